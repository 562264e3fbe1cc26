// Tokenizer::fromGguf: the tokenizer a GGUF file's metadata describes, as transformers 5.17
// builds it for AutoTokenizer.from_pretrained(dir, gguf_file=NAME) (integrations/ggml.py:
// GGUFTokenizerSkeleton, GGUFLlamaConverter, GGUFQwen2Converter;
// modeling_gguf_pytorch_utils.load_gguf_checkpoint; TokenizersBackend.__init__).
// The metadata becomes the tokenizer.json and tokenizer_config.json transformers would hold,
// and TokenizerBuilder reads those as it reads a checkpoint's files, so every check and limit
// of Tokenizer::load applies; what only the metadata can get wrong (a key's type, an array's
// length, an id out of range) is refused here, naming the key.
//
// transformers, not llama.cpp, is the oracle, but for the architectures where transformers
// builds another tokenizer than the model's (gemma, gemma2, gemma3: Unigram; phi3: BPE that
// drops the spaces): there tpc encodes as llama.cpp does (spm.cpp), and decodes SentencePiece's
// way. Where transformers is the oracle, the two differ (see docs/weights.md):
//  - transformers picks the converter by general.architecture, not by tokenizer.ggml.model,
//    and for a "gpt2" (byte-level) vocabulary under the llama architecture (Llama 3, SmolLM2)
//    pre-tokenizes with GPT-2's regex (the ByteLevel pre-tokenizer's), whatever
//    tokenizer.ggml.pre names. There tpc takes the patterns llama.cpp takes for that name
//    (llamaCppPres), as the model's own tokenizer does; GPT-2's only for a name it lacks.
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
//  - the Qwen family (qwen2, qwen2moe, qwen3, qwen3moe) gets Qwen2Converter's pipeline and
//    exactly three special tokens, <|endoftext|>, <|im_start|> and <|im_end|>, whatever the
//    token types say; its bos and eos are Qwen2Tokenizer's defaults (none, and
//    <|endoftext|>), not the file's ids (Qwen2.5-Instruct's eos is <|im_end|>).
#include "tpcrt/tokenizer.h"

#include "components.h"
#include "tokenizer_builder.h"
#include "tokenizer_impl.h"
#include "tpcrt/gguf.h"
#include "tpcrt/utf8.h"

