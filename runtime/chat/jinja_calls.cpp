// What a template can call: the global functions (raise_exception, strftime_now, range,
// namespace, dict) and the methods of str and dict values, each found by name in a table of its
// type's methods. str.replace and str.split serve the replace and wordcount filters too.
#include "jinja_filters.h"
#include "jinja_render.h"
#include "tpcrt/utf8.h"

#include <algorithm>
#include <cstring>
#include <ctime>
#include <unordered_map>

namespace tpcrt::jinja {
namespace {

using Method = Value (*)(const Operands &);

namespace methods {

// strip, lstrip and rstrip.
Value strip(const Operands &o) {
  const std::string &s = o.value.s();
  const Value *chars = o.args.get(0, "chars");
  o.r.work(o.line, s.size());
  return o.r.newStr(jinja::strip(s, chars && chars->kind == Value::String ? &chars->s() : nullptr,
                                 o.name != "rstrip", o.name != "lstrip"),
                    o.line);
}

template <Case mode> Value caseMapped(const Operands &o) {
  return o.r.newStr(caseMap(o.value.s(), mode), o.line);
}

// startswith and endswith, of a string or any of a tuple of them.
Value startsOrEndsWith(const Operands &o) {
  const std::string &s = o.value.s(), &name = o.name;
  const Value *arg = o.args.get(0, "prefix");
  if (!arg)
    fail(o.line, name + "() takes at least 1 argument");
  List candidates = arg->kind == Value::ListV ? arg->seq() : List{*arg};
  for (const Value &c : candidates) {
    o.r.step(o.line);
    if (c.kind != Value::String)
      fail(o.line, name + "() expects a string or a tuple of strings");
    const std::string &t = c.s();
    o.r.work(o.line, t.size());
    if (t.size() <= s.size() &&
        (name == "startswith" ? s.compare(0, t.size(), t) == 0
                              : s.compare(s.size() - t.size(), t.size(), t) == 0))
      return Value::boolean(true);
  }
  return Value::boolean(false);
}

Value split(const Operands &o) {
  const Value *sep = o.args.get(0, "sep");
  const Value *maxsplit = o.args.get(1, "maxsplit");
  if (sep && sep->kind == Value::String && sep->s().empty())
    fail(o.line, "empty separator");
  if (sep && sep->kind != Value::String && sep->kind != Value::None)
    fail(o.line, "split() expects a string separator");
  return o.r.split(o.value.s(), sep && sep->kind == Value::String ? &sep->s() : nullptr,
                   maxsplit && maxsplit->isInt() ? maxsplit->asInt() : -1, o.line);
}

Value replace(const Operands &o) {
  return o.r.replaceAll(o.value.s(), requireString(o.args.get(0, "old"), "replace()", o.line),
                        requireString(o.args.get(1, "new"), "replace()", o.line),
                        o.args.get(2, "count"), o.line);
}

Value find(const Operands &o) {
  const std::string &s = o.value.s();
  o.r.work(o.line, s.size());
  size_t hit = findText(s, requireString(o.args.get(0, "sub"), "find()", o.line));
  return Value::integer(hit == std::string::npos ? -1 : countCodePoints(s.substr(0, hit)));
}

Value count(const Operands &o) {
  const std::string &s = o.value.s();
  const std::string &sub = requireString(o.args.get(0, "sub"), "count()", o.line);
  if (sub.empty())
    return Value::integer(o.r.length(o.value, o.line) + 1);
  o.r.work(o.line, s.size());
  int64_t n = 0;
  for (size_t pos = findText(s, sub); pos != std::string::npos;
       pos = findText(s, sub, pos + sub.size())) {
    o.r.work(o.line, Renderer::kSearchCost);
    ++n;
  }
  return Value::integer(n);
}

Value join(const Operands &o) {
  const Value *seq = o.args.get(0, "iterable");
  if (!seq)
    fail(o.line, "join() takes exactly one argument");
  Value all = o.r.sequence(*seq, o.line);
  std::string out;
  for (size_t k = 0; k < all.seq().size(); ++k) {
    o.r.step(o.line);
    const Value &item = all.seq()[k];
    if (item.kind != Value::String)
      fail(o.line, "join() expects strings");
    if (k)
      out += o.value.s();
    out += item.s();
    o.r.checkLength(o.line, out.size());
  }
  return o.r.newStr(std::move(out), o.line);
}

// A dict's items, keys or values.
Value entries(const Operands &o) {
  List out;
  for (const auto &[k, v] : o.value.map())
    out.push_back(o.name == "items"  ? Value::makeList({Value::str(k), v}, true)
                  : o.name == "keys" ? Value::str(k)
                                     : v);
  return o.r.newList(std::move(out), o.line);
}

Value get(const Operands &o) {
  const Value *key = o.args.get(0, "key");
  const Value *def = o.args.get(1, "default");
  if (key && key->kind == Value::String)
    if (const Value *v = o.value.map().find(key->s()))
      return *v;
  return def ? *def : Value::none();
}

} // namespace methods

const std::unordered_map<std::string, Method> &stringMethods() {
  static const std::unordered_map<std::string, Method> table = {
      {"capitalize", methods::caseMapped<Case::Capitalize>},
      {"count", methods::count},
      {"endswith", methods::startsOrEndsWith},
      {"find", methods::find},
      {"join", methods::join},
      {"lower", methods::caseMapped<Case::Lower>},
      {"lstrip", methods::strip},
      {"replace", methods::replace},
      {"rstrip", methods::strip},
      {"split", methods::split},
      {"startswith", methods::startsOrEndsWith},
      {"strip", methods::strip},
      {"title", methods::caseMapped<Case::Title>},
      {"upper", methods::caseMapped<Case::Upper>},
  };
  return table;
}

// A dict's, and a namespace's.
const std::unordered_map<std::string, Method> &mappingMethods() {
  static const std::unordered_map<std::string, Method> table = {
      {"get", methods::get},
      {"items", methods::entries},
      {"keys", methods::entries},
      {"values", methods::entries},
  };
  return table;
}

} // namespace

Value Renderer::method(const Value &obj, const std::string &name, const Args &args, int line) {
  step(line);
  if (obj.kind == Value::Undefined)
    undefinedError(obj, line);
  const std::unordered_map<std::string, Method> *table = nullptr;
  if (obj.kind == Value::String)
    table = &stringMethods();
  else if (obj.isMapping())
    table = &mappingMethods();
  if (table) {
    auto found = table->find(name);
    if (found != table->end())
      return found->second({*this, name, obj, args, line});
  }
  fail(line, "method '" + name + "' of a " + typeName(obj) +
                 " value is outside the supported Jinja subset");
}

Value Renderer::call(const Expr &e) {
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

Value Renderer::strftimeNow(const std::string &format, int line) {
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
Value Renderer::range(const Args &args, int line) {
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

// str.replace(from, to, count): Python inserts `to` around every character for an empty
// `from`. Built within maxStringBytes as it grows.
Value Renderer::replaceAll(const std::string &s, const std::string &from, const std::string &to,
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

Value Renderer::split(const std::string &s, const std::string *sep, int64_t maxsplit, int line) {
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

} // namespace tpcrt::jinja
