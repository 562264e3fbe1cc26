// Tokenizer::fromGguf: the tokenizer a GGUF file's metadata describes, as transformers 5.17
// builds it for AutoTokenizer.from_pretrained(dir, gguf_file=NAME) (integrations/ggml.py:
// GGUFTokenizerSkeleton, GGUFLlamaConverter; modeling_gguf_pytorch_utils.load_gguf_checkpoint).
// The metadata becomes the tokenizer.json and tokenizer_config.json transformers would hold,
// and TokenizerBuilder reads those as it reads a checkpoint's files, so every check and limit
// of Tokenizer::load applies; what only the metadata can get wrong (a key's type, an array's
// length, an id out of range) is refused here, naming the key.
//
// transformers, not llama.cpp, is the oracle, and the two differ (see docs/weights.md):
//  - transformers picks the converter by general.architecture, not by tokenizer.ggml.model,
//    and for a "gpt2" (byte-level) vocabulary under the llama architecture (Llama 3, SmolLM2)
//    pre-tokenizes with GPT-2's regex (the ByteLevel pre-tokenizer's), whatever
//    tokenizer.ggml.pre names; llama.cpp uses the regex of that pre-tokenizer type.
//  - transformers adds no BOS or EOS when encoding: it reads neither
//    tokenizer.ggml.add_bos_token nor add_eos_token; llama.cpp adds what they say.
//  - only tokens of type 3 (control) become special tokens in transformers; llama.cpp also
//    matches type 4 (user-defined) tokens in the text.
//  - transformers 5.17's GGUFLlamaConverter swaps bos and eos: its eos token is the
//    string of tokenizer.ggml.bos_token_id (when an eos id is given) and its bos token the
//    same string (when a bos id is given). tpc follows, for bosToken() and eosToken(), which
//    chat templates see; the ids generation stops at come from the model config instead.
//  - with no tokenizer.ggml.add_space_prefix, the "gpt2" vocabulary's decoder strips one
//    leading space from the decoded text (transformers' Strip decoder, add_prefix_space
//    defaulting to true); llama.cpp does not.
#include "tpcrt/tokenizer.h"

#include "tokenizer_builder.h"
#include "tpcrt/gguf.h"
#include "tpcrt/utf8.h"

#include <algorithm>
#include <cmath>
#include <set>
#include <stdexcept>
#include <unordered_map>
#include <unordered_set>

