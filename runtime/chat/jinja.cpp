// The Jinja subset behind renderChatTemplate: a lexer with transformers' whitespace settings
// (trim_blocks, lstrip_blocks, keep_trailing_newline off), a parser to a small tree and an
// interpreter with Jinja's default Undefined. What real chat templates use is here; anything
// else is an error naming the construct and its line, never output that differs silently.
#include "jinja.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <ctime>
#include <map>
#include <memory>
#include <stdexcept>

namespace tpcrt::jinja {
namespace {

struct TemplateError {
  std::string message;
};

[[noreturn]] void fail(int line, const std::string &message) {
  throw TemplateError{"chat template line " + std::to_string(line) + ": " + message};
}

// Nesting deeper than this (brackets, operators, blocks) is refused rather than recursed into,
// so that no template can overflow the stack; real templates nest a handful of levels.
constexpr int kMaxDepth = 200;

struct DepthGuard {
  DepthGuard(int &depth, int line) : depth(depth) {
    if (++depth > kMaxDepth)
      fail(line, "nesting deeper than " + std::to_string(kMaxDepth) + " levels");
  }
  ~DepthGuard() { --depth; }
  int &depth;
};

// ---------------------------------------------------------------------------------------
// Values: Python's types as templates see them.

struct Value;
using List = std::vector<Value>;
using Dict = std::vector<std::pair<std::string, Value>>; // insertion order, as Python's dict

struct Value {
  enum Kind { Undefined, None, Bool, Int, Float, String, ListV, DictV, NamespaceV, Function };
  Kind kind = Undefined;
  bool b = false;
  int64_t i = 0;
  double f = 0;
  std::string s; // a String's text; an Undefined's hint, as Jinja words it
  std::shared_ptr<List> list;
  std::shared_ptr<Dict> dict; // DictV and NamespaceV
  bool tuple = false;         // a ListV that Python would hold as a tuple: printed (a, b)
  int nesting = 0;            // lists and dicts inside: printing, comparing and freeing recurse

