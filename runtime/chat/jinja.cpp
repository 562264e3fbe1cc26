// The Jinja subset behind renderChatTemplate: a lexer with transformers' whitespace settings
// (trim_blocks, lstrip_blocks, keep_trailing_newline off), a parser to a small tree and an
// interpreter with Jinja's default Undefined. What real chat templates use is here; anything
// else is an error naming the construct and its line, never output that differs silently.
//
// The template and the messages are untrusted, so the interpreter is bounded by the caller's
// ChatTemplateLimits: every expression, statement, loop iteration and item visited is a render
// step; every byte of text built or scanned is text work; strings, lists, dicts, the output and
// nesting have maximum sizes, checked wherever one is built or changed. Integer arithmetic is
// checked. Inputs are valid UTF-8 and every operation keeps text whole characters, so the
// output is valid UTF-8 too.
#include "jinja.h"

#include "tpcrt/utf8.h"

#include <algorithm>
#include <array>
#include <cctype>
#include <cerrno>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <ctime>
#include <map>
#include <memory>
#include <stdexcept>
#include <unordered_map>
#include <unordered_set>

namespace tpcrt::jinja {
namespace {

struct TemplateError {
  std::string message;
};

[[noreturn]] void fail(int line, const std::string &message) {
  throw TemplateError{"chat template line " + std::to_string(line) + ": " + message};
}

// A limit of ChatTemplateLimits exceeded: `what` says what went over it.
[[noreturn]] void overLimit(int line, const std::string &what, const char *limit) {
  fail(line, what + " (limit " + limit + ")");
}

// Deeper than this, maxNesting is refused: each level is a dozen stack frames of the parser, the
// evaluator or printing a value, up to 13 KB of stack a level under AddressSanitizer (1000
// levels overflowed its 8 MB main stack; 600 did not), a tenth of that in an optimized build.
constexpr int kMaxNestingCeiling = 500;

struct DepthGuard {
  DepthGuard(int &depth, int maxDepth, int line) : depth(depth) {
    if (++depth > maxDepth) {
      --depth;
      overLimit(line, "nesting deeper than " + std::to_string(maxDepth) + " levels", "maxNesting");
    }
  }
  ~DepthGuard() { --depth; }
  int &depth;
};

// ---------------------------------------------------------------------------------------
// UTF-8. Inputs are validated once; after that every string is valid UTF-8 and the helpers
// below step through it by code points (Python's characters), never cutting one.

size_t utf8Length(unsigned char lead) {
  return lead < 0x80 ? 1 : lead < 0xE0 ? 2 : lead < 0xF0 ? 3 : 4;
}

// The code point at `i` of valid UTF-8, and its length in `len`.
uint32_t decodeAt(const std::string &s, size_t i, size_t &len) {
  unsigned char c = (unsigned char)s[i];
  len = utf8Length(c);
  if (len == 1)
    return c;
  uint32_t cp = c & (0xFF >> (len + 1));
  for (size_t k = 1; k < len; ++k)
    cp = (cp << 6) | ((unsigned char)s[i + k] & 0x3F);
  return cp;
}

// The start of the code point that ends just before `i` (> 0) in valid UTF-8.
size_t previousStart(const std::string &s, size_t i) {
  do
    --i;
  while (i > 0 && ((unsigned char)s[i] & 0xC0) == 0x80);
  return i;
}

int64_t countCodePoints(const std::string &s) {
  int64_t n = 0;
  for (char c : s)
    n += ((unsigned char)c & 0xC0) != 0x80;
  return n;
}

// Python's str.isspace() for one code point (what strip() and split() drop).
bool isSpaceCodePoint(uint32_t c) {
  if (c < 0x80)
    return (c >= 0x09 && c <= 0x0D) || (c >= 0x1C && c <= 0x20);
  return c == 0x85 || c == 0xA0 || c == 0x1680 || (c >= 0x2000 && c <= 0x200A) || c == 0x2028 ||
         c == 0x2029 || c == 0x202F || c == 0x205F || c == 0x3000;
}

bool isSpace(char c) {
  return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v';
}

// Python's str.strip family: drops the code points in `chars` (whitespace when null) from the
// ends chosen. Linear in the text and the set.
std::string strip(const std::string &s, const std::string *chars, bool left, bool right) {
  std::vector<uint32_t> set; // the non-ASCII ones, sorted; the ASCII ones in a bitmap
  bool ascii[128] = {};
  if (chars) {
    for (size_t i = 0, n; i < chars->size(); i += n) {
      uint32_t cp = decodeAt(*chars, i, n);
      if (cp < 128)
        ascii[cp] = true;
      else
        set.push_back(cp);
    }
    std::sort(set.begin(), set.end());
  }
  auto drop = [&](uint32_t cp) {
    if (!chars)
      return isSpaceCodePoint(cp);
    return cp < 128 ? ascii[cp] : std::binary_search(set.begin(), set.end(), cp);
  };
  size_t b = 0, e = s.size(), n;
  while (left && b < e && drop(decodeAt(s, b, n)))
    b += n;
  while (right && e > b) {
    size_t start = previousStart(s, e);
    if (!drop(decodeAt(s, start, n)))
      break;
    e = start;
  }
  return s.substr(b, e - b);
}

// `needle` in `hay` from `from`: glibc's memmem is linear in the worst case (two-way search),
// where std::string::find can take the product of the lengths.
size_t findText(const std::string &hay, const std::string &needle, size_t from = 0) {
  if (from > hay.size())
    return std::string::npos;
  if (needle.empty())
    return from;
  if (needle.size() == 1) { // the common case, without memmem's setup
    const void *hit = std::memchr(hay.data() + from, needle[0], hay.size() - from);
    return hit ? size_t(static_cast<const char *>(hit) - hay.data()) : std::string::npos;
  }
  const void *hit = memmem(hay.data() + from, hay.size() - from, needle.data(), needle.size());
  return hit ? size_t(static_cast<const char *>(hit) - hay.data()) : std::string::npos;
}

// ASCII case mapping, whatever the process's locale: 0 lower, 1 upper, 2 title, 3 capitalize.
std::string caseMap(std::string s, int mode) {
  auto lower = [](char c) { return c >= 'A' && c <= 'Z' ? char(c - 'A' + 'a') : c; };
  auto upper = [](char c) { return c >= 'a' && c <= 'z' ? char(c - 'a' + 'A') : c; };
  auto alnum = [](char c) {
    return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z');
  };
  bool start = true;
  for (size_t k = 0; k < s.size(); ++k) {
    char c = s[k];
    if (mode == 0)
      s[k] = lower(c);
    else if (mode == 1)
      s[k] = upper(c);
    else if (mode == 2)
      s[k] = start ? upper(c) : lower(c);
    else
      s[k] = k == 0 ? upper(c) : lower(c);
    start = !alnum(c);
  }
  return s;
}

// ---------------------------------------------------------------------------------------
// Values: Python's types as templates see them. Copies are cheap (templates copy values
// freely: every variable read, every loop item): strings, lists and dicts are shared, and
// immutable except a namespace's attributes.

// A string value's bytes, with its length in code points once something has counted it, and
// for text that is not ASCII, once something indexes it, where every kMarkEvery-th code point
// starts: s[i] walks less than kMarkEvery characters, not i.
struct Text {
  explicit Text(std::string bytes) : bytes(std::move(bytes)) {}
  static constexpr int64_t kMarkEvery = 64;
  std::string bytes;
  mutable int64_t codePoints = -1;
  mutable std::vector<size_t> marks;
};

struct ListBox;
struct DictBox;
class Dict;
struct Value;
using List = std::vector<Value>;

struct Value {
  enum Kind { Undefined, None, Bool, Int, Float, String, ListV, DictV, NamespaceV, Function };
  Kind kind = Undefined;
  bool b = false;
  bool tuple = false; // a ListV that Python would hold as a tuple: printed (a, b)
  int nesting = 0;    // lists and dicts inside, when it was built
  int64_t i = 0;
  double f = 0;
  std::shared_ptr<const Text> text; // a String's; an Undefined's hint; a Function's name
  std::shared_ptr<ListBox> list;
  std::shared_ptr<DictBox> dict; // DictV and NamespaceV

  const std::string &s() const;
  const List &seq() const;
  Dict &map() const;

  static Value undefined(std::string hint) {
    Value v;
    v.text = std::make_shared<const Text>(std::move(hint));
    return v;
  }
  static Value function(std::string name) {
    Value v = undefined(std::move(name));
    v.kind = Function;
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
  // Unchecked: the renderer's own constructors check the limits of what a template builds.
  static Value str(std::string x) {
    Value v;
    v.kind = String;
    if (!x.empty())
      v.text = std::make_shared<const Text>(std::move(x));
    return v;
  }
  static Value makeList(List x, bool tuple = false);
  static Value makeDict(Dict x, Kind kind = DictV);

  bool isNumber() const { return kind == Bool || kind == Int || kind == Float; }
  bool isInt() const { return kind == Int || kind == Bool; }
  bool isMapping() const { return kind == DictV || kind == NamespaceV; }
  double asDouble() const { return kind == Float ? f : kind == Bool ? (b ? 1 : 0) : double(i); }
  int64_t asInt() const { return kind == Bool ? (b ? 1 : 0) : i; }
};

// A dict's entries in insertion order, as Python's dict keeps them, with an index by key once
// there are enough of them for a linear search to cost more than hashing.
class Dict {
public:
  using Entry = std::pair<std::string, Value>;

