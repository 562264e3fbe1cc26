// Lexing: a template into its text and tags, each tag into tokens, with transformers'
// whitespace settings (trim_blocks, lstrip_blocks, keep_trailing_newline off) applied, so that
// the parser sees only what renders.
#ifndef TPCRT_CHAT_JINJA_LEXER_H
#define TPCRT_CHAT_JINJA_LEXER_H

#include <cstdint>
#include <string>
#include <vector>

namespace tpcrt::jinja {

struct Tok {
  enum Kind { Name, Str, Int, Float, Op } kind;
  std::string text; // a string literal's value, decoded
  int line;
  int64_t i = 0;
  double f = 0;
};

// Text to print as it is, an expression to print ({{ }}) or a statement ({% %}).
struct Piece {
  enum Kind { Text, Output, Stmt } kind;
  std::string text;
  std::vector<Tok> toks;
  int line;
};

std::vector<Piece> lex(const std::string &source);

} // namespace tpcrt::jinja

#endif // TPCRT_CHAT_JINJA_LEXER_H