  static Value undefined(std::string hint) {
    Value v;
    v.s = std::move(hint);
    return v;
  }
  static Value function(std::string name) {
    Value v;
    v.kind = Function;
    v.s = std::move(name);
    return v;
  }
  static Value none() {
    Value v;
    v.kind = None;
    return v;
  }
  static Value boolean(bool x) {
    Value v;
    v.kind = Bool;
    v.b = x;
    return v;
  }
  static Value integer(int64_t x) {
    Value v;
    v.kind = Int;
    v.i = x;
    return v;
  }
  static Value number(double x) {
    Value v;
    v.kind = Float;
    v.f = x;
    return v;
  }
  static Value str(std::string x) {
    Value v;
    v.kind = String;
    v.s = std::move(x);
    return v;
  }
  static int nestingOf(const Value &inner) {
    if (inner.nesting >= kMaxDepth) // a loop wrapping a list in a list, ...
      throw TemplateError{"chat template: values nested deeper than " + std::to_string(kMaxDepth) +
                          " levels"};
    return inner.nesting + 1;
  }
  static Value makeList(List x, bool tuple = false) {
    Value v;
    v.kind = ListV;
    v.tuple = tuple;
    for (const Value &item : x)
      v.nesting = std::max(v.nesting, nestingOf(item));
    v.list = std::make_shared<List>(std::move(x));
    return v;
  }
  static Value makeDict(Dict x, Kind kind = DictV) {
    Value v;
    v.kind = kind;
    for (const auto &kv : x)
      v.nesting = std::max(v.nesting, nestingOf(kv.second));
    v.dict = std::make_shared<Dict>(std::move(x));
    return v;
  }
  bool isNumber() const { return kind == Bool || kind == Int || kind == Float; }
  bool isMapping() const { return kind == DictV || kind == NamespaceV; }
  double asDouble() const { return kind == Float ? f : kind == Bool ? (b ? 1 : 0) : double(i); }
  int64_t asInt() const { return kind == Bool ? (b ? 1 : 0) : i; }
};

const Value *findKey(const Dict &d, const std::string &key) {
  for (const auto &[k, v] : d)
    if (k == key)
      return &v;
  return nullptr;
}

void setKey(Dict &d, const std::string &key, Value v) {
  for (auto &[k, old] : d)
    if (k == key) {
      old = std::move(v);
      return;
    }
  d.emplace_back(key, std::move(v));
}

const char *typeName(const Value &v) {
  switch (v.kind) {
  case Value::Undefined:
    return "Undefined";
  case Value::None:
    return "NoneType";
  case Value::Bool:
    return "bool";
  case Value::Int:
    return "int";
  case Value::Float:
    return "float";
  case Value::String:
    return "str";
  case Value::ListV:
    return "list";
  case Value::DictV:
    return "dict";
  case Value::NamespaceV:
    return "Namespace";
  case Value::Function:
    return "builtin_function_or_method";
  }
  return "?";
}

bool truthy(const Value &v) {
  switch (v.kind) {
  case Value::Undefined:
  case Value::None:
    return false;
  case Value::Bool:
    return v.b;
  case Value::Int:
    return v.i != 0;
  case Value::Float:
    return v.f != 0;
  case Value::String:
    return !v.s.empty();
  case Value::ListV:
    return !v.list->empty();
  case Value::DictV:
    return !v.dict->empty();
  case Value::NamespaceV:
  case Value::Function:
    return true;
  }
  return false;
}

// Code points of UTF-8 text, each as its bytes: len(), indexing and slicing count these.
std::vector<std::string> codePoints(const std::string &s) {
  std::vector<std::string> out;
  for (size_t i = 0; i < s.size();) {
    unsigned char c = s[i];
    size_t n = c < 0x80 ? 1 : (c >> 5) == 6 ? 2 : (c >> 4) == 14 ? 3 : (c >> 3) == 30 ? 4 : 1;
    n = std::min(n, s.size() - i);
    out.push_back(s.substr(i, n));
    i += n;
  }
  return out;
}

std::string pyFloat(double x) {
  if (std::isnan(x))
    return "nan";
  if (std::isinf(x))
    return x > 0 ? "inf" : "-inf";
  char buf[64];
  if (x == std::floor(x) && std::fabs(x) < 1e16) {
    std::snprintf(buf, sizeof buf, "%.1f", x);
    return buf;
  }
  for (int p = 1; p <= 17; ++p) {
    std::snprintf(buf, sizeof buf, "%.*g", p, x);
    if (std::strtod(buf, nullptr) == x)
      break;
  }
  std::string s = buf;
  if (s.find_first_of(".e") == std::string::npos)
    s += ".0";
  return s;
}

std::string repr(const Value &v);

std::string toStr(const Value &v) {
  switch (v.kind) {
  case Value::Undefined:
    return "";
  case Value::None:
    return "None";
  case Value::Bool:
    return v.b ? "True" : "False";
  case Value::Int:
    return std::to_string(v.i);
  case Value::Float:
    return pyFloat(v.f);
  case Value::String:
    return v.s;
  case Value::ListV: {
    std::string out = v.tuple ? "(" : "[";
    for (size_t k = 0; k < v.list->size(); ++k)
      out += (k ? ", " : "") + repr((*v.list)[k]);
    return out + (!v.tuple ? "]" : v.list->size() == 1 ? ",)" : ")");
  }
  case Value::DictV: {
    std::string out = "{";
    bool first = true;
    for (const auto &[key, val] : *v.dict) {
      out += (first ? "" : ", ") + repr(Value::str(key)) + ": " + repr(val);
      first = false;
    }
    return out + "}";
  }
  case Value::NamespaceV:
    return "<Namespace>";
  case Value::Function:
    return "<built-in function " + v.s + ">";
  }
  return "";
}

std::string repr(const Value &v) {
  if (v.kind != Value::String)
    return toStr(v);
  char quote =
      v.s.find('\'') != std::string::npos && v.s.find('"') == std::string::npos ? '"' : '\'';
  std::string out(1, quote);
  for (char c : v.s) {
    if (c == quote || c == '\\')
      out += '\\', out += c;
    else if (c == '\n')
      out += "\\n";
    else if (c == '\r')
      out += "\\r";
    else if (c == '\t')
      out += "\\t";
    else
      out += c;
  }
  return out + quote;
}

// json.dumps(x, ensure_ascii=False, indent=indent), transformers' tojson.
void toJson(const Value &v, int indent, int depth, std::string &out, int line) {
  auto newline = [&](int d) {
    out += '\n';
    out.append(size_t(indent) * d, ' ');
  };
  switch (v.kind) {
  case Value::Undefined:
  case Value::NamespaceV:
  case Value::Function:
    fail(line, std::string("tojson: a value of type ") + typeName(v) + " is not JSON serializable");
  case Value::None:
    out += "null";
    return;
  case Value::Bool:
    out += v.b ? "true" : "false";
    return;
  case Value::Int:
    out += std::to_string(v.i);
    return;
  case Value::Float:
    out += std::isnan(v.f)   ? "NaN"
           : std::isinf(v.f) ? (v.f > 0 ? "Infinity" : "-Infinity")
                             : pyFloat(v.f);
    return;
  case Value::String:
    out += '"';
    for (unsigned char c : v.s) {
      switch (c) {
      case '"':
        out += "\\\"";
        break;
      case '\\':
        out += "\\\\";
        break;
      case '\n':
        out += "\\n";
        break;
      case '\r':
        out += "\\r";
        break;
      case '\t':
        out += "\\t";
        break;
      case '\b':
        out += "\\b";
        break;
      case '\f':
        out += "\\f";
        break;
      default:
        if (c < 0x20) {
          char buf[8];
          std::snprintf(buf, sizeof buf, "\\u%04x", c);
          out += buf;
        } else {
          out += char(c);
        }
      }
    }
    out += '"';
    return;
  case Value::ListV:
    if (v.list->empty()) {
      out += "[]";
      return;
    }
    out += '[';
    for (size_t k = 0; k < v.list->size(); ++k) {
      if (k)
        out += indent >= 0 ? "," : ", ";
      if (indent >= 0)
        newline(depth + 1);
      toJson((*v.list)[k], indent, depth + 1, out, line);
    }
    if (indent >= 0)
      newline(depth);
    out += ']';
    return;
  case Value::DictV: {
    if (v.dict->empty()) {
      out += "{}";
      return;
    }
    out += '{';
    bool first = true;
    for (const auto &[key, val] : *v.dict) {
      if (!first)
        out += indent >= 0 ? "," : ", ";
      first = false;
      if (indent >= 0)
        newline(depth + 1);
      toJson(Value::str(key), indent, depth + 1, out, line);
      out += ": ";
      toJson(val, indent, depth + 1, out, line);
    }
    if (indent >= 0)
      newline(depth);
    out += '}';
    return;
  }
  }
}

bool equal(const Value &a, const Value &b) {
  if (a.isNumber() && b.isNumber())
    return a.kind == Value::Float || b.kind == Value::Float ? a.asDouble() == b.asDouble()
                                                            : a.asInt() == b.asInt();
  if (a.kind != b.kind)
    return false;
  switch (a.kind) {
  case Value::Undefined:
  case Value::None:
    return true;
  case Value::String:
    return a.s == b.s;
  case Value::ListV:
    if (a.tuple != b.tuple || a.list->size() != b.list->size())
      return false;
    for (size_t k = 0; k < a.list->size(); ++k)
      if (!equal((*a.list)[k], (*b.list)[k]))
        return false;
    return true;
  case Value::DictV:
    if (a.dict->size() != b.dict->size())
      return false;
    for (const auto &[key, val] : *a.dict) {
      const Value *other = findKey(*b.dict, key);
      if (!other || !equal(val, *other))
        return false;
    }
    return true;
  default:
    return a.dict == b.dict;
  }
}

bool less(const Value &a, const Value &b, const std::string &op, int line) {
  if (a.isNumber() && b.isNumber())
    return a.asDouble() < b.asDouble();
  if (a.kind == Value::String && b.kind == Value::String)
    return a.s < b.s;
  if (a.kind == Value::ListV && b.kind == Value::ListV) {
    size_t n = std::min(a.list->size(), b.list->size());
    for (size_t k = 0; k < n; ++k)
      if (!equal((*a.list)[k], (*b.list)[k]))
        return less((*a.list)[k], (*b.list)[k], op, line);
    return a.list->size() < b.list->size();
  }
  fail(line, "'" + op + "' not supported between instances of '" + typeName(a) + "' and '" +
                 typeName(b) + "'");
}

bool isSpace(char c) {
  return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v';
}

// Python's str.isspace() for one code point in UTF-8 (what strip() and split() drop).
bool isSpaceCodePoint(const std::string &c) {
  if (c.size() == 1)
    return isSpace(c[0]) || (c[0] >= 0x1c && c[0] <= 0x1f);
  static const char *const kWide[] = {"\u0085", "\u00a0", "\u1680", "\u2000", "\u2001",
                                      "\u2002", "\u2003", "\u2004", "\u2005", "\u2006",
                                      "\u2007", "\u2008", "\u2009", "\u200a", "\u2028",
                                      "\u2029", "\u202f", "\u205f", "\u3000"};
  return std::any_of(std::begin(kWide), std::end(kWide), [&](const char *w) { return c == w; });
}

std::string strip(const std::string &s, const Value *chars, bool left, bool right) {
  std::vector<std::string> cps = codePoints(s), set;
  if (chars && chars->kind == Value::String)
    set = codePoints(chars->s);
  auto drop = [&](const std::string &c) {
    return chars && chars->kind == Value::String ? std::find(set.begin(), set.end(), c) != set.end()
                                                 : isSpaceCodePoint(c);
  };
  size_t b = 0, e = cps.size();
  while (left && b < e && drop(cps[b]))
    ++b;
  while (right && e > b && drop(cps[e - 1]))
    --e;
  std::string out;
  for (size_t k = b; k < e; ++k)
    out += cps[k];
  return out;
}

// ---------------------------------------------------------------------------------------
// Lexing: the template into text and tags, each tag into tokens.

struct Tok {
  enum Kind { Name, Str, Int, Float, Op } kind;
  std::string text;
  int line;
  int64_t i = 0;
  double f = 0;
};

struct Piece {
  enum Kind { Text, Output, Stmt } kind;
  std::string text;
  std::vector<Tok> toks;
  int line;
};

const char *const kOps[] = {"**", "//", "==", "!=", "<=", ">=", "+", "-", "*", "/", "%", "~", "<",
                            ">",  "=",  "(",  ")",  "[",  "]",  "{", "}", ".", ",", ":", "|"};

std::vector<Piece> lex(std::string src) {
  // Jinja's newline normalization, then keep_trailing_newline=False.
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
  src = std::move(norm);
  if (!src.empty() && src.back() == '\n')
    src.pop_back();

  std::vector<Piece> pieces;
  size_t pos = 0;
  int line = 1;
  bool lineStarting = true;
  while (pos <= src.size()) {
    size_t open = pos;
    while ((open = src.find('{', open)) != std::string::npos &&
           (open + 1 >= src.size() || std::strchr("{%#", src[open + 1]) == nullptr))
      ++open;
    std::string text = src.substr(pos, open == std::string::npos ? std::string::npos : open - pos);
    int textLine = line;
    line += int(std::count(text.begin(), text.end(), '\n'));
    if (open == std::string::npos) {
      if (!text.empty())
        pieces.push_back({Piece::Text, text, {}, textLine});
      break;
    }
    char kind = src[open + 1];
    char mod = open + 2 < src.size() ? src[open + 2] : '\0';
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

    int tagLine = line;
    size_t p = open + 2 + (mod == '-' || mod == '+' ? 1 : 0);
    bool stripAfter = false, keepNewline = false;
    size_t end;
    if (kind == '#') {
      size_t close = src.find("#}", p);
      if (close == std::string::npos)
        fail(tagLine, "unterminated comment '{#' (no '#}')");
      stripAfter = close > p && src[close - 1] == '-';
      keepNewline = close > p && src[close - 1] == '+';
      line += int(std::count(src.begin() + long(p), src.begin() + long(close), '\n'));
      end = close + 2;
    } else {
      Piece piece{kind == '{' ? Piece::Output : Piece::Stmt, "", {}, tagLine};
      const char *closer = kind == '{' ? "}}" : "%}";
      std::string brackets; // the closers still expected, innermost last
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
            end = p + 2;
            break;
          }
          if ((src[p] == '-' || src[p] == '+') && src.compare(p + 1, 2, closer) == 0) {
            stripAfter = src[p] == '-';
            keepNewline = src[p] == '+';
            end = p + 3;
            break;
          }
        }
        char c = src[p];
        if (c == '\'' || c == '"') {
          std::string value;
          size_t q = p + 1;
          for (; q < src.size() && src[q] != c; ++q) {
            if (src[q] == '\n')
              ++line;
            if (src[q] != '\\' || q + 1 >= src.size()) {
              value += src[q];
              continue;
            }
            char e = src[++q];
            switch (e) {
            case 'n':
              value += '\n';
              break;
            case 't':
              value += '\t';
              break;
            case 'r':
              value += '\r';
              break;
            case '0':
              value += '\0';
              break;
            case '\\':
            case '\'':
            case '"':
              value += e;
              break;
            case '\n':
              ++line;
              break;
            case 'u':
            case 'x': {
              size_t n = e == 'u' ? 4 : 2;
              if (q + n >= src.size())
                fail(line, "truncated \\" + std::string(1, e) + " escape in a string");
              unsigned cp = unsigned(std::stoul(src.substr(q + 1, n), nullptr, 16));
              q += n;
              if (cp < 0x80) {
                value += char(cp);
              } else if (cp < 0x800) {
                value += char(0xC0 | (cp >> 6));
                value += char(0x80 | (cp & 0x3F));
              } else {
                value += char(0xE0 | (cp >> 12));
                value += char(0x80 | ((cp >> 6) & 0x3F));
                value += char(0x80 | (cp & 0x3F));
              }
              break;
            }
            default:
              value += '\\';
              value += e;
            }
          }
          if (q >= src.size())
            fail(line, "unterminated string literal");
          piece.toks.push_back({Tok::Str, value, line});
          p = q + 1;
        } else if (std::isdigit((unsigned char)c)) {
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
          piece.toks.push_back(t);
          p = q;
        } else if (std::isalpha((unsigned char)c) || c == '_') {
          size_t q = p;
          while (q < src.size() && (std::isalnum((unsigned char)src[q]) || src[q] == '_'))
            ++q;
          piece.toks.push_back({Tok::Name, src.substr(p, q - p), line});
          p = q;
        } else {
          const char *op = nullptr;
          for (const char *candidate : kOps)
            if (src.compare(p, std::strlen(candidate), candidate) == 0) {
              op = candidate;
              break;
            }
          if (!op)
            fail(line, std::string("unexpected character '") + c + "'");
          if (std::strchr("([{", op[0]) && op[1] == '\0') {
            brackets += op[0] == '(' ? ')' : op[0] == '[' ? ']' : '}';
          } else if (std::strchr(")]}", op[0]) && op[1] == '\0') {
            if (brackets.empty() || brackets.back() != op[0])
              fail(line,
                   std::string("unexpected '") + op[0] + "'" +
                       (brackets.empty() ? ""
                                         : std::string(", expected '") + brackets.back() + "'"));
            brackets.pop_back();
          }
          piece.toks.push_back({Tok::Op, op, line});
          p += std::strlen(op);
        }
      }
      if (piece.toks.empty())
        fail(tagLine, kind == '{' ? "empty expression '{{ }}'" : "empty statement '{% %}'");
      pieces.push_back(std::move(piece));
    }
    pos = end;
    if (stripAfter) {
      size_t q = pos;
      while (q < src.size() && isSpace(src[q]))
        line += src[q++] == '\n';
      lineStarting = q > pos && src[q - 1] == '\n';
      pos = q;
    } else if (kind != '{' && !keepNewline && pos < src.size() && src[pos] == '\n') { // trim_blocks
      ++pos;
      ++line;
      lineStarting = true;
    } else {
      lineStarting = false;
    }
  }
  return pieces;
}