#include <algorithm>
#include <cctype>
#include <cstdio>
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
  std::string converter; // converterOf's
  std::vector<std::string> tokens;
  std::vector<double> scores;        // empty when absent
  std::vector<int64_t> tokenTypes;   // empty when absent
  bool hasTokenTypes = false;
  std::vector<std::pair<std::string, std::string>> merges;
  bool mergesGiven = false;
  std::optional<int64_t> bos, eos, unk, pad;
  std::optional<bool> addSpacePrefix; // each converter has its own default
  std::optional<bool> addBos, addEos;  // read for llama.cpp's SentencePiece only
  std::string name;                    // general.name
  std::string pre;                     // tokenizer.ggml.pre, "" when absent
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
/// load_gguf_checkpoint renames it): "llama" or "qwen2" for the ones tpc reads, else "" and
/// why not.
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
  // load_gguf_checkpoint renames qwen2moe and qwen3moe to qwen2_moe and qwen3_moe; the four
  // map to GGUFQwen2Converter, and their model types to Qwen2Tokenizer.
  if (arch == "qwen2" || arch == "qwen2moe" || arch == "qwen3" || arch == "qwen3moe")
    return "qwen2";
  // Where transformers builds another tokenizer than the model's: gemma's a Unigram one from
  // the scores, phi3's a BPE one without SentencePiece's spaces (GGUFPhi3Converter: "Hello
  // world" becomes "elloworld"). tpc reads these "llama" vocabularies as llama.cpp does,
  // SentencePiece's way, and llama-tokenize is the oracle.
  if (arch == "gemma" || arch == "gemma2" || arch == "gemma3" || arch == "phi3")
    return "spm";
  // Architectures of tpc's whose GGUF tokenizer transformers 5.17 does not build (no
  // converter): their byte-level vocabularies are read as llama.cpp reads them (bpeJson), and
  // llama-tokenize is the oracle.
  if (arch == "olmo2" || arch == "smollm3" || arch == "gpt-oss" || arch == "deepseek2" ||
      arch == "llama4")
    return "bpe";
  static const std::set<std::string> unigram = {"t5", "t5encoder", "umt5", "gemma4"};
  // GGUFQwen2Converter too, but qwen35's special tokens come from the file's ids
  // (get_gguf_tokenizer, Qwen3_5Tokenizer) and minimax_m2's are TokenizersBackend's <s>, </s>.
  static const std::set<std::string> qwenOther = {"qwen35", "minimax-m2"};
  // GGUFGPTConverter's.
  static const std::set<std::string> otherConverter = {
      "bloom", "falcon", "stablelm", "gpt2", "starcoder2", "mamba", "nemotron"};
  const char *const read = "tpc reads the tokenizer of GGUF files of architecture llama (and "
                           "deci), qwen2, qwen2moe, qwen3, qwen3moe, gemma, gemma2, gemma3, "
                           "phi3, olmo2, smollm3, gpt-oss, deepseek2 and llama4 only, not of '";
  if (unigram.count(arch))
    why = "transformers builds a Unigram tokenizer for architecture '" + arch +
          "' (tpc reads BPE tokenizers only)";
  else if (qwenOther.count(arch))
    why = read + arch + "' (transformers builds Qwen2's pipeline with other special tokens)";
  else if (otherConverter.count(arch))
    why = read + arch + "' (transformers builds that one with another converter)";
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
  v.converter = converterOf(file, v.architecture, why);
  if (v.converter.empty())
    throw GgufError(v.prefix + "general.architecture: " + why);
  if (!file.getString("tokenizer.ggml.model", v.model, error))
    throw GgufError(error);
  // GGUFLlamaConverter reads a "llama" vocabulary as SentencePiece's and any other as Llama
  // 3's byte-level one; of llama.cpp's other models ("bert", "t5", "rwkv", ...) none is either.
  if (v.model != "llama" && v.model != "gpt2")
    throw GgufError(v.prefix + "tokenizer.ggml.model: '" + v.model.substr(0, 64) +
                    "' tokenizers are not supported (tpc reads 'llama', SentencePiece-style "
                    "BPE, and 'gpt2', byte-level BPE)");
  // GGUFQwen2Converter builds byte-level BPE whatever the model says; tpc takes only "gpt2",
  // which llama.cpp reads the same way.
  if (v.converter == "qwen2" && v.model != "gpt2")
    throw GgufError(v.prefix + "tokenizer.ggml.model: '" + v.model + "' under architecture '" +
                    v.architecture + "' (tpc reads 'gpt2', byte-level BPE, there)");
  if (v.converter == "bpe" && v.model != "gpt2")
    throw GgufError(v.prefix + "tokenizer.ggml.model: '" + v.model.substr(0, 64) +
                    "' under architecture '" + v.architecture +
                    "' (tpc reads 'gpt2', byte-level BPE, there)");
  if (v.converter == "spm" && v.model != "llama")
    throw GgufError(v.prefix + "tokenizer.ggml.model: '" + v.model.substr(0, 64) +
                    "' under architecture '" + v.architecture +
                    "' (tpc reads 'llama', SentencePiece, there)");
  file.getString("general.name", v.name, error);
  if (file.find("tokenizer.ggml.pre") && !file.getString("tokenizer.ggml.pre", v.pre, error))
    throw GgufError(error);

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
  } else if (v.scores.empty() && v.converter != "spm") { // (llama.cpp: every score 0)
    throw GgufError(v.prefix + "tokenizer.ggml.merges: missing, and no tokenizer.ggml.scores to "
                    "build merges from");
  }

  v.bos = tokenId(file, v, "tokenizer.ggml.bos_token_id");
  v.eos = tokenId(file, v, "tokenizer.ggml.eos_token_id");
  v.unk = tokenId(file, v, "tokenizer.ggml.unknown_token_id");
  v.pad = tokenId(file, v, "tokenizer.ggml.padding_token_id");
  if (file.find("tokenizer.ggml.add_space_prefix")) {
    bool add = false;
    if (!file.getBool("tokenizer.ggml.add_space_prefix", add, error))
      throw GgufError(error);
    v.addSpacePrefix = add;
  }
  for (auto [key, flag] : {std::pair{"tokenizer.ggml.add_bos_token", &v.addBos},
                           std::pair{"tokenizer.ggml.add_eos_token", &v.addEos}}) {
    bool add = false;
    if (!file.find(key))
      continue;
    if (!file.getBool(key, add, error))
      throw GgufError(error);
    *flag = add;
  }
  return v;
}

json typed(const char *type) { return json{{"type", type}}; }

/// A ByteLevel pre-tokenizer, decoder or post-processor.
json byteLevel(bool addPrefixSpace, bool trimOffsets, bool useRegex) {
  return {{"type", "ByteLevel"},
          {"add_prefix_space", addPrefixSpace},
          {"trim_offsets", trimOffsets},
          {"use_regex", useRegex}};
}