  const Value *find(const std::string &key) const {
    size_t at = position(key);
    return at == npos ? nullptr : &entries[at].second;
  }
  // Sets `key`; true when it is new.
  bool set(const std::string &key, Value v) {
    size_t at = position(key);
    if (at != npos) {
      entries[at].second = std::move(v);
      return false;
    }
    entries.emplace_back(key, std::move(v));
    if (!index.empty()) {
      index.emplace(key, entries.size() - 1);
    } else if (entries.size() > kIndexFrom) {
      for (size_t k = 0; k < entries.size(); ++k)
        index.emplace(entries[k].first, k);
    }
    return true;
  }
  size_t size() const { return entries.size(); }
  bool empty() const { return entries.empty(); }
  Value &valueAt(size_t k) { return entries[k].second; }
  std::vector<Entry>::const_iterator begin() const { return entries.begin(); }
  std::vector<Entry>::const_iterator end() const { return entries.end(); }

private:
  static constexpr size_t npos = std::string::npos;
  static constexpr size_t kIndexFrom = 32;
  size_t position(const std::string &key) const {
    if (!index.empty()) {
      auto hit = index.find(key);
      return hit == index.end() ? npos : hit->second;
    }
    for (size_t k = 0; k < entries.size(); ++k)
      if (entries[k].first == key)
        return k;
    return npos;
  }
  std::vector<Entry> entries;
  std::unordered_map<std::string, size_t> index;
};

// Freeing a value frees what it holds, and a chain of namespaces built by setting attributes
// can be any number of levels deep: freeing it recursively would overflow the stack. So lists
// and dicts are freed through a queue instead, one level at a time: a container whose last
// reference goes is queued, and the outermost release frees the queue (what freeing one
// container releases is queued behind it). The queue is intrusive, so freeing never allocates.
struct Container {
  Container() = default;
  Container(const Container &) = delete;
  Container &operator=(const Container &) = delete;
  virtual ~Container() = default;
  Container *nextDead = nullptr;
};

struct ListBox : Container {
  explicit ListBox(List items) : items(std::move(items)) {}
  List items;
};

struct DictBox : Container {
  explicit DictBox(Dict entries) : entries(std::move(entries)) {}
  Dict entries;
};

thread_local Container *deadHead = nullptr;
thread_local bool freeing = false;

void release(Container *c) noexcept {
  c->nextDead = deadHead;
  deadHead = c;
  if (freeing)
    return;
  freeing = true;
  while (Container *dead = deadHead) {
    deadHead = dead->nextDead;
    delete dead;
  }
  freeing = false;
}

template <class Box, class Contents> std::shared_ptr<Box> boxed(Contents contents) {
  return std::shared_ptr<Box>(new Box(std::move(contents)), [](Box *b) { release(b); });
}

const std::string &Value::s() const {
  static const std::string empty;
  return text ? text->bytes : empty;
}
const List &Value::seq() const { return list->items; }
Dict &Value::map() const { return dict->entries; }

Value Value::makeList(List x, bool tuple) {
  Value v;
  v.kind = ListV;
  v.tuple = tuple;
  for (const Value &item : x)
    v.nesting = std::max(v.nesting, item.nesting + 1);
  v.list = boxed<ListBox>(std::move(x));
  return v;
}

Value Value::makeDict(Dict x, Kind kind) {
  Value v;
  v.kind = kind;
  for (const auto &kv : x)
    v.nesting = std::max(v.nesting, kv.second.nesting + 1);
  v.dict = boxed<DictBox>(std::move(x));
  return v;
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
    return v.tuple ? "tuple" : "list";
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
    return !v.s().empty();
  case Value::ListV:
    return !v.seq().empty();
  case Value::DictV:
    return !v.map().empty();
  case Value::NamespaceV:
  case Value::Function:
    return true;
  }
  return false;
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
            if (src[q] != '\\' || q + 1 >= src.size())
              value += src[q];
            else
              q = unescape(src, q, value, line);
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
  ExprParser(const std::vector<Tok> &toks, size_t start, int line, int maxNesting)
      : toks(toks), at(start), line(line), maxNesting(maxNesting) {}

  const std::vector<Tok> &toks;
  size_t at;
  int line;
  int maxNesting;

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
    for (const ExprP &a : e->args)
      if (a)
        grew(*e, *a);
    return e;
  }
  // Left-deep chains (a + b + c ..., x.a.b ..., f|g|h ...) are built by loops, not recursion:
  // their height is checked here, as each operand is added, so that evaluating (and freeing)
  // a tree never recurses deeper than maxNesting.
  void grew(Expr &e, const Expr &child) {
    e.height = std::max(e.height, child.height + 1);
    if (e.height > maxNesting)
      overLimit(e.line, "nesting deeper than " + std::to_string(maxNesting) + " levels",
                "maxNesting");
  }
  void addArg(const ExprP &e, ExprP arg) {
    grew(*e, *arg);
    e->args.push_back(std::move(arg));
  }

  // Brackets, 'not' and unary signs: what the parser recurses into, one level each.
  int depth = 0;

