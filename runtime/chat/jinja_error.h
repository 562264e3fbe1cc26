// How the template engine fails. Every stage throws, so that an error deep in the lexer, the
// parser or the renderer ends the rendering at once; render (jinja.cpp) catches it and returns
// its text. Each message names the template line, and a limit of ChatTemplateLimits exceeded
// also names the limit, so that whoever wrote the template can find what to change.
#ifndef TPCRT_CHAT_JINJA_ERROR_H
#define TPCRT_CHAT_JINJA_ERROR_H

#include <string>

namespace tpcrt::jinja {

struct TemplateError {
  std::string message;
};

// raise_exception(message): the template's own words, reported without a line.
struct Raised {
  std::string message;
};

[[noreturn]] inline void fail(int line, const std::string &message) {
  throw TemplateError{"chat template line " + std::to_string(line) + ": " + message};
}

// A limit of ChatTemplateLimits exceeded: `what` says what went over it.
[[noreturn]] inline void overLimit(int line, const std::string &what, const char *limit) {
  fail(line, what + " (limit " + limit + ")");
}

// Deeper than this, maxNesting is refused: each level is a dozen stack frames of the parser, the
// evaluator or printing a value, up to 13 KB of stack a level under AddressSanitizer (1000
// levels overflowed its 8 MB main stack; 600 did not), a tenth of that in an optimized build.
constexpr int kMaxNestingCeiling = 500;

// One level of recursion (parsing, rendering or visiting a value), refused past `maxDepth`.
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

} // namespace tpcrt::jinja

#endif // TPCRT_CHAT_JINJA_ERROR_H