// ---------------------------------------------------------------------------------------
// The tree.

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

const char *const kFilters[] = {
    "abs",     "capitalize", "count",  "d",          "default", "dictsort",   "first",
    "float",   "int",        "items",  "join",       "last",    "length",     "list",
    "lower",   "map",        "max",    "min",        "reject",  "rejectattr", "replace",
    "reverse", "safe",       "select", "selectattr", "sort",    "string",     "sum",
    "title",   "tojson",     "trim",   "unique",     "upper",   "wordcount"};
const char *const kTests[] = {
    "boolean", "callable", "defined", "divisibleby", "eq",   "equalto",   "escaped", "even",
    "false",   "filter",   "float",   "ge",          "gt",   "in",        "integer", "iterable",
    "le",      "lower",    "lt",      "mapping",     "ne",   "none",      "number",  "odd",
    "sameas",  "sequence", "string",  "test",        "true", "undefined", "upper"};

bool known(const char *const *begin, const char *const *end, const std::string &name) {
  return std::any_of(begin, end, [&](const char *n) { return name == n; });
}

class ExprParser {
public:
  ExprParser(const std::vector<Tok> &toks, size_t start, int line)
      : toks(toks), at(start), line(line) {}

  const std::vector<Tok> &toks;
  size_t at;
  int line;

  const Tok *peek(size_t ahead = 0) const {
    return at + ahead < toks.size() ? &toks[at + ahead] : nullptr;
  }
  int curLine() const { return peek() ? peek()->line : line; }
  bool isOp(const char *op, size_t ahead = 0) const {
    const Tok *t = peek(ahead);
    return t && t->kind == Tok::Op && t->text == op;
  }
  bool isName(const char *name, size_t ahead = 0) const {
    const Tok *t = peek(ahead);
    return t && t->kind == Tok::Name && t->text == name;
  }
  std::string describe() const {
    return peek() ? "'" + peek()->text + "'" : std::string("the end of the tag");
  }
  void expectOp(const char *op) {
    if (!isOp(op))
      fail(curLine(), std::string("expected '") + op + "', found " + describe());
    ++at;
  }
  std::string expectName() {
    if (!peek() || peek()->kind != Tok::Name)
      fail(curLine(), "expected a name, found " + describe());
    return toks[at++].text;
  }
  void expectEnd() {
    if (peek())
      fail(curLine(), "unexpected " + describe() + " in the tag");
  }

  ExprP make(Expr::Kind kind, int l, std::vector<ExprP> args = {}) {
    auto e = std::make_shared<Expr>();
    e->kind = kind;
    e->line = l;
    e->args = std::move(args);
    seal(*e);
    return e;
  }
  // Left-deep chains (a + b + c ..., x.a.b ..., f|g|h ...) are built by loops, not recursion:
  // their height is checked here, so that evaluating (and freeing) a tree never recurses
  // deeper than kMaxDepth.
  static void seal(Expr &e) {
    int h = 0;
    for (const ExprP &a : e.args)
      if (a)
        h = std::max(h, a->height);
    for (const auto &kv : e.kwargs)
      h = std::max(h, kv.second->height);
    e.height = h + 1;
    if (e.height > kMaxDepth)
      fail(e.line, "nesting deeper than " + std::to_string(kMaxDepth) + " levels");
  }

  int depth = 0;

  ExprP expr(bool withCond = true) {
    DepthGuard guard(depth, curLine());
    ExprP a = orExpr();
    while (withCond && isName("if")) {
      int l = curLine();
      ++at;
      ExprP c = orExpr();
      ExprP b;
      if (isName("else")) {
        ++at;
        b = expr();
      }
      a = make(Expr::Cond, l, {a, c, b});
    }
    return a;
  }
  ExprP orExpr() {
    ExprP a = andExpr();
    while (isName("or")) {
      int l = curLine();
      ++at;
      a = make(Expr::Or, l, {a, andExpr()});
    }
    return a;
  }
  ExprP andExpr() {
    ExprP a = notExpr();
    while (isName("and")) {
      int l = curLine();
      ++at;
      a = make(Expr::And, l, {a, notExpr()});
    }
    return a;
  }
  ExprP notExpr() {
    DepthGuard guard(depth, curLine());
    if (isName("not")) {
      int l = curLine();
      ++at;
      return make(Expr::Not, l, {notExpr()});
    }
    return compare();
  }
  ExprP compare() {
    int l = curLine();
    ExprP a = math1();
    ExprP cmp;
    for (;;) {
      std::string op;
      if (peek() && peek()->kind == Tok::Op &&
          known(std::begin(kCmpOps), std::end(kCmpOps), peek()->text)) {
        op = toks[at++].text;
      } else if (isName("in")) {
        ++at;
        op = "in";
      } else if (isName("not") && isName("in", 1)) {
        at += 2;
        op = "not in";
      } else {
        break;
      }
      if (!cmp)
        cmp = make(Expr::Cmp, l, {a});
      cmp->ops.push_back(op);
      cmp->args.push_back(math1());
      seal(*cmp);
    }
    return cmp ? cmp : a;
  }
  static constexpr const char *kCmpOps[] = {"==", "!=", "<", ">", "<=", ">="};

  ExprP binary(ExprP a, const std::string &op, ExprP b, int l) {
    ExprP e = make(Expr::Bin, l, {a, b});
    e->name = op;
    return e;
  }
  ExprP math1() {
    ExprP a = concat();
    while (isOp("+") || isOp("-")) {
      int l = curLine();
      std::string op = toks[at++].text;
      a = binary(a, op, concat(), l);
    }
    return a;
  }
  ExprP concat() {
    ExprP a = math2();
    while (isOp("~")) {
      int l = curLine();
      ++at;
      a = binary(a, "~", math2(), l);
    }
    return a;
  }
  ExprP math2() {
    ExprP a = pow();
    while (isOp("*") || isOp("/") || isOp("//") || isOp("%")) {
      int l = curLine();
      std::string op = toks[at++].text;
      a = binary(a, op, pow(), l);
    }
    return a;
  }
  ExprP pow() {
    ExprP a = unary();
    while (isOp("**")) {
      int l = curLine();
      ++at;
      a = binary(a, "**", unary(), l);
    }
    return a;
  }
  ExprP unary(bool withFilter = true) {
    DepthGuard guard(depth, curLine());
    int l = curLine();
    ExprP e;
    if (isOp("-")) {
      ++at;
      e = make(Expr::Neg, l, {unary(false)});
    } else if (isOp("+")) {
      ++at;
      e = make(Expr::Pos, l, {unary(false)});
    } else {
      e = primary();
    }
    e = postfix(e);
    return withFilter ? filters(e) : e;
  }
  ExprP literal(Value v, int l) {
    ExprP e = make(Expr::Lit, l);
    e->lit = std::move(v);
    return e;
  }
  ExprP primary() {
    const Tok *t = peek();
    if (!t)
      fail(line, "expected an expression, found the end of the tag");
    int l = t->line;
    switch (t->kind) {
    case Tok::Name: {
      ++at;
      const std::string &n = t->text;
      if (n == "true" || n == "True")
        return literal(Value::boolean(true), l);
      if (n == "false" || n == "False")
        return literal(Value::boolean(false), l);
      if (n == "none" || n == "None")
        return literal(Value::none(), l);
      ExprP e = make(Expr::Name, l);
      e->name = n;
      return e;
    }
    case Tok::Str: {
      std::string s;
      while (peek() && peek()->kind == Tok::Str)
        s += toks[at++].text;
      return literal(Value::str(s), l);
    }
    case Tok::Int:
      ++at;
      return literal(Value::integer(t->i), l);
    case Tok::Float:
      ++at;
      return literal(Value::number(t->f), l);
    case Tok::Op:
      break;
    }
    if (isOp("(")) {
      ++at;
      if (isOp(")")) {
        ++at;
        ExprP empty = make(Expr::ListE, l);
        empty->tuple = true;
        return empty;
      }
      ExprP e = expr();
      if (isOp(",")) {
        ExprP tuple = make(Expr::ListE, l, {e});
        tuple->tuple = true;
        while (isOp(",")) {
          ++at;
          if (isOp(")"))
            break;
          tuple->args.push_back(expr());
          seal(*tuple);
        }
        e = tuple;
      }
      expectOp(")");
      return e;
    }
    if (isOp("[")) {
      ++at;
      ExprP e = make(Expr::ListE, l);
      while (!isOp("]")) {
        e->args.push_back(expr());
        seal(*e);
        if (!isOp(","))
          break;
        ++at;
      }
      expectOp("]");
      return e;
    }
    if (isOp("{")) {
      ++at;
      ExprP e = make(Expr::DictE, l);
      while (!isOp("}")) {
        e->args.push_back(expr());
        expectOp(":");
        e->args.push_back(expr());
        seal(*e);
        if (!isOp(","))
          break;
        ++at;
      }
      expectOp("}");
      return e;
    }
    fail(l, "unexpected '" + t->text + "' in an expression");
  }
  void callArgs(const ExprP &e) {
    expectOp("(");
    while (!isOp(")")) {
      if (peek() && peek()->kind == Tok::Name && isOp("=", 1)) {
        std::string key = toks[at].text;
        at += 2;
        e->kwargs.emplace_back(key, expr());
      } else {
        e->args.push_back(expr());
      }
      seal(*e);
      if (!isOp(","))
        break;
      ++at;
    }
    expectOp(")");
  }
  ExprP postfix(ExprP e) {
    for (;;) {
      int l = curLine();
      if (isOp(".")) {
        ++at;
        const Tok *t = peek();
        if (!t || (t->kind != Tok::Name && t->kind != Tok::Int))
          fail(l, "expected an attribute name after '.', found " + describe());
        ++at;
        if (t->kind == Tok::Int) {
          e = make(Expr::Item, l, {e, literal(Value::integer(t->i), l)});
        } else {
          e = make(Expr::Attr, l, {e});
          e->name = t->text;
        }
      } else if (isOp("[")) {
        ++at;
        ExprP start, stop, step;
        if (!isOp(":"))
          start = expr();
        if (isOp(":")) {
          ++at;
          if (!isOp("]") && !isOp(":"))
            stop = expr();
          if (isOp(":")) {
            ++at;
            if (!isOp("]"))
              step = expr();
          }
          expectOp("]");
          e = make(Expr::Slice, l, {e, start, stop, step});
        } else {
          expectOp("]");
          e = make(Expr::Item, l, {e, start});
        }
      } else if (isOp("(")) {
        e = make(Expr::Call, l, {e});
        callArgs(e);
      } else {
        return e;
      }
    }
  }
  ExprP filters(ExprP e) {
    for (;;) {
      int l = curLine();
      if (isOp("|")) {
        ++at;
        std::string name = expectName();
        if (!known(std::begin(kFilters), std::end(kFilters), name))
          fail(l, "filter '" + name + "' is outside the supported Jinja subset");
        e = make(Expr::Filter, l, {e});
        e->name = name;
        if (isOp("("))
          callArgs(e);
      } else if (isName("is")) {
        ++at;
        bool negated = false;
        if (isName("not")) {
          ++at;
          negated = true;
        }
        std::string name = expectName();
        if (!known(std::begin(kTests), std::end(kTests), name))
          fail(l, "test '" + name + "' is outside the supported Jinja subset");
        e = make(Expr::Test, l, {e});
        e->name = name;
        e->negated = negated;
        if (isOp("(")) {
          callArgs(e);
        } else if (const Tok *t = peek()) {
          static const char *const kStop[] = {"and", "or", "else", "if", "is", "in", "not"};
          bool starts = t->kind != Tok::Op ? !(t->kind == Tok::Name &&
                                               known(std::begin(kStop), std::end(kStop), t->text))
                                           : (t->text == "[" || t->text == "{" || t->text == "-");
          if (starts) {
            e->args.push_back(postfix(primary()));
            seal(*e);
          }
        }
      } else {
        return e;
      }
    }
  }
};

