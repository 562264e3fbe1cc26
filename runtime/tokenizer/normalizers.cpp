// Normalizers: what the text between added tokens becomes before it is pre-tokenized (NFC,
// Replace of a literal, Prepend), and Sequence, their chain.
#include "components.h"

#include <unicode/normalizer2.h>
#include <unicode/unistr.h>

#include <algorithm>

namespace tpcrt {
namespace tokenizer_detail {

std::string normalize(const std::vector<Normalizer> &chain, std::string s) {
  for (const Normalizer &n : chain) {
    switch (n.kind) {
    case Normalizer::NFC: {
      UErrorCode status = U_ZERO_ERROR;
      const icu::Normalizer2 *nfc = icu::Normalizer2::getNFCInstance(status);
      if (U_FAILURE(status))
        break;
      // `s` is valid UTF-8 (encode() checked the text), as ICU needs.
      icu::UnicodeString u = nfc->normalize(icu::UnicodeString::fromUTF8(s), status);
      if (U_SUCCESS(status)) {
        s.clear();
        u.toUTF8String(s);
      }
      break;
    }
    case Normalizer::Replace:
      s = n.pattern.replaceAll(s, n.text);
      break;
    case Normalizer::Prepend:
      if (!s.empty())
        s = n.text + s;
      break;
    }
  }
  return s;
}

namespace {

/// One normalizer of type `kind`, which is not a Sequence.
Normalizer readNormalizer(const json &j, const std::string &kind, const std::string &where,
                          const TokenizerLimits &limits) {
  if (kind == "NFC")
    return {Normalizer::NFC, Literal(), ""};
  if (kind == "Replace") {
    Literal literal;
    std::shared_ptr<Regex> regex;
    pattern(j.value("pattern", json()), where, limits, literal, regex);
    if (regex)
      throw LoadError(where + ": a Replace normalizer with a Regex pattern is not supported");
    return {Normalizer::Replace, literal,
            bounded(str(j, "content", where), where + ".content", limits)};
  }
  if (kind == "Prepend")
    return {Normalizer::Prepend, Literal(),
            bounded(str(j, "prepend", where), where + ".prepend", limits)};
  throw LoadError(where + ": normalizer type '" + kind + "' is not supported");
}

} // namespace

void loadNormalizer(const json &j, const std::string &where, const TokenizerLimits &limits,
                    std::vector<Normalizer> &chain) {
  loadChain(j, "normalizers", "normalizers", where, limits, chain, readNormalizer);
}

void normalizerGrowth(const std::vector<Normalizer> &chain, double &f, double &c) {
  for (const Normalizer &n : chain) {
    if (n.kind == Normalizer::NFC) { // NFC makes UTF-8 at most 3 times longer (UAX #15)
      f *= 3;
      c *= 3;
    } else if (n.kind == Normalizer::Replace) {
      double r = std::max(1.0, double(n.text.size()) / double(n.pattern.text.size()));
      f *= r;
      c *= r;
    } else {
      c += double(n.text.size());
    }
  }
}

} // namespace tokenizer_detail
} // namespace tpcrt
