// Parsing: the lexer's pieces into a small tree of statements (Node) and expressions (Expr),
// what the renderer walks. Constructs outside the subset, and filters and tests the subset does
// not have, are refused here, naming the line, so that an unsupported template fails before it
// renders anything.
#ifndef TPCRT_CHAT_JINJA_PARSER_H
#define TPCRT_CHAT_JINJA_PARSER_H

#include "jinja_lexer.h"
#include "jinja_value.h"

#include <memory>
#include <string>
#include <utility>
#include <vector>

namespace tpcrt::jinja {

struct Expr;
using ExprP = std::shared_ptr<Expr>;

struct Expr {
  enum Kind {
    Lit,
    Name,
    ListE,
    DictE,
    Attr,
    Item,
    Slice,
    Call,
    Filter,
    Test,
    Neg,
    Pos,
    Not,
    And,
    Or,
    Bin,
    Cmp,
    Cond
  } kind;
  int line;
  Value lit;
  std::string name; // Name, Attr, Filter, Test, Bin's operator
  std::vector<ExprP> args;
  std::vector<std::pair<std::string, ExprP>> kwargs;
  std::vector<std::string> ops; // Cmp
  bool negated = false;         // Test
  bool tuple = false;           // ListE: (a, b)
  int height = 1;               // of the tree below: bounded, as evaluating it recurses
};

struct Node {
  enum Kind { Text, Output, If, For, Set, Break, Continue } kind;
  Node(Kind kind, int line) : kind(kind), line(line) {}
  int line;
  std::string text;
  ExprP expr, cond;
  std::vector<std::pair<ExprP, std::vector<Node>>> branches;
  std::vector<Node> body, elseBody;
  std::vector<std::string> targets; // For's names; Set's name
  std::string attr;                 // set ns.attr
};

// The template's statements; blocks and expressions nest at most `maxNesting` deep.
std::vector<Node> parse(std::vector<Piece> pieces, int maxNesting);

} // namespace tpcrt::jinja

#endif // TPCRT_CHAT_JINJA_PARSER_H