/// LlamaConverter's decoder: byte tokens joined, "▁" back to a space, then (a byte-level
/// vocabulary) the byte-level alphabet undone, and (where a space was prefixed) the first
/// space dropped.
json sentencePieceDecoder(bool byteLevelToo, bool stripPrefix) {
  json decoders = json::array({typed("ByteFallback"), typed("Fuse"),
                               {{"type", "Replace"},
                                {"pattern", {{"String", kSpace}}},
                                {"content", " "}}});
  if (byteLevelToo)
    decoders.push_back(byteLevel(false, false, true));
  if (stripPrefix)
    decoders.push_back({{"type", "Strip"}, {"content", " "}, {"start", 1u}, {"stop", 0u}});
  return {{"type", "Sequence"}, {"decoders", std::move(decoders)}};
}

/// The BPE model of the tokens and the merges (the file's, or built from the scores), with the
/// flags a converter gives it.
json bpeModel(const GgufVocabulary &v, bool byteFallback,
              const std::vector<std::pair<std::string, std::string>> &merges) {
  json vocab = json::object();
  for (size_t i = 0; i < v.tokens.size(); ++i)
    vocab[v.tokens[i]] = i; // a token listed twice: its last id, as Python's dict keeps
  json pairs = json::array();
  for (const auto &[a, b] : merges)
    pairs.push_back(json::array({a, b}));
  return {{"type", "BPE"},         {"vocab", std::move(vocab)},
          {"merges", std::move(pairs)}, {"fuse_unk", byteFallback},
          {"byte_fallback", byteFallback}, {"unk_token", nullptr}};
}

/// The file's merges, or those GGUFTokenizerSkeleton builds from the scores.
std::vector<std::pair<std::string, std::string>> mergesOf(const GgufVocabulary &v,
                                                          const TokenizerLimits &limits) {
  return v.mergesGiven ? v.merges : mergesFromScores(v, limits);
}

/// Appends a special token as tokenizer.add_special_tokens([AddedToken(content,
/// normalized=False, special=True)]) adds it: its vocabulary id, or (absent from the
/// vocabulary) the next id the tokenizers library's AddedVocabulary gives.
void addSpecial(json &tok, const std::string &content, bool special = true) {
  const json &vocab = tok["model"]["vocab"];
  json &added = tok["added_tokens"];
  uint64_t id = 0;
  if (auto it = vocab.find(content); it != vocab.end()) {
    id = it->get<uint64_t>(); // listed twice: the builder keeps the first, as the library does
  } else {
    // Only GGUFQwen2Converter's three can be absent: a scan of the few added so far.
    std::optional<uint64_t> maxAdded;
    for (const json &a : added) {
      if (a["content"] == content)
        return;
      maxAdded = std::max(maxAdded.value_or(0), a["id"].get<uint64_t>());
    }
    uint64_t size = vocab.size();
    id = maxAdded && (*maxAdded >= size || size == 0) ? *maxAdded + 1 : size;
  }
  added.push_back({{"id", id},
                   {"content", content},
                   {"special", special},
                   {"normalized", false},
                   {"lstrip", false},
                   {"rstrip", false},
                   {"single_word", false}});
}

/// tokenizer.json and tokenizer_config.json as GGUFLlamaConverter and LlamaTokenizer leave
/// them.
/// How llama.cpp b11434 pre-tokenizes a byte-level ("gpt2") vocabulary, by the name that
/// tokenizer.ggml.pre gives (llama-vocab.cpp): its patterns, each applied in turn to the pieces
/// the ones before it cut (matches and what lies between both kept, tokenizers' Split with
/// "Isolated"), and whether a piece that is a whole token skips the merges. The patterns are
/// the models' own tokenizer.json ones, as llama.cpp spells them (case-insensitive contractions
/// written out; GPT-4o's and Tekken's cases through lookaheads). Only the pre-tokenizers of the
/// architectures tpc runs are here.
struct LlamaCppPre {
  std::vector<std::string> names;
  std::vector<const char *> patterns;
  bool ignoreMerges = false;
  bool addBos = false; // llama.cpp's default where the file has no add_bos_token
};

const char *const kGpt2 =
    R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S))";
const char *const kLlama3 =
    R"((?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\r\n\p{L}\p{N}]?\p{L}+|)"
    R"(\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";
const char *const kQwen2 =
    R"((?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\r\n\p{L}\p{N}]?\p{L}+|)"
    R"(\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";
const char *const kCjk = R"([\x{4E00}-\x{9FA5}\x{800}-\x{4E00}\x{AC00}-\x{D7FF}]+)";

