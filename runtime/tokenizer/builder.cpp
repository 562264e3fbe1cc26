// TokenizerBuilder (tokenizer_builder.h) and Tokenizer::load: a Tokenizer from tokenizer.json
// and tokenizer_config.json, a section at a time. The model, the added tokens and each
// component kind are read by their own file's loader; here is the order transformers reads
// them in, the tokenizer classes whose components transformers rebuilds rather than reads
// (LlamaTokenizer, GemmaTokenizer, Qwen2Tokenizer, GPT2Tokenizer), the named special tokens,
// and the checks that span components. Also the readers of tokenizer.json's fields that every
// loader shares (components.h).
#include "tpcrt/tokenizer.h"

#include "components.h"
#include "regex.h"
#include "tokenizer_builder.h"
#include "tokenizer_impl.h"
#include "tpcrt/file.h"

#include <sys/stat.h>

#include <algorithm>
#include <cstdio>
#include <limits>
#include <map>

namespace tpcrt {
namespace tokenizer_detail {

// --- Reading tokenizer.json's fields (components.h) -----------------------------------------

std::string kindOf(const json &j) {
  if (!j.is_object() || !j.contains("type") || !j["type"].is_string())
    return "";
  const std::string &s = j["type"].get_ref<const std::string &>();
  size_t n = shownBytes(s);
  return s.substr(0, n) + (n < s.size() ? "..." : "");
}

std::string str(const json &j, const char *key, const std::string &where) {
  if (!j.is_object() || !j.contains(key) || !j[key].is_string())
    throw LoadError(where + "." + key + ": missing or not a string");
  return j[key].get<std::string>();
}

uint32_t idOf(const json &v, const std::string &where) {
  if (!v.is_number_unsigned() || v.get<uint64_t>() > std::numeric_limits<uint32_t>::max())
    throw LoadError(where + ": id " + v.dump() + " is not an integer in [0, 2^32)");
  return v.get<uint32_t>();
}

std::string bounded(std::string s, const std::string &where, const TokenizerLimits &limits) {
  if (s.size() > limits.maxTokenBytes)
    throw LoadError(where + ": " + shown(s) + " is " + std::to_string(s.size()) + " bytes, " +
                    beyond(limits.maxTokenBytes, "bytes", "maxTokenBytes"));
  return s;
}

std::string oneChar(std::string s, const std::string &where) {
  if (s.empty() || charLen(s, 0) != s.size())
    throw LoadError(where + ": " + shown(s) + " is not one character");
  return s;
}

void pattern(const json &j, const std::string &where, const TokenizerLimits &limits,
             Literal &literal, std::shared_ptr<Regex> &regex) {
  if (!j.is_object())
    throw LoadError(where + ".pattern: missing or not an object");
  if (j.contains("String") && j["String"].is_string()) {
    std::string s = bounded(j["String"].get<std::string>(), where + ".pattern.String", limits);
    // The tokenizers library would match an empty pattern between every two characters.
    if (s.empty())
      throw LoadError(where + ".pattern.String: an empty pattern is not supported");
    literal = Literal(s);
  } else if (j.contains("Regex") && j["Regex"].is_string()) {
    regex = std::make_shared<Regex>(
        bounded(j["Regex"].get<std::string>(), where + ".pattern.Regex", limits),
        where + ".pattern");
  } else {
    throw LoadError(where + ".pattern: neither a String nor a Regex");
  }
}

void checkCount(size_t have, const std::string &where, const char *what,
                const TokenizerLimits &limits) {
  if (have >= limits.maxComponents)
    throw LoadError(where + ": " + beyond(limits.maxComponents, what, "maxComponents"));
}

} // namespace tokenizer_detail

using namespace tokenizer_detail;

namespace {

// --- The files --------------------------------------------------------------------------------

/// Refuses JSON nested deeper than `maxDepth` before nlohmann's parser and the loaders (which
/// recurse into Sequence components) see it: a scan of the brackets outside strings.
void checkJsonDepth(const std::string &text, const std::string &path, uint32_t maxDepth) {
  uint64_t depth = 0;
  bool inString = false;
  for (size_t i = 0; i < text.size(); ++i) {
    char c = text[i];
    if (inString) {
      if (c == '\\')
        ++i;
      else if (c == '"')
        inString = false;
    } else if (c == '"') {
      inString = true;
    } else if (c == '[' || c == '{') {
      if (++depth > maxDepth)
        throw LoadError(path + ": nested " + beyond(maxDepth, "deep", "maxJsonDepth") +
                        " at byte " + std::to_string(i));
    } else if ((c == ']' || c == '}') && depth > 0) {
      --depth;
    }
  }
}

json readJson(const std::string &path, bool required, bool &found, const TokenizerLimits &limits) {
  struct stat st {};
  if (::stat(path.c_str(), &st) == 0 && S_ISREG(st.st_mode) &&
      static_cast<uint64_t>(st.st_size) > limits.maxFileBytes)
    throw LoadError(path + ": " + std::to_string(st.st_size) + " bytes, " +
                    beyond(limits.maxFileBytes, "bytes", "maxFileBytes"));
  std::string text;
  found = readFile(path, text);
  if (!found) {
    if (required)
      throw LoadError(path + ": cannot be opened");
    return json();
  }
  if (text.size() > limits.maxFileBytes) // it grew since
    throw LoadError(path + ": " + std::to_string(text.size()) + " bytes, " +
                    beyond(limits.maxFileBytes, "bytes", "maxFileBytes"));
  checkJsonDepth(text, path, limits.maxJsonDepth);
  json j = json::parse(text, nullptr, false);
  if (j.is_discarded())
    throw LoadError(path + ": not valid JSON");
  if (!j.is_object())
    throw LoadError(path + ": not a JSON object");
  return j;
}

/// A token field of tokenizer_config.json: a string or an AddedToken object ({"content": s}).
std::string configToken(const json &cfg, const char *key) {
  if (!cfg.contains(key))
    return "";
  const json &v = cfg[key];
  if (v.is_string())
    return v.get<std::string>();
  if (v.is_object() && v.contains("content") && v["content"].is_string())
    return v["content"].get<std::string>();
  return "";
}

/// A boolean of tokenizer_config.json, `def` when it is absent or not a boolean.
bool configBool(const json &cfg, const char *key, bool def) {
  return cfg.contains(key) && cfg[key].is_boolean() ? cfg[key].get<bool>() : def;
}

// --- The tokenizer class ----------------------------------------------------------------------

const char *const kSpace = "\xE2\x96\x81"; // U+2581, SentencePiece's space

/// tokenizer_config.json's tokenizer_class, without "Fast" (an alias in transformers 5).
std::string tokenizerClass(const json &cfg) {
  std::string cls = cfg.contains("tokenizer_class") && cfg["tokenizer_class"].is_string()
                        ? cfg["tokenizer_class"].get<std::string>()
                        : std::string();
  if (cls.size() > 4 && cls.compare(cls.size() - 4, 4, "Fast") == 0)
    cls.resize(cls.size() - 4);
  return cls;
}

/// The named special tokens the class's __init__ gives when the config names none.
std::map<std::string, std::string> classDefaults(const std::string &cls) {
  std::map<std::string, std::string> defaults;
  if (cls == "LlamaTokenizer")
    defaults = {{"unk_token", "<unk>"}, {"bos_token", "<s>"}, {"eos_token", "</s>"}};
  else if (cls == "GemmaTokenizer")
    defaults = {{"unk_token", "<unk>"},
                {"bos_token", "<bos>"},
                {"eos_token", "<eos>"},
                {"pad_token", "<pad>"},
                {"mask_token", "<mask>"}};
  else if (cls == "Qwen2Tokenizer")
    defaults = {{"unk_token", "<|endoftext|>"},
                {"eos_token", "<|endoftext|>"},
                {"pad_token", "<|endoftext|>"}};
  else if (cls == "GPT2Tokenizer")
    defaults = {{"unk_token", "<|endoftext|>"},
                {"bos_token", "<|endoftext|>"},
                {"eos_token", "<|endoftext|>"}};
  return defaults;
}

/// The named special tokens: the config's, else the class's defaults. transformers adds those
/// the vocabulary lacks as new special tokens.
void addNamedTokens(TokenizerImpl &t, const json &cfg, const std::string &cls,
                    const std::string &cfgFile) {
  std::map<std::string, std::string> defaults = classDefaults(cls);
  auto named = [&](const std::string &key) {
    if (cfg.contains(key))
      return configToken(cfg, key.c_str());
    auto d = defaults.find(key);
    return d != defaults.end() ? d->second : std::string();
  };
  for (const char *key : {"bos_token", "eos_token", "unk_token", "sep_token", "pad_token",
                          "cls_token", "mask_token"}) {
    std::string s = named(key);
    if (s.empty() || t.addedByContent.count(s))
      continue;
    t.addToken({s, 0, true, false, false, false, false, ""}, std::nullopt, cfgFile + ": " + key);
  }
  t.bos = named("bos_token");
  t.eos = named("eos_token");
}

/// LlamaTokenizer's and GemmaTokenizer's decoders: SentencePiece's space back to " ", bytes
/// from <0xNN> tokens, all joined.
std::vector<Decoder> sentencePieceDecoders() {
  return {{Decoder::Replace, Literal(kSpace), " "},
          {Decoder::ByteFallback, Literal(), ""},
          {Decoder::Fuse, Literal(), ""}};
}

void llamaPipeline(TokenizerImpl &t, const json &cfg) {
  bool addPrefixSpace = configBool(cfg, "add_prefix_space", true);
  bool legacy = configBool(cfg, "legacy", false);
  t.byteFallback = true;
  t.fuseUnk = true;
  t.ignoreMerges = false;
  t.unk.reset();
  PreTokenizer p;
  p.kind = PreTokenizer::Metaspace;
  p.prependScheme = addPrefixSpace ? (legacy ? "always" : "first") : "never";
  p.split = false;
  t.preTokenizers = {p};
  t.hasDecoder = true;
  t.decoders = sentencePieceDecoders();
  if (addPrefixSpace) {
    Decoder strip{Decoder::Strip, Literal(), " "};
    strip.start = 1;
    t.decoders.push_back(strip);
  }
}

void gemmaPipeline(TokenizerImpl &t, const json &cfg) {
  t.byteFallback = true;
  t.fuseUnk = true;
  t.ignoreMerges = false;
  std::string unkTok = cfg.contains("unk_token") ? configToken(cfg, "unk_token") : "<unk>";
  auto u = t.vocab.find(unkTok);
  t.unk = u != t.vocab.end() ? std::optional<uint32_t>(u->second) : std::nullopt;
  t.normalizers = {{Normalizer::Replace, Literal(" "), kSpace}};
  PreTokenizer p;
  p.kind = PreTokenizer::Split;
  p.literal = Literal(" ");
  p.behavior = "merged_with_previous";
  t.preTokenizers = {p};
  t.hasDecoder = true;
  t.decoders = sentencePieceDecoders();
}

/// Qwen2Tokenizer (NFC, its pattern, then the byte-level alphabet) and GPT2Tokenizer (the
/// ByteLevel pre-tokenizer with GPT-2's pattern).
void byteLevelPipeline(TokenizerImpl &t, const json &cfg, bool qwen2) {
  t.byteFallback = false;
  t.fuseUnk = false;
  t.ignoreMerges = false;
  t.unk.reset();
  bool addPrefixSpace = configBool(cfg, "add_prefix_space", false);
  PreTokenizer bl;
  bl.kind = PreTokenizer::ByteLevel;
  bl.addPrefixSpace = addPrefixSpace;
  t.normalizers.clear();
  t.preTokenizers.clear();
  if (qwen2) {
    t.normalizers = {{Normalizer::NFC, Literal(), ""}};
    PreTokenizer split;
    split.kind = PreTokenizer::Split;
    split.regex = std::make_shared<Regex>(kQwen2Pattern, "Qwen2Tokenizer's pattern");
    split.behavior = "isolated";
    t.preTokenizers.push_back(split);
    bl.useRegex = false;
  }
  t.preTokenizers.push_back(bl);
  t.hasDecoder = true;
  t.decoders = {{Decoder::ByteLevel, Literal(), ""}};
}

/// The pipeline of a tokenizer class transformers rebuilds from vocab and merges alone; false
/// for any other class, whose pipeline is tokenizer.json's.
bool classPipeline(TokenizerImpl &t, const json &cfg, const std::string &cls) {
  if (cls == "LlamaTokenizer")
    llamaPipeline(t, cfg);
  else if (cls == "GemmaTokenizer")
    gemmaPipeline(t, cfg);
  else if (cls == "Qwen2Tokenizer" || cls == "GPT2Tokenizer")
    byteLevelPipeline(t, cfg, cls == "Qwen2Tokenizer");
  else
    return false;
  return true;
}

// --- Checks across components -----------------------------------------------------------------

/// Refuses components that can make text grow more than limits.maxTextGrowth: the worst case
/// of each, composed, as n bytes -> f * n + c bytes.
void checkGrowth(const TokenizerImpl &t) {
  const TokenizerLimits &limits = t.limits;
  const std::string &file = t.file;
  double g = static_cast<double>(limits.maxTextGrowth), f = 1, c = 0;
  normalizerGrowth(t.normalizers, f, c);
  preTokenizerGrowth(t.preTokenizers, f, c);
  if (f > g || c > g) {
    char text[160];
    std::snprintf(text, sizeof text, "%.4g * n + %.4g bytes", f, c);
    throw LoadError(file + ": normalizer and pre_tokenizer: they can make an n-byte text " + text +
                    " long, " + beyond(limits.maxTextGrowth, "times (n + 1)", "maxTextGrowth"));
  }
  double d = decoderGrowth(t.decoders);
  if (d > g) {
    char text[64];
    std::snprintf(text, sizeof text, "%.4g", d);
    throw LoadError(file + ": decoder: the decoders can make a token's text " + text +
                    " times longer, " + beyond(limits.maxTextGrowth, "times", "maxTextGrowth"));
  }
}

/// The id of a special token a post-processor names by its string.
uint32_t tokenId(const TokenizerImpl &t, const std::string &tok, const std::string &where) {
  auto it = t.vocab.find(tok);
  if (it != t.vocab.end())
    return it->second;
  auto a = t.addedByContent.find(tok);
  if (a != t.addedByContent.end())
    return a->second;
  throw LoadError(where + ": token " + shown(tok) + " is not in the vocabulary");
}

/// Fills `t` from tokenizer.json `j` and tokenizer_config.json `cfgIn`, a section at a time.
void readTokenizer(TokenizerImpl &t, const json &j, const json &cfgIn,
                   const TokenizerSource &source) {
  const std::string &file = source.file;
  if (!j.is_object())
    throw LoadError(file + ": not a JSON object");
  const json &cfg = cfgIn.is_object() ? cfgIn : json::object();
  if (!j.contains("model") || !j["model"].is_object())
    throw LoadError(file + ": model: missing or not an object");
  t.loadModel(j["model"], source);
  if (j.contains("added_tokens"))
    t.loadAddedTokens(j["added_tokens"], source.addedTokens);
  std::string cls = tokenizerClass(cfg);
  addNamedTokens(t, cfg, cls, source.configFile);

  // The pipeline: the tokenizer class's own where transformers rebuilds it, else the file's.
  if (!classPipeline(t, cfg, cls)) {
    loadNormalizer(j.value("normalizer", json()), file + ": normalizer", t.limits, t.normalizers);
    loadPreTokenizer(j.value("pre_tokenizer", json()), file + ": pre_tokenizer", t.limits,
                     t.preTokenizers);
    const json &decoder = j.value("decoder", json());
    t.hasDecoder = !decoder.is_null();
    loadDecoder(decoder, file + ": decoder", t.limits, t.decoders);
  }
  checkGrowth(t);
  t.buildMatchers();

  // The post-processor: the file's. transformers ignores add_bos_token and add_eos_token of
  // tokenizer_config.json when there is a tokenizer.json, and with no post-processor in it
  // builds one that adds neither.
  loadPostProcessor(
      j.value("post_processor", json()), file + ": post_processor", t.limits,
      [&t](const std::string &tok, const std::string &where) { return tokenId(t, tok, where); },
      t.post);
  for (const PostItem &item : t.post)
    for (uint32_t id : item.ids)
      t.idEnd = std::max<int64_t>(t.idEnd, int64_t(id) + 1);
}

} // namespace

std::unique_ptr<Tokenizer> Tokenizer::load(const std::string &dir, std::string &error,
                                           const TokenizerLimits &limits) {
  TokenizerSource source;
  source.file = dir + "/tokenizer.json";
  source.configFile = dir + "/tokenizer_config.json";
  source.vocab = source.file + ": model.vocab";
  source.merges = source.file + ": model.merges";
  source.addedTokens = source.file + ": added_tokens";
  json j, cfg;
  try {
    bool found = false;
    j = readJson(source.file, true, found, limits);
    cfg = readJson(source.configFile, false, found, limits);
    if (!found)
      cfg = json::object();
  } catch (const LoadError &e) {
    error = e.what();
    return nullptr;
  } catch (const std::bad_alloc &) {
    error = source.file + ": not enough memory to load it";
    return nullptr;
  }
  return TokenizerBuilder::build(j, cfg, source, limits, error);
}

std::unique_ptr<Tokenizer> TokenizerBuilder::build(const json &j, const json &cfg,
                                                   const TokenizerSource &source,
                                                   const TokenizerLimits &limits,
                                                   std::string &error) {
  std::unique_ptr<Tokenizer> tok(new Tokenizer());
  TokenizerImpl &t = *tok->impl_;
  t.limits = limits;
  const std::string &file = source.file;
  t.file = file;
  try {
    readTokenizer(t, j, cfg, source);
  } catch (const LoadError &e) {
    error = e.what();
    return nullptr;
  } catch (const json::exception &e) {
    error = file + ": " + e.what();
    return nullptr;
  } catch (const std::bad_alloc &) {
    error = file + ": not enough memory to load it";
    return nullptr;
  }
  return tok;
}

} // namespace tpcrt