namespace tpcrt {

namespace {

using json = nlohmann::json;

struct GgufError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

const char *const kSpace = "\xE2\x96\x81"; // U+2581, SentencePiece's space

/// Bytes that building merges from scores may hash (each split of a token hashes its two
/// halves): about a second of work; real vocabularies take a few million.
const uint64_t kMaxMergeBuildBytes = uint64_t(1) << 28;

/// The length of the character at s[i] of a valid UTF-8 string.
size_t charLength(const std::string &s, size_t i) {
  auto c = static_cast<unsigned char>(s[i]);
  size_t n = c < 0x80 ? 1 : c < 0xE0 ? 2 : c < 0xF0 ? 3 : 4;
  return std::min(n, s.size() - i);
}

/// The metadata that describes a tokenizer, read and checked.
struct GgufVocabulary {
  std::string prefix; // "GGUF file X: "
  std::string architecture, model;
  std::vector<std::string> tokens;
  std::vector<double> scores;        // empty when absent
  std::vector<int64_t> tokenTypes;   // empty when absent
  bool hasTokenTypes = false;
  std::vector<std::pair<std::string, std::string>> merges;
  bool mergesGiven = false;
  std::optional<int64_t> bos, eos, unk, pad;
  bool addPrefixSpace = true;
};

/// An optional token id: absent, or an integer naming one of the tokens.
std::optional<int64_t> tokenId(const GgufFile &file, const GgufVocabulary &v, const char *key) {
  if (!file.find(key))
    return std::nullopt;
  int64_t id = 0;
  std::string error;
  if (!file.getInt(key, id, error, 0, int64_t(v.tokens.size()) - 1))
    throw GgufError(error + (v.tokens.empty() ? "" : " (an id of tokenizer.ggml.tokens)"));
  return id;
}

/// transformers' GGUFTokenizerSkeleton, for a vocabulary without merges: for each token in
/// order, every split into two tokens, those of higher-scoring halves first; then all of them
/// by the token's score, highest first (Python's sorts are stable: ties keep that order).
std::vector<std::pair<std::string, std::string>> mergesFromScores(const GgufVocabulary &v,
                                                                  const TokenizerLimits &limits) {
  // Python's {token: score} keeps a token's first place and its last score.
  std::unordered_map<std::string, double> score;
  std::vector<const std::string *> order;
  for (size_t i = 0; i < v.tokens.size(); ++i) {
    auto [it, fresh] = score.insert_or_assign(v.tokens[i], v.scores[i]);
    if (fresh)
      order.push_back(&it->first);
  }
  struct Merge {
    std::string left, right;
    double score;
  };
  std::vector<Merge> merges;
  uint64_t hashed = 0;
  for (const std::string *token : order) {
    const std::string &t = *token;
    std::vector<Merge> local;
    hashed += t.size() * uint64_t(t.size());
    if (hashed > kMaxMergeBuildBytes)
      throw GgufError(v.prefix + "tokenizer.ggml.scores: building merges from the scores (there "
                      "is no tokenizer.ggml.merges) would take more than " +
                      std::to_string(kMaxMergeBuildBytes) + " bytes of hashing");
    for (size_t cut = t.empty() ? 0 : charLength(t, 0); cut > 0 && cut < t.size();
         cut += charLength(t, cut)) {
      std::string left = t.substr(0, cut), right = t.substr(cut);
      if (score.count(left) && score.count(right))
        local.push_back({std::move(left), std::move(right), score[t]});
    }
    std::stable_sort(local.begin(), local.end(), [&](const Merge &a, const Merge &b) {
      double la = score[a.left], lb = score[b.left];
      return la != lb ? la > lb : score[a.right] > score[b.right];
    });
    for (Merge &m : local) {
      if (merges.size() >= limits.maxMerges)
        throw GgufError(v.prefix + "tokenizer.ggml.scores: the merges built from them are more "
                        "than " + std::to_string(limits.maxMerges) + " (limit maxMerges)");
      merges.push_back(std::move(m));
    }
  }
  std::stable_sort(merges.begin(), merges.end(),
                   [](const Merge &a, const Merge &b) { return a.score > b.score; });
  std::vector<std::pair<std::string, std::string>> out;
  out.reserve(merges.size());
  for (Merge &m : merges)
    out.emplace_back(std::move(m.left), std::move(m.right));
  return out;
}

/// The converter transformers 5.17 picks for an architecture (GGUF_TO_FAST_CONVERTERS, after
/// load_gguf_checkpoint renames it): "llama" for the one tpc reads, else why not.
std::string converterOf(const GgufFile &file, const std::string &arch, std::string &why) {
  std::string name;
  std::string ignored;
  file.getString("general.name", name, ignored);
  if (arch == "llama" || arch == "deci" || arch == "decilm") {
    // load_gguf_checkpoint takes a llama file named exactly "mistral" for a mistral one, and
    // transformers has no GGUF tokenizer converter for mistral.
    if (arch == "llama" && name == "mistral") {
      why = "general.name 'mistral' makes transformers 5.17 read it as a mistral model, whose "
            "GGUF tokenizer it cannot build";
      return "";
    }
    return "llama";
  }
  static const std::set<std::string> unigram = {"t5", "t5encoder", "umt5", "gemma2", "gemma3",
                                                "gemma4"};
  static const std::set<std::string> notYet = {"qwen2", "qwen2moe", "qwen3", "qwen3moe", "qwen35",
                                               "minimax-m2", "phi3", "bloom", "falcon", "stablelm",
                                               "gpt2", "starcoder2", "mamba", "nemotron"};
  if (unigram.count(arch))
    why = "transformers builds a Unigram tokenizer for architecture '" + arch +
          "' (tpc reads BPE tokenizers only)";
  else if (notYet.count(arch))
    why = "tpc reads the tokenizer of llama-architecture GGUF files only, not of architecture '" +
          arch + "' (transformers builds that one with another converter)";
  else
    why = "transformers 5.17 builds no tokenizer for architecture '" + arch + "'";
  return "";
}

GgufVocabulary readVocabulary(const GgufFile &file, const TokenizerLimits &limits) {
  GgufVocabulary v;
  v.prefix = "GGUF file " + file.path() + ": ";
  std::string error;
  if (!file.getString("general.architecture", v.architecture, error))
    throw GgufError(error);
  std::string why;
  if (converterOf(file, v.architecture, why).empty())
    throw GgufError(v.prefix + "general.architecture: " + why);
  if (!file.getString("tokenizer.ggml.model", v.model, error))
    throw GgufError(error);
  // GGUFLlamaConverter reads a "llama" vocabulary as SentencePiece's and any other as Llama
  // 3's byte-level one; of llama.cpp's other models ("bert", "t5", "rwkv", ...) none is either.
  if (v.model != "llama" && v.model != "gpt2")
    throw GgufError(v.prefix + "tokenizer.ggml.model: '" + v.model.substr(0, 64) +
                    "' tokenizers are not supported (tpc reads 'llama', SentencePiece-style "
                    "BPE, and 'gpt2', byte-level BPE)");

  if (!file.getStrings("tokenizer.ggml.tokens", v.tokens, error))
    throw GgufError(error);
  if (v.tokens.size() > limits.maxVocab)
    throw GgufError(v.prefix + "tokenizer.ggml.tokens: more than " +
                    std::to_string(limits.maxVocab) + " entries (limit maxVocab)");
  for (size_t i = 0; i < v.tokens.size(); ++i) {
    const std::string &t = v.tokens[i];
    std::string where = v.prefix + "tokenizer.ggml.tokens[" + std::to_string(i) + "]";
    if (t.size() > limits.maxTokenBytes)
      throw GgufError(where + ": " + std::to_string(t.size()) + " bytes, more than " +
                      std::to_string(limits.maxTokenBytes) + " (limit maxTokenBytes)");
    // transformers decodes each string as UTF-8, strictly.
    if (size_t bad = firstInvalidUtf8(t); bad != std::string::npos)
      throw GgufError(where + ": not valid UTF-8 at byte " + std::to_string(bad));
  }

  if (file.find("tokenizer.ggml.token_type")) {
    if (!file.getInts("tokenizer.ggml.token_type", v.tokenTypes, error))
      throw GgufError(error);
    // transformers indexes the tokens by the types' positions: a longer list fails there, a
    // shorter one would leave tokens without a type.
    if (v.tokenTypes.size() != v.tokens.size())
      throw GgufError(v.prefix + "tokenizer.ggml.token_type: " +
                      std::to_string(v.tokenTypes.size()) + " entries for " +
                      std::to_string(v.tokens.size()) + " tokens");
    v.hasTokenTypes = true;
  }

  if (file.find("tokenizer.ggml.scores")) {
    if (!file.getFloats("tokenizer.ggml.scores", v.scores, error))
      throw GgufError(error);
    if (v.scores.size() != v.tokens.size())
      throw GgufError(v.prefix + "tokenizer.ggml.scores: " + std::to_string(v.scores.size()) +
                      " entries for " + std::to_string(v.tokens.size()) + " tokens");
    for (size_t i = 0; i < v.scores.size(); ++i)
      if (std::isnan(v.scores[i]))
        throw GgufError(v.prefix + "tokenizer.ggml.scores[" + std::to_string(i) +
                        "]: NaN orders nothing");
  }

  if (file.find("tokenizer.ggml.merges")) {
    std::vector<std::string> merges;
    if (!file.getStrings("tokenizer.ggml.merges", merges, error))
      throw GgufError(error);
    if (merges.size() > limits.maxMerges)
      throw GgufError(v.prefix + "tokenizer.ggml.merges: more than " +
                      std::to_string(limits.maxMerges) + " entries (limit maxMerges)");
    v.merges.reserve(merges.size());
    for (size_t i = 0; i < merges.size(); ++i) {
      const std::string &m = merges[i];
      size_t space = m.find(' ');
      // transformers splits at every space and the tokenizers library wants two parts.
      if (space == std::string::npos || m.find(' ', space + 1) != std::string::npos)
        throw GgufError(v.prefix + "tokenizer.ggml.merges[" + std::to_string(i) + "]: \"" +
                        m.substr(0, 64) + "\" is not two tokens with one space between");
      if (firstInvalidUtf8(m) != std::string::npos)
        throw GgufError(v.prefix + "tokenizer.ggml.merges[" + std::to_string(i) +
                        "]: not valid UTF-8");
      v.merges.emplace_back(m.substr(0, space), m.substr(space + 1));
    }
    v.mergesGiven = true;
  } else if (v.scores.empty()) {
    throw GgufError(v.prefix + "tokenizer.ggml.merges: missing, and no tokenizer.ggml.scores to "
                    "build merges from");
  }

  v.bos = tokenId(file, v, "tokenizer.ggml.bos_token_id");
  v.eos = tokenId(file, v, "tokenizer.ggml.eos_token_id");
  v.unk = tokenId(file, v, "tokenizer.ggml.unknown_token_id");
  v.pad = tokenId(file, v, "tokenizer.ggml.padding_token_id");
  if (file.find("tokenizer.ggml.add_space_prefix") &&
      !file.getBool("tokenizer.ggml.add_space_prefix", v.addPrefixSpace, error))
    throw GgufError(error);
  return v;
}

json typed(const char *type) { return json{{"type", type}}; }

/// tokenizer.json and tokenizer_config.json as GGUFLlamaConverter and LlamaTokenizer leave
/// them.
void llamaJson(const GgufVocabulary &v, const TokenizerLimits &limits, json &tok, json &cfg) {
  bool llama3 = v.model != "llama";
  json vocab = json::object();
  for (size_t i = 0; i < v.tokens.size(); ++i)
    vocab[v.tokens[i]] = i; // a token listed twice: its last id, as Python's dict keeps
  json merges = json::array();
  for (const auto &[a, b] : v.mergesGiven ? v.merges : mergesFromScores(v, limits))
    merges.push_back(json::array({a, b}));
  json model = {{"type", "BPE"},         {"vocab", std::move(vocab)},
                {"merges", std::move(merges)}, {"fuse_unk", true},
                {"byte_fallback", true}, {"unk_token", nullptr}};
  if (v.unk)
    model["unk_token"] = v.tokens[*v.unk];
  tok = json::object();
  tok["model"] = std::move(model);

  // Special tokens: every control token (type 3) where there are types, else unk, bos and the
  // eos transformers names (the string of the bos id).
  json added = json::array();
  auto special = [&](const std::string &content) {
    added.push_back({{"id", tok["model"]["vocab"][content]},
                     {"content", content},
                     {"special", true},
                     {"normalized", false},
                     {"lstrip", false},
                     {"rstrip", false},
                     {"single_word", false}});
  };
  std::optional<std::string> bos, eos;
  if (v.bos)
    bos = v.tokens[*v.bos];
  if (v.eos && v.bos)
    eos = v.tokens[*v.bos]; // transformers 5.17: proto.tokens[proto.bos_token_id]
  if (v.hasTokenTypes) {
    for (size_t i = 0; i < v.tokens.size(); ++i)
      if (v.tokenTypes[i] == 3)
        special(v.tokens[i]);
  } else {
    if (v.unk)
      special(v.tokens[*v.unk]);
    if (bos)
      special(*bos);
    if (eos)
      special(*eos);
  }
  tok["added_tokens"] = std::move(added);

  if (llama3) {
    tok["normalizer"] = nullptr;
    tok["pre_tokenizer"] = {{"type", "ByteLevel"}, {"add_prefix_space", false},
                            {"trim_offsets", false}, {"use_regex", true}};
  } else {
    // LlamaConverter's legacy normalizer: the file sets no "legacy", which it reads as true.
    json normalizers = json::array();
    if (v.addPrefixSpace)
      normalizers.push_back({{"type", "Prepend"}, {"prepend", kSpace}});
    normalizers.push_back(
        {{"type", "Replace"}, {"pattern", {{"String", " "}}}, {"content", kSpace}});
    tok["normalizer"] = {{"type", "Sequence"}, {"normalizers", std::move(normalizers)}};
    tok["pre_tokenizer"] = nullptr;
  }
  json decoders = json::array({typed("ByteFallback"), typed("Fuse"),
                               {{"type", "Replace"},
                                {"pattern", {{"String", kSpace}}},
                                {"content", " "}}});
  if (llama3)
    decoders.push_back({{"type", "ByteLevel"}, {"add_prefix_space", false},
                        {"trim_offsets", false}, {"use_regex", true}});
  if (v.addPrefixSpace)
    decoders.push_back({{"type", "Strip"}, {"content", " "}, {"start", 1u}, {"stop", 0u}});
  tok["decoder"] = {{"type", "Sequence"}, {"decoders", std::move(decoders)}};
  // TokenizersBackend's post-processor without add_bos_token or add_eos_token (the GGUF keys
  // of those reach no argument): "$A", nothing added.
  tok["post_processor"] = nullptr;

  // No tokenizer_class: the components above are used as they are.
  cfg = json::object();
  cfg["bos_token"] = eos ? json(*eos) : json(nullptr); // swapped, as transformers 5.17 has them
  cfg["eos_token"] = bos ? json(*bos) : json(nullptr);
  cfg["unk_token"] = v.unk ? json(v.tokens[*v.unk]) : json(nullptr);
}

} // namespace

std::unique_ptr<Tokenizer> Tokenizer::fromGguf(const GgufFile &file, std::string &error,
                                               const TokenizerLimits &limits) {
  TokenizerSource source;
  std::string prefix = "GGUF file " + file.path();
  source.file = prefix;
  source.configFile = prefix;
  source.vocab = prefix + ": tokenizer.ggml.tokens";
  source.merges = prefix + ": tokenizer.ggml.merges";
  source.addedTokens = prefix + ": tokenizer.ggml.token_type's control tokens";
  json tok, cfg;
  try {
    GgufVocabulary v = readVocabulary(file, limits);
    if (!v.mergesGiven)
      source.merges = prefix + ": the merges built from tokenizer.ggml.scores";
    llamaJson(v, limits, tok, cfg);
  } catch (const GgufError &e) {
    error = e.what();
    return nullptr;
  } catch (const std::bad_alloc &) {
    error = prefix + ": not enough memory to build its tokenizer";
    return nullptr;
  }
  return TokenizerBuilder::build(tok, cfg, source, limits, error);
}

} // namespace tpcrt