const std::vector<LlamaCppPre> &llamaCppPres() {
  static const std::vector<LlamaCppPre> table = {
      {{"llama3", "llama-v3", "llama-bpe", "falcon3", "falcon-h1", "pixtral", "midm-2.0", "lfm2",
        "jina-v5-nano"},
       {kLlama3},
       true,
       true},
      {{"dbrx", "smaug-bpe"}, {kLlama3}, false},
      {{"gpt-2", "phi-2", "olmo", "mpt"}, {kGpt2}, false},
      {{"smollm", "starcoder", "refact", "command-r", "codeshell", "exaone", "minerva-7b"},
       {R"(\p{N})", kGpt2},
       false},
      {{"qwen2", "deepseek-r1-qwen", "stablelm2", "megrez"}, {kQwen2}, false},
      {{"deepseek-llm"},
       {"[\r\n]",
        R"(\s?[A-Za-z\x{B5}\x{C0}-\x{D6}\x{D8}-\x{F6}\x{F8}-\x{1BA}\x{1BC}-\x{1BF}\x{1C4}-\x{293})"
        R"(\x{295}-\x{2AF}\x{370}-\x{373}\x{376}\x{377}\x{37B}-\x{37D}\x{37F}\x{386})"
        R"(\x{388}-\x{38A})"
        R"(\x{38C}\x{38E}-\x{3A1}\x{3A3}-\x{3F5}\x{3F7}-\x{481}\x{48A}-\x{52F}\x{531}-\x{556})"
        R"(\x{10A0}-\x{10C5}\x{13A0}-\x{13F5}\x{13F8}-\x{13FD}\x{1C90}-\x{1CBA}\x{1CBD}-\x{1CBF})"
        R"(\x{1D00}-\x{1D2B}\x{1D6B}-\x{1D77}\x{1D79}-\x{1D9A}\x{1E00}-\x{1F15}\x{1F18}-\x{1F1D})"
        R"(\x{1F20}-\x{1F45}\x{1F48}-\x{1F4D}\x{1F50}-\x{1F57}\x{1F59}\x{1F5B}\x{1F5D})"
        R"(\x{1F5F}-\x{1F7D}\x{1F80}-\x{1FB4}\x{1FB6}-\x{1FBC}\x{1FBE}\x{1FC2}-\x{1FC4})"
        R"(\x{1FC6}-\x{1FCC}\x{1FD0}-\x{1FD3}\x{1FD6}-\x{1FDB}\x{1FE0}-\x{1FEC}\x{1FF2}-\x{1FF4})"
        R"(\x{1FF6}-\x{1FFC}\x{2102}\x{2107}\x{210A}-\x{2113}\x{2115}\x{2119}-\x{211D})"
        R"(\x{2124}\x{2126}\x{2128}\x{212A}-\x{212D}\x{212F}-\x{2134}\x{2139}\x{213C}-\x{213F})"
        R"(\x{2145}-\x{2149}\x{214E}\x{2183}\x{2184}\x{2C00}-\x{2C7B}\x{2C7E}-\x{2CE4})"
        R"(\x{2CEB}-\x{2CEE}\x{2CF2}\x{2CF3}\x{A640}-\x{A66D}\x{A680}-\x{A69B}\x{A722}-\x{A76F})"
        R"(\x{A771}-\x{A787}\x{A78B}-\x{A78E}\x{AB70}-\x{ABBF}\x{FB00}-\x{FB06}\x{FB13}-\x{FB17})"
        R"(\x{FF21}-\x{FF3A}\x{FF41}-\x{FF5A}\x{10400}-\x{1044F}\x{104B0}-\x{104D3})"
        R"(\x{104D8}-\x{104FB}\x{10C80}-\x{10CB2}\x{10CC0}-\x{10CF2}\x{118A0}-\x{118DF})"
        R"(\x{1E900}-\x{1E943}]+)",
        R"(\s?[!-/:-~\x{FF01}-\x{FF0F}\x{FF1A}-\x{FF5E}\x{2018}-\x{201F}\x{3000}-\x{3002}]+)",
        R"(\s+$)",
        kCjk, R"(\p{N}+)"},
       false},
      {{"deepseek-coder"},
       {"[\r\n]", R"(\s?\p{L}+)", R"(\s?\p{P}+)", kCjk, R"(\p{N})"},
       false},
      {{"deepseek-v3"},
       {R"(\p{N}{1,3})", R"([\x{4E00}-\x{9FA5}\x{3040}-\x{309F}\x{30A0}-\x{30FF}]+)",
        R"([!"#$%&'()*+,\-./:;<=>?@\[\\\]^_`{|}~][A-Za-z]+|[^\r\n\p{L}\p{P}\p{S}]?[\p{L}\p{M}]+|)"
        R"( ?[\p{P}\p{S}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)"},
       false},
      {{"gpt-4o", "llama4"},
       {R"([^\r\n\p{L}\p{N}]?((?=[\p{L}])([^a-z]))*((?=[\p{L}])([^A-Z]))+)"
        R"((?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])?|)"
        R"([^\r\n\p{L}\p{N}]?((?=[\p{L}])([^a-z]))+((?=[\p{L}])([^A-Z]))*)"
        R"((?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])?|)"
        R"(\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+)"},
       false},
      {{"tekken"},
       {R"([^\r\n\p{L}\p{N}]?((?=[\p{L}])([^a-z]))*((?=[\p{L}])([^A-Z]))+|)"
        R"([^\r\n\p{L}\p{N}]?((?=[\p{L}])([^a-z]))+((?=[\p{L}])([^A-Z]))*|)"
        R"(\p{N}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+)"},
       true,
       true},
  };
  return table;
}