class Parser {
public:
  explicit Parser(std::vector<Piece> pieces) : pieces(std::move(pieces)) {}

  std::vector<Node> parse() {
    std::string endKw;
    std::vector<Node> nodes = body({}, endKw, 0, "");
    return nodes;
  }

private:
  std::vector<Piece> pieces;
  size_t at = 0;
  int loopDepth = 0;
  int blockDepth = 0;

  // Parses until one of `ends` (left in endKw, its tag's parser positioned after the keyword).
  std::vector<Node> body(const std::vector<std::string> &ends, std::string &endKw, int openLine,
                         const std::string &opener) {
    std::vector<Node> nodes;
    while (at < pieces.size()) {
      Piece &p = pieces[at++];
      if (p.kind == Piece::Text) {
        Node n{Node::Text, p.line};
        n.text = p.text;
        nodes.push_back(std::move(n));
        continue;
      }
      ExprParser ep(p.toks, 0, p.line);
      if (p.kind == Piece::Output) {
        Node n{Node::Output, p.line};
        n.expr = ep.expr();
        ep.expectEnd();
        nodes.push_back(std::move(n));
        continue;
      }
      if (p.toks[0].kind != Tok::Name)
        fail(p.line, "expected a statement name after '{%', found '" + p.toks[0].text + "'");
      std::string kw = p.toks[0].text;
      ep.at = 1;
      if (std::find(ends.begin(), ends.end(), kw) != ends.end()) {
        endKw = kw;
        current = std::make_unique<ExprParser>(p.toks, 1, p.line);
        return nodes;
      }
      if (kw == "if") {
        nodes.push_back(parseIf(ep, p.line));
      } else if (kw == "for") {
        nodes.push_back(parseFor(ep, p.line));
      } else if (kw == "set") {
        Node n{Node::Set, p.line};
        n.targets.push_back(ep.expectName());
        if (ep.isOp(".")) {
          ++ep.at;
          n.attr = ep.expectName();
        }
        if (ep.isOp(","))
          fail(p.line, "'set' with several targets is outside the supported Jinja subset");
        if (!ep.isOp("="))
          fail(p.line, "block 'set' (without '=') is outside the supported Jinja subset");
        ++ep.at;
        n.expr = ep.expr();
        ep.expectEnd();
        nodes.push_back(std::move(n));
      } else if (kw == "break" || kw == "continue") {
        if (loopDepth == 0)
          fail(p.line, "'" + kw + "' outside a 'for' loop");
        ep.expectEnd();
        nodes.push_back(Node{kw == "break" ? Node::Break : Node::Continue, p.line});
      } else if (kw == "generation") { // transformers' assistant-mask marker: no output
        ep.expectEnd();
        std::string end;
        std::vector<Node> inner = body({"endgeneration"}, end, p.line, "generation");
        current->expectEnd();
        for (Node &n : inner)
          nodes.push_back(std::move(n));
      } else if (kw == "endfor" || kw == "endif" || kw == "else" || kw == "elif" ||
                 kw == "endset" || kw == "endmacro" || kw == "endgeneration") {
        fail(p.line, "unexpected '" + kw + "'" +
                         (opener.empty() ? std::string()
                                         : " inside '" + opener + "' opened at line " +
                                               std::to_string(openLine)));
      } else if (kw == "macro" || kw == "call" || kw == "filter" || kw == "raw" || kw == "with" ||
                 kw == "include" || kw == "import" || kw == "from" || kw == "extends" ||
                 kw == "block" || kw == "do" || kw == "autoescape") {
        fail(p.line, "the '" + kw + "' statement is outside the supported Jinja subset");
      } else {
        fail(p.line, "unknown statement '" + kw + "'");
      }
    }
    if (!ends.empty())
      fail(openLine, "'" + opener + "' is never closed (expected '" + ends.back() + "')");
    return nodes;
  }

  Node parseIf(ExprParser &ep, int line) {
    DepthGuard guard(blockDepth, line);
    Node n{Node::If, line};
    ExprP cond = ep.expr();
    ep.expectEnd();
    for (;;) {
      std::string end;
      std::vector<Node> b = body({"elif", "else", "endif"}, end, line, "if");
      n.branches.emplace_back(cond, std::move(b));
      if (end == "elif") {
        cond = current->expr();
        current->expectEnd();
        continue;
      }
      current->expectEnd();
      if (end == "else") {
        n.elseBody = body({"endif"}, end, line, "if");
        current->expectEnd();
      }
      return n;
    }
  }

  Node parseFor(ExprParser &ep, int line) {
    DepthGuard guard(blockDepth, line);
    Node n{Node::For, line};
    n.targets.push_back(ep.expectName());
    while (ep.isOp(",")) {
      ++ep.at;
      n.targets.push_back(ep.expectName());
    }
    if (!ep.isName("in"))
      fail(line, "expected 'in' in 'for', found " + ep.describe());
    ++ep.at;
    n.expr = ep.expr(false);
    if (ep.isName("if")) {
      ++ep.at;
      n.cond = ep.expr(false);
    }
    if (ep.isName("recursive"))
      fail(line, "recursive 'for' is outside the supported Jinja subset");
    ep.expectEnd();
    ++loopDepth;
    std::string end;
    n.body = body({"else", "endfor"}, end, line, "for");
    --loopDepth;
    current->expectEnd();
    if (end == "else") {
      n.elseBody = body({"endfor"}, end, line, "for");
      current->expectEnd();
    }
    return n;
  }

  std::unique_ptr<ExprParser> current; // the closing tag's rest, for elif's condition
};

// ---------------------------------------------------------------------------------------
// Rendering.

enum class Flow { Next, Break, Continue };

struct Raised {
  std::string message;
};

class Renderer {
public:
  explicit Renderer(std::map<std::string, Value> globals) { scopes.push_back(std::move(globals)); }

  std::string out;

  Flow exec(const std::vector<Node> &nodes) {
    for (const Node &n : nodes) {
      Flow f = exec(n);
      if (f != Flow::Next)
        return f;
    }
    return Flow::Next;
  }

private:
  std::vector<std::map<std::string, Value>> scopes;

  Value lookup(const std::string &name) {
    for (auto it = scopes.rbegin(); it != scopes.rend(); ++it) {
      auto found = it->find(name);
      if (found != it->end())
        return found->second;
    }
    return Value::undefined("'" + name + "' is undefined");
  }

