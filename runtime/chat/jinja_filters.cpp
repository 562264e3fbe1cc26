// The filters and tests: each a small function of its operands, found by name in a table. The
// filters that take a sequence iterate what `for` would (a dict's keys, a string's characters)
// and visit each item as a render step; those that build text or lists build them within the
// limits, as the rest of the renderer does.
#include "jinja_filters.h"

#include "jinja_render.h"

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <optional>
#include <unordered_map>
#include <unordered_set>

namespace tpcrt::jinja {
namespace {

// Longer text is not taken as a number by the int and float filters (Python's int() refuses
// more than 4300 digits), rather than parsed at length.
constexpr size_t kMaxNumberText = 4300;

// Python's float() of a string: decimal digits (an underscore between two), a point, an
// exponent, or inf, infinity and nan; strtod alone would take hexadecimal too.
std::optional<double> parseFloat(const std::string &text) {
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
  std::string word =
      caseMap(plain[0] == '+' || plain[0] == '-' ? plain.substr(1) : plain, Case::Lower);
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
std::optional<Value> parseInt(const std::string &text, int line) {
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

// ---- The filters.

namespace filters {

// str(value), as the filters on text take what is not text.
std::string text(const Operands &o) { return o.r.str(o.value, o.line); }

Value safe(const Operands &o) { return o.value; }

Value trim(const Operands &o) {
  const Value *chars = o.args.get(0, "chars");
  return o.r.newStr(strip(text(o), chars && chars->kind == Value::String ? &chars->s() : nullptr,
                          true, true),
                    o.line);
}

Value length(const Operands &o) { return o.r.len(o.value, o.line); }

template <Case mode> Value caseMapped(const Operands &o) {
  return o.r.newStr(caseMap(text(o), mode), o.line);
}

Value string(const Operands &o) { return o.r.newStr(text(o), o.line); }

Value tojson(const Operands &o) {
  // json.dumps's indent: a number of spaces (none for 0 or less, yet a newline per item) or a
  // string; none for one line.
  const Value *indent = o.args.get(0, "indent");
  std::string unit;
  bool indented = indent && indent->kind != Value::None;
  if (indented && indent->isInt()) {
    o.r.checkLength(o.line, uint64_t(std::max<int64_t>(indent->asInt(), 0)));
    unit.assign(size_t(std::max<int64_t>(indent->asInt(), 0)), ' ');
  } else if (indented && indent->kind == Value::String) {
    unit = indent->s();
  } else if (indented) {
    fail(o.line, "tojson: indent must be an integer or a string");
  }
  std::string out;
  o.r.toJson(o.value, indented ? &unit : nullptr, 0, out, o.line);
  return o.r.newStr(std::move(out), o.line);
}

// default (or d): the default for an undefined value, or with boolean=true for a false one.
Value orDefault(const Operands &o) {
  const Value *def = o.args.get(0, "default_value");
  const Value *boolean = o.args.get(1, "boolean");
  bool useDefault =
      boolean && truthy(*boolean) ? !truthy(o.value) : o.value.kind == Value::Undefined;
  return useDefault ? (def ? *def : Value::str("")) : o.value;
}

Value replace(const Operands &o) {
  return o.r.replaceAll(text(o), requireString(o.args.get(0, "old"), "replace", o.line),
                        requireString(o.args.get(1, "new"), "replace", o.line),
                        o.args.get(2, "count"), o.line);
}

Value wordcount(const Operands &o) {
  return Value::integer(int64_t(o.r.split(text(o), nullptr, -1, o.line).seq().size()));
}

Value toInt(const Operands &o) {
  const Value &v = o.value;
  const Value *def = o.args.get(0, "default");
  Value fallback = def ? *def : Value::integer(0);
  if (v.kind == Value::Float) { // int(nan) fails and jinja2 gives the default
    if (std::isnan(v.f))
      return fallback;
    if (!(std::fabs(v.f) < 9.2e18))
      fail(o.line, "filter 'int': " + pyFloat(v.f) + " does not fit in 64 bits");
    return Value::integer(int64_t(v.f));
  }
  if (v.isNumber())
    return Value::integer(v.asInt());
  return parseInt(text(o), o.line).value_or(fallback);
}

Value toFloat(const Operands &o) {
  if (o.value.isNumber())
    return Value::number(o.value.asDouble());
  const Value *def = o.args.get(0, "default");
  std::optional<double> f = parseFloat(text(o));
  return f ? Value::number(*f) : def ? *def : Value::number(0);
}

Value abs(const Operands &o) {
  const Value &v = o.value;
  if (v.kind == Value::Float)
    return Value::number(std::fabs(v.f));
  if (v.isNumber())
    return v.asInt() < 0 ? Renderer::number("-", Value::integer(0), v, o.line)
                         : Value::integer(v.asInt());
  fail(o.line, std::string("bad operand type for abs(): '") + typeName(v) + "'");
}

Value items(const Operands &o) {
  if (o.value.kind == Value::Undefined)
    return Value::makeList({});
  if (!o.value.isMapping())
    fail(o.line, "filter 'items' expects a mapping");
  List items;
  for (const auto &[k, val] : o.value.map())
    items.push_back(Value::makeList({Value::str(k), val}, true));
  return o.r.newList(std::move(items), o.line);
}

// The filters below take a sequence, which they iterate as `for` does.
Value sequence(const Operands &o) { return o.r.sequence(o.value, o.line); }

Value list(const Operands &o) { return sequence(o); }

// first or last: of a string, its character, without a value per character.
Value firstOrLast(const Operands &o) {
  bool first = o.name == "first";
  if (o.value.kind == Value::String) {
    const std::string &s = o.value.s();
    if (s.empty())
      return Value::undefined("No " + o.name + " item, sequence was empty.");
    size_t at = first ? 0 : previousStart(s, s.size());
    return Value::str(s.substr(at, utf8Length((unsigned char)s[at])));
  }
  Value all = sequence(o);
  if (all.seq().empty())
    return Value::undefined("No " + o.name + " item, sequence was empty.");
  return first ? all.seq().front() : all.seq().back();
}

// Of a string, its characters reversed without a value per character.
Value reverse(const Operands &o) {
  if (o.value.kind == Value::String) {
    const std::string &s = o.value.s();
    std::string r(s.size(), '\0');
    for (size_t e = s.size(), w = 0; e > 0;) {
      size_t b = previousStart(s, e);
      for (size_t k = b; k < e; ++k)
        r[w++] = s[k];
      e = b;
    }
    return o.r.newStr(std::move(r), o.line);
  }
  Value all = sequence(o);
  return o.r.newList(List(all.seq().rbegin(), all.seq().rend()), o.line);
}

// An item, or its attribute at `attribute`'s path where one is given.
Value itemOrAttribute(const Operands &o, const Value &item, const Value *attribute) {
  return attribute ? o.r.attrPath(item, o.r.str(*attribute, o.line), o.line) : item;
}

Value join(const Operands &o) {
  Value all = sequence(o);
  const List &items = all.seq();
  const Value *sep = o.args.get(0, "d");
  const Value *attribute = o.args.get(1, "attribute");
  std::string glue = sep ? o.r.str(*sep, o.line) : "", out;
  for (size_t k = 0; k < items.size(); ++k) {
    o.r.step(o.line);
    if (k)
      out += glue;
    out += o.r.str(itemOrAttribute(o, items[k], attribute), o.line);
    o.r.checkLength(o.line, out.size());
  }
  return o.r.newStr(std::move(out), o.line);
}

Value sum(const Operands &o) {
  Value all = sequence(o);
  const Value *attribute = o.args.get(0, "attribute");
  const Value *start = o.args.get(1, "start");
  Value total = start ? *start : Value::integer(0);
  for (const Value &item : all.seq()) {
    o.r.step(o.line);
    total = o.r.arith("+", total, itemOrAttribute(o, item, attribute), o.line);
  }
  return total;
}

// map(attribute=...), or map('filter', args...): each item's attribute, or each item filtered.
Value map(const Operands &o) {
  Value all = sequence(o);
  const List &items = all.seq();
  const Args &args = o.args;
  const Value *attribute = args.get(99, "attribute");
  List out;
  if (attribute) {
    const Value *def = args.get(99, "default");
    for (const Value &item : items) {
      Value x = o.r.attrPath(item, o.r.str(*attribute, o.line), o.line);
      out.push_back(x.kind == Value::Undefined && def ? *def : x);
    }
    return o.r.newList(std::move(out), o.line);
  }
  if (args.pos.empty() || args.pos[0].kind != Value::String)
    fail(o.line, "filter 'map' needs a filter name or attribute=");
  std::string inner = args.pos[0].s();
  if (!findFilter(inner))
    fail(o.line, "filter '" + inner + "' is outside the supported Jinja subset");
  Args rest;
  rest.pos.assign(args.pos.begin() + 1, args.pos.end());
  rest.kw = args.kw;
  for (const Value &item : items)
    out.push_back(o.r.filter(inner, item, rest, o.line));
  return o.r.newList(std::move(out), o.line);
}

// select, reject, selectattr and rejectattr: the items that pass the test named (or, with
// none named, are true), or fail it; the ...attr ones test an attribute of each.
Value selectOrReject(const Operands &o) {
  Value all = sequence(o);
  const std::string &name = o.name;
  const Args &args = o.args;
  bool byAttr = name == "selectattr" || name == "rejectattr";
  bool keep = name == "select" || name == "selectattr";
  size_t first = byAttr ? 1 : 0;
  if (byAttr && (args.pos.empty() || args.pos[0].kind != Value::String))
    fail(o.line, "filter '" + name + "' needs an attribute name");
  std::string testName;
  if (args.pos.size() > first) {
    if (args.pos[first].kind != Value::String)
      fail(o.line, "filter '" + name + "' needs a test name");
    testName = args.pos[first].s();
    if (!findTest(testName))
      fail(o.line, "test '" + testName + "' is outside the supported Jinja subset");
  }
  Args testArgs;
  if (args.pos.size() > first + 1)
    testArgs.pos.assign(args.pos.begin() + long(first) + 1, args.pos.end());
  List out;
  for (const Value &item : all.seq()) {
    o.r.step(o.line);
    Value x = byAttr ? o.r.attrPath(item, args.pos[0].s(), o.line) : item;
    bool t = testName.empty() ? truthy(x) : o.r.test(testName, x, testArgs, o.line);
    if (t == keep)
      out.push_back(item);
  }
  return o.r.newList(std::move(out), o.line);
}

// jinja2's unique: the first of each, strings compared ignoring case.
Value unique(const Operands &o) {
  Value all = sequence(o);
  const List &items = all.seq();
  const Value *caseSensitive = o.args.get(0, "case_sensitive");
  const Value *attribute = o.args.get(1, "attribute");
  std::unordered_set<std::string> seen;
  seen.reserve(items.size());
  List out;
  std::string key;
  for (const Value &item : items) {
    key.clear();
    o.r.hashKey(itemOrAttribute(o, item, attribute), caseSensitive && truthy(*caseSensitive), key,
                o.line);
    if (seen.insert(key).second)
      out.push_back(item);
  }
  return o.r.newList(std::move(out), o.line);
}

// What sort, min and max compare the items by, as jinja2's do: the item or its attribute,
// strings ignoring case unless case_sensitive (the arguments at `caseAt` and `attributeAt`).
List orderKeys(const Operands &o, const List &items, size_t caseAt, size_t attributeAt) {
  const Value *caseSensitive = o.args.get(caseAt, "case_sensitive");
  const Value *attribute = o.args.get(attributeAt, "attribute");
  bool ignoreCase = !(caseSensitive && truthy(*caseSensitive));
  List keys;
  for (const Value &item : items) {
    o.r.step(o.line);
    Value k = itemOrAttribute(o, item, attribute);
    if (ignoreCase && k.kind == Value::String)
      k = o.r.newStr(caseMap(k.s(), Case::Lower), o.line);
    keys.push_back(std::move(k));
  }
  return keys;
}

// Stable, also reversed (as Python's sorted(reverse=True) is).
Value sort(const Operands &o) {
  Value all = sequence(o);
  const List &items = all.seq();
  const Value *reverse = o.args.get(0, "reverse");
  List keys = orderKeys(o, items, 1, 2);
  std::vector<size_t> order(items.size());
  for (size_t k = 0; k < order.size(); ++k)
    order[k] = k;
  bool descending = reverse && truthy(*reverse);
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) {
    return descending ? o.r.less(keys[b], keys[a], "<", o.line)
                      : o.r.less(keys[a], keys[b], "<", o.line);
  });
  List sorted;
  for (size_t k : order)
    sorted.push_back(items[k]);
  return o.r.newList(std::move(sorted), o.line);
}

// min or max: the first of equals.
Value minOrMax(const Operands &o) {
  Value all = sequence(o);
  const List &items = all.seq();
  List keys = orderKeys(o, items, 0, 1);
  if (items.empty())
    return Value::undefined("No aggregated item, sequence was empty.");
  size_t best = 0;
  for (size_t k = 1; k < items.size(); ++k)
    if (o.name == "min" ? o.r.less(keys[k], keys[best], "<", o.line)
                        : o.r.less(keys[best], keys[k], "<", o.line))
      best = k;
  return items[best];
}

// Jinja has it and templates may name it where it never runs, so it parses; applied, it is
// refused (after the check of its operand that every filter over a sequence makes).
Value dictsort(const Operands &o) {
  sequence(o);
  fail(o.line, "filter 'dictsort' is outside the supported Jinja subset");
}

} // namespace filters

const std::unordered_map<std::string, Filter> &filterTable() {
  static const std::unordered_map<std::string, Filter> table = {
      {"abs", filters::abs},
      {"capitalize", filters::caseMapped<Case::Capitalize>},
      {"count", filters::length},
      {"d", filters::orDefault},
      {"default", filters::orDefault},
      {"dictsort", filters::dictsort},
      {"first", filters::firstOrLast},
      {"float", filters::toFloat},
      {"int", filters::toInt},
      {"items", filters::items},
      {"join", filters::join},
      {"last", filters::firstOrLast},
      {"length", filters::length},
      {"list", filters::list},
      {"lower", filters::caseMapped<Case::Lower>},
      {"map", filters::map},
      {"max", filters::minOrMax},
      {"min", filters::minOrMax},
      {"reject", filters::selectOrReject},
      {"rejectattr", filters::selectOrReject},
      {"replace", filters::replace},
      {"reverse", filters::reverse},
      {"safe", filters::safe},
      {"select", filters::selectOrReject},
      {"selectattr", filters::selectOrReject},
      {"sort", filters::sort},
      {"string", filters::string},
      {"sum", filters::sum},
      {"title", filters::caseMapped<Case::Title>},
      {"tojson", filters::tojson},
      {"trim", filters::trim},
      {"unique", filters::unique},
      {"upper", filters::caseMapped<Case::Upper>},
      {"wordcount", filters::wordcount},
  };
  return table;
}


// ---- The tests.

namespace tests {

// The argument of a test that takes one (value=).
const Value &argument(const Operands &o) {
  const Value *arg = o.args.get(0, "value");
  if (!arg)
    fail(o.line, "test '" + o.name + "' needs an argument");
  return *arg;
}

// lower or upper: a string with cased letters all of that case.
bool cased(const Operands &o) {
  const Value &v = o.value;
  if (v.kind == Value::String)
    o.r.work(o.line, v.s().size());
  return v.kind == Value::String && isCase(v.s(), o.name == "lower");
}

// even, odd and divisibleby(n).
bool divisible(const Operands &o) {
  if (!o.value.isInt())
    fail(o.line, "test '" + o.name + "' needs an integer");
  int64_t d = 2;
  if (o.name == "divisibleby") {
    if (!argument(o).isInt())
      fail(o.line, "test 'divisibleby' needs an integer");
    d = argument(o).asInt();
  }
  if (d == 0)
    fail(o.line, "integer division or modulo by zero");
  bool divisible = d == -1 || o.value.asInt() % d == 0; // INT64_MIN % -1 traps in C++
  return o.name == "odd" ? !divisible : divisible;
}

// Jinja has them and templates may name them where they never run, so they parse; applied,
// they are refused.
bool refused(const Operands &o) {
  fail(o.line, "test '" + o.name + "' is outside the supported Jinja subset");
}

bool equal(const Operands &o) { return o.r.equal(o.value, argument(o), o.line); }

bool sameas(const Operands &o) { return o.value.kind == argument(o).kind && equal(o); }

bool iterable(const Operands &o) {
  Value::Kind k = o.value.kind;
  return k == Value::String || k == Value::ListV || k == Value::DictV || k == Value::Undefined;
}

} // namespace tests

const std::unordered_map<std::string, Test> &testTable() {
  using tests::argument;
  using O = const Operands &;
  static const std::unordered_map<std::string, Test> table = {
      {"boolean", [](O o) { return o.value.kind == Value::Bool; }},
      {"callable", [](O o) { return o.value.kind == Value::Function; }},
      {"defined", [](O o) { return o.value.kind != Value::Undefined; }},
      {"divisibleby", tests::divisible},
      {"eq", tests::equal},
      {"equalto", tests::equal},
      {"escaped", tests::refused},
      {"even", tests::divisible},
      {"false", [](O o) { return o.value.kind == Value::Bool && !o.value.b; }},
      {"filter", tests::refused},
      {"float", [](O o) { return o.value.kind == Value::Float; }},
      {"ge", [](O o) { return o.r.compare(">=", o.value, argument(o), o.line); }},
      {"gt", [](O o) { return o.r.compare(">", o.value, argument(o), o.line); }},
      {"in", [](O o) { return o.r.contains(argument(o), o.value, o.line); }},
      {"integer", [](O o) { return o.value.kind == Value::Int; }},
      {"iterable", tests::iterable},
      {"le", [](O o) { return o.r.compare("<=", o.value, argument(o), o.line); }},
      {"lower", tests::cased},
      {"lt", [](O o) { return o.r.compare("<", o.value, argument(o), o.line); }},
      {"mapping", [](O o) { return o.value.kind == Value::DictV; }},
      {"ne", [](O o) { return !o.r.equal(o.value, argument(o), o.line); }},
      {"none", [](O o) { return o.value.kind == Value::None; }},
      {"number", [](O o) { return o.value.isNumber(); }},
      {"odd", tests::divisible},
      {"sameas", tests::sameas},
      {"sequence", tests::iterable},
      {"string", [](O o) { return o.value.kind == Value::String; }},
      {"test", tests::refused},
      {"true", [](O o) { return o.value.kind == Value::Bool && o.value.b; }},
      {"undefined", [](O o) { return o.value.kind == Value::Undefined; }},
      {"upper", tests::cased},
  };
  return table;
}

} // namespace

Filter findFilter(const std::string &name) {
  auto found = filterTable().find(name);
  return found == filterTable().end() ? nullptr : found->second;
}

Test findTest(const std::string &name) {
  auto found = testTable().find(name);
  return found == testTable().end() ? nullptr : found->second;
}

Value Renderer::filter(const std::string &name, const Value &v, const Args &args, int line) {
  step(line);
  Filter apply = findFilter(name);
  if (!apply)
    fail(line, "filter '" + name + "' is outside the supported Jinja subset");
  return apply({*this, name, v, args, line});
}

bool Renderer::test(const std::string &name, const Value &v, const Args &args, int line) {
  Test apply = findTest(name);
  if (!apply)
    fail(line, "test '" + name + "' is outside the supported Jinja subset");
  return apply({*this, name, v, args, line});
}

} // namespace tpcrt::jinja