/// llama.cpp's pre-tokenizer of the name `pre`; null for one this table lacks.
const LlamaCppPre *llamaCppPre(const std::string &pre) {
  for (const LlamaCppPre &p : llamaCppPres())
    if (std::find(p.names.begin(), p.names.end(), pre) != p.names.end())
      return &p;
  return nullptr;
}

/// The Sequence of Splits and byte-level mapping that pre-tokenizes as `p` does.
json llamaCppPreTokenizer(const LlamaCppPre &p) {
  json steps = json::array();
  for (const char *pattern : p.patterns)
    steps.push_back({{"type", "Split"},
                     {"pattern", {{"Regex", pattern}}},
                     {"behavior", "Isolated"},
                     {"invert", false}});
  steps.push_back(byteLevel(false, false, false));
  return {{"type", "Sequence"}, {"pretokenizers", std::move(steps)}};
}

void llamaJson(const GgufVocabulary &v, const TokenizerLimits &limits, json &tok, json &cfg) {
  bool llama3 = v.model != "llama";
  bool addPrefixSpace = v.addSpacePrefix.value_or(true);
  tok = json::object();
  tok["model"] = bpeModel(v, true, mergesOf(v, limits));
  if (v.unk)
    tok["model"]["unk_token"] = v.tokens[*v.unk];

  // Special tokens: every control token (type 3) where there are types, else unk, bos and the
  // eos transformers names (the string of the bos id).
  tok["added_tokens"] = json::array();
  std::optional<std::string> bos, eos;
  if (v.bos)
    bos = v.tokens[*v.bos];
  if (v.eos && v.bos)
    eos = v.tokens[*v.bos]; // transformers 5.17: proto.tokens[proto.bos_token_id]
  if (v.hasTokenTypes) {
    for (size_t i = 0; i < v.tokens.size(); ++i)
      if (v.tokenTypes[i] == 3)
        addSpecial(tok, v.tokens[i]);
  } else {
    if (v.unk)
      addSpecial(tok, v.tokens[*v.unk]);
    if (bos)
      addSpecial(tok, *bos);
    if (eos)
      addSpecial(tok, *eos);
  }

  if (llama3) {
    tok["normalizer"] = nullptr;
    // Where llama.cpp knows the pre-tokenizer the file names, its patterns (transformers
    // 5.17 takes GPT-2's whatever the name: Llama 3's digits, grouped in threes, would come
    // out whole); else GPT-2's, as transformers.
    if (const LlamaCppPre *pre = llamaCppPre(v.pre)) {
      tok["pre_tokenizer"] = llamaCppPreTokenizer(*pre);
      tok["model"]["ignore_merges"] = pre->ignoreMerges;
    } else {
      tok["pre_tokenizer"] = byteLevel(false, false, true);
    }
  } else {
    // LlamaConverter's legacy normalizer: the file sets no "legacy", which it reads as true.
    json normalizers = json::array();
    if (addPrefixSpace)
      normalizers.push_back({{"type", "Prepend"}, {"prepend", kSpace}});
    normalizers.push_back(
        {{"type", "Replace"}, {"pattern", {{"String", " "}}}, {"content", kSpace}});
    tok["normalizer"] = {{"type", "Sequence"}, {"normalizers", std::move(normalizers)}};
    tok["pre_tokenizer"] = nullptr;
  }
  tok["decoder"] = sentencePieceDecoder(llama3, addPrefixSpace);
  // TokenizersBackend's post-processor without add_bos_token or add_eos_token (the GGUF keys
  // of those reach no argument): "$A", nothing added.
  tok["post_processor"] = nullptr;

  // No tokenizer_class: the components above are used as they are.
  cfg = json::object();
  cfg["bos_token"] = eos ? json(*eos) : json(nullptr); // swapped, as transformers 5.17 has them
  cfg["eos_token"] = bos ? json(*bos) : json(nullptr);
  cfg["unk_token"] = v.unk ? json(v.tokens[*v.unk]) : json(nullptr);
}