  Flow exec(const Node &n) {
    switch (n.kind) {
    case Node::Text:
      out += n.text;
      return Flow::Next;
    case Node::Output:
      out += toStr(eval(*n.expr));
      return Flow::Next;
    case Node::If:
      for (const auto &[cond, body] : n.branches)
        if (truthy(eval(*cond)))
          return exec(body);
      return exec(n.elseBody);
    case Node::Set: {
      Value v = eval(*n.expr);
      if (n.attr.empty()) {
        scopes.back()[n.targets[0]] = std::move(v);
        return Flow::Next;
      }
      Value ns = lookup(n.targets[0]);
      if (ns.kind != Value::NamespaceV)
        fail(n.line, "cannot assign attribute '" + n.attr + "' on '" + n.targets[0] +
                         "', which is not a namespace");
      setKey(*ns.dict, n.attr, std::move(v));
      return Flow::Next;
    }
    case Node::Break:
      return Flow::Break;
    case Node::Continue:
      return Flow::Continue;
    case Node::For:
      return execFor(n);
    }
    return Flow::Next;
  }

  List iterate(const Value &v, int line) {
    switch (v.kind) {
    case Value::Undefined:
      return {};
    case Value::ListV:
      return *v.list;
    case Value::DictV: {
      List keys;
      for (const auto &kv : *v.dict)
        keys.push_back(Value::str(kv.first));
      return keys;
    }
    case Value::String: {
      List chars;
      for (std::string &c : codePoints(v.s))
        chars.push_back(Value::str(std::move(c)));
      return chars;
    }
    default:
      fail(line, std::string("'") + typeName(v) + "' object is not iterable");
    }
  }

  void bindTargets(const Node &n, const Value &item) {
    if (n.targets.size() == 1) {
      scopes.back()[n.targets[0]] = item;
      return;
    }
    List parts = iterate(item, n.line);
    if (parts.size() != n.targets.size())
      fail(n.line, "cannot unpack " + std::to_string(parts.size()) + " values into " +
                       std::to_string(n.targets.size()) + " loop variables");
    for (size_t k = 0; k < parts.size(); ++k)
      scopes.back()[n.targets[k]] = parts[k];
  }

  Flow execFor(const Node &n) {
    List items = iterate(eval(*n.expr), n.line);
    scopes.emplace_back();
    if (n.cond) {
      List kept;
      for (const Value &item : items) {
        bindTargets(n, item);
        if (truthy(eval(*n.cond)))
          kept.push_back(item);
      }
      items = std::move(kept);
    }
    for (size_t k = 0; k < items.size(); ++k) {
      // What the body sets lasts one iteration: the next one sees the outer values again.
      scopes.back().clear();
      bindTargets(n, items[k]);
      int64_t len = int64_t(items.size()), idx = int64_t(k);
      Dict loop = {{"index", Value::integer(idx + 1)},
                   {"index0", Value::integer(idx)},
                   {"revindex", Value::integer(len - idx)},
                   {"revindex0", Value::integer(len - idx - 1)},
                   {"first", Value::boolean(k == 0)},
                   {"last", Value::boolean(k + 1 == items.size())},
                   {"length", Value::integer(len)},
                   {"depth", Value::integer(1)},
                   {"depth0", Value::integer(0)}};
      if (k > 0)
        loop.emplace_back("previtem", items[k - 1]);
      if (k + 1 < items.size())
        loop.emplace_back("nextitem", items[k + 1]);
      scopes.back()["loop"] = Value::makeDict(std::move(loop));
      if (exec(n.body) == Flow::Break)
        break;
    }
    scopes.pop_back();
    if (items.empty())
      return exec(n.elseBody);
    return Flow::Next;
  }

  [[noreturn]] void undefinedError(const Value &v, int line) { fail(line, v.s); }

  Value getAttr(const Value &obj, const std::string &name, int line) {
    if (obj.kind == Value::Undefined)
      undefinedError(obj, line);
    if (obj.isMapping()) {
      if (const Value *v = findKey(*obj.dict, name))
        return *v;
      return Value::undefined("'dict object' has no attribute '" + name + "'");
    }
    return Value::undefined(std::string("'") + typeName(obj) + " object' has no attribute '" +
                            name + "'");
  }

  static int64_t normIndex(int64_t i, size_t n) { return i < 0 ? i + int64_t(n) : i; }

  Value getItem(const Value &obj, const Value &key, int line) {
    if (obj.kind == Value::Undefined)
      undefinedError(obj, line);
    if (obj.isMapping()) {
      if (key.kind == Value::String)
        if (const Value *v = findKey(*obj.dict, key.s))
          return *v;
      return Value::undefined("'dict object' has no attribute " + repr(key));
    }
    if ((obj.kind == Value::ListV || obj.kind == Value::String) &&
        (key.kind == Value::Int || key.kind == Value::Bool)) {
      if (obj.kind == Value::ListV) {
        int64_t i = normIndex(key.asInt(), obj.list->size());
        if (i >= 0 && i < int64_t(obj.list->size()))
          return (*obj.list)[size_t(i)];
      } else {
        std::vector<std::string> cps = codePoints(obj.s);
        int64_t i = normIndex(key.asInt(), cps.size());
        if (i >= 0 && i < int64_t(cps.size()))
          return Value::str(cps[size_t(i)]);
      }
      return Value::undefined(std::string("'") + typeName(obj) + " object' has no element " +
                              toStr(key));
    }
    if (obj.kind == Value::ListV || obj.kind == Value::String)
      fail(line, std::string(typeName(obj)) + " indices must be integers, not " + typeName(key));
    return Value::undefined(std::string("'") + typeName(obj) + " object' has no attribute " +
                            repr(key));
  }

  Value slice(const Value &obj, const Expr &e) {
    auto bound = [&](const ExprP &x, bool &present) -> int64_t {
      present = false;
      if (!x)
        return 0;
      Value v = eval(*x);
      if (v.kind == Value::None)
        return 0;
      if (v.kind != Value::Int && v.kind != Value::Bool)
        fail(e.line, "slice indices must be integers or None");
      present = true;
      return v.asInt();
    };
    bool hasStart, hasStop, hasStep;
    int64_t start = bound(e.args[1], hasStart), stop = bound(e.args[2], hasStop),
            step = bound(e.args[3], hasStep);
    if (!hasStep)
      step = 1;
    if (step == 0)
      fail(e.line, "slice step cannot be zero");
    std::vector<std::string> cps;
    size_t n;
    if (obj.kind == Value::ListV) {
      n = obj.list->size();
    } else if (obj.kind == Value::String) {
      cps = codePoints(obj.s);
      n = cps.size();
    } else if (obj.kind == Value::Undefined) {
      undefinedError(obj, e.line);
    } else {
      fail(e.line, std::string("'") + typeName(obj) + "' object cannot be sliced");
    }
    int64_t len = int64_t(n);
    auto adjust = [&](int64_t v, bool present, bool isStart) {
      int64_t lower = step > 0 ? 0 : -1, upper = step > 0 ? len : len - 1;
      if (!present)
        return (step < 0) == isStart ? upper : lower;
      if (v < 0) {
        v += len;
        return v < lower ? lower : v;
      }
      return v > upper ? upper : v;
    };
    start = adjust(start, hasStart, true);
    stop = adjust(stop, hasStop, false);
    List items;
    std::string text;
    for (int64_t i = start; step > 0 ? i < stop : i > stop; i += step) {
      if (obj.kind == Value::ListV)
        items.push_back((*obj.list)[size_t(i)]);
      else
        text += cps[size_t(i)];
    }
    return obj.kind == Value::ListV ? Value::makeList(std::move(items)) : Value::str(text);
  }

  Value arith(const std::string &op, const Value &a, const Value &b, int line) {
    if (op == "~")
      return Value::str(toStr(a) + toStr(b));
    if (a.kind == Value::Undefined)
      undefinedError(a, line);
    if (b.kind == Value::Undefined)
      undefinedError(b, line);
    if (a.isNumber() && b.isNumber()) {
      bool flt = a.kind == Value::Float || b.kind == Value::Float;
      double x = a.asDouble(), y = b.asDouble();
      int64_t p = a.asInt(), q = b.asInt(), r = 0;
      // Python's integers do not overflow; tpc's are 64 bits and say so rather than wrap.
      auto checked = [&](bool overflow) {
        if (overflow)
          fail(line, "integer overflow in '" + op + "' (beyond 64 bits)");
        return Value::integer(r);
      };
      if (op == "+")
        return flt ? Value::number(x + y) : checked(__builtin_add_overflow(p, q, &r));
      if (op == "-")
        return flt ? Value::number(x - y) : checked(__builtin_sub_overflow(p, q, &r));
      if (op == "*")
        return flt ? Value::number(x * y) : checked(__builtin_mul_overflow(p, q, &r));
      if (!flt && q == -1 && p == INT64_MIN && (op == "//" || op == "%"))
        return op == "%" ? Value::integer(0) : checked(true);
      if ((op == "/" || op == "//" || op == "%") && (flt ? y == 0 : q == 0))
        fail(line, "division by zero");
      if (op == "/")
        return Value::number(x / y);
      if (op == "//") {
        if (flt)
          return Value::number(std::floor(x / y));
        int64_t d = p / q;
        return Value::integer((p % q != 0 && ((p < 0) != (q < 0))) ? d - 1 : d);
      }
      if (op == "%") {
        if (flt) {
          double m = std::fmod(x, y);
          return Value::number(m != 0 && ((m < 0) != (y < 0)) ? m + y : m);
        }
        int64_t m = p % q;
        return Value::integer(m != 0 && ((m < 0) != (q < 0)) ? m + q : m);
      }
      if (op == "**") {
        if (flt || q < 0)
          return Value::number(std::pow(x, y));
        int64_t acc = 1;
        for (int64_t k = 0; k < q && acc != 0 && !(p == 1 || (p == -1 && k > 1)); ++k)
          if (__builtin_mul_overflow(acc, p, &acc))
            return checked(true);
        if (p == -1)
          acc = q % 2 ? -1 : 1;
        return Value::integer(p == 1 ? 1 : acc);
      }
    }
    if (op == "+" && a.kind == Value::String && b.kind == Value::String)
      return Value::str(a.s + b.s);
    if (op == "+" && a.kind == Value::ListV && b.kind == Value::ListV) {
      List l = *a.list;
      l.insert(l.end(), b.list->begin(), b.list->end());
      return Value::makeList(std::move(l));
    }
    if (op == "*" && (b.kind == Value::String || b.kind == Value::ListV) &&
        (a.kind == Value::Int || a.kind == Value::Bool))
      return arith(op, b, a, line);
    if (op == "*" && (a.kind == Value::String || a.kind == Value::ListV) &&
        (b.kind == Value::Int || b.kind == Value::Bool)) {
      int64_t times = b.asInt();
      size_t unit = a.kind == Value::String ? a.s.size() : a.list->size();
      if (times > 0 && unit > 0 && uint64_t(times) > (uint64_t(1) << 24) / unit)
        fail(line, "repetition makes a value too large");
      Value r = a.kind == Value::String ? Value::str("") : Value::makeList({});
      r.nesting = a.nesting;
      for (int64_t k = 0; k < times; ++k) {
        if (a.kind == Value::String)
          r.s += a.s;
        else
          r.list->insert(r.list->end(), a.list->begin(), a.list->end());
      }
      return r;
    }
    if (op == "%" && a.kind == Value::String)
      fail(line, "string formatting with '%' is outside the supported Jinja subset");
    fail(line, "unsupported operand type(s) for " + op + ": '" + typeName(a) + "' and '" +
                   typeName(b) + "'");
  }

