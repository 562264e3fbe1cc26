// Lexing: the template into text and tags, each tag into tokens. Whitespace control is applied
// here ('-' and '+' in a tag, trim_blocks and lstrip_blocks), as Jinja's lexer does, and string
// literals are decoded as Python's unicode-escape would.
#include "jinja_lexer.h"

#include "jinja_error.h"
#include "jinja_text.h"
#include "tpcrt/utf8.h"

#include <algorithm>
#include <cctype>
#include <cstdio>
#include <cstring>
#include <stdexcept>

namespace tpcrt::jinja {
namespace {

const char *const kOps[] = {"**", "//", "==", "!=", "<=", ">=", "+", "-", "*", "/", "%", "~", "<",
                            ">",  "=",  "(",  ")",  "[",  "]",  "{", "}", ".", ",", ":", "|"};

// Python's unicode-escape decoding of the escape at src[q] (a backslash) into `out`, as Jinja
// decodes string literals; returns the escape's last offset. What would make text that is not
// UTF-8 (a surrogate) is an error, as are malformed escapes, with Python's words.
size_t unescape(const std::string &src, size_t q, std::string &out, int &line) {
  char e = src[++q];
  auto hexDigits = [&](size_t n, const char *form) {
    uint32_t cp = 0;
    for (size_t k = 1; k <= n; ++k) {
      char h = q + k < src.size() ? src[q + k] : '\0';
      int d = h >= '0' && h <= '9'   ? h - '0'
              : h >= 'a' && h <= 'f' ? h - 'a' + 10
              : h >= 'A' && h <= 'F' ? h - 'A' + 10
                                     : -1;
      if (d < 0)
        fail(line, std::string("truncated ") + form + " escape in a string literal");
      cp = cp * 16 + uint32_t(d);
    }
    std::string escape = src.substr(q - 1, n + 2);
    q += n;
    if (cp > 0x10FFFF)
      fail(line, "illegal Unicode character " + escape + " in a string literal");
    if (cp >= 0xD800 && cp <= 0xDFFF)
      fail(line, "the escape " + escape + " in a string literal is a lone surrogate, which " +
                     "has no UTF-8 form");
    appendUtf8(out, cp);
  };
  switch (e) {
  case '\n': // a continued line
    ++line;
    break;
  case '\\':
  case '\'':
  case '"':
    out += e;
    break;
  case 'a':
    out += '\a';
    break;
  case 'b':
    out += '\b';
    break;
  case 'f':
    out += '\f';
    break;
  case 'n':
    out += '\n';
    break;
  case 'r':
    out += '\r';
    break;
  case 't':
    out += '\t';
    break;
  case 'v':
    out += '\v';
    break;
  case 'x':
    hexDigits(2, "\\xXX");
    break;
  case 'u':
    hexDigits(4, "\\uXXXX");
    break;
  case 'U':
    hexDigits(8, "\\UXXXXXXXX");
    break;
  case 'N':
    fail(line, "\\N{...} escapes are outside the supported Jinja subset");
  default:
    if (e >= '0' && e <= '7') { // up to three octal digits
      uint32_t cp = 0;
      size_t k = 0;
      for (; k < 3 && q + k < src.size() && src[q + k] >= '0' && src[q + k] <= '7'; ++k)
        cp = cp * 8 + uint32_t(src[q + k] - '0');
      q += k - 1;
      appendUtf8(out, cp);
    } else if ((unsigned char)e >= 0x80) {
      // Jinja escapes the literal to ASCII first ('\xe9' for 'é'), so a backslash before a
      // non-ASCII character escapes that escape's own backslash: '\é' is '\xe9'.
      size_t len;
      uint32_t cp = decodeAt(src, q, len);
      char buf[16];
      std::snprintf(buf, sizeof buf,
                    cp < 0x100     ? "\\x%02x"
                    : cp < 0x10000 ? "\\u%04x"
                                   : "\\U%08x",
                    unsigned(cp));
      out += buf;
      q += len - 1;
    } else { // not an escape: kept as it is
      out += '\\';
      out += e;
    }
  }
  return q;
}

// Jinja's newline normalization (\r\n and \r to \n), then keep_trailing_newline=False.
std::string normalizeNewlines(const std::string &src) {
  std::string norm;
  for (size_t k = 0; k < src.size(); ++k) {
    if (src[k] == '\r') {
      norm += '\n';
      if (k + 1 < src.size() && src[k + 1] == '\n')
        ++k;
    } else {
      norm += src[k];
    }
  }
  if (!norm.empty() && norm.back() == '\n')
    norm.pop_back();
  return norm;
}

// Where a tag ends, and what it asks of the whitespace after it ('-%}' and '+%}').
struct TagEnd {
  size_t end = 0;
  bool stripAfter = false, keepNewline = false;
};

class Lexer {
public:
  explicit Lexer(std::string src) : src(std::move(src)) {}