/// llama.cpp's token types (LLAMA_TOKEN_TYPE_*) that tokenizer.ggml.token_type holds.
enum TokenType : int64_t { kUnknown = 2, kControl = 3, kUserDefined = 4 };

/// Whether llama.cpp cuts a token of this type out of the text before merging (its special
/// tokens cache: control, user-defined and unknown tokens).
bool cutOut(int64_t type) { return type == kControl || type == kUserDefined || type == kUnknown; }

/// The ids llama.cpp's SentencePiece reading takes: bos and eos the file's, else <s> and </s>'s
/// 1 and 2 (where there are that many tokens); unk the file's, else its first token of type
/// unknown (llama.cpp's default, id 0, names a token of any kind, which nothing should stand
/// for an unknown byte).
struct SpmIds {
  std::optional<int64_t> unk, bos, eos;
};
SpmIds spmIds(const GgufVocabulary &v) {
  auto orDefault = [&](std::optional<int64_t> given, int64_t fallback) {
    return given || fallback >= int64_t(v.tokens.size()) ? given : std::optional(fallback);
  };
  SpmIds ids{v.unk, orDefault(v.bos, 1), orDefault(v.eos, 2)};
  for (size_t i = 0; !ids.unk && i < v.tokenTypes.size(); ++i)
    if (v.tokenTypes[i] == kUnknown)
      ids.unk = int64_t(i);
  return ids;
}

/// The tables of llama.cpp's SentencePiece encoding (spm.cpp), from the vocabulary.
std::shared_ptr<tokenizer_detail::SentencePieceEncoder> spmEncoder(const GgufVocabulary &v) {
  auto e = std::make_shared<tokenizer_detail::SentencePieceEncoder>();
  e->ids.reserve(v.tokens.size());
  for (size_t i = 0; i < v.tokens.size(); ++i)
    e->ids[v.tokens[i]] = uint32_t(i); // a token listed twice: its last id, as llama.cpp's map
  e->scores.assign(v.tokens.size(), 0.0f);
  for (size_t i = 0; i < v.scores.size(); ++i)
    e->scores[i] = float(v.scores[i]);
  // Control, user-defined and unknown tokens are cut out of the text, the longest first (of
  // equal lengths, the lower id; llama.cpp's sort leaves that order unspecified). An empty one
  // would match everywhere: llama.cpp loops on it, tpc leaves it out.
  // A file whose general.name says Phi-3 drops the whitespace after each of them, but after
  // <unk>, <s> and <|endoftext|> (llama.cpp sets RSTRIP by that name, for every architecture).
  std::string name = v.name;
  for (char &c : name)
    c = char(std::tolower(static_cast<unsigned char>(c)));
  bool phi3 = name.find("phi-3") != std::string::npos || name.find("phi3") != std::string::npos;
  for (size_t i = 0; i < v.tokens.size() && v.hasTokenTypes; ++i) {
    if (!cutOut(v.tokenTypes[i]) || v.tokens[i].empty())
      continue;
    const std::string &t = v.tokens[i];
    bool rstrip = phi3 && t != "<unk>" && t != "<s>" && t != "<|endoftext|>";
    e->specials.push_back({t, uint32_t(i), rstrip});
  }
  std::stable_sort(e->specials.begin(), e->specials.end(),
                   [](const auto &a, const auto &b) { return a.text.size() > b.text.size(); });
  std::vector<std::string> texts;
  for (const auto &sp : e->specials)
    texts.push_back(sp.text);
  e->matcher.build(texts);
  // A character that is no token becomes the tokens of its bytes: <0xXX>, else the byte
  // itself as a token.
  e->byteIds.assign(256, -1);
  bool allBytes = true;
  for (int b = 0; b < 256; ++b) {
    char hex[8];
    std::snprintf(hex, sizeof hex, "<0x%02X>", b);
    auto it = e->ids.find(hex);
    if (it == e->ids.end())
      it = e->ids.find(std::string(1, char(b)));
    if (it != e->ids.end())
      e->byteIds[b] = it->second;
    else
      allBytes = false;
  }
  auto [unk, bos, eos] = spmIds(v);
  if (!allBytes && !unk)
    throw GgufError(v.prefix + "tokenizer.ggml.tokens: no <0xXX> token for some byte, and no "
                               "unknown token to stand for a character that is none");
  e->addSpacePrefix = v.addSpacePrefix.value_or(true);
  e->addBos = v.addBos.value_or(true);
  e->addEos = v.addEos.value_or(false);
  if (e->addBos && !bos)
    throw GgufError(v.prefix + "tokenizer.ggml.add_bos_token: BOS is to be added, but there "
                               "is no tokenizer.ggml.bos_token_id (nor a token 1)");
  if (e->addEos && !eos)
    throw GgufError(v.prefix + "tokenizer.ggml.add_eos_token: EOS is to be added, but there "
                               "is no tokenizer.ggml.eos_token_id (nor a token 2)");
  if (unk)
    e->unk = uint32_t(*unk);
  if (bos)
    e->bos = uint32_t(*bos);
  if (eos)
    e->eos = uint32_t(*eos);
  return e;
}

