// The filters and tests of the subset, as tables from a name to the function that applies it
// (jinja_filters.cpp). One table serves both the parser, which refuses a name it lacks, and the
// renderer, which applies what it finds, so that the two cannot disagree.
#ifndef TPCRT_CHAT_JINJA_FILTERS_H
#define TPCRT_CHAT_JINJA_FILTERS_H

#include "jinja_value.h"

#include <string>

namespace tpcrt::jinja {

class Renderer;
struct Args;

// What a filter, a test or a method applies to: `value|name(args)`, `value is name(args)` or
// `value.name(args)` on template line `line`, rendered by `r`.
struct Operands {
  Renderer &r;
  const std::string &name;
  const Value &value;
  const Args &args;
  int line;
};

using Filter = Value (*)(const Operands &);
using Test = bool (*)(const Operands &);

// Null for a name outside the subset.
Filter findFilter(const std::string &name);
Test findTest(const std::string &name);

} // namespace tpcrt::jinja

#endif // TPCRT_CHAT_JINJA_FILTERS_H