  std::vector<Piece> run() {
    size_t pos = 0;
    while (pos <= src.size()) {
      size_t open = pos;
      while ((open = src.find('{', open)) != std::string::npos &&
             (open + 1 >= src.size() || std::strchr("{%#", src[open + 1]) == nullptr))
        ++open;
      std::string text =
          src.substr(pos, open == std::string::npos ? std::string::npos : open - pos);
      int textLine = line;
      line += int(std::count(text.begin(), text.end(), '\n'));
      if (open == std::string::npos) {
        if (!text.empty())
          pieces.push_back({Piece::Text, text, {}, textLine});
        break;
      }
      char kind = src[open + 1];
      char mod = open + 2 < src.size() ? src[open + 2] : '\0';
      textBeforeTag(std::move(text), textLine, kind, mod);
      size_t p = open + 2 + (mod == '-' || mod == '+' ? 1 : 0);
      pos = afterTag(kind == '#' ? comment(p) : tag(kind, p), kind);
    }
    return std::move(pieces);
  }

private:
  std::string src;
  std::vector<Piece> pieces;
  int line = 1;
  bool lineStarting = true; // whether the text after the last tag starts a line

  // The text before a tag, less the whitespace the tag's control removes: '{%-' strips all of
  // it at the end; lstrip_blocks, the spaces before a block tag that starts its line.
  void textBeforeTag(std::string text, int textLine, char kind, char mod) {
    if (mod == '-') {
      text = strip(text, nullptr, false, true);
    } else if (mod != '+' && kind != '{') { // lstrip_blocks
      size_t lpos = text.rfind('\n') + 1;   // npos + 1 == 0
      if ((lpos > 0 || lineStarting) && lpos < text.size() &&
          std::all_of(text.begin() + lpos, text.end(), isSpace))
        text.erase(lpos);
    }
    if (!text.empty())
      pieces.push_back({Piece::Text, text, {}, textLine});
  }

  // Past a tag, less the whitespace its control removes: '-%}' strips all that follows;
  // trim_blocks, the newline after a block tag or a comment.
  size_t afterTag(const TagEnd &end, char kind) {
    size_t pos = end.end;
    if (end.stripAfter) {
      size_t q = pos;
      while (q < src.size() && isSpace(src[q]))
        line += src[q++] == '\n';
      lineStarting = q > pos && src[q - 1] == '\n';
      return q;
    }
    if (kind != '{' && !end.keepNewline && pos < src.size() && src[pos] == '\n') { // trim_blocks
      ++line;
      lineStarting = true;
      return pos + 1;
    }
    lineStarting = false;
    return pos;
  }

  // A comment whose text starts at `p`.
  TagEnd comment(size_t p) {
    size_t close = src.find("#}", p);
    if (close == std::string::npos)
      fail(line, "unterminated comment '{#' (no '#}')");
    TagEnd end;
    end.stripAfter = close > p && src[close - 1] == '-';
    end.keepNewline = close > p && src[close - 1] == '+';
    line += int(std::count(src.begin() + long(p), src.begin() + long(close), '\n'));
    end.end = close + 2;
    return end;
  }

  // An expression ({{, `kind` '{') or a statement ({%, '%') whose tokens start at `p`: a
  // piece of its tokens. The brackets opened in it must close before its closer counts.
  TagEnd tag(char kind, size_t p) {
    int tagLine = line;
    Piece piece{kind == '{' ? Piece::Output : Piece::Stmt, "", {}, tagLine};
    const char *closer = kind == '{' ? "}}" : "%}";
    std::string brackets; // the closers still expected, innermost last
    TagEnd end;
    for (;;) {
      while (p < src.size() && isSpace(src[p]))
        line += src[p++] == '\n';
      if (p >= src.size())
        fail(tagLine, std::string("unterminated '") + (kind == '{' ? "{{" : "{%") + "' (" +
                          (!brackets.empty() ? "a bracket opened in it is never closed"
                                             : std::string("no '") + closer + "'") +
                          ")");
      if (brackets.empty()) {
        if (src.compare(p, 2, closer) == 0) {
          end.end = p + 2;
          break;
        }
        if ((src[p] == '-' || src[p] == '+') && src.compare(p + 1, 2, closer) == 0) {
          end.stripAfter = src[p] == '-';
          end.keepNewline = src[p] == '+';
          end.end = p + 3;
          break;
        }
      }
      char c = src[p];
      if (c == '\'' || c == '"')
        p = stringLiteral(p, piece.toks);
      else if (std::isdigit((unsigned char)c))
        p = numberLiteral(p, piece.toks);
      else if (std::isalpha((unsigned char)c) || c == '_')
        p = name(p, piece.toks);
      else
        p = op(p, piece.toks, brackets);
    }
    if (piece.toks.empty())
      fail(tagLine, kind == '{' ? "empty expression '{{ }}'" : "empty statement '{% %}'");
    pieces.push_back(std::move(piece));
    return end;
  }