/// The added tokens of a vocabulary read as llama.cpp reads it: the tokens it cuts out of the
/// text first, user-defined ones shown when decoding (as llama.cpp's token_to_piece does) and
/// the others special.
void addCutOutTokens(const GgufVocabulary &v, json &tok) {
  tok["added_tokens"] = json::array();
  for (size_t i = 0; i < v.tokens.size() && v.hasTokenTypes; ++i)
    if (cutOut(v.tokenTypes[i]))
      addSpecial(tok, v.tokens[i], v.tokenTypes[i] != kUserDefined);
}

/// tokenizer.json and tokenizer_config.json for what decodes a vocabulary llama.cpp's
/// SentencePiece encoding encodes (the encoding itself is spmEncoder's): its tokens with byte
/// fallback, control and unknown tokens special (skipped where asked), user-defined ones shown
/// always, as llama.cpp's token_to_piece does; bos and eos as the file (or llama.cpp) names
/// them.
void spmJson(const GgufVocabulary &v, json &tok, json &cfg) {
  auto [unk, bos, eos] = spmIds(v);
  bool addPrefixSpace = v.addSpacePrefix.value_or(true);
  tok = json::object();
  tok["model"] = bpeModel(v, true, {});
  if (unk)
    tok["model"]["unk_token"] = v.tokens[*unk];
  addCutOutTokens(v, tok);
  tok["normalizer"] = nullptr;
  tok["pre_tokenizer"] = nullptr;
  tok["decoder"] = sentencePieceDecoder(false, addPrefixSpace);
  tok["post_processor"] = nullptr;
  cfg = json::object();
  cfg["bos_token"] = bos ? json(v.tokens[*bos]) : json(nullptr);
  cfg["eos_token"] = eos ? json(v.tokens[*eos]) : json(nullptr);
  cfg["unk_token"] = unk ? json(v.tokens[*unk]) : json(nullptr);
}

/// tokenizer.json and tokenizer_config.json for a byte-level vocabulary read as llama.cpp
/// reads it: the pre-tokenizer tokenizer.ggml.pre names (llamaCppPres; a name tpc does not
/// know is refused), control, user-defined and unknown tokens cut out of the text first (the
/// user-defined ones shown when decoding, as llama.cpp's token_to_piece does), and BOS and EOS
/// added as add_bos_token and add_eos_token say (without them, llama.cpp's defaults: BOS for
/// Llama 3's and Tekken's pre-tokenizers, no EOS).
void bpeJson(const GgufVocabulary &v, const TokenizerLimits &limits, json &tok, json &cfg) {
  const LlamaCppPre *pre = llamaCppPre(v.pre);
  if (!pre)
    throw GgufError(v.prefix + "tokenizer.ggml.pre: " +
                    (v.pre.empty() ? std::string("none")
                                   : "'" + v.pre.substr(0, 64) + "'") +
                    ", a pre-tokenizer tpc does not know for architecture '" + v.architecture +
                    "' (it reads llama.cpp's for llama-bpe, gpt-2, olmo, smollm, qwen2, "
                    "deepseek-llm, deepseek-coder, deepseek-v3, gpt-4o, llama4, tekken and "
                    "their aliases)");
  tok = json::object();
  tok["model"] = bpeModel(v, false, mergesOf(v, limits));
  tok["model"]["ignore_merges"] = pre->ignoreMerges;
  if (v.unk)
    tok["model"]["unk_token"] = v.tokens[*v.unk];
  addCutOutTokens(v, tok);
  tok["normalizer"] = nullptr;
  tok["pre_tokenizer"] = llamaCppPreTokenizer(*pre);
  tok["decoder"] = byteLevel(true, true, true);
  bool addBos = v.addBos.value_or(pre->addBos), addEos = v.addEos.value_or(false);
  if (addBos && !v.bos)
    throw GgufError(v.prefix + "BOS is to be added (tokenizer.ggml.add_bos_token, or llama.cpp's "
                               "default for '" + v.pre + "'), but there is no "
                               "tokenizer.ggml.bos_token_id");
  if (addEos && !v.eos)
    throw GgufError(v.prefix + "tokenizer.ggml.add_eos_token: EOS is to be added, but there is "
                               "no tokenizer.ggml.eos_token_id");
  json single = json::array(), specials = json::object();
  auto special = [&](int64_t id) {
    const std::string &name = v.tokens[size_t(id)];
    single.push_back({{"SpecialToken", {{"id", name}, {"type_id", 0}}}});
    specials[name] = {
        {"id", name}, {"ids", json::array({uint64_t(id)})}, {"tokens", json::array({name})}};
  };
  if (addBos)
    special(*v.bos);
  single.push_back({{"Sequence", {{"id", "A"}, {"type_id", 0}}}});
  if (addEos)
    special(*v.eos);
  tok["post_processor"] = {{"type", "TemplateProcessing"},
                           {"single", std::move(single)},
                           {"special_tokens", std::move(specials)}};
  cfg = json::object();
  cfg["bos_token"] = v.bos ? json(v.tokens[*v.bos]) : json(nullptr);
  cfg["eos_token"] = v.eos ? json(v.tokens[*v.eos]) : json(nullptr);
  cfg["unk_token"] = v.unk ? json(v.tokens[*v.unk]) : json(nullptr);
}

