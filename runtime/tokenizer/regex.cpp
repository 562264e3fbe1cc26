// regex.h's Regex: PCRE2 behind the bounds tokenizer.json's patterns and untrusted text need.
#include "regex.h"

#include "text.h"

#include <algorithm>
#include <limits>
#include <memory>
#include <new>

namespace tpcrt {
namespace tokenizer_detail {

namespace {

const uint64_t kFirstLimit = 32; // enough for most matches of real patterns

} // namespace

Regex::Regex(const std::string &pattern, const std::string &where) : where_(where) {
  int err = 0;
  PCRE2_SIZE off = 0;
  code_ = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(pattern.data()), pattern.size(),
                        PCRE2_UTF | PCRE2_UCP, &err, &off, nullptr);
  if (!code_)
    throw LoadError(where + ": regex " + shown(pattern) + " does not compile at offset " +
                    std::to_string(off) + ": " + message(err));
}
Regex::~Regex() { pcre2_code_free(code_); }

std::vector<std::pair<size_t, size_t>>
Regex::findAll(const std::string &s, const TokenizerLimits &limits, RegexBudget &budget) const {
  // Match data and context per call: a Tokenizer may encode on several threads at once.
  std::unique_ptr<pcre2_match_data, void (*)(pcre2_match_data *)> data(
      pcre2_match_data_create_from_pattern(code_, nullptr), pcre2_match_data_free);
  std::unique_ptr<pcre2_match_context, void (*)(pcre2_match_context *)> context(
      pcre2_match_context_create(nullptr), pcre2_match_context_free);
  if (!data || !context)
    throw std::bad_alloc();
  pcre2_set_depth_limit(context.get(), limits.regexDepthLimit);
  pcre2_set_heap_limit(context.get(), static_cast<uint32_t>(std::min<uint64_t>(
                                          std::max<uint64_t>(limits.regexHeapLimit / 1024, 1),
                                          std::numeric_limits<uint32_t>::max())));
  auto tooLong = [&] {
    return EncodeError(where_ + ": a match takes " +
                       beyond(limits.regexMatchLimit, "steps", "regexMatchLimit"));
  };
  auto spent = [&] {
    return EncodeError(where_ + ": a text of " + std::to_string(budget.textBytes) +
                       " bytes takes " + beyond(budget.total, "regex steps", "regexStepsPerByte"));
  };
  std::vector<std::pair<size_t, size_t>> out;
  size_t pos = 0;
  while (pos <= s.size()) {
    // PCRE2 does not say how many steps a match took, only whether it ran out of its limit:
    // each match starts with a small limit that doubles while it runs out, and the budget
    // is charged every limit tried, at most four times what the match took (or the first
    // limit).
    uint64_t limit = std::min<uint64_t>({kFirstLimit, limits.regexMatchLimit, budget.left});
    int rc;
    for (;;) {
      if (limit == 0)
        throw limits.regexMatchLimit == 0 ? tooLong() : spent();
      pcre2_set_match_limit(context.get(), static_cast<uint32_t>(limit));
      // PCRE2_NO_UTF_CHECK: encode() checked the text, every step since keeps it valid and
      // `pos` is at a character boundary (checking again would cost the whole text for
      // each match).
      rc = pcre2_match(code_, reinterpret_cast<PCRE2_SPTR>(s.data()), s.size(), pos,
                       PCRE2_NO_UTF_CHECK, data.get(), context.get());
      budget.left -= limit;
      if (rc != PCRE2_ERROR_MATCHLIMIT)
        break;
      if (limit >= limits.regexMatchLimit)
        throw tooLong();
      if (budget.left == 0)
        throw spent();
      limit = std::min<uint64_t>({limit * 2, limits.regexMatchLimit, budget.left});
    }
    if (rc == PCRE2_ERROR_NOMATCH)
      break;
    if (rc == PCRE2_ERROR_DEPTHLIMIT)
      throw EncodeError(where_ + ": a match nests " +
                        beyond(limits.regexDepthLimit, "backtracking levels", "regexDepthLimit"));
    if (rc == PCRE2_ERROR_HEAPLIMIT)
      throw EncodeError(where_ + ": a match needs " +
                        beyond(limits.regexHeapLimit, "bytes", "regexHeapLimit"));
    if (rc < 0)
      throw EncodeError(where_ + ": " + message(rc));
    PCRE2_SIZE *ov = pcre2_get_ovector_pointer(data.get());
    size_t b = ov[0], e = ov[1];
    if (e == b) { // an empty match: step over one character
      pos = b + (b < s.size() ? charLen(s, b) : 1);
      continue;
    }
    out.emplace_back(b, e);
    pos = e;
  }
  return out;
}

std::string Regex::message(int code) {
  PCRE2_UCHAR msg[256];
  pcre2_get_error_message(code, msg, sizeof msg);
  return reinterpret_cast<char *>(msg);
}

} // namespace tokenizer_detail
} // namespace tpcrt