  bool contains(const Value &container, const Value &item, int line) {
    switch (container.kind) {
    case Value::Undefined:
      return false;
    case Value::String:
      if (item.kind != Value::String)
        fail(line,
             "'in <string>' requires string as left operand, not " + std::string(typeName(item)));
      return container.s.find(item.s) != std::string::npos;
    case Value::ListV:
      return std::any_of(container.list->begin(), container.list->end(),
                         [&](const Value &v) { return equal(v, item); });
    case Value::DictV:
    case Value::NamespaceV:
      return item.kind == Value::String && findKey(*container.dict, item.s);
    default:
      fail(line, std::string("argument of type '") + typeName(container) + "' is not iterable");
    }
  }

  bool compare(const std::string &op, const Value &a, const Value &b, int line) {
    if (op == "==")
      return equal(a, b);
    if (op == "!=")
      return !equal(a, b);
    if (op == "in")
      return contains(b, a, line);
    if (op == "not in")
      return !contains(b, a, line);
    if (op == "<")
      return less(a, b, op, line);
    if (op == ">")
      return less(b, a, op, line);
    if (op == "<=")
      return !less(b, a, op, line);
    return !less(a, b, op, line); // >=
  }

  struct Args {
    std::vector<Value> pos;
    std::vector<std::pair<std::string, Value>> kw;
    const Value *get(size_t index, const char *name) const {
      if (index < pos.size())
        return &pos[index];
      for (const auto &[k, v] : kw)
        if (k == name)
          return &v;
      return nullptr;
    }
  };

  Args evalArgs(const Expr &e, size_t skip) {
    Args a;
    for (size_t k = skip; k < e.args.size(); ++k)
      a.pos.push_back(eval(*e.args[k]));
    for (const auto &[k, v] : e.kwargs)
      a.kw.emplace_back(k, eval(*v));
    return a;
  }

  std::string requireString(const Value *v, const std::string &what, int line) {
    if (!v || v->kind != Value::String)
      fail(line, what + " expects a string argument");
    return v->s;
  }

  bool test(const std::string &name, const Value &v, const Args &args, int line) {
    const Value *arg = args.get(0, "value");
    auto needArg = [&]() -> const Value & {
      if (!arg)
        fail(line, "test '" + name + "' needs an argument");
      return *arg;
    };
    if (name == "defined")
      return v.kind != Value::Undefined;
    if (name == "undefined")
      return v.kind == Value::Undefined;
    if (name == "none")
      return v.kind == Value::None;
    if (name == "string")
      return v.kind == Value::String;
    if (name == "number")
      return v.isNumber();
    if (name == "integer")
      return v.kind == Value::Int;
    if (name == "float")
      return v.kind == Value::Float;
    if (name == "boolean")
      return v.kind == Value::Bool;
    if (name == "true")
      return v.kind == Value::Bool && v.b;
    if (name == "false")
      return v.kind == Value::Bool && !v.b;
    if (name == "mapping")
      return v.kind == Value::DictV;
    if (name == "iterable" || name == "sequence")
      return v.kind == Value::String || v.kind == Value::ListV || v.kind == Value::DictV ||
             v.kind == Value::Undefined;
    if (name == "callable")
      return v.kind == Value::Function;
    if (name == "lower" || name == "upper") {
      if (v.kind != Value::String)
        return false;
      std::string t = v.s;
      for (char &c : t)
        c = char(name == "lower" ? std::tolower((unsigned char)c) : std::toupper((unsigned char)c));
      return t == v.s;
    }
    if (name == "even" || name == "odd" || name == "divisibleby") {
      if (v.kind != Value::Int && v.kind != Value::Bool)
        fail(line, "test '" + name + "' needs an integer");
      int64_t d = name == "divisibleby" ? needArg().asInt() : 2;
      if (d == 0)
        fail(line, "division by zero");
      bool divisible = v.asInt() % d == 0;
      return name == "odd" ? !divisible : divisible;
    }
    if (name == "eq" || name == "equalto")
      return equal(v, needArg());
    if (name == "ne")
      return !equal(v, needArg());
    if (name == "sameas")
      return v.kind == needArg().kind && equal(v, *arg);
    if (name == "lt" || name == "gt" || name == "le" || name == "ge") {
      static const std::map<std::string, std::string> ops = {
          {"lt", "<"}, {"gt", ">"}, {"le", "<="}, {"ge", ">="}};
      return compare(ops.at(name), v, needArg(), line);
    }
    if (name == "in")
      return contains(needArg(), v, line);
    fail(line, "test '" + name + "' is outside the supported Jinja subset");
  }

  Value length(const Value &v, int line) {
    switch (v.kind) {
    case Value::Undefined:
      return Value::integer(0);
    case Value::String:
      return Value::integer(int64_t(codePoints(v.s).size()));
    case Value::ListV:
      return Value::integer(int64_t(v.list->size()));
    case Value::DictV:
      return Value::integer(int64_t(v.dict->size()));
    default:
      fail(line, std::string("object of type '") + typeName(v) + "' has no len()");
    }
  }

  static std::string caseMap(std::string s, int mode) { // 0 lower, 1 upper, 2 title, 3 capitalize
    bool start = true;
    for (char &c : s) {
      unsigned char u = (unsigned char)c;
      if (mode == 0)
        c = char(std::tolower(u));
      else if (mode == 1)
        c = char(std::toupper(u));
      else if (mode == 2)
        c = char(start ? std::toupper(u) : std::tolower(u));
      else
        c = char(&c == &s[0] ? std::toupper(u) : std::tolower(u));
      start = !std::isalnum(u);
    }
    return s;
  }

  Value attrPath(const Value &item, const std::string &path, int line) {
    Value v = item;
    size_t b = 0;
    while (b <= path.size()) {
      size_t e = path.find('.', b);
      std::string part = path.substr(b, e == std::string::npos ? std::string::npos : e - b);
      v = v.kind == Value::Undefined ? v : getAttr(v, part, line);
      if (e == std::string::npos)
        break;
      b = e + 1;
    }
    return v;
  }

