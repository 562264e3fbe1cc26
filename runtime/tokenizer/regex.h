// The regexes of tokenizer.json's pre-tokenizers (PCRE2, UTF and Unicode properties): every
// non-overlapping match. The patterns and the text are untrusted, so each match is bounded by
// TokenizerLimits' regex limits, and the matches of one encode() together by a budget linear
// in the text. Internal to runtime/tokenizer.
#ifndef TPCRT_TOKENIZER_REGEX_H
#define TPCRT_TOKENIZER_REGEX_H

#include "tpcrt/tokenizer.h"

#ifndef PCRE2_CODE_UNIT_WIDTH
#define PCRE2_CODE_UNIT_WIDTH 8
#endif
#include <pcre2.h>

#include <cstddef>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

namespace tpcrt {
namespace tokenizer_detail {

/// The regex steps one encode() may still spend (TokenizerLimits::regexStepsPerByte).
struct RegexBudget {
  uint64_t left;
  uint64_t total;
  size_t textBytes;
};

class Regex {
public:
  /// A LoadError naming `where` (the pattern's place in tokenizer.json) when the pattern does
  /// not compile.
  Regex(const std::string &pattern, const std::string &where);
  ~Regex();
  Regex(const Regex &) = delete;
  Regex &operator=(const Regex &) = delete;

  /// Every non-overlapping match in s, which must be valid UTF-8, as [begin, end) byte
  /// ranges; an EncodeError when a match runs into one of the limits.
  std::vector<std::pair<size_t, size_t>>
  findAll(const std::string &s, const TokenizerLimits &limits, RegexBudget &budget) const;

private:
  static std::string message(int code);

  std::string where_; // the pattern's place in tokenizer.json, for messages
  pcre2_code *code_ = nullptr;
};

} // namespace tokenizer_detail
} // namespace tpcrt

#endif // TPCRT_TOKENIZER_REGEX_H