  ExprP expr(bool withCond = true) {
    DepthGuard guard(depth, maxNesting, curLine());
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
    if (isName("not")) {
      DepthGuard guard(depth, maxNesting, curLine());
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
      addArg(cmp, math1());
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
    int l = curLine();
    ExprP e;
    if (isOp("-") || isOp("+")) {
      DepthGuard guard(depth, maxNesting, l);
      bool neg = isOp("-");
      ++at;
      e = make(neg ? Expr::Neg : Expr::Pos, l, {unary(false)});
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
          addArg(tuple, expr());
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
        addArg(e, expr());
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
        addArg(e, expr());
        expectOp(":");
        addArg(e, expr());
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
        ExprP value = expr();
        grew(*e, *value);
        e->kwargs.emplace_back(key, std::move(value));
      } else {
        addArg(e, expr());
      }
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
            addArg(e, postfix(primary()));
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
  Parser(std::vector<Piece> pieces, int maxNesting)
      : pieces(std::move(pieces)), maxNesting(maxNesting) {}

  std::vector<Node> parse() {
    std::string endKw;
    std::vector<Node> nodes = body({}, endKw, 0, "");
    return nodes;
  }

private:
  std::vector<Piece> pieces;
  int maxNesting;
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
      ExprParser ep(p.toks, 0, p.line, maxNesting);
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
        current = std::make_unique<ExprParser>(p.toks, 1, p.line, maxNesting);
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
        DepthGuard guard(blockDepth, maxNesting, p.line);
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
    DepthGuard guard(blockDepth, maxNesting, line);
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
    DepthGuard guard(blockDepth, maxNesting, line);
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
  Renderer(std::map<std::string, Value> globals, const ChatTemplateLimits &limits)
      : limits(limits) {
    scopes.push_back(std::move(globals));
  }

  // Namespaces are the only values a template can change, so every reference cycle (a
  // namespace holding itself, through lists perhaps) goes through one: emptying them all when
  // the rendering ends frees the cycles that Python's garbage collector would.
  ~Renderer() {
    for (const std::weak_ptr<DictBox> &weak : namespaces)
      if (std::shared_ptr<DictBox> ns = weak.lock()) {
        Dict attributes = std::move(ns->entries);
        ns->entries = Dict();
      }
  }

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
  const ChatTemplateLimits &limits;
  uint64_t steps = 0, textWork = 0;
  int valueDepth = 0; // of printing, comparing or hashing a value, which recurse into it
  std::vector<std::map<std::string, Value>> scopes;
  std::vector<std::weak_ptr<DictBox>> namespaces;

  // ---- The limits.

  // What a search that finds something costs besides the bytes it scans, in bytes of text
  // work: a text with a hit every other byte costs about this much per hit.
  static constexpr uint64_t kSearchCost = 8;

  void step(int line, uint64_t n = 1) {
    steps += n;
    if (steps > limits.maxRenderSteps)
      overLimit(line, "more than " + std::to_string(limits.maxRenderSteps) + " render steps",
                "maxRenderSteps");
  }
  void work(int line, uint64_t bytes) {
    textWork += bytes;
    if (textWork > limits.maxTextWork)
      overLimit(line,
                "more than " + std::to_string(limits.maxTextWork) +
                    " bytes of text built or scanned",
                "maxTextWork");
  }
  void checkLength(int line, uint64_t bytes) {
    if (bytes > limits.maxStringBytes)
      overLimit(line, "a string of more than " + std::to_string(limits.maxStringBytes) + " bytes",
                "maxStringBytes");
  }
  void checkItems(int line, uint64_t n, const char *what) {
    if (n > limits.maxItems)
      overLimit(line,
                std::string("a ") + what + " of more than " + std::to_string(limits.maxItems) +
                    " items",
                "maxItems");
  }
  void checkNesting(int line, const Value &inner) {
    if (inner.nesting >= limits.maxNesting)
      overLimit(line, "values nested deeper than " + std::to_string(limits.maxNesting) + " levels",
                "maxNesting");
  }

  // What the template builds, within the limits.
  Value newStr(std::string s, int line) {
    checkLength(line, s.size());
    work(line, s.size());
    return Value::str(std::move(s));
  }
  Value newList(List items, int line, bool tuple = false) {
    checkItems(line, items.size(), tuple ? "tuple" : "list");
    step(line, items.size());
    for (const Value &item : items)
      checkNesting(line, item);
    return Value::makeList(std::move(items), tuple);
  }
  Value newDict(Dict d, int line, Value::Kind kind = Value::DictV) {
    checkItems(line, d.size(), kind == Value::DictV ? "dict" : "namespace");
    step(line, d.size());
    for (const auto &kv : d)
      checkNesting(line, kv.second);
    Value v = Value::makeDict(std::move(d), kind);
    if (kind == Value::NamespaceV)
      namespaces.push_back(v.dict);
    return v;
  }

  // ---- Strings by code points.

  int64_t length(const Value &str, int line) {
    if (!str.text)
      return 0;
    if (str.text->codePoints < 0) {
      work(line, str.s().size());
      str.text->codePoints = countCodePoints(str.s());
    }
    return str.text->codePoints;
  }
  // The byte offset of code point `index` (in [0, length)) of `str`.
  size_t offsetOf(const Value &str, int64_t index, int line) {
    const std::string &s = str.s();
    if (length(str, line) == int64_t(s.size())) // ASCII
      return size_t(index);
    const Text &text = *str.text;
    if (text.marks.empty()) {
      work(line, s.size());
      for (size_t at = 0, k = 0; at < s.size(); at += utf8Length((unsigned char)s[at]), ++k)
        if (k % Text::kMarkEvery == 0)
          text.marks.push_back(at);
    }
    size_t at = text.marks[size_t(index / Text::kMarkEvery)];
    for (int64_t k = 0; k < index % Text::kMarkEvery; ++k)
      at += utf8Length((unsigned char)s[at]);
    return at;
  }
  std::string codePointAt(const Value &str, int64_t index, int line) {
    size_t at = offsetOf(str, index, line);
    return str.s().substr(at, utf8Length((unsigned char)str.s()[at]));
  }
  // The characters of a string, each a string value.
  List characters(const Value &str, int line) {
    checkItems(line, uint64_t(length(str, line)), "list of characters");
    step(line, uint64_t(length(str, line)));
    List chars;
    const std::string &s = str.s();
    for (size_t i = 0, n; i < s.size(); i += n)
      chars.push_back(Value::str(s.substr(i, n = utf8Length((unsigned char)s[i]))));
    return chars;
  }

  // ---- Printing, comparing and hashing values, which recurse into lists and dicts.

  // str(v), or repr(v) when `asRepr`, appended to `out` as Python prints them.
  void print(const Value &v, bool asRepr, std::string &out, int line) {
    step(line);
    switch (v.kind) {
    case Value::Undefined:
      if (asRepr)
        out += "Undefined";
      return;
    case Value::None:
      out += "None";
      return;
    case Value::Bool:
      out += v.b ? "True" : "False";
      return;
    case Value::Int:
      out += std::to_string(v.i);
      return;
    case Value::Float:
      out += pyFloat(v.f);
      return;
    case Value::String:
      work(line, v.s().size());
      if (asRepr)
        quote(v.s(), out);
      else
        out += v.s();
      break;
    case Value::ListV: {
      DepthGuard guard(valueDepth, limits.maxNesting, line);
      out += v.tuple ? "(" : "[";
      for (size_t k = 0; k < v.seq().size(); ++k) {
        if (k)
          out += ", ";
        print(v.seq()[k], true, out, line);
      }
      out += !v.tuple ? "]" : v.seq().size() == 1 ? ",)" : ")";
      break;
    }
    case Value::DictV:
    case Value::NamespaceV: { // jinja2's Namespace prints as <Namespace {attributes}>
      DepthGuard guard(valueDepth, limits.maxNesting, line);
      out += v.kind == Value::NamespaceV ? "<Namespace {" : "{";
      bool first = true;
      for (const auto &[key, val] : v.map()) {
        out += first ? "" : ", ";
        first = false;
        quote(key, out);
        out += ": ";
        print(val, true, out, line);
      }
      out += v.kind == Value::NamespaceV ? "}>" : "}";
      break;
    }
    case Value::Function:
      out += "<built-in function " + v.s() + ">";
      return;
    }
    checkLength(line, out.size());
  }

  // Python's repr of a string: quoted, with \\, the quote and ASCII's control characters
  // escaped (\n, \r, \t, else \xNN).
  static void quote(const std::string &s, std::string &out) {
    static const auto escapes = [] {
      std::array<std::array<char, 8>, 128> table{};
      for (int c = 0; c < 0x20; ++c)
        std::snprintf(table[size_t(c)].data(), 8, "\\x%02x", c);
      std::snprintf(table[0x7f].data(), 8, "\\x7f");
      for (auto [c, e] : {std::pair<char, const char *>{'\\', "\\\\"},
                          {'\n', "\\n"},
                          {'\r', "\\r"},
                          {'\t', "\\t"},
                          {'\'', "\\'"},
                          {'"', "\\\""}})
        std::snprintf(table[size_t(c)].data(), 8, "%s", e);
      return table;
    }();
    char q = s.find('\'') != std::string::npos && s.find('"') == std::string::npos ? '"' : '\'';
    escapeInto(s, out, q, [q](unsigned char c) -> const char * {
      if (c >= 128 || ((c == '\'' || c == '"') && c != (unsigned char)q))
        return nullptr;
      return escapes[c][0] ? escapes[c].data() : nullptr;
    });
  }

  // `s` between `q`s, each byte that `escape` gives an escape for replaced by it: sized first,
  // then written, as long texts of short escapes are what a hostile template would build.
  template <class Escape>
  static void escapeInto(const std::string &s, std::string &out, char q, Escape escape) {
    size_t size = s.size() + 2;
    for (unsigned char c : s)
      if (const char *e = escape(c))
        size += std::strlen(e) - 1;
    size_t at = out.size();
    out.resize(at + size);
    char *w = &out[at];
    *w++ = q;
    size_t plain = 0; // the bytes not yet written, written in runs
    for (size_t k = 0; k < s.size(); ++k) {
      const char *e = escape((unsigned char)s[k]);
      if (!e)
        continue;
      std::memcpy(w, s.data() + plain, k - plain);
      w += k - plain;
      while (*e)
        *w++ = *e++;
      plain = k + 1;
    }
    std::memcpy(w, s.data() + plain, s.size() - plain);
    w[s.size() - plain] = q;
  }

  // str(v): a string value's own text, else it printed.
  std::string str(const Value &v, int line) {
    if (v.kind == Value::String) {
      work(line, v.s().size());
      return v.s();
    }
    std::string out;
    print(v, false, out, line);
    work(line, out.size());
    return out;
  }

  // json.dumps(x, ensure_ascii=False, indent=indent), transformers' tojson; `indent` null for
  // none (one line).
  void toJson(const Value &v, const std::string *indent, int depth, std::string &out, int line) {
    step(line);
    auto newline = [&](int d) {
      uint64_t size;
      if (__builtin_mul_overflow(uint64_t(indent->size()), uint64_t(d), &size) ||
          __builtin_add_overflow(size, uint64_t(out.size()) + 1, &size))
        size = UINT64_MAX;
      checkLength(line, size);
      out += '\n';
      for (int k = 0; k < d; ++k)
        out += *indent;
    };
    switch (v.kind) {
    case Value::Undefined:
    case Value::NamespaceV:
    case Value::Function:
      fail(line,
           std::string("tojson: a value of type ") + typeName(v) + " is not JSON serializable");
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
      work(line, v.s().size());
      jsonString(v.s(), out);
      break;
    case Value::ListV: {
      if (v.seq().empty()) {
        out += "[]";
        return;
      }
      DepthGuard guard(valueDepth, limits.maxNesting, line);
      out += '[';
      for (size_t k = 0; k < v.seq().size(); ++k) {
        if (k)
          out += indent ? "," : ", ";
        if (indent)
          newline(depth + 1);
        toJson(v.seq()[k], indent, depth + 1, out, line);
      }
      if (indent)
        newline(depth);
      out += ']';
      break;
    }
    case Value::DictV: {
      if (v.map().empty()) {
        out += "{}";
        return;
      }
      DepthGuard guard(valueDepth, limits.maxNesting, line);
      out += '{';
      bool first = true;
      for (const auto &[key, val] : v.map()) {
        if (!first)
          out += indent ? "," : ", ";
        first = false;
        if (indent)
          newline(depth + 1);
        jsonString(key, out);
        out += ": ";
        toJson(val, indent, depth + 1, out, line);
      }
      if (indent)
        newline(depth);
      out += '}';
      break;
    }
    }
    checkLength(line, out.size());
  }

  // A JSON string, as json.dumps(ensure_ascii=False) writes it.
  static void jsonString(const std::string &s, std::string &out) {
    static const auto escapes = [] {
      std::array<std::array<char, 8>, 128> table{};
      for (int c = 0; c < 0x20; ++c)
        std::snprintf(table[size_t(c)].data(), 8, "\\u%04x", c);
      for (auto [c, e] : {std::pair<char, const char *>{'"', "\\\""},
                          {'\\', "\\\\"},
                          {'\n', "\\n"},
                          {'\r', "\\r"},
                          {'\t', "\\t"},
                          {'\b', "\\b"},
                          {'\f', "\\f"}})
        std::snprintf(table[size_t(c)].data(), 8, "%s", e);
      return table;
    }();
    escapeInto(s, out, '"', [](unsigned char c) -> const char * {
      return c < 128 && escapes[c][0] ? escapes[c].data() : nullptr;
    });
  }

  bool equal(const Value &a, const Value &b, int line) {
    step(line);
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
      if (a.text != b.text)
        work(line, std::min(a.s().size(), b.s().size()));
      return a.s() == b.s();
    case Value::ListV: {
      if (a.tuple != b.tuple || a.seq().size() != b.seq().size())
        return false;
      DepthGuard guard(valueDepth, limits.maxNesting, line);
      for (size_t k = 0; k < a.seq().size(); ++k)
        if (!equal(a.seq()[k], b.seq()[k], line))
          return false;
      return true;
    }
    case Value::DictV: {
      if (a.map().size() != b.map().size())
        return false;
      DepthGuard guard(valueDepth, limits.maxNesting, line);
      for (const auto &[key, val] : a.map()) {
        const Value *other = b.map().find(key);
        if (!other || !equal(val, *other, line))
          return false;
      }
      return true;
    }
    default: // namespaces and functions: the same one
      return a.dict == b.dict && a.s() == b.s();
    }
  }

  bool less(const Value &a, const Value &b, const std::string &op, int line) {
    step(line);
    if (a.kind == Value::Int && b.kind == Value::Int)
      return a.i < b.i;
    if (a.isNumber() && b.isNumber())
      return a.asDouble() < b.asDouble();
    if (a.kind == Value::String && b.kind == Value::String) {
      work(line, std::min(a.s().size(), b.s().size()));
      return a.s() < b.s(); // UTF-8's byte order is its code points' order, as Python compares
    }
    if (a.kind == Value::ListV && b.kind == Value::ListV) {
      DepthGuard guard(valueDepth, limits.maxNesting, line);
      size_t n = std::min(a.seq().size(), b.seq().size());
      for (size_t k = 0; k < n; ++k)
        if (!equal(a.seq()[k], b.seq()[k], line))
          return less(a.seq()[k], b.seq()[k], op, line);
      return a.seq().size() < b.seq().size();
    }
    fail(line, "'" + op + "' not supported between instances of '" + typeName(a) + "' and '" +
                   typeName(b) + "'");
  }

  // A key equal for values Python's set would take as equal (1, 1.0 and True; strings ignoring
  // ASCII case unless `caseSensitive`, as jinja2's unique does), for hashing.
  void hashKey(const Value &v, bool caseSensitive, std::string &key, int line) {
    step(line);
    switch (v.kind) {
    case Value::Undefined:
      key += 'U';
      break;
    case Value::None:
      key += 'N';
      break;
    case Value::Bool:
    case Value::Int:
      key += 'I' + std::to_string(v.asInt()) + ';';
      break;
    case Value::Float:
      if (v.f == std::floor(v.f) && std::fabs(v.f) < 9.2e18) {
        key += 'I' + std::to_string(int64_t(v.f)) + ';';
      } else {
        char buf[40];
        std::snprintf(buf, sizeof buf, "F%a;", v.f);
        key += buf;
      }
      break;
    case Value::String: {
      work(line, 2 * v.s().size()); // copied into the key, then hashed
      key += 'S' + std::to_string(v.s().size()) + ':';
      size_t at = key.size();
      key += v.s();
      if (!caseSensitive)
        for (size_t k = at; k < key.size(); ++k)
          key[k] = key[k] >= 'A' && key[k] <= 'Z' ? char(key[k] - 'A' + 'a') : key[k];
      break;
    }
    case Value::ListV:
      if (v.tuple) {
        DepthGuard guard(valueDepth, limits.maxNesting, line);
        key += 'T' + std::to_string(v.seq().size()) + ':';
        for (const Value &item : v.seq())
          hashKey(item, caseSensitive, key, line);
        break;
      }
      [[fallthrough]];
    case Value::DictV:
      fail(line, std::string("unhashable type: '") + typeName(v) + "'");
    case Value::NamespaceV:
    case Value::Function: {
      char buf[40];
      std::snprintf(buf, sizeof buf, "P%p;", static_cast<const void *>(v.dict.get()));
      key += buf;
      key += v.s();
      break;
    }
    }
    checkLength(line, key.size());
  }

  // ---- Statements.

  Value lookup(const std::string &name) {
    for (auto it = scopes.rbegin(); it != scopes.rend(); ++it) {
      auto found = it->find(name);
      if (found != it->end())
        return found->second;
    }
    return Value::undefined("'" + name + "' is undefined");
  }

  void emit(const std::string &text, int line) {
    if (text.size() > limits.maxOutputBytes - out.size())
      overLimit(line, "output of more than " + std::to_string(limits.maxOutputBytes) + " bytes",
                "maxOutputBytes");
    work(line, text.size());
    out += text;
  }

  Flow exec(const Node &n) {
    step(n.line);
    switch (n.kind) {
    case Node::Text:
      emit(n.text, n.line);
      return Flow::Next;
    case Node::Output: {
      Value v = eval(*n.expr);
      if (v.kind == Value::String) {
        emit(v.s(), n.line);
      } else {
        std::string text;
        print(v, false, text, n.line);
        emit(text, n.line);
      }
      return Flow::Next;
    }
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
      // A namespace is the one value that changes after it is built, so what is set into it
      // is checked here as what it was built with was. (Containers that already hold it keep
      // the nesting they recorded, so a chain of namespaces can grow deeper than the limit;
      // nothing relies on that record: printing and comparing count their own depth, and
      // values are freed without recursion.)
      checkNesting(n.line, v);
      if (!ns.map().find(n.attr))
        checkItems(n.line, ns.map().size() + 1, "namespace");
      ns.map().set(n.attr, std::move(v));
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

  // What `for` iterates, and the filters that take a sequence: a list as it is (values do
  // not change), a dict's keys, a string's characters.
  Value sequence(const Value &v, int line) {
    switch (v.kind) {
    case Value::Undefined:
      return Value::makeList({});
    case Value::ListV:
      return v;
    case Value::DictV: {
      List keys;
      for (const auto &kv : v.map())
        keys.push_back(Value::str(kv.first));
      return newList(std::move(keys), line);
    }
    case Value::String:
      return Value::makeList(characters(v, line));
    default:
      fail(line, std::string("'") + typeName(v) + "' object is not iterable");
    }
  }

  void bindTargets(const Node &n, const Value &item) {
    if (n.targets.size() == 1) {
      scopes.back()[n.targets[0]] = item;
      return;
    }
    Value parts = sequence(item, n.line);
    if (parts.seq().size() != n.targets.size())
      fail(n.line, "cannot unpack " + std::to_string(parts.seq().size()) + " values into " +
                       std::to_string(n.targets.size()) + " loop variables");
    for (size_t k = 0; k < parts.seq().size(); ++k)
      scopes.back()[n.targets[k]] = parts.seq()[k];
  }

  // jinja2's loop object. It is one object that advances, as jinja2's LoopContext does: it is
  // updated in place unless something besides the loop's scope holds it.
  static void advanceLoop(Value &loop, const List &items, size_t k) {
    if (!loop.dict || loop.dict.use_count() > 2) {
      Dict d;
      for (const char *key : {"index", "index0", "revindex", "revindex0", "first", "last", "length",
                              "depth", "depth0", "previtem", "nextitem"})
        d.set(key, Value());
      loop = Value::makeDict(std::move(d));
    }
    int64_t len = int64_t(items.size()), idx = int64_t(k);
    Dict &d = loop.map();
    d.valueAt(0) = Value::integer(idx + 1);
    d.valueAt(1) = Value::integer(idx);
    d.valueAt(2) = Value::integer(len - idx);
    d.valueAt(3) = Value::integer(len - idx - 1);
    d.valueAt(4) = Value::boolean(k == 0);
    d.valueAt(5) = Value::boolean(k + 1 == items.size());
    d.valueAt(6) = Value::integer(len);
    d.valueAt(7) = Value::integer(1);
    d.valueAt(8) = Value::integer(0);
    d.valueAt(9) = k > 0 ? items[k - 1] : Value::undefined("there is no previous item");
    d.valueAt(10) = k + 1 < items.size() ? items[k + 1] : Value::undefined("there is no next item");
    int nesting = 0;
    for (const auto &kv : d)
      nesting = std::max(nesting, kv.second.nesting + 1);
    loop.nesting = nesting;
  }

  Flow execFor(const Node &n) {
    Value all = sequence(eval(*n.expr), n.line);
    scopes.emplace_back();
    const List *items = &all.seq();
    List kept;
    if (n.cond) {
      for (const Value &item : *items) {
        step(n.line);
        bindTargets(n, item);
        if (truthy(eval(*n.cond)))
          kept.push_back(item);
      }
      items = &kept;
    }
    Value loop;
    for (size_t k = 0; k < items->size(); ++k) {
      step(n.line); // an iteration, whatever its body: nested loops count every inner one
      // What the body sets lasts one iteration: the next one sees the outer values again.
      // (The loop's own names are set anew each time.)
      if (scopes.back().size() > n.targets.size() + 1)
        scopes.back().clear();
      bindTargets(n, (*items)[k]);
      advanceLoop(loop, *items, k);
      scopes.back()["loop"] = loop;
      if (exec(n.body) == Flow::Break)
        break;
    }
    scopes.pop_back();
    if (items->empty())
      return exec(n.elseBody);
    return Flow::Next;
  }

  // ---- Expressions.

  [[noreturn]] void undefinedError(const Value &v, int line) { fail(line, v.s()); }

  Value getAttr(const Value &obj, const std::string &name, int line) {
    if (obj.kind == Value::Undefined)
      undefinedError(obj, line);
    if (obj.isMapping()) {
      if (const Value *v = obj.map().find(name))
        return *v;
      return Value::undefined("'dict object' has no attribute '" + name + "'");
    }
    return Value::undefined(std::string("'") + typeName(obj) + " object' has no attribute '" +
                            name + "'");
  }

  Value getItem(const Value &obj, const Value &key, int line) {
    if (obj.kind == Value::Undefined)
      undefinedError(obj, line);
    if (obj.isMapping()) {
      if (key.kind == Value::String)
        if (const Value *v = obj.map().find(key.s()))
          return *v;
      std::string shown;
      print(key, true, shown, line);
      return Value::undefined("'dict object' has no attribute " + shown);
    }
    if ((obj.kind == Value::ListV || obj.kind == Value::String) && key.isInt()) {
      int64_t n = obj.kind == Value::ListV ? int64_t(obj.seq().size()) : length(obj, line);
      int64_t i = key.asInt() < 0 ? key.asInt() + n : key.asInt(); // no overflow: n >= 0
      if (i >= 0 && i < n)
        return obj.kind == Value::ListV ? obj.seq()[size_t(i)]
                                        : Value::str(codePointAt(obj, i, line));
      return Value::undefined(std::string("'") + typeName(obj) + " object' has no element " +
                              std::to_string(key.asInt()));
    }
    if (obj.kind == Value::ListV || obj.kind == Value::String)
      fail(line, std::string(typeName(obj)) + " indices must be integers, not " + typeName(key));
    std::string shown;
    print(key, true, shown, line);
    return Value::undefined(std::string("'") + typeName(obj) + " object' has no attribute " +
                            shown);
  }

  Value slice(const Value &obj, const Expr &e) {
    auto bound = [&](const ExprP &x, bool &present) -> int64_t {
      present = false;
      if (!x)
        return 0;
      Value v = eval(*x);
      if (v.kind == Value::None)
        return 0;
      if (!v.isInt())
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
    int64_t len;
    if (obj.kind == Value::ListV)
      len = int64_t(obj.seq().size());
    else if (obj.kind == Value::String)
      len = length(obj, e.line);
    else if (obj.kind == Value::Undefined)
      undefinedError(obj, e.line);
    else
      fail(e.line, std::string("'") + typeName(obj) + "' object cannot be sliced");
    // Python's PySlice_AdjustIndices: the bounds clamped into [-1, len].
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
    // How many items, without stepping past the bounds (a step near INT64_MAX would overflow).
    uint64_t count = 0;
    if (step > 0 && start < stop)
      count = (uint64_t(stop - start) - 1) / uint64_t(step) + 1;
    else if (step < 0 && start > stop)
      count = (uint64_t(start - stop) - 1) / (uint64_t(0) - uint64_t(step)) + 1;
    if (obj.kind == Value::ListV) {
      List items;
      items.reserve(count);
      for (uint64_t k = 0, i = uint64_t(start); k < count; ++k, i += uint64_t(step))
        items.push_back(obj.seq()[size_t(i)]);
      return newList(std::move(items), e.line);
    }
    const std::string &s = obj.s();
    if (len == int64_t(s.size())) { // ASCII: characters are bytes
      if (step == 1)
        return newStr(s.substr(size_t(start), count), e.line);
      std::string text;
      text.reserve(count);
      for (uint64_t k = 0, i = uint64_t(start); k < count; ++k, i += uint64_t(step))
        text += s[size_t(i)];
      return newStr(std::move(text), e.line);
    }
    // Walk the UTF-8 to each character taken: the walk is at most the text, once.
    std::string text;
    size_t at = count ? offsetOf(obj, start, e.line) : 0, walked = 0;
    for (uint64_t k = 0; k < count; ++k) {
      size_t n = utf8Length((unsigned char)s[at]);
      text.append(s, at, n);
      if (k + 1 == count)
        break;
      size_t from = at;
      if (step > 0)
        for (int64_t j = 0; j < step; ++j)
          at += utf8Length((unsigned char)s[at]);
      else
        for (int64_t j = 0; j > step; --j)
          at = previousStart(s, at);
      walked += at > from ? at - from : from - at;
    }
    work(e.line, walked);
    return newStr(std::move(text), e.line);
  }

  Value arith(const std::string &op, const Value &a, const Value &b, int line) {
    if (op == "~" && a.kind == Value::String && b.kind == Value::String)
      return concat(a.s(), b.s(), line);
    if (op == "~")
      return concat(str(a, line), str(b, line), line);
    if (a.kind == Value::Undefined)
      undefinedError(a, line);
    if (b.kind == Value::Undefined)
      undefinedError(b, line);
    if (a.isNumber() && b.isNumber())
      return number(op, a, b, line);
    if (op == "+" && a.kind == Value::String && b.kind == Value::String)
      return concat(a.s(), b.s(), line);
    if (op == "+" && a.kind == Value::ListV && b.kind == Value::ListV) {
      checkItems(line, uint64_t(a.seq().size()) + b.seq().size(), "list");
      List l = a.seq();
      l.insert(l.end(), b.seq().begin(), b.seq().end());
      return newList(std::move(l), line, a.tuple && b.tuple);
    }
    if (op == "*" && (b.kind == Value::String || b.kind == Value::ListV) && a.isInt())
      return arith(op, b, a, line);
    if (op == "*" && (a.kind == Value::String || a.kind == Value::ListV) && b.isInt())
      return repeat(a, b.asInt(), line);
    if (op == "%" && a.kind == Value::String)
      fail(line, "string formatting with '%' is outside the supported Jinja subset");
    fail(line, "unsupported operand type(s) for " + op + ": '" + typeName(a) + "' and '" +
                   typeName(b) + "'");
  }

  Value concat(const std::string &a, const std::string &b, int line) {
    checkLength(line, uint64_t(a.size()) + b.size());
    return newStr(a + b, line);
  }

  // s * n and l * n: Python's repetition, within the limits before anything is built.
  Value repeat(const Value &a, int64_t times, int line) {
    bool isStr = a.kind == Value::String;
    uint64_t unit = isStr ? a.s().size() : a.seq().size(), n = times > 0 ? uint64_t(times) : 0;
    uint64_t total = 0;
    if (__builtin_mul_overflow(unit, n, &total))
      total = UINT64_MAX;
    if (isStr)
      checkLength(line, total);
    else
      checkItems(line, total, a.tuple ? "tuple" : "list");
    if (isStr) { // the first copy, then doubling what is there
      std::string s(total, '\0');
      if (total) {
        std::memcpy(&s[0], a.s().data(), unit);
        for (size_t done = unit; done < total; done *= 2)
          std::memcpy(&s[done], s.data(), std::min(done, total - done));
      }
      return newStr(std::move(s), line);
    }
    List l;
    l.reserve(total);
    for (uint64_t k = 0; unit && k < n; ++k)
      l.insert(l.end(), a.seq().begin(), a.seq().end());
    return newList(std::move(l), line, a.tuple);
  }

  // Python's arithmetic on numbers. Its integers do not overflow; tpc's are 64 bits, and a
  // result beyond them is an error naming the operation rather than a wrapped value.
  static Value number(const std::string &op, const Value &a, const Value &b, int line) {
    auto overflow = [&]() -> Value {
      fail(line, "integer overflow in '" + op + "' (beyond 64 bits)");
    };
    if (a.kind == Value::Float || b.kind == Value::Float) {
      double x = a.asDouble(), y = b.asDouble();
      if (op == "+")
        return Value::number(x + y);
      if (op == "-")
        return Value::number(x - y);
      if (op == "*")
        return Value::number(x * y);
      if (op == "**") {
        if (x == 0 && y < 0)
          fail(line, "0.0 cannot be raised to a negative power");
        if (x < 0 && y != std::floor(y))
          fail(line, "a negative number to a fractional power (a complex number) is outside "
                     "the supported Jinja subset");
        return Value::number(std::pow(x, y));
      }
      if (y == 0)
        fail(line, op == "/" ? "division by zero" : "float division or modulo by zero");
      if (op == "/")
        return Value::number(x / y);
      // CPython's float divmod: the remainder takes y's sign, the quotient rounds to nearest.
      double mod = std::fmod(x, y), div = (x - mod) / y;
      if (mod != 0) {
        if ((y < 0) != (mod < 0)) {
          mod += y;
          div -= 1.0;
        }
      } else {
        mod = std::copysign(0.0, y);
      }
      if (op == "%")
        return Value::number(mod);
      double floorDiv = std::copysign(0.0, x / y);
      if (div != 0) {
        floorDiv = std::floor(div);
        if (div - floorDiv > 0.5)
          floorDiv += 1.0;
      }
      return Value::number(floorDiv);
    }
    int64_t p = a.asInt(), q = b.asInt(), r;
    if (op == "+")
      return __builtin_add_overflow(p, q, &r) ? overflow() : Value::integer(r);
    if (op == "-")
      return __builtin_sub_overflow(p, q, &r) ? overflow() : Value::integer(r);
    if (op == "*")
      return __builtin_mul_overflow(p, q, &r) ? overflow() : Value::integer(r);
    if (op == "**") {
      if (q < 0) {
        if (p == 0)
          fail(line, "0.0 cannot be raised to a negative power");
        return Value::number(std::pow(double(p), double(q)));
      }
      int64_t acc = 1, base = p;
      for (uint64_t e = uint64_t(q); e; e >>= 1) { // by squaring: at most 63 rounds
        if ((e & 1) && __builtin_mul_overflow(acc, base, &acc))
          return overflow();
        if (e > 1 && __builtin_mul_overflow(base, base, &base))
          return overflow();
      }
      return Value::integer(acc);
    }
    if (q == 0)
      fail(line, op == "/" ? "division by zero" : "integer division or modulo by zero");
    if (op == "/")
      return Value::number(double(p) / double(q));
    if (q == -1) // INT64_MIN / -1 traps in C++; in Python it is just -p
      return op == "%" ? Value::integer(0) : p == INT64_MIN ? overflow() : Value::integer(-p);
    int64_t d = p / q, m = p % q;
    if (m != 0 && ((m < 0) != (q < 0))) { // Python floors: the remainder has q's sign
      d -= 1;
      m += q;
    }
    return Value::integer(op == "%" ? m : d);
  }

  bool contains(const Value &container, const Value &item, int line) {
    switch (container.kind) {
    case Value::Undefined:
      return false;
    case Value::String:
      if (item.kind != Value::String)
        fail(line,
             "'in <string>' requires string as left operand, not " + std::string(typeName(item)));
      work(line, container.s().size());
      return findText(container.s(), item.s()) != std::string::npos;
    case Value::ListV:
      return std::any_of(container.seq().begin(), container.seq().end(),
                         [&](const Value &v) { return equal(v, item, line); });
    case Value::DictV:
    case Value::NamespaceV:
      return item.kind == Value::String && container.map().find(item.s());
    default:
      fail(line, std::string("argument of type '") + typeName(container) + "' is not iterable");
    }
  }

  bool compare(const std::string &op, const Value &a, const Value &b, int line) {
    if (op == "==")
      return equal(a, b, line);
    if (op == "!=")
      return !equal(a, b, line);
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

  static const std::string &requireString(const Value *v, const std::string &what, int line) {
    if (!v || v->kind != Value::String)
      fail(line, what + " expects a string argument");
    return v->s();
  }

  // Python's str.islower/isupper, for ASCII letters: some cased letter, none of the other case.
  static bool isCase(const std::string &s, bool lower) {
    bool cased = false;
    for (char c : s) {
      bool l = c >= 'a' && c <= 'z', u = c >= 'A' && c <= 'Z';
      if (lower ? u : l)
        return false;
      cased = cased || l || u;
    }
    return cased;
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
      if (v.kind == Value::String)
        work(line, v.s().size());
      return v.kind == Value::String && isCase(v.s(), name == "lower");
    }
    if (name == "even" || name == "odd" || name == "divisibleby") {
      if (!v.isInt())
        fail(line, "test '" + name + "' needs an integer");
      int64_t d = 2;
      if (name == "divisibleby") {
        if (!needArg().isInt())
          fail(line, "test 'divisibleby' needs an integer");
        d = arg->asInt();
      }
      if (d == 0)
        fail(line, "integer division or modulo by zero");
      bool divisible = d == -1 || v.asInt() % d == 0; // INT64_MIN % -1 traps in C++
      return name == "odd" ? !divisible : divisible;
    }
    if (name == "eq" || name == "equalto")
      return equal(v, needArg(), line);
    if (name == "ne")
      return !equal(v, needArg(), line);
    if (name == "sameas")
      return v.kind == needArg().kind && equal(v, *arg, line);
    if (name == "lt" || name == "gt" || name == "le" || name == "ge") {
      static const std::map<std::string, std::string> ops = {
          {"lt", "<"}, {"gt", ">"}, {"le", "<="}, {"ge", ">="}};
      return compare(ops.at(name), v, needArg(), line);
    }
    if (name == "in")
      return contains(needArg(), v, line);
    fail(line, "test '" + name + "' is outside the supported Jinja subset");
  }

  Value len(const Value &v, int line) {
    switch (v.kind) {
    case Value::Undefined:
      return Value::integer(0);
    case Value::String:
      return Value::integer(length(v, line));
    case Value::ListV:
      return Value::integer(int64_t(v.seq().size()));
    case Value::DictV:
      return Value::integer(int64_t(v.map().size()));
    default:
      fail(line, std::string("object of type '") + typeName(v) + "' has no len()");
    }
  }

  Value attrPath(const Value &item, const std::string &path, int line) {
    Value v = item;
    size_t b = 0;
    while (b <= path.size()) {
      step(line);
      size_t e = path.find('.', b);
      std::string part = path.substr(b, e == std::string::npos ? std::string::npos : e - b);
      v = v.kind == Value::Undefined ? v : getAttr(v, part, line);
      if (e == std::string::npos)
        break;
      b = e + 1;
    }
    return v;
  }

  // Longer text is not taken as a number by the int and float filters (Python's int() refuses
  // more than 4300 digits), rather than parsed at length.
  static constexpr size_t kMaxNumberText = 4300;

  // Python's float() of a string: decimal digits (an underscore between two), a point, an
  // exponent, or inf, infinity and nan; strtod alone would take hexadecimal too.
  static std::optional<double> parseFloat(const std::string &text) {
    if (text.size() > kMaxNumberText)
      return std::nullopt;
    std::string t = strip(text, nullptr, true, true), plain;
    auto digit = [&](size_t k) { return k < t.size() && t[k] >= '0' && t[k] <= '9'; };
    for (size_t k = 0; k < t.size(); ++k) {
      if (t[k] == '_' && k > 0 && digit(k - 1) && digit(k + 1))
        continue;
      plain += t[k];
    }
    if (plain.empty())
      return std::nullopt;
    std::string word = caseMap(plain[0] == '+' || plain[0] == '-' ? plain.substr(1) : plain, 0);
    bool special = word == "inf" || word == "infinity" || word == "nan";
    if (!special && plain.find_first_not_of("0123456789+-.eE") != std::string::npos)
      return std::nullopt;
    char *end = nullptr;
    double f = std::strtod(plain.c_str(), &end);
    if (end != plain.c_str() + plain.size())
      return std::nullopt;
    return f;
  }

  // jinja2's int filter on a string: Python's int() of it (decimal, an underscore between two
  // digits), else int(float()) of it; null where both fail.
  static std::optional<Value> parseInt(const std::string &text, int line) {
    if (text.size() > kMaxNumberText)
      return std::nullopt;
    std::string t = strip(text, nullptr, true, true), plain;
    for (size_t k = 0; k < t.size(); ++k) {
      bool between = k > 0 && k + 1 < t.size() && std::isdigit((unsigned char)t[k - 1]) &&
                     std::isdigit((unsigned char)t[k + 1]);
      if (t[k] == '_' && between)
        continue;
      plain += t[k];
    }
    if (plain.empty())
      return std::nullopt;
    size_t digits = plain[0] == '+' || plain[0] == '-' ? 1 : 0;
    if (plain.size() > digits &&
        plain.find_first_not_of("0123456789", digits) == std::string::npos) {
      errno = 0;
      long long i = std::strtoll(plain.c_str(), nullptr, 10);
      if (errno == ERANGE)
        fail(line, "filter 'int': " + t + " does not fit in 64 bits");
      return Value::integer(i);
    }
    std::optional<double> f = parseFloat(t);
    if (!f || std::isnan(*f))
      return std::nullopt;
    if (!(std::fabs(*f) < 9.2e18))
      fail(line, "filter 'int': " + t + " does not fit in 64 bits");
    return Value::integer(int64_t(*f));
  }

  Value filter(const std::string &name, const Value &v, const Args &args, int line) {
    step(line);
    auto text = [&]() { return str(v, line); };
    if (name == "safe")
      return v;
    if (name == "trim") {
      const Value *chars = args.get(0, "chars");
      return newStr(
          strip(text(), chars && chars->kind == Value::String ? &chars->s() : nullptr, true, true),
          line);
    }
    if (name == "length" || name == "count")
      return len(v, line);
    if (name == "upper")
      return newStr(caseMap(text(), 1), line);
    if (name == "lower")
      return newStr(caseMap(text(), 0), line);
    if (name == "title")
      return newStr(caseMap(text(), 2), line);
    if (name == "capitalize")
      return newStr(caseMap(text(), 3), line);
    if (name == "string")
      return newStr(text(), line);
    if (name == "tojson") {
      // json.dumps's indent: a number of spaces (none for 0 or less, yet a newline per item)
      // or a string; none for one line.
      const Value *indent = args.get(0, "indent");
      std::string unit;
      bool indented = indent && indent->kind != Value::None;
      if (indented && indent->isInt()) {
        checkLength(line, uint64_t(std::max<int64_t>(indent->asInt(), 0)));
        unit.assign(size_t(std::max<int64_t>(indent->asInt(), 0)), ' ');
      } else if (indented && indent->kind == Value::String) {
        unit = indent->s();
      } else if (indented) {
        fail(line, "tojson: indent must be an integer or a string");
      }
      std::string out;
      toJson(v, indented ? &unit : nullptr, 0, out, line);
      return newStr(std::move(out), line);
    }
    if (name == "default" || name == "d") {
      const Value *def = args.get(0, "default_value");
      const Value *boolean = args.get(1, "boolean");
      bool useDefault = boolean && truthy(*boolean) ? !truthy(v) : v.kind == Value::Undefined;
      return useDefault ? (def ? *def : Value::str("")) : v;
    }
    if (name == "replace") {
      return replaceAll(text(), requireString(args.get(0, "old"), "replace", line),
                        requireString(args.get(1, "new"), "replace", line), args.get(2, "count"),
                        line);
    }
    if (name == "wordcount")
      return Value::integer(int64_t(split(text(), nullptr, -1, line).seq().size()));
    if (name == "int") {
      const Value *def = args.get(0, "default");
      Value fallback = def ? *def : Value::integer(0);
      if (v.kind == Value::Float) { // int(nan) fails and jinja2 gives the default
        if (std::isnan(v.f))
          return fallback;
        if (!(std::fabs(v.f) < 9.2e18))
          fail(line, "filter 'int': " + pyFloat(v.f) + " does not fit in 64 bits");
        return Value::integer(int64_t(v.f));
      }
      if (v.isNumber())
        return Value::integer(v.asInt());
      return parseInt(text(), line).value_or(fallback);
    }
    if (name == "float") {
      if (v.isNumber())
        return Value::number(v.asDouble());
      const Value *def = args.get(0, "default");
      std::optional<double> f = parseFloat(text());
      return f ? Value::number(*f) : def ? *def : Value::number(0);
    }
    if (name == "abs") {
      if (v.kind == Value::Float)
        return Value::number(std::fabs(v.f));
      if (v.isNumber())
        return v.asInt() < 0 ? number("-", Value::integer(0), v, line) : Value::integer(v.asInt());
      fail(line, std::string("bad operand type for abs(): '") + typeName(v) + "'");
    }
    if (name == "items") {
      if (v.kind == Value::Undefined)
        return Value::makeList({});
      if (!v.isMapping())
        fail(line, "filter 'items' expects a mapping");
      List items;
      for (const auto &[k, val] : v.map())
        items.push_back(Value::makeList({Value::str(k), val}, true));
      return newList(std::move(items), line);
    }
    // A string's first, last and reverse, without a value per character.
    if (v.kind == Value::String && (name == "first" || name == "last" || name == "reverse")) {
      const std::string &s = v.s();
      if (name != "reverse") {
        if (s.empty())
          return Value::undefined("No " + name + " item, sequence was empty.");
        size_t at = name == "first" ? 0 : previousStart(s, s.size());
        return Value::str(s.substr(at, utf8Length((unsigned char)s[at])));
      }
      std::string r(s.size(), '\0');
      for (size_t e = s.size(), w = 0; e > 0;) {
        size_t b = previousStart(s, e);
        for (size_t k = b; k < e; ++k)
          r[w++] = s[k];
        e = b;
      }
      return newStr(std::move(r), line);
    }
    // The rest take a sequence.
    Value all = sequence(v, line);
    const List &items = all.seq();
    if (name == "list")
      return all;
    if (name == "first" || name == "last") {
      if (items.empty())
        return Value::undefined("No " + name + " item, sequence was empty.");
      return name == "first" ? items.front() : items.back();
    }
    if (name == "reverse")
      return newList(List(items.rbegin(), items.rend()), line);
    if (name == "join") {
      const Value *sep = args.get(0, "d");
      const Value *attribute = args.get(1, "attribute");
      std::string glue = sep ? str(*sep, line) : "", out;
      for (size_t k = 0; k < items.size(); ++k) {
        step(line);
        if (k)
          out += glue;
        out += str(attribute ? attrPath(items[k], str(*attribute, line), line) : items[k], line);
        checkLength(line, out.size());
      }
      return newStr(std::move(out), line);
    }
    if (name == "sum") {
      const Value *attribute = args.get(0, "attribute");
      const Value *start = args.get(1, "start");
      Value total = start ? *start : Value::integer(0);
      for (const Value &item : items) {
        step(line);
        total =
            arith("+", total, attribute ? attrPath(item, str(*attribute, line), line) : item, line);
      }
      return total;
    }
    if (name == "map") {
      const Value *attribute = args.get(99, "attribute");
      List out;
      if (attribute) {
        const Value *def = args.get(99, "default");
        for (const Value &item : items) {
          Value x = attrPath(item, str(*attribute, line), line);
          out.push_back(x.kind == Value::Undefined && def ? *def : x);
        }
        return newList(std::move(out), line);
      }
      if (args.pos.empty() || args.pos[0].kind != Value::String)
        fail(line, "filter 'map' needs a filter name or attribute=");
      std::string inner = args.pos[0].s();
      if (!known(std::begin(kFilters), std::end(kFilters), inner))
        fail(line, "filter '" + inner + "' is outside the supported Jinja subset");
      Args rest;
      rest.pos.assign(args.pos.begin() + 1, args.pos.end());
      rest.kw = args.kw;
      for (const Value &item : items)
        out.push_back(filter(inner, item, rest, line));
      return newList(std::move(out), line);
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
        testName = args.pos[first].s();
        if (!known(std::begin(kTests), std::end(kTests), testName))
          fail(line, "test '" + testName + "' is outside the supported Jinja subset");
      }
      Args testArgs;
      if (args.pos.size() > first + 1)
        testArgs.pos.assign(args.pos.begin() + long(first) + 1, args.pos.end());
      List out;
      for (const Value &item : items) {
        step(line);
        Value x = byAttr ? attrPath(item, args.pos[0].s(), line) : item;
        bool t = testName.empty() ? truthy(x) : test(testName, x, testArgs, line);
        if (t == keep)
          out.push_back(item);
      }
      return newList(std::move(out), line);
    }
    if (name == "unique") { // jinja2's: the first of each, strings compared ignoring case
      const Value *caseSensitive = args.get(0, "case_sensitive");
      const Value *attribute = args.get(1, "attribute");
      std::unordered_set<std::string> seen;
      seen.reserve(items.size());
      List out;
      std::string key;
      for (const Value &item : items) {
        key.clear();
        hashKey(attribute ? attrPath(item, str(*attribute, line), line) : item,
                caseSensitive && truthy(*caseSensitive), key, line);
        if (seen.insert(key).second)
          out.push_back(item);
      }
      return newList(std::move(out), line);
    }
    if (name == "sort" || name == "min" || name == "max") {
      // jinja2's: strings compared ignoring case unless case_sensitive; sort is stable, also
      // reversed (as Python's sorted(reverse=True) is); min and max give the first of equals.
      bool isSort = name == "sort";
      const Value *reverse = isSort ? args.get(0, "reverse") : nullptr;
      const Value *caseSensitive = args.get(isSort ? 1 : 0, "case_sensitive");
      const Value *attribute = args.get(isSort ? 2 : 1, "attribute");
      bool ignoreCase = !(caseSensitive && truthy(*caseSensitive));
      List keys;
      for (const Value &item : items) {
        step(line);
        Value k = attribute ? attrPath(item, str(*attribute, line), line) : item;
        if (ignoreCase && k.kind == Value::String)
          k = newStr(caseMap(k.s(), 0), line);
        keys.push_back(std::move(k));
      }
      std::vector<size_t> order(items.size());
      for (size_t k = 0; k < order.size(); ++k)
        order[k] = k;
      if (!isSort) {
        if (items.empty())
          return Value::undefined("No aggregated item, sequence was empty.");
        size_t best = 0;
        for (size_t k = 1; k < items.size(); ++k)
          if (name == "min" ? less(keys[k], keys[best], "<", line)
                            : less(keys[best], keys[k], "<", line))
            best = k;
        return items[best];
      }
      bool descending = reverse && truthy(*reverse);
      std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) {
        return descending ? less(keys[b], keys[a], "<", line) : less(keys[a], keys[b], "<", line);
      });
      List sorted;
      for (size_t k : order)
        sorted.push_back(items[k]);
      return newList(std::move(sorted), line);
    }
    if (name == "dictsort")
      fail(line, "filter 'dictsort' is outside the supported Jinja subset");
    fail(line, "filter '" + name + "' is outside the supported Jinja subset");
  }

  // str.replace(from, to, count): Python inserts `to` around every character for an empty
  // `from`. Built within maxStringBytes as it grows.
  Value replaceAll(const std::string &s, const std::string &from, const std::string &to,
                   const Value *count, int line) {
    int64_t limit = count && count->isInt() ? count->asInt() : -1;
    std::string out;
    int64_t done = 0;
    auto more = [&]() { return limit < 0 || done < limit; };
    if (from.empty()) {
      work(line, s.size());
      uint64_t inserts = uint64_t(countCodePoints(s)) + 1, size = 0;
      if (limit >= 0)
        inserts = std::min(inserts, uint64_t(limit));
      if (__builtin_mul_overflow(inserts, uint64_t(to.size()), &size) ||
          __builtin_add_overflow(size, uint64_t(s.size()), &size))
        size = UINT64_MAX;
      checkLength(line, size);
      out.resize(size);
      char *w = &out[0];
      for (size_t i = 0, n; i <= s.size(); i += n) {
        if (more()) {
          std::memcpy(w, to.data(), to.size());
          w += to.size();
          ++done;
        }
        n = i < s.size() ? utf8Length((unsigned char)s[i]) : 1;
        if (i < s.size()) {
          std::memcpy(w, s.data() + i, n);
          w += n;
        }
      }
      return newStr(std::move(out), line);
    }
    work(line, s.size());
    size_t pos = 0;
    for (size_t hit; more() && (hit = findText(s, from, pos)) != std::string::npos; ++done) {
      work(line, kSearchCost); // each search that finds something costs a call
      out.append(s, pos, hit - pos);
      out += to;
      checkLength(line, out.size());
      pos = hit + from.size();
    }
    out.append(s, pos, std::string::npos);
    return newStr(std::move(out), line);
  }

  // str.split(sep, maxsplit): on runs of whitespace for no separator.
  Value split(const std::string &s, const std::string *sep, int64_t maxsplit, int line) {
    work(line, s.size());
    List parts;
    auto add = [&](size_t b, size_t e) {
      checkItems(line, parts.size() + 1, "list");
      step(line);
      parts.push_back(Value::str(s.substr(b, e - b)));
    };
    if (!sep) {
      size_t k = 0, n;
      auto spaceAt = [&](size_t at) { return isSpaceCodePoint(decodeAt(s, at, n)); };
      for (;;) {
        while (k < s.size() && spaceAt(k))
          k += n;
        if (k >= s.size())
          break;
        if (maxsplit >= 0 && int64_t(parts.size()) == maxsplit) {
          add(k, s.size()); // the rest as it is, trailing whitespace and all
          break;
        }
        size_t e = k;
        while (e < s.size() && !spaceAt(e))
          e += n;
        add(k, e);
        k = e;
      }
      return newList(std::move(parts), line);
    }
    size_t pos = 0;
    for (size_t hit; (maxsplit < 0 || int64_t(parts.size()) < maxsplit) &&
                     (hit = findText(s, *sep, pos)) != std::string::npos;
         pos = hit + sep->size()) {
      work(line, kSearchCost);
      add(pos, hit);
    }
    add(pos, s.size());
    return newList(std::move(parts), line);
  }

  Value method(const Value &obj, const std::string &name, const Args &args, int line) {
    step(line);
    if (obj.kind == Value::Undefined)
      undefinedError(obj, line);
    if (obj.kind == Value::String) {
      const std::string &s = obj.s();
      if (name == "strip" || name == "lstrip" || name == "rstrip") {
        const Value *chars = args.get(0, "chars");
        work(line, s.size());
        return newStr(strip(s, chars && chars->kind == Value::String ? &chars->s() : nullptr,
                            name != "rstrip", name != "lstrip"),
                      line);
      }
      if (name == "upper")
        return newStr(caseMap(s, 1), line);
      if (name == "lower")
        return newStr(caseMap(s, 0), line);
      if (name == "title")
        return newStr(caseMap(s, 2), line);
      if (name == "capitalize")
        return newStr(caseMap(s, 3), line);
      if (name == "startswith" || name == "endswith") {
        const Value *arg = args.get(0, "prefix");
        if (!arg)
          fail(line, name + "() takes at least 1 argument");
        List candidates = arg->kind == Value::ListV ? arg->seq() : List{*arg};
        for (const Value &c : candidates) {
          step(line);
          if (c.kind != Value::String)
            fail(line, name + "() expects a string or a tuple of strings");
          const std::string &t = c.s();
          work(line, t.size());
          if (t.size() <= s.size() &&
              (name == "startswith" ? s.compare(0, t.size(), t) == 0
                                    : s.compare(s.size() - t.size(), t.size(), t) == 0))
            return Value::boolean(true);
        }
        return Value::boolean(false);
      }
      if (name == "split") {
        const Value *sep = args.get(0, "sep");
        const Value *maxsplit = args.get(1, "maxsplit");
        if (sep && sep->kind == Value::String && sep->s().empty())
          fail(line, "empty separator");
        if (sep && sep->kind != Value::String && sep->kind != Value::None)
          fail(line, "split() expects a string separator");
        return split(s, sep && sep->kind == Value::String ? &sep->s() : nullptr,
                     maxsplit && maxsplit->isInt() ? maxsplit->asInt() : -1, line);
      }
      if (name == "replace")
        return replaceAll(s, requireString(args.get(0, "old"), "replace()", line),
                          requireString(args.get(1, "new"), "replace()", line),
                          args.get(2, "count"), line);
      if (name == "find") {
        work(line, s.size());
        size_t hit = findText(s, requireString(args.get(0, "sub"), "find()", line));
        return Value::integer(hit == std::string::npos ? -1 : countCodePoints(s.substr(0, hit)));
      }
      if (name == "count") {
        const std::string &sub = requireString(args.get(0, "sub"), "count()", line);
        if (sub.empty())
          return Value::integer(length(obj, line) + 1);
        work(line, s.size());
        int64_t n = 0;
        for (size_t pos = findText(s, sub); pos != std::string::npos;
             pos = findText(s, sub, pos + sub.size())) {
          work(line, kSearchCost);
          ++n;
        }
        return Value::integer(n);
      }
      if (name == "join") {
        const Value *seq = args.get(0, "iterable");
        if (!seq)
          fail(line, "join() takes exactly one argument");
        Value all = sequence(*seq, line);
        std::string out;
        for (size_t k = 0; k < all.seq().size(); ++k) {
          step(line);
          const Value &item = all.seq()[k];
          if (item.kind != Value::String)
            fail(line, "join() expects strings");
          if (k)
            out += s;
          out += item.s();
          checkLength(line, out.size());
        }
        return newStr(std::move(out), line);
      }
    } else if (obj.isMapping()) {
      if (name == "items" || name == "keys" || name == "values") {
        List out;
        for (const auto &[k, v] : obj.map())
          out.push_back(name == "items"  ? Value::makeList({Value::str(k), v}, true)
                        : name == "keys" ? Value::str(k)
                                         : v);
        return newList(std::move(out), line);
      }
      if (name == "get") {
        const Value *key = args.get(0, "key");
        const Value *def = args.get(1, "default");
        if (key && key->kind == Value::String)
          if (const Value *v = obj.map().find(key->s()))
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
    const std::string &name = fn.s();
    Args args = evalArgs(e, 1);
    if (name == "raise_exception") {
      const Value *msg = args.get(0, "message");
      throw Raised{msg ? str(*msg, e.line) : std::string()};
    }
    if (name == "strftime_now")
      return strftimeNow(requireString(args.get(0, "format"), "strftime_now()", e.line), e.line);
    if (name == "range")
      return range(args, e.line);
    if (name == "namespace" || name == "dict") {
      Dict d;
      for (const Value &p : args.pos) {
        if (!p.isMapping())
          fail(e.line, name + "() takes keyword arguments or a mapping");
        for (const auto &kv : p.map()) {
          step(e.line);
          d.set(kv.first, kv.second);
        }
      }
      for (auto &[k, v] : args.kw)
        d.set(k, v);
      return newDict(std::move(d), e.line, name == "namespace" ? Value::NamespaceV : Value::DictV);
    }
    fail(e.line, "'" + name + "' is not callable");
  }

  Value strftimeNow(const std::string &format, int line) {
    step(line, 1 + uint64_t(std::count(format.begin(), format.end(), '%'))); // each conversion
    std::time_t now = std::time(nullptr);
    std::tm local{};
    localtime_r(&now, &local);
    // strftime says 0 both for an empty result and for a buffer too small: grow it to what
    // the longest conversion (a few dozen bytes per directive) could need, then give up.
    std::vector<char> buf;
    size_t n = 0;
    for (size_t size = 256; n == 0 && !format.empty(); size *= 4) {
      checkLength(line, size / 4);
      buf.resize(size);
      n = std::strftime(buf.data(), buf.size(), format.c_str(), &local);
      if (size > 64 * format.size() + 256)
        break;
    }
    step(line, n / 8); // and for what it writes: a conversion can take a few hundred ns
    std::string text(buf.data(), n);
    if (firstInvalidUtf8(text) != std::string::npos) // a locale's names, say
      fail(line, "strftime_now() made text that is not UTF-8");
    return newStr(std::move(text), line);
  }

  // Python's range within transformers' sandbox, which refuses more than MAX_RANGE items. The
  // count is found first, so that no step can run past the bounds.
  Value range(const Args &args, int line) {
    std::vector<int64_t> a;
    for (const Value &v : args.pos) {
      if (!v.isInt())
        fail(line, "range() expects integers");
      a.push_back(v.asInt());
    }
    if (a.empty() || a.size() > 3)
      fail(line, "range() takes 1 to 3 arguments");
    int64_t start = a.size() > 1 ? a[0] : 0, stop = a.size() > 1 ? a[1] : a[0],
            step = a.size() > 2 ? a[2] : 1;
    if (step == 0)
      fail(line, "range() arg 3 must not be zero");
    uint64_t count = 0;
    if (step > 0 && start < stop)
      count = (uint64_t(stop) - uint64_t(start) - 1) / uint64_t(step) + 1;
    else if (step < 0 && start > stop)
      count = (uint64_t(start) - uint64_t(stop) - 1) / (uint64_t(0) - uint64_t(step)) + 1;
    constexpr uint64_t kMaxRange = 100000; // jinja2.sandbox.MAX_RANGE
    if (count > kMaxRange)
      fail(line, "Range too big. The sandbox blocks ranges larger than MAX_RANGE (100000).");
    List out;
    out.reserve(count);
    for (uint64_t k = 0, v = uint64_t(start); k < count; ++k, v += uint64_t(step))
      out.push_back(Value::integer(int64_t(v))); // v wraps as unsigned; its value is in range
    return newList(std::move(out), line);
  }

  Value eval(const Expr &e) {
    step(e.line);
    switch (e.kind) {
    case Expr::Lit:
      return e.lit;
    case Expr::Name:
      return lookup(e.name);
    case Expr::ListE: {
      List items;
      for (const ExprP &a : e.args)
        items.push_back(eval(*a));
      return newList(std::move(items), e.line, e.tuple);
    }
    case Expr::DictE: {
      Dict d;
      for (size_t k = 0; k + 1 < e.args.size(); k += 2) {
        Value key = eval(*e.args[k]);
        if (key.kind != Value::String)
          fail(e.line, "dict keys other than strings are outside the supported Jinja subset");
        d.set(key.s(), eval(*e.args[k + 1]));
      }
      return newDict(std::move(d), e.line);
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
                                    : number("-", Value::integer(0), v, e.line);
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

// "NAME: not valid UTF-8 (...)" when `text` is not, naming its first invalid byte.
std::string utf8Problem(const std::string &text) {
  size_t at = firstInvalidUtf8(text);
  if (at == std::string::npos)
    return "";
  char buf[96];
  std::snprintf(buf, sizeof buf,
                "not valid UTF-8 (the byte at offset %zu, 0x%02x, begins no "
                "character)",
                at, unsigned((unsigned char)text[at]));
  return buf;
}

} // namespace

std::optional<std::string> render(const std::string &source,
                                  const std::vector<ChatMessage> &messages,
                                  const ChatOptions &options, std::string &error) {
  const ChatTemplateLimits &limits = options.limits;
  if (limits.maxNesting < 1 || limits.maxNesting > kMaxNestingCeiling) {
    error = "ChatTemplateLimits::maxNesting is " + std::to_string(limits.maxNesting) +
            ": it must be from 1 to " + std::to_string(kMaxNestingCeiling);
    return std::nullopt;
  }
  if (source.size() > limits.maxTemplateBytes) {
    error = "the chat template is " + std::to_string(source.size()) + " bytes, more than " +
            std::to_string(limits.maxTemplateBytes) + " (limit maxTemplateBytes)";
    return std::nullopt;
  }
  // The template and every text given to it are UTF-8 (as Python's str is), so that what the
  // template makes of them is too.
  if (std::string problem = utf8Problem(source); !problem.empty()) {
    size_t at = firstInvalidUtf8(source);
    error = "chat template line " +
            std::to_string(1 + std::count(source.begin(), source.begin() + long(at), '\n')) + ": " +
            problem;
    return std::nullopt;
  }
  auto invalidInput = [&](const std::string &name, const std::string &text) {
    std::string problem = utf8Problem(text);
    if (!problem.empty())
      error = name + ": " + problem;
    return !problem.empty();
  };
  for (size_t k = 0; k < messages.size(); ++k)
    if (invalidInput("messages[" + std::to_string(k) + "].role", messages[k].role) ||
        invalidInput("messages[" + std::to_string(k) + "].content", messages[k].content))
      return std::nullopt;
  if (invalidInput("bos_token", options.bosToken) || invalidInput("eos_token", options.eosToken))
    return std::nullopt;
  try {
    std::vector<Node> tree = Parser(lex(source), limits.maxNesting).parse();
    List msgs;
    for (const ChatMessage &m : messages) {
      Dict d;
      d.set("role", Value::str(m.role));
      d.set("content", Value::str(m.content));
      msgs.push_back(Value::makeDict(std::move(d)));
    }
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
    Renderer r(std::move(globals), limits);
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
