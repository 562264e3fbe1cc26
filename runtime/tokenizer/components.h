// The component kinds of a tokenizer.json pipeline, one file each as in the tokenizers
// library: normalizers.cpp, pre_tokenizers.cpp, decoders.cpp, post_processors.cpp (the BPE
// model and the added tokens, whose tables TokenizerImpl holds, are models.cpp and
// added_tokens.cpp). For each kind: its types, what runs a chain of them, its loader (what
// reads it from tokenizer.json, used by builder.cpp) and how much it can make a text grow, for
// the builder's check against TokenizerLimits::maxTextGrowth. Also the readers of
// tokenizer.json's fields that every loader shares (defined in builder.cpp).
// Internal to runtime/tokenizer.
#ifndef TPCRT_TOKENIZER_COMPONENTS_H
#define TPCRT_TOKENIZER_COMPONENTS_H

#include "text.h"
#include "tpcrt/tokenizer.h"

#include <nlohmann/json.hpp>

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <type_traits>
#include <vector>

namespace tpcrt {
namespace tokenizer_detail {

using json = nlohmann::json;

class Regex;
struct RegexBudget;

// --- Reading tokenizer.json's fields (builder.cpp) ------------------------------------------

/// A component's type, cut when long (no type is) so that messages naming it stay short.
std::string kindOf(const json &j);

/// A string field of a JSON object, or a LoadError naming the file and the field.
std::string str(const json &j, const char *key, const std::string &where);

/// An optional field of a JSON object: `def` when absent or null, a LoadError naming the
/// field when it has another type.
template <typename T> T field(const json &j, const char *key, T def, const std::string &where) {
  if (!j.is_object() || !j.contains(key) || j[key].is_null())
    return def;
  const json &v = j[key];
  bool ok = std::is_same<T, bool>::value          ? v.is_boolean()
            : std::is_same<T, std::string>::value ? v.is_string()
                                                  : v.is_number_unsigned();
  if (!ok)
    throw LoadError(where + "." + key + ": not a " +
                    (std::is_same<T, bool>::value          ? "boolean"
                     : std::is_same<T, std::string>::value ? "string"
                                                           : "non-negative integer"));
  return v.get<T>();
}

/// An id in tokenizer.json: an integer in [0, 2^32), as the tokenizers library's u32 ids, or a
/// LoadError naming the field.
uint32_t idOf(const json &v, const std::string &where);

/// A string of a component, at most maxTokenBytes long.
std::string bounded(std::string s, const std::string &where, const TokenizerLimits &limits);

/// A string that must be one character (the tokenizers library reads it as a Rust char).
std::string oneChar(std::string s, const std::string &where);

/// A Replace/Split pattern: {"String": s} or {"Regex": r}.
void pattern(const json &j, const std::string &where, const TokenizerLimits &limits,
             Literal &literal, std::shared_ptr<Regex> &regex);

/// Refuses one more component of a chain that has `have`: at most maxComponents of each kind.
void checkCount(size_t have, const std::string &where, const char *what,
                const TokenizerLimits &limits);

/// The type of component `j`, or none when nothing more is to be read of it: it is null (no
/// component), or a Sequence, and `load(item, itemWhere)` has loaded each item of j[key].
template <typename Load>
std::optional<std::string> componentKind(const json &j, const char *key, const std::string &where,
                                         Load load) {
  if (j.is_null())
    return std::nullopt;
  std::string kind = kindOf(j);
  if (kind != "Sequence")
    return kind;
  if (!j.contains(key) || !j[key].is_array())
    throw LoadError(where + "." + key + ": missing or not a list");
  for (size_t i = 0; i < j[key].size(); ++i)
    load(j[key][i], where + "." + key + "[" + std::to_string(i) + "]");
  return std::nullopt;
}

/// Appends to `chain` what tokenizer.json's component `j` describes: nothing for null, each
/// item of j[key] in turn for a Sequence, else `read(j, kind, where, limits)`; at most
/// maxComponents components of the chain's kind, `what`.
template <typename T, typename Read>
void loadChain(const json &j, const char *key, const char *what, const std::string &where,
               const TokenizerLimits &limits, std::vector<T> &chain, Read read) {
  std::optional<std::string> kind =
      componentKind(j, key, where, [&](const json &item, const std::string &at) {
        loadChain(item, key, what, at, limits, chain, read);
      });
  if (!kind)
    return;
  checkCount(chain.size(), where, what, limits);
  chain.push_back(read(j, *kind, where, limits));
}

// --- Normalizers (normalizers.cpp) ----------------------------------------------------------

struct Normalizer {
  enum Kind { NFC, Replace, Prepend } kind;
  Literal pattern;  // Replace
  std::string text; // Replace: the content; Prepend: what is prepended
};

/// The text after each normalizer of the chain; `s` must be valid UTF-8.
std::string normalize(const std::vector<Normalizer> &chain, std::string s);
/// Appends to `chain` what tokenizer.json's normalizer `j` (null: none) describes.
void loadNormalizer(const json &j, const std::string &where, const TokenizerLimits &limits,
                    std::vector<Normalizer> &chain);
/// Composes the chain's worst case into n bytes -> f * n + c bytes.
void normalizerGrowth(const std::vector<Normalizer> &chain, double &f, double &c);

// --- Pre-tokenizers (pre_tokenizers.cpp) ----------------------------------------------------

struct Piece {
  std::string text;
  bool first; // at offset 0 of the original text (Metaspace's prepend_scheme "first")
};

struct PreTokenizer {
  enum Kind { Split, ByteLevel, Metaspace } kind;
  // Split
  std::shared_ptr<Regex> regex; // null: split on `literal`
  Literal literal;
  std::string behavior; // isolated, removed, merged_with_previous, merged_with_next
  bool invert = false;
  // ByteLevel
  bool addPrefixSpace = false, useRegex = true;
  // Metaspace
  std::string replacement = "\xE2\x96\x81"; // one character
  std::string prependScheme = "always";
  bool split = true;
};

/// Qwen2Tokenizer's pattern (transformers' PRETOKENIZE_REGEX in tokenization_qwen2.py).
extern const char *const kQwen2Pattern;

/// The pieces each pre-tokenizer of the chain cuts the pieces into, in turn.
std::vector<Piece> preTokenize(const std::vector<PreTokenizer> &chain, std::vector<Piece> pieces,
                               const TokenizerLimits &limits, RegexBudget &budget);
/// Appends to `chain` what tokenizer.json's pre_tokenizer `j` (null: none) describes.
void loadPreTokenizer(const json &j, const std::string &where, const TokenizerLimits &limits,
                      std::vector<PreTokenizer> &chain);
/// Composes the chain's worst case, per piece, into n bytes -> f * n + c bytes.
void preTokenizerGrowth(const std::vector<PreTokenizer> &chain, double &f, double &c);
/// A Metaspace component's replacement (one character) and prepend_scheme (or what the older
/// add_prefix_space says), which the pre-tokenizer and the decoder read alike.
void metaspaceFields(const json &j, const std::string &where, std::string &replacement,
                     std::string &prependScheme);

// --- Decoders (decoders.cpp; DecodeStream, which runs them, is in tokenizer_impl.h) ---------

struct Decoder {
  enum Kind { Replace, ByteFallback, Fuse, Strip, Metaspace, ByteLevel } kind;
  Literal pattern;     // Replace
  std::string content; // Replace: the replacement; Strip, Metaspace: one character
  uint64_t start = 0, stop = 0;
  bool prependNever = false; // Metaspace: prepend_scheme "never"
};

/// Appends to `chain` what tokenizer.json's decoder `j` (null: none) describes.
void loadDecoder(const json &j, const std::string &where, const TokenizerLimits &limits,
                 std::vector<Decoder> &chain);
/// How many times longer the chain can make a token's text.
double decoderGrowth(const std::vector<Decoder> &chain);

// --- Post-processors (post_processors.cpp) --------------------------------------------------

struct PostItem {
  bool isSequence; // $A, else special token ids
  std::vector<uint32_t> ids;
};

/// The id of a token a post-processor names by its string, or a LoadError naming `where`.
using TokenIdOf = std::function<uint32_t(const std::string &token, const std::string &where)>;

/// Fills `post` as tokenizer.json's post_processor `j` (null: none) says.
void loadPostProcessor(const json &j, const std::string &where, const TokenizerLimits &limits,
                       const TokenIdOf &tokenId, std::vector<PostItem> &post);
/// `ids` with the special tokens `post` adds around them.
std::vector<int64_t> postProcess(const std::vector<PostItem> &post,
                                 const std::vector<int64_t> &ids);

} // namespace tokenizer_detail
} // namespace tpcrt

#endif // TPCRT_TOKENIZER_COMPONENTS_H