  Value filter(const std::string &name, const Value &v, const Args &args, int line) {
    auto str = [&]() { return toStr(v); };
    if (name == "safe")
      return v;
    if (name == "trim")
      return Value::str(strip(str(), args.get(0, "chars"), true, true));
    if (name == "length" || name == "count")
      return length(v, line);
    if (name == "upper")
      return Value::str(caseMap(str(), 1));
    if (name == "lower")
      return Value::str(caseMap(str(), 0));
    if (name == "title")
      return Value::str(caseMap(str(), 2));
    if (name == "capitalize")
      return Value::str(caseMap(str(), 3));
    if (name == "string")
      return Value::str(str());
    if (name == "tojson") {
      const Value *indent = args.get(0, "indent");
      std::string out;
      toJson(v, indent && indent->kind == Value::Int ? int(indent->i) : -1, 0, out, line);
      return Value::str(out);
    }
    if (name == "default" || name == "d") {
      const Value *def = args.get(0, "default_value");
      const Value *boolean = args.get(1, "boolean");
      bool useDefault = boolean && truthy(*boolean) ? !truthy(v) : v.kind == Value::Undefined;
      return useDefault ? (def ? *def : Value::str("")) : v;
    }
    if (name == "replace") {
      std::string s = str(), from = requireString(args.get(0, "old"), "replace", line),
                  to = requireString(args.get(1, "new"), "replace", line);
      return Value::str(replaceAll(s, from, to, args.get(2, "count"), line));
    }
    if (name == "wordcount") {
      Value parts = split(str(), nullptr, -1);
      return Value::integer(int64_t(parts.list->size()));
    }
    if (name == "int") {
      if (v.isNumber()) {
        if (v.kind == Value::Float && !(std::fabs(v.f) < 9.2e18))
          fail(line, "filter 'int': " + pyFloat(v.f) + " does not fit in 64 bits");
        return Value::integer(v.kind == Value::Float ? int64_t(v.f) : v.asInt());
      }
      try {
        return Value::integer(std::stoll(strip(str(), nullptr, true, true)));
      } catch (const std::exception &) {
        const Value *def = args.get(0, "default");
        return def ? *def : Value::integer(0);
      }
    }
    if (name == "float") {
      if (v.isNumber())
        return Value::number(v.asDouble());
      try {
        return Value::number(std::stod(strip(str(), nullptr, true, true)));
      } catch (const std::exception &) {
        const Value *def = args.get(0, "default");
        return def ? *def : Value::number(0);
      }
    }
    if (name == "abs") {
      if (v.kind == Value::Float)
        return Value::number(std::fabs(v.f));
      if (v.isNumber())
        return v.asInt() == INT64_MIN ? arith("-", Value::integer(0), v, line)
                                      : Value::integer(std::llabs(v.asInt()));
      fail(line, std::string("bad operand type for abs(): '") + typeName(v) + "'");
    }
    if (name == "items") {
      if (v.kind == Value::Undefined)
        return Value::makeList({});
      if (!v.isMapping())
        fail(line, "filter 'items' expects a mapping");
      List items;
      for (const auto &[k, val] : *v.dict)
        items.push_back(Value::makeList({Value::str(k), val}, true));
      return Value::makeList(std::move(items));
    }
    // The rest take a sequence.
    List items = iterate(v, line);
    if (name == "list")
      return Value::makeList(std::move(items));
    if (name == "first" || name == "last") {
      if (items.empty())
        return Value::undefined("No " + name + " item, sequence was empty.");
      return name == "first" ? items.front() : items.back();
    }
    if (name == "reverse") {
      if (v.kind == Value::String) {
        std::vector<std::string> cps = codePoints(v.s);
        std::string r;
        for (auto it = cps.rbegin(); it != cps.rend(); ++it)
          r += *it;
        return Value::str(r);
      }
      std::reverse(items.begin(), items.end());
      return Value::makeList(std::move(items));
    }
    if (name == "join") {
      const Value *sep = args.get(0, "d");
      const Value *attribute = args.get(1, "attribute");
      std::string out;
      for (size_t k = 0; k < items.size(); ++k) {
        if (k)
          out += sep ? toStr(*sep) : "";
        out += toStr(attribute ? attrPath(items[k], toStr(*attribute), line) : items[k]);
      }
      return Value::str(out);
    }
    if (name == "sum") {
      const Value *attribute = args.get(0, "attribute");
      const Value *start = args.get(1, "start");
      Value total = start ? *start : Value::integer(0);
      for (const Value &item : items)
        total = arith("+", total, attribute ? attrPath(item, toStr(*attribute), line) : item, line);
      return total;
    }
    if (name == "map") {
      const Value *attribute = args.get(99, "attribute");
      List out;
      if (attribute) {
        const Value *def = args.get(99, "default");
        for (const Value &item : items) {
          Value x = attrPath(item, toStr(*attribute), line);
          out.push_back(x.kind == Value::Undefined && def ? *def : x);
        }
        return Value::makeList(std::move(out));
      }
      if (args.pos.empty() || args.pos[0].kind != Value::String)
        fail(line, "filter 'map' needs a filter name or attribute=");
      std::string inner = args.pos[0].s;
      if (!known(std::begin(kFilters), std::end(kFilters), inner))
        fail(line, "filter '" + inner + "' is outside the supported Jinja subset");
      Args rest;
      rest.pos.assign(args.pos.begin() + 1, args.pos.end());
      rest.kw = args.kw;
      for (const Value &item : items)
        out.push_back(filter(inner, item, rest, line));
      return Value::makeList(std::move(out));
    }
    if (name == "select" || name == "reject" || name == "selectattr" || name == "rejectattr") {
      bool byAttr = name == "selectattr" || name == "rejectattr";
      bool keep = name == "select" || name == "selectattr";
      size_t first = byAttr ? 1 : 0;
      if (byAttr && (args.pos.empty() || args.pos[0].kind != Value::String))
        fail(line, "filter '" + name + "' needs an attribute name");
      std::string testName;
      if (args.pos.size() > first) {
        if (args.pos[first].kind != Value::String)
          fail(line, "filter '" + name + "' needs a test name");
        testName = args.pos[first].s;
        if (!known(std::begin(kTests), std::end(kTests), testName))
          fail(line, "test '" + testName + "' is outside the supported Jinja subset");
      }
      Args testArgs;
      if (args.pos.size() > first + 1)
        testArgs.pos.assign(args.pos.begin() + long(first) + 1, args.pos.end());
      List out;
      for (const Value &item : items) {
        Value x = byAttr ? attrPath(item, args.pos[0].s, line) : item;
        bool t = testName.empty() ? truthy(x) : test(testName, x, testArgs, line);
        if (t == keep)
          out.push_back(item);
      }
      return Value::makeList(std::move(out));
    }
    if (name == "unique") {
      List out;
      for (const Value &item : items)
        if (std::none_of(out.begin(), out.end(), [&](const Value &o) { return equal(o, item); }))
          out.push_back(item);
      return Value::makeList(std::move(out));
    }
    if (name == "sort" || name == "min" || name == "max" || name == "dictsort") {
      if (name == "dictsort")
        fail(line, "filter 'dictsort' is outside the supported Jinja subset");
      const Value *reverse = name == "sort" ? args.get(0, "reverse") : nullptr;
      const Value *attribute = args.get(name == "sort" ? 2 : 1, "attribute");
      auto key = [&](const Value &x) {
        Value k = attribute ? attrPath(x, toStr(*attribute), line) : x;
        return k;
      };
      std::stable_sort(items.begin(), items.end(), [&](const Value &a, const Value &b) {
        return less(key(a), key(b), "<", line);
      });
      if (name == "min")
        return items.empty() ? Value::undefined("No aggregated item, sequence was empty.")
                             : items.front();
      if (name == "max")
        return items.empty() ? Value::undefined("No aggregated item, sequence was empty.")
                             : items.back();
      if (reverse && truthy(*reverse))
        std::reverse(items.begin(), items.end());
      return Value::makeList(std::move(items));
    }
    fail(line, "filter '" + name + "' is outside the supported Jinja subset");
  }

  static std::string replaceAll(const std::string &s, const std::string &from,
                                const std::string &to, const Value *count, int line) {
    int64_t limit = count && count->kind == Value::Int ? count->i : -1;
    std::string out;
    if (from.empty()) { // Python inserts `to` around every code point
      std::vector<std::string> cps = codePoints(s);
      int64_t done = 0;
      for (const std::string &c : cps) {
        if (limit < 0 || done < limit)
          out += to, ++done;
        out += c;
      }
      if (limit < 0 || done < limit)
        out += to;
      return out;
    }
    size_t pos = 0;
    int64_t done = 0;
    for (;;) {
      size_t hit = s.find(from, pos);
      if (hit == std::string::npos || (limit >= 0 && done >= limit))
        break;
      out += s.substr(pos, hit - pos) + to;
      pos = hit + from.size();
      ++done;
    }
    return out + s.substr(pos);
  }

  static Value split(const std::string &s, const Value *sep, int64_t maxsplit) {
    List parts;
    if (!sep || sep->kind == Value::None) {
      std::vector<std::string> cps = codePoints(s);
      auto join = [&](size_t b, size_t e) {
        std::string out;
        for (size_t k = b; k < e; ++k)
          out += cps[k];
        return out;
      };
      size_t k = 0;
      while (true) {
        while (k < cps.size() && isSpaceCodePoint(cps[k]))
          ++k;
        if (k >= cps.size())
          break;
        if (maxsplit >= 0 && int64_t(parts.size()) == maxsplit) {
          parts.push_back(Value::str(join(k, cps.size())));
          break;
        }
        size_t e = k;
        while (e < cps.size() && !isSpaceCodePoint(cps[e]))
          ++e;
        parts.push_back(Value::str(join(k, e)));
        k = e;
      }
      return Value::makeList(std::move(parts));
    }
    size_t pos = 0;
    for (;;) {
      size_t hit = s.find(sep->s, pos);
      if (hit == std::string::npos || (maxsplit >= 0 && int64_t(parts.size()) == maxsplit))
        break;
      parts.push_back(Value::str(s.substr(pos, hit - pos)));
      pos = hit + sep->s.size();
    }
    parts.push_back(Value::str(s.substr(pos)));
    return Value::makeList(std::move(parts));
  }

