// Values: building lists and dicts, freeing them without recursion, and what Python says of
// any value (its type's name, its truth, a float's text).
#include "jinja_value.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>

namespace tpcrt::jinja {

namespace {

thread_local Container *deadHead = nullptr;
thread_local bool freeing = false;

} // namespace

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

} // namespace tpcrt::jinja
