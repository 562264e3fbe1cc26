// Rendering: the interpreter that walks the parse tree with Jinja's default Undefined, and
// writes the output. Its work is split by what it does (the files name the parts below):
//   jinja_render.cpp     statements, expressions, indexing and slicing
//   jinja_operators.cpp  arithmetic, comparison, membership and hashing of values
//   jinja_print.cpp      values as str(), repr() and JSON print them
//   jinja_filters.cpp    the filters and tests
//   jinja_calls.cpp      the global functions and the str and dict methods
//
// The template and the messages are untrusted, so the renderer is bounded by the caller's
// ChatTemplateLimits: every expression, statement, loop iteration and item visited is a render
// step; every byte of text built or scanned is text work; strings, lists, dicts, the output and
// nesting have maximum sizes, checked wherever one is built or changed (the checks are public,
// as the filters and methods build values too). Integer arithmetic is checked. Every operation
// keeps text whole characters, so the output is valid UTF-8 as the inputs are.
#ifndef TPCRT_CHAT_JINJA_RENDER_H
#define TPCRT_CHAT_JINJA_RENDER_H

#include "jinja_error.h"
#include "jinja_parser.h"
#include "jinja_text.h"
#include "jinja_value.h"
#include "tpcrt/chat_template.h"

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

namespace tpcrt::jinja {

// What a statement tells the loop around it.
enum class Flow { Next, Break, Continue };

// A call's arguments, evaluated.
struct Args {
  std::vector<Value> pos;
  std::vector<std::pair<std::string, Value>> kw;
  // Python's binding of a parameter: the positional argument at `index`, else the keyword
  // argument `name`; null when neither was given.
  const Value *get(size_t index, const char *name) const {
    if (index < pos.size())
      return &pos[index];
    for (const auto &[k, v] : kw)
      if (k == name)
        return &v;
    return nullptr;
  }
};

// The error of using an undefined value: its hint says which and why.
[[noreturn]] inline void undefinedError(const Value &v, int line) { fail(line, v.s()); }

inline const std::string &requireString(const Value *v, const std::string &what, int line) {
  if (!v || v->kind != Value::String)
    fail(line, what + " expects a string argument");
  return v->s();
}

class Renderer {
public:
  Renderer(std::map<std::string, Value> globals, const ChatTemplateLimits &limits)
      : limits(limits) {
    scopes.push_back(std::move(globals));
  }
  ~Renderer();

  std::string out;

  Flow exec(const std::vector<Node> &nodes) {
    for (const Node &n : nodes) {
      Flow f = exec(n);
      if (f != Flow::Next)
        return f;
    }
    return Flow::Next;
  }

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

  // ---- Strings by code points (jinja_render.cpp).

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
  size_t offsetOf(const Value &str, int64_t index, int line);
  std::string codePointAt(const Value &str, int64_t index, int line);
  // The characters of a string, each a string value.
  List characters(const Value &str, int line);

  // ---- What any value is, has or holds (jinja_render.cpp).

  // What `for` iterates, and the filters that take a sequence: a list as it is (values do
  // not change), a dict's keys, a string's characters.
  Value sequence(const Value &v, int line);
  // len(v).
  Value len(const Value &v, int line);
  Value getAttr(const Value &obj, const std::string &name, int line);
  // The attribute at a dotted `path` (a.b.c) of `item`, as filters' attribute= takes it.
  Value attrPath(const Value &item, const std::string &path, int line);

  // ---- Printing, comparing and hashing values, which recurse into lists and dicts.

  // str(v), or repr(v) when `asRepr`, appended to `out` as Python prints them (jinja_print.cpp).
  void print(const Value &v, bool asRepr, std::string &out, int line);
  // str(v): a string value's own text, else it printed.
  std::string str(const Value &v, int line);
  // json.dumps(x, ensure_ascii=False, indent=indent), transformers' tojson; `indent` null for
  // none (one line).
  void toJson(const Value &v, const std::string *indent, int depth, std::string &out, int line);

  // The operators (jinja_operators.cpp).
  bool equal(const Value &a, const Value &b, int line);
  // a < b; `op` is the operator the template wrote, for the error where they do not compare.
  bool less(const Value &a, const Value &b, const std::string &op, int line);
  // A key equal for values Python's set would take as equal (1, 1.0 and True; strings ignoring
  // ASCII case unless `caseSensitive`, as jinja2's unique does), for hashing.
  void hashKey(const Value &v, bool caseSensitive, std::string &key, int line);
  bool contains(const Value &container, const Value &item, int line);
  // A comparison: ==, !=, <, >, <=, >=, in or not in.
  bool compare(const std::string &op, const Value &a, const Value &b, int line);
  // A binary arithmetic operator, or ~.
  Value arith(const std::string &op, const Value &a, const Value &b, int line);
  // Python's arithmetic on numbers. Its integers do not overflow; tpc's are 64 bits, and a
  // result beyond them is an error naming the operation rather than a wrapped value.
  static Value number(const std::string &op, const Value &a, const Value &b, int line);

  // ---- Filters, tests and methods (jinja_filters.cpp, jinja_calls.cpp).

  Value filter(const std::string &name, const Value &v, const Args &args, int line);
  bool test(const std::string &name, const Value &v, const Args &args, int line);
  Value method(const Value &obj, const std::string &name, const Args &args, int line);
  // str.replace(from, to, count).
  Value replaceAll(const std::string &s, const std::string &from, const std::string &to,
                   const Value *count, int line);
  // str.split(sep, maxsplit): on runs of whitespace for no separator.
  Value split(const std::string &s, const std::string *sep, int64_t maxsplit, int line);

private:
  const ChatTemplateLimits &limits;
  uint64_t steps = 0, textWork = 0;
  int valueDepth = 0; // of printing, comparing or hashing a value, which recurse into it
  std::vector<std::map<std::string, Value>> scopes;
  std::vector<std::weak_ptr<DictBox>> namespaces;

  // ---- Statements (jinja_render.cpp).

  Value lookup(const std::string &name);
  void emit(const std::string &text, int line);
  Flow exec(const Node &n);
  void bindTargets(const Node &n, const Value &item);
  static void advanceLoop(Value &loop, const List &items, size_t k);
  Flow execFor(const Node &n);

  // ---- Expressions (jinja_render.cpp, calls in jinja_calls.cpp).

  Value eval(const Expr &e);
  Args evalArgs(const Expr &e, size_t skip);
  Value getItem(const Value &obj, const Value &key, int line);
  Value slice(const Value &obj, const Expr &e);
  Value concat(const std::string &a, const std::string &b, int line);
  Value repeat(const Value &a, int64_t times, int line);
  Value call(const Expr &e);
  Value strftimeNow(const std::string &format, int line);
  Value range(const Args &args, int line);
};

} // namespace tpcrt::jinja

#endif // TPCRT_CHAT_JINJA_RENDER_H