/// tokenizer.json and tokenizer_config.json as GGUFQwen2Converter (Qwen2Converter.converted)
/// and Qwen2Tokenizer leave them.
void qwenJson(const GgufVocabulary &v, const TokenizerLimits &limits, json &tok, json &cfg) {
  std::vector<std::pair<std::string, std::string>> merges = mergesOf(v, limits);
  // Qwen2Converter takes an empty vocabulary or merges list as "none given" and reads the slow
  // tokenizer's, which the GGUF skeleton lacks: transformers fails.
  if (v.tokens.empty() || merges.empty())
    throw GgufError(v.prefix +
                    (v.tokens.empty() ? "tokenizer.ggml.tokens" : "tokenizer.ggml.merges") +
                    ": none, and transformers' Qwen2Converter builds no tokenizer without them");
  tok = json::object();
  tok["model"] = bpeModel(v, false, merges);
  // GGUFQwen2Converter's three, whatever the token types say; transformers adds those the
  // vocabulary lacks after it.
  tok["added_tokens"] = json::array();
  for (const char *special : {"<|endoftext|>", "<|im_start|>", "<|im_end|>"})
    addSpecial(tok, special);
  tok["normalizer"] = typed("NFC");
  json split = {{"type", "Split"},
                {"pattern", {{"Regex", tokenizer_detail::kQwen2Pattern}}},
                {"behavior", "Isolated"},
                {"invert", false}};
  // add_prefix_space: the file's add_space_prefix, which GGUFTokenizerSkeleton carries.
  tok["pre_tokenizer"] = {
      {"type", "Sequence"},
      {"pretokenizers",
       json::array({std::move(split), byteLevel(v.addSpacePrefix.value_or(false), true, false)})}};
  tok["decoder"] = byteLevel(true, true, true);
  tok["post_processor"] = byteLevel(true, false, true);

  // No tokenizer_class (the components above are used as they are): Qwen2Tokenizer's
  // defaults, which no GGUF key reaches (load_gguf_checkpoint passes the ids, not the strings).
  cfg = json::object();
  cfg["bos_token"] = nullptr;
  cfg["eos_token"] = "<|endoftext|>";
  cfg["unk_token"] = "<|endoftext|>";
  cfg["pad_token"] = "<|endoftext|>";
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
  std::shared_ptr<tokenizer_detail::SentencePieceEncoder> sentencePiece;
  try {
    GgufVocabulary v = readVocabulary(file, limits);
    if (!v.mergesGiven)
      source.merges = prefix + ": the merges built from tokenizer.ggml.scores";
    if (v.converter == "spm") {
      source.merges = prefix + ": tokenizer.ggml.scores";
      source.addedTokens = prefix + ": tokenizer.ggml.token_type's control, user-defined and "
                                    "unknown tokens";
      spmJson(v, tok, cfg);
      sentencePiece = spmEncoder(v);
    } else if (v.converter == "qwen2") {
      source.addedTokens = prefix + ": GGUFQwen2Converter's special tokens";
      qwenJson(v, limits, tok, cfg);
    } else if (v.converter == "bpe") {
      source.addedTokens = prefix + ": tokenizer.ggml.token_type's control, user-defined and "
                                    "unknown tokens";
      bpeJson(v, limits, tok, cfg);
    } else {
      llamaJson(v, limits, tok, cfg);
    }
  } catch (const GgufError &e) {
    error = e.what();
    return nullptr;
  } catch (const std::bad_alloc &) {
    error = prefix + ": not enough memory to build its tokenizer";
    return nullptr;
  }
  std::unique_ptr<Tokenizer> tokenizer = TokenizerBuilder::build(tok, cfg, source, limits, error);
  if (tokenizer)
    tokenizer->impl_->sentencePiece = std::move(sentencePiece);
  return tokenizer;
}

} // namespace tpcrt
