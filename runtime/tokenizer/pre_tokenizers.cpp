// Pre-tokenizers: how a normalized text is cut into the pieces the model merges separately
// (Split on a literal or a regex, ByteLevel's GPT-2 pattern and byte alphabet, Metaspace), and
// Sequence, their chain.
#include "components.h"
#include "regex.h"

#include <algorithm>
#include <cctype>

namespace tpcrt {
namespace tokenizer_detail {

const char *const kQwen2Pattern =
    R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";

namespace {

// GPT-2's pre-tokenization pattern, the ByteLevel pre-tokenizer's default.
const char *const kGpt2Pattern =
    R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)";

/// The pieces a Split pre-tokenizer cuts one piece into.
std::vector<Piece> split(const PreTokenizer &p, const Piece &piece, const TokenizerLimits &limits,
                         RegexBudget &budget) {
  // Cut the piece into alternating unmatched and matched stretches.
  const std::string &s = piece.text;
  std::vector<std::pair<size_t, size_t>> hits =
      p.regex ? p.regex->findAll(s, limits, budget) : p.literal.findAll(s);
  struct Stretch {
    size_t b, e;
    bool match;
  };
  std::vector<Stretch> parts;
  size_t pos = 0;
  for (auto [b, e] : hits) {
    if (b > pos)
      parts.push_back({pos, b, false});
    parts.push_back({b, e, true});
    pos = e;
  }
  if (pos < s.size())
    parts.push_back({pos, s.size(), false});
  if (p.invert)
    for (Stretch &st : parts)
      st.match = !st.match;
  std::vector<Piece> out;
  bool pendingNext = false;
  for (const Stretch &st : parts) {
    Piece next{s.substr(st.b, st.e - st.b), piece.first && st.b == 0};
    if (st.match && p.behavior == "removed")
      continue;
    if (st.match && p.behavior == "merged_with_previous" && !out.empty()) {
      out.back().text += next.text;
      continue;
    }
    if (pendingNext) {
      out.back().text += next.text;
      pendingNext = false;
    } else {
      out.push_back(next);
    }
    if (st.match && p.behavior == "merged_with_next")
      pendingNext = true;
  }
  return out;
}

} // namespace

std::vector<Piece> preTokenize(const std::vector<PreTokenizer> &chain, std::vector<Piece> pieces,
                               const TokenizerLimits &limits, RegexBudget &budget) {
  static const Regex gpt2(kGpt2Pattern, "GPT-2's pattern (the ByteLevel pre-tokenizer's)");
  for (const PreTokenizer &p : chain) {
    std::vector<Piece> next;
    for (Piece &piece : pieces) {
      switch (p.kind) {
      case PreTokenizer::Split:
        for (Piece &q : split(p, piece, limits, budget))
          next.push_back(std::move(q));
        break;
      case PreTokenizer::ByteLevel: {
        if (p.addPrefixSpace && piece.text.rfind(' ', 0) != 0)
          piece.text = " " + piece.text;
        std::vector<Piece> parts{piece};
        if (p.useRegex) {
          parts.clear();
          for (auto [b, e] : gpt2.findAll(piece.text, limits, budget))
            parts.push_back({piece.text.substr(b, e - b), piece.first && b == 0});
        }
        for (Piece &q : parts) {
          std::string mapped;
          for (unsigned char c : q.text)
            mapped += byteLevel().byteToChar[c];
          next.push_back({mapped, q.first});
        }
        break;
      }
      case PreTokenizer::Metaspace: {
        std::string s = piece.text;
        replaceAll(s, " ", p.replacement);
        bool prepend = p.prependScheme == "always" || (p.prependScheme == "first" && piece.first);
        if (prepend && s.rfind(p.replacement, 0) != 0)
          s = p.replacement + s;
        if (!p.split) {
          next.push_back({s, piece.first});
          break;
        }
        PreTokenizer bySpace;
        bySpace.kind = PreTokenizer::Split;
        bySpace.literal = Literal(p.replacement);
        bySpace.behavior = "merged_with_next";
        for (Piece &q : split(bySpace, {s, piece.first}, limits, budget))
          next.push_back(std::move(q));
        break;
      }
      }
    }
    pieces = std::move(next);
  }
  return pieces;
}

namespace {

/// One pre-tokenizer of type `kind`, which is not a Sequence.
PreTokenizer readPreTokenizer(const json &j, const std::string &kind, const std::string &where,
                              const TokenizerLimits &limits) {
  PreTokenizer p;
  if (kind == "Split") {
    p.kind = PreTokenizer::Split;
    pattern(j.value("pattern", json()), where, limits, p.literal, p.regex);
    p.behavior = str(j, "behavior", where);
    for (char &c : p.behavior)
      c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    if (p.behavior == "mergedwithprevious")
      p.behavior = "merged_with_previous";
    if (p.behavior == "mergedwithnext")
      p.behavior = "merged_with_next";
    if (p.behavior != "isolated" && p.behavior != "removed" &&
        p.behavior != "merged_with_previous" && p.behavior != "merged_with_next")
      throw LoadError(where + ".behavior: " + shown(p.behavior) + " is not supported");
    p.invert = field(j, "invert", false, where);
  } else if (kind == "ByteLevel") {
    p.kind = PreTokenizer::ByteLevel;
    p.addPrefixSpace = field(j, "add_prefix_space", false, where);
    p.useRegex = field(j, "use_regex", true, where);
  } else if (kind == "Metaspace") {
    p.kind = PreTokenizer::Metaspace;
    metaspaceFields(j, where, p.replacement, p.prependScheme);
    p.split = field(j, "split", true, where);
    if (p.prependScheme != "first" && p.prependScheme != "always" && p.prependScheme != "never")
      throw LoadError(where + ".prepend_scheme: " + shown(p.prependScheme) + " is not supported");
  } else {
    throw LoadError(where + ": pre-tokenizer type '" + kind + "' is not supported");
  }
  return p;
}

} // namespace

void loadPreTokenizer(const json &j, const std::string &where, const TokenizerLimits &limits,
                      std::vector<PreTokenizer> &chain) {
  loadChain(j, "pretokenizers", "pre-tokenizers", where, limits, chain, readPreTokenizer);
}

void metaspaceFields(const json &j, const std::string &where, std::string &replacement,
                     std::string &prependScheme) {
  replacement =
      oneChar(field(j, "replacement", std::string("\xE2\x96\x81"), where), where + ".replacement");
  prependScheme = field(j, "prepend_scheme", std::string("always"), where);
  if (j.contains("add_prefix_space") && !j.contains("prepend_scheme"))
    prependScheme = field(j, "add_prefix_space", true, where) ? "always" : "never";
}

void preTokenizerGrowth(const std::vector<PreTokenizer> &chain, double &f, double &c) {
  for (const PreTokenizer &p : chain) {
    // Per piece of n >= 1 bytes: the byte-level alphabet takes up to 2 bytes a byte (and
    // a prefix space one more); Metaspace a replacement for each space, and one before.
    double r = p.kind == PreTokenizer::ByteLevel   ? (p.addPrefixSpace ? 4 : 2)
               : p.kind == PreTokenizer::Metaspace ? 2 * double(p.replacement.size())
                                                   : 1;
    f *= r;
    c *= r;
  }
}

} // namespace tokenizer_detail
} // namespace tpcrt
