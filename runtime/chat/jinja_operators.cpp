// The operators on values: arithmetic as Python's (floored division, checked 64-bit integers),
// repetition and concatenation within the limits, and the comparisons, membership and hashing
// that recurse into lists and dicts, each level counted against maxNesting.
#include "jinja_render.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>

namespace tpcrt::jinja {

Value Renderer::arith(const std::string &op, const Value &a, const Value &b, int line) {
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

Value Renderer::concat(const std::string &a, const std::string &b, int line) {
  checkLength(line, uint64_t(a.size()) + b.size());
  return newStr(a + b, line);
}

// s * n and l * n: Python's repetition, within the limits before anything is built.
Value Renderer::repeat(const Value &a, int64_t times, int line) {
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

Value Renderer::number(const std::string &op, const Value &a, const Value &b, int line) {
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

bool Renderer::contains(const Value &container, const Value &item, int line) {
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

bool Renderer::compare(const std::string &op, const Value &a, const Value &b, int line) {
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

bool Renderer::equal(const Value &a, const Value &b, int line) {
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

bool Renderer::less(const Value &a, const Value &b, const std::string &op, int line) {
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

void Renderer::hashKey(const Value &v, bool caseSensitive, std::string &key, int line) {
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

} // namespace tpcrt::jinja