  Value method(const Value &obj, const std::string &name, const Args &args, int line) {
    if (obj.kind == Value::Undefined)
      undefinedError(obj, line);
    if (obj.kind == Value::String) {
      const std::string &s = obj.s;
      if (name == "strip" || name == "lstrip" || name == "rstrip")
        return Value::str(strip(s, args.get(0, "chars"), name != "rstrip", name != "lstrip"));
      if (name == "upper")
        return Value::str(caseMap(s, 1));
      if (name == "lower")
        return Value::str(caseMap(s, 0));
      if (name == "title")
        return Value::str(caseMap(s, 2));
      if (name == "capitalize")
        return Value::str(caseMap(s, 3));
      if (name == "startswith" || name == "endswith") {
        const Value *arg = args.get(0, "prefix");
        if (!arg)
          fail(line, name + "() takes at least 1 argument");
        List candidates = arg->kind == Value::ListV ? *arg->list : List{*arg};
        for (const Value &c : candidates) {
          if (c.kind != Value::String)
            fail(line, name + "() expects a string or a tuple of strings");
          if (c.s.size() <= s.size() &&
              (name == "startswith" ? s.compare(0, c.s.size(), c.s) == 0
                                    : s.compare(s.size() - c.s.size(), c.s.size(), c.s) == 0))
            return Value::boolean(true);
        }
        return Value::boolean(false);
      }
      if (name == "split") {
        const Value *sep = args.get(0, "sep");
        const Value *maxsplit = args.get(1, "maxsplit");
        if (sep && sep->kind == Value::String && sep->s.empty())
          fail(line, "empty separator");
        if (sep && sep->kind != Value::String && sep->kind != Value::None)
          fail(line, "split() expects a string separator");
        return split(s, sep, maxsplit && maxsplit->kind == Value::Int ? maxsplit->i : -1);
      }
      if (name == "replace")
        return Value::str(replaceAll(s, requireString(args.get(0, "old"), "replace()", line),
                                     requireString(args.get(1, "new"), "replace()", line),
                                     args.get(2, "count"), line));
      if (name == "find") {
        size_t hit = s.find(requireString(args.get(0, "sub"), "find()", line));
        return Value::integer(
            hit == std::string::npos ? -1 : int64_t(codePoints(s.substr(0, hit)).size()));
      }
      if (name == "count") {
        std::string sub = requireString(args.get(0, "sub"), "count()", line);
        if (sub.empty())
          return Value::integer(int64_t(codePoints(s).size()) + 1);
        int64_t n = 0;
        for (size_t pos = s.find(sub); pos != std::string::npos;
             pos = s.find(sub, pos + sub.size()))
          ++n;
        return Value::integer(n);
      }
      if (name == "join") {
        const Value *seq = args.get(0, "iterable");
        if (!seq)
          fail(line, "join() takes exactly one argument");
        std::string out;
        List items = iterate(*seq, line);
        for (size_t k = 0; k < items.size(); ++k) {
          if (items[k].kind != Value::String)
            fail(line, "join() expects strings");
          out += (k ? s : "") + items[k].s;
        }
        return Value::str(out);
      }
    } else if (obj.isMapping()) {
      if (name == "items" || name == "keys" || name == "values") {
        List out;
        for (const auto &[k, v] : *obj.dict)
          out.push_back(name == "items"  ? Value::makeList({Value::str(k), v}, true)
                        : name == "keys" ? Value::str(k)
                                         : v);
        return Value::makeList(std::move(out));
      }
      if (name == "get") {
        const Value *key = args.get(0, "key");
        const Value *def = args.get(1, "default");
        if (key && key->kind == Value::String)
          if (const Value *v = findKey(*obj.dict, key->s))
            return *v;
        return def ? *def : Value::none();
      }
    }
    fail(line, "method '" + name + "' of a " + typeName(obj) +
                   " value is outside the supported Jinja subset");
  }

  Value call(const Expr &e) {
    const Expr &callee = *e.args[0];
    if (callee.kind == Expr::Attr) {
      Value obj = eval(*callee.args[0]);
      return method(obj, callee.name, evalArgs(e, 1), e.line);
    }
    if (callee.kind != Expr::Name)
      fail(e.line, "only named functions and methods can be called");
    Value fn = lookup(callee.name);
    if (fn.kind == Value::Undefined)
      fail(e.line,
           "'" + callee.name + "' is undefined (not a function of the supported Jinja subset)");
    if (fn.kind != Value::Function)
      fail(e.line, "'" + callee.name + "' is not callable");
    const std::string &name = fn.s;
    Args args = evalArgs(e, 1);
    if (name == "raise_exception") {
      const Value *msg = args.get(0, "message");
      throw Raised{msg ? toStr(*msg) : std::string()};
    }
    if (name == "strftime_now") {
      std::string format = requireString(args.get(0, "format"), "strftime_now()", e.line);
      std::time_t now = std::time(nullptr);
      std::tm local{};
      localtime_r(&now, &local);
      char buf[256];
      size_t n = std::strftime(buf, sizeof buf, format.c_str(), &local);
      return Value::str(std::string(buf, n));
    }
    if (name == "range") {
      std::vector<int64_t> a;
      for (const Value &v : args.pos) {
        if (v.kind != Value::Int && v.kind != Value::Bool)
          fail(e.line, "range() expects integers");
        a.push_back(v.asInt());
      }
      if (a.empty() || a.size() > 3)
        fail(e.line, "range() takes 1 to 3 arguments");
      int64_t start = a.size() > 1 ? a[0] : 0, stop = a.size() > 1 ? a[1] : a[0],
              step = a.size() > 2 ? a[2] : 1;
      if (step == 0)
        fail(e.line, "range() arg 3 must not be zero");
      List out;
      for (int64_t k = start; step > 0 ? k < stop : k > stop; k += step) {
        if (out.size() >= 100000) // the sandbox's MAX_RANGE
          fail(e.line, "range too big");
        out.push_back(Value::integer(k));
      }
      return Value::makeList(std::move(out));
    }
    if (name == "namespace" || name == "dict") {
      Dict d;
      for (const Value &p : args.pos) {
        if (!p.isMapping())
          fail(e.line, name + "() takes keyword arguments or a mapping");
        for (const auto &kv : *p.dict)
          setKey(d, kv.first, kv.second);
      }
      for (auto &[k, v] : args.kw)
        setKey(d, k, v);
      return Value::makeDict(std::move(d), name == "namespace" ? Value::NamespaceV : Value::DictV);
    }
    fail(e.line, "'" + name + "' is not callable");
  }

  Value eval(const Expr &e) {
    switch (e.kind) {
    case Expr::Lit:
      return e.lit;
    case Expr::Name:
      return lookup(e.name);
    case Expr::ListE: {
      List items;
      for (const ExprP &a : e.args)
        items.push_back(eval(*a));
      return Value::makeList(std::move(items), e.tuple);
    }
    case Expr::DictE: {
      Dict d;
      for (size_t k = 0; k + 1 < e.args.size(); k += 2) {
        Value key = eval(*e.args[k]);
        if (key.kind != Value::String)
          fail(e.line, "dict keys other than strings are outside the supported Jinja subset");
        setKey(d, key.s, eval(*e.args[k + 1]));
      }
      return Value::makeDict(std::move(d));
    }
    case Expr::Attr:
      return getAttr(eval(*e.args[0]), e.name, e.line);
    case Expr::Item:
      return getItem(eval(*e.args[0]), eval(*e.args[1]), e.line);
    case Expr::Slice:
      return slice(eval(*e.args[0]), e);
    case Expr::Call:
      return call(e);
    case Expr::Filter: {
      Value v = eval(*e.args[0]);
      return filter(e.name, v, evalArgs(e, 1), e.line);
    }
    case Expr::Test: {
      Value v = eval(*e.args[0]);
      return Value::boolean(test(e.name, v, evalArgs(e, 1), e.line) != e.negated);
    }
    case Expr::Neg:
    case Expr::Pos: {
      Value v = eval(*e.args[0]);
      if (v.kind == Value::Undefined)
        undefinedError(v, e.line);
      if (!v.isNumber())
        fail(e.line, std::string("bad operand type for unary ") +
                         (e.kind == Expr::Neg ? "-" : "+") + ": '" + typeName(v) + "'");
      if (e.kind == Expr::Pos)
        return v.kind == Value::Bool ? Value::integer(v.asInt()) : v;
      return v.kind == Value::Float ? Value::number(-v.f)
                                    : arith("-", Value::integer(0), v, e.line);
    }
    case Expr::Not:
      return Value::boolean(!truthy(eval(*e.args[0])));
    case Expr::And: {
      Value a = eval(*e.args[0]);
      return truthy(a) ? eval(*e.args[1]) : a;
    }
    case Expr::Or: {
      Value a = eval(*e.args[0]);
      return truthy(a) ? a : eval(*e.args[1]);
    }
    case Expr::Bin:
      return arith(e.name, eval(*e.args[0]), eval(*e.args[1]), e.line);
    case Expr::Cmp: {
      Value a = eval(*e.args[0]);
      for (size_t k = 0; k < e.ops.size(); ++k) {
        Value b = eval(*e.args[k + 1]);
        if (!compare(e.ops[k], a, b, e.line))
          return Value::boolean(false);
        a = std::move(b);
      }
      return Value::boolean(true);
    }
    case Expr::Cond:
      if (truthy(eval(*e.args[1])))
        return eval(*e.args[0]);
      return e.args[2] ? eval(*e.args[2])
                       : Value::undefined("the inline 'if' expression evaluated to false "
                                          "and no 'else' section was defined.");
    }
    return Value();
  }
};

} // namespace

std::optional<std::string> render(const std::string &source,
                                  const std::vector<ChatMessage> &messages,
                                  const ChatOptions &options, std::string &error) {
  try {
    std::vector<Node> tree = Parser(lex(source)).parse();
    List msgs;
    for (const ChatMessage &m : messages)
      msgs.push_back(
          Value::makeDict({{"role", Value::str(m.role)}, {"content", Value::str(m.content)}}));
    // transformers passes tools and documents, None when not given: defined, and none.
    std::map<std::string, Value> globals = {
        {"messages", Value::makeList(std::move(msgs))},
        {"add_generation_prompt", Value::boolean(options.addGenerationPrompt)},
        {"bos_token", Value::str(options.bosToken)},
        {"eos_token", Value::str(options.eosToken)},
        {"tools", Value::none()},
        {"documents", Value::none()}};
    // Jinja's globals, and transformers' raise_exception and strftime_now.
    for (const char *fn : {"raise_exception", "strftime_now", "range", "namespace", "dict"})
      globals[fn] = Value::function(fn);
    Renderer r(std::move(globals));
    r.exec(tree);
    return std::move(r.out);
  } catch (const TemplateError &e) {
    error = e.message;
  } catch (const Raised &e) {
    error = e.message;
  } catch (const std::exception &e) { // memory, mostly: a template that builds huge values
    error = std::string("chat template: ") + e.what();
  }
  return std::nullopt;
}

} // namespace tpcrt::jinja