  // Each of these lexes the token at `p` into `toks` and returns the offset after it.

  size_t stringLiteral(size_t p, std::vector<Tok> &toks) {
    char c = src[p];
    std::string value;
    size_t q = p + 1;
    for (; q < src.size() && src[q] != c; ++q) {
      if (src[q] == '\n')
        ++line;
      if (src[q] != '\\' || q + 1 >= src.size())
        value += src[q];
      else
        q = unescape(src, q, value, line);
    }
    if (q >= src.size())
      fail(line, "unterminated string literal");
    toks.push_back({Tok::Str, value, line});
    return q + 1;
  }

  size_t numberLiteral(size_t p, std::vector<Tok> &toks) {
    size_t q = p;
    while (q < src.size() && (std::isdigit((unsigned char)src[q]) || src[q] == '_'))
      ++q;
    bool isFloat = false;
    if (q + 1 < src.size() && src[q] == '.' && std::isdigit((unsigned char)src[q + 1])) {
      isFloat = true;
      ++q;
      while (q < src.size() && (std::isdigit((unsigned char)src[q]) || src[q] == '_'))
        ++q;
    }
    if (q < src.size() && (src[q] == 'e' || src[q] == 'E')) { // an exponent: 1e20, 2.5e-7
      size_t d = q + 1 + (q + 1 < src.size() && (src[q + 1] == '+' || src[q + 1] == '-'));
      if (d < src.size() && std::isdigit((unsigned char)src[d])) {
        isFloat = true;
        q = d;
        while (q < src.size() && (std::isdigit((unsigned char)src[q]) || src[q] == '_'))
          ++q;
      }
    }
    std::string digits;
    for (size_t k = p; k < q; ++k)
      if (src[k] != '_')
        digits += src[k];
    Tok t{isFloat ? Tok::Float : Tok::Int, digits, line};
    try {
      if (isFloat)
        t.f = std::stod(digits);
      else
        t.i = std::stoll(digits);
    } catch (const std::exception &) {
      fail(line, "number literal '" + digits + "' is out of range");
    }
    toks.push_back(t);
    return q;
  }

  size_t name(size_t p, std::vector<Tok> &toks) {
    size_t q = p;
    while (q < src.size() && (std::isalnum((unsigned char)src[q]) || src[q] == '_'))
      ++q;
    toks.push_back({Tok::Name, src.substr(p, q - p), line});
    return q;
  }

  // An operator, with the brackets it opens or closes in `brackets`.
  size_t op(size_t p, std::vector<Tok> &toks, std::string &brackets) {
    const char *token = nullptr;
    for (const char *candidate : kOps)
      if (src.compare(p, std::strlen(candidate), candidate) == 0) {
        token = candidate;
        break;
      }
    if (!token)
      fail(line, std::string("unexpected character '") + src[p] + "'");
    if (std::strchr("([{", token[0]) && token[1] == '\0') {
      brackets += token[0] == '(' ? ')' : token[0] == '[' ? ']' : '}';
    } else if (std::strchr(")]}", token[0]) && token[1] == '\0') {
      if (brackets.empty() || brackets.back() != token[0])
        fail(line, std::string("unexpected '") + token[0] + "'" +
                       (brackets.empty() ? ""
                                         : std::string(", expected '") + brackets.back() + "'"));
      brackets.pop_back();
    }
    toks.push_back({Tok::Op, token, line});
    return p + std::strlen(token);
  }
};

} // namespace

std::vector<Piece> lex(const std::string &source) { return Lexer(normalizeNewlines(source)).run(); }

} // namespace tpcrt::jinja
