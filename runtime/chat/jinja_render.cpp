// Rendering: statements, loops and scopes, and evaluating expressions, down to indexing and
// slicing values. Strings index by code points as Python's do, walking the UTF-8 from marks
// kept every few dozen characters, so that s[i] in a loop costs no more than the loop.
#include "jinja_render.h"

#include <algorithm>

namespace tpcrt::jinja {

// Namespaces are the only values a template can change, so every reference cycle (a namespace
// holding itself, through lists perhaps) goes through one: emptying them all when the rendering
// ends frees the cycles that Python's garbage collector would.
Renderer::~Renderer() {
  for (const std::weak_ptr<DictBox> &weak : namespaces)
    if (std::shared_ptr<DictBox> ns = weak.lock()) {
      Dict attributes = std::move(ns->entries);
      ns->entries = Dict();
    }
}

// ---- Statements.

Flow Renderer::exec(const Node &n) {
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

Value Renderer::lookup(const std::string &name) {
  for (auto it = scopes.rbegin(); it != scopes.rend(); ++it) {
    auto found = it->find(name);
    if (found != it->end())
      return found->second;
  }
  return Value::undefined("'" + name + "' is undefined");
}

void Renderer::emit(const std::string &text, int line) {
  if (text.size() > limits.maxOutputBytes - out.size())
    overLimit(line, "output of more than " + std::to_string(limits.maxOutputBytes) + " bytes",
              "maxOutputBytes");
  work(line, text.size());
  out += text;
}

Value Renderer::sequence(const Value &v, int line) {
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

void Renderer::bindTargets(const Node &n, const Value &item) {
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
void Renderer::advanceLoop(Value &loop, const List &items, size_t k) {
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

Flow Renderer::execFor(const Node &n) {
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

// ---- Strings by code points.

size_t Renderer::offsetOf(const Value &str, int64_t index, int line) {
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

std::string Renderer::codePointAt(const Value &str, int64_t index, int line) {
  size_t at = offsetOf(str, index, line);
  return str.s().substr(at, utf8Length((unsigned char)str.s()[at]));
}

List Renderer::characters(const Value &str, int line) {
  checkItems(line, uint64_t(length(str, line)), "list of characters");
  step(line, uint64_t(length(str, line)));
  List chars;
  const std::string &s = str.s();
  for (size_t i = 0, n; i < s.size(); i += n)
    chars.push_back(Value::str(s.substr(i, n = utf8Length((unsigned char)s[i]))));
  return chars;
}

// ---- Values' parts: attributes, items, slices, lengths.

Value Renderer::getAttr(const Value &obj, const std::string &name, int line) {
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

Value Renderer::getItem(const Value &obj, const Value &key, int line) {
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

Value Renderer::slice(const Value &obj, const Expr &e) {
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

Value Renderer::len(const Value &v, int line) {
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

Value Renderer::attrPath(const Value &item, const std::string &path, int line) {
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

// ---- Expressions.

Args Renderer::evalArgs(const Expr &e, size_t skip) {
  Args a;
  for (size_t k = skip; k < e.args.size(); ++k)
    a.pos.push_back(eval(*e.args[k]));
  for (const auto &[k, v] : e.kwargs)
    a.kw.emplace_back(k, eval(*v));
  return a;
}

Value Renderer::eval(const Expr &e) {
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

} // namespace tpcrt::jinja
