// Printing values: str() and repr() as Python writes them, and tojson as json.dumps does.
// Escaped text is sized before it is written, and every string printed counts as text work.
#include "jinja_render.h"

#include <array>
#include <cmath>
#include <cstdio>
#include <cstring>

namespace tpcrt::jinja {
namespace {

// `s` between `q`s, each byte that `escape` gives an escape for replaced by it: sized first,
// then written, as long texts of short escapes are what a hostile template would build.
template <class Escape>
void escapeInto(const std::string &s, std::string &out, char q, Escape escape) {
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

// Python's repr of a string: quoted, with \\, the quote and ASCII's control characters
// escaped (\n, \r, \t, else \xNN).
void quote(const std::string &s, std::string &out) {
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

// A JSON string, as json.dumps(ensure_ascii=False) writes it.
void jsonString(const std::string &s, std::string &out) {
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

} // namespace

void Renderer::print(const Value &v, bool asRepr, std::string &out, int line) {
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

std::string Renderer::str(const Value &v, int line) {
  if (v.kind == Value::String) {
    work(line, v.s().size());
    return v.s();
  }
  std::string out;
  print(v, false, out, line);
  work(line, out.size());
  return out;
}

void Renderer::toJson(const Value &v, const std::string *indent, int depth, std::string &out,
                      int line) {
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

} // namespace tpcrt::jinja
