// Tokenizer::fromGguf and loadChatTemplateGguf on GGUF files written here (metadata only):
// a small valid vocabulary read and used, and hostile metadata each refused with an error
// naming the key at fault. Conformance with transformers' GGUF tokenizer is
// test/conformance/tokenizers-gguf*.test.
#include "tpcrt/chat_template.h"
#include "tpcrt/gguf.h"
#include "tpcrt/tokenizer.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <functional>
#include <map>
#include <string>
#include <string_view>
#include <vector>

using namespace tpcrt;

namespace {

/// One metadata value, as the test writes it.
struct Value {
  GgufValueType type;
  std::string s;                      // String
  std::vector<std::string> strings;   // an array of strings
  std::vector<int64_t> ints;          // an array of I32, or a U32 / Bool scalar (ints[0])
  std::vector<float> floats;          // an array of F32
  GgufValueType element = GgufValueType::String;
};

Value str(std::string s) { return {GgufValueType::String, std::move(s), {}, {}, {}}; }
Value u32(int64_t v) { return {GgufValueType::U32, "", {}, {v}, {}}; }
Value boolean(bool v) { return {GgufValueType::Bool, "", {}, {v}, {}}; }
Value strings(std::vector<std::string> v) {
  return {GgufValueType::Array, "", std::move(v), {}, {}, GgufValueType::String};
}
Value i32s(std::vector<int64_t> v) {
  return {GgufValueType::Array, "", {}, std::move(v), {}, GgufValueType::I32};
}
Value f32s(std::vector<float> v) {
  return {GgufValueType::Array, "", {}, {}, std::move(v), GgufValueType::F32};
}

void put(std::string &s, uint64_t v, int bytes) {
  for (int i = 0; i < bytes; ++i)
    s += char(v >> (8 * i));
}
void putString(std::string &s, const std::string &v) {
  put(s, v.size(), 8);
  s += v;
}

/// A GGUF file of version 3 with these metadata pairs and no tensors, written to a
/// temporary file; its path.
std::string write(const std::map<std::string, Value> &metadata, const std::string &name) {
  std::string s = "GGUF";
  put(s, 3, 4);
  put(s, 0, 8);
  put(s, metadata.size(), 8);
  for (const auto &[key, v] : metadata) {
    putString(s, key);
    put(s, uint32_t(v.type), 4);
    switch (v.type) {
    case GgufValueType::String:
      putString(s, v.s);
      break;
    case GgufValueType::U32:
      put(s, uint64_t(v.ints[0]), 4);
      break;
    case GgufValueType::Bool:
      put(s, uint64_t(v.ints[0]), 1);
      break;
    default: // an array
      put(s, uint32_t(v.element), 4);
      if (v.element == GgufValueType::String) {
        put(s, v.strings.size(), 8);
        for (const std::string &e : v.strings)
          putString(s, e);
      } else if (v.element == GgufValueType::I32) {
        put(s, v.ints.size(), 8);
        for (int64_t e : v.ints)
          put(s, uint64_t(e), 4);
      } else {
        put(s, v.floats.size(), 8);
        for (float e : v.floats) {
          uint32_t bits;
          std::memcpy(&bits, &e, 4);
          put(s, bits, 4);
        }
      }
    }
  }
  while (s.size() % 32)
    s += '\0';
  std::string path = testing::TempDir() + "gguf-tokenizer-test-" + name + ".gguf";
  FILE *f = std::fopen(path.c_str(), "wb");
  EXPECT_NE(f, nullptr);
  std::fwrite(s.data(), 1, s.size(), f);
  std::fclose(f);
  return path;
}

/// A byte-level ("gpt2") vocabulary of the llama architecture: "a", "b", "ab", "<s>" (control).
std::map<std::string, Value> validGpt2() {
  return {{"general.architecture", str("llama")},
          {"tokenizer.ggml.model", str("gpt2")},
          {"tokenizer.ggml.tokens", strings({"a", "b", "ab", "<s>"})},
          {"tokenizer.ggml.token_type", i32s({1, 1, 1, 3})},
          {"tokenizer.ggml.merges", strings({"a b"})},
          {"tokenizer.ggml.bos_token_id", u32(3)},
          {"tokenizer.ggml.eos_token_id", u32(3)},
          {"tokenizer.ggml.add_space_prefix", boolean(false)},
          {"tokenizer.chat_template", str("{{ bos_token }}{{ messages[0].content }}")}};
}

/// A SentencePiece-style ("llama") vocabulary with scores and no merges.
std::map<std::string, Value> validLlama() {
  return {{"general.architecture", str("llama")},
          {"tokenizer.ggml.model", str("llama")},
          {"tokenizer.ggml.tokens", strings({"<unk>", "<s>", "\xE2\x96\x81", "h", "i",
                                             "hi", "\xE2\x96\x81hi"})},
          {"tokenizer.ggml.scores", f32s({0, 0, -1, -2, -3, -4, -5})},
          {"tokenizer.ggml.token_type", i32s({2, 3, 1, 1, 1, 1, 1})},
          {"tokenizer.ggml.bos_token_id", u32(1)},
          {"tokenizer.ggml.unknown_token_id", u32(0)}};
}

/// A Qwen-family vocabulary (qwen3moe) that lacks <|im_start|>, with add_space_prefix.
std::map<std::string, Value> validQwen() {
  return {{"general.architecture", str("qwen3moe")},
          {"tokenizer.ggml.model", str("gpt2")},
          {"tokenizer.ggml.tokens",
           strings({"a", "b", "ab", "ba", "<|endoftext|>", "<|im_end|>"})},
          {"tokenizer.ggml.token_type", i32s({1, 1, 1, 1, 3, 3})},
          {"tokenizer.ggml.merges", strings({"a b", "b a"})},
          {"tokenizer.ggml.bos_token_id", u32(4)},
          {"tokenizer.ggml.eos_token_id", u32(5)},
          {"tokenizer.ggml.add_space_prefix", boolean(true)}};
}

std::string loadError(const std::map<std::string, Value> &metadata, const std::string &name,
                      const TokenizerLimits &limits = TokenizerLimits()) {
  std::string error;
  std::unique_ptr<GgufFile> file = GgufFile::open(write(metadata, name), error);
  EXPECT_NE(file, nullptr) << error;
  if (!file)
    return error;
  std::unique_ptr<Tokenizer> tok = Tokenizer::fromGguf(*file, error, limits);
  EXPECT_EQ(tok, nullptr);
  return error;
}

} // namespace

TEST(GgufTokenizer, ReadsAByteLevelVocabulary) {
  std::string error;
  std::unique_ptr<GgufFile> file = GgufFile::open(write(validGpt2(), "gpt2"), error);
  ASSERT_NE(file, nullptr) << error;
  std::unique_ptr<Tokenizer> tok = Tokenizer::fromGguf(*file, error);
  ASSERT_NE(tok, nullptr) << error;
  auto ids = tok->encode("ab<s>a", true, error);
  ASSERT_TRUE(ids) << error;
  EXPECT_EQ(*ids, (std::vector<int64_t>{2, 3, 0})); // no BOS added, <s> special
  EXPECT_EQ(tok->decode({3, 2}, true), "ab");
  EXPECT_EQ(tok->idEnd(), 4);
  EXPECT_EQ(tok->bosToken(), "<s>");
  std::optional<std::string> source = loadChatTemplateGguf(*file, error);
  ASSERT_TRUE(source) << error;
  EXPECT_EQ(*source, "{{ bos_token }}{{ messages[0].content }}");
}

// A byte-level vocabulary of an architecture transformers builds no tokenizer for, read as
// llama.cpp reads it: the named pre-tokenizer, control tokens cut out, BOS added as the file
// says (Llama 3's pre-tokenizer adds it by default), decoded byte-level.
TEST(GgufTokenizer, ReadsOtherArchitecturesByteLevelVocabulariesAsLlamaCppDoes) {
  std::map<std::string, Value> metadata = validGpt2();
  metadata["general.architecture"] = str("smollm3");
  metadata["tokenizer.ggml.pre"] = str("llama-bpe");
  std::string error;
  std::unique_ptr<GgufFile> file = GgufFile::open(write(metadata, "smollm3"), error);
  ASSERT_NE(file, nullptr) << error;
  std::unique_ptr<Tokenizer> tok = Tokenizer::fromGguf(*file, error);
  ASSERT_NE(tok, nullptr) << error;
  auto ids = tok->encode("ab<s>a", true, error);
  ASSERT_TRUE(ids) << error;
  EXPECT_EQ(*ids, (std::vector<int64_t>{3, 2, 3, 0})); // BOS, then <s> cut out
  ids = tok->encode("ab<s>a", false, error);
  ASSERT_TRUE(ids) << error;
  EXPECT_EQ(*ids, (std::vector<int64_t>{2, 3, 0}));
  EXPECT_EQ(tok->decode({3, 2, 0}, true), "aba");

  metadata["tokenizer.ggml.add_bos_token"] = boolean(false);
  file = GgufFile::open(write(metadata, "smollm3-no-bos"), error);
  ASSERT_NE(file, nullptr) << error;
  tok = Tokenizer::fromGguf(*file, error);
  ASSERT_NE(tok, nullptr) << error;
  ids = tok->encode("ab", true, error);
  ASSERT_TRUE(ids) << error;
  EXPECT_EQ(*ids, (std::vector<int64_t>{2}));
}

TEST(GgufTokenizer, BuildsMergesFromScores) {
  std::string error;
  std::unique_ptr<GgufFile> file = GgufFile::open(write(validLlama(), "llama"), error);
  ASSERT_NE(file, nullptr) << error;
  std::unique_ptr<Tokenizer> tok = Tokenizer::fromGguf(*file, error);
  ASSERT_NE(tok, nullptr) << error;
  auto ids = tok->encode("hi", false, error);
  ASSERT_TRUE(ids) << error;
  EXPECT_EQ(*ids, (std::vector<int64_t>{6})); // "▁hi": the prefix space, two merges
  EXPECT_EQ(tok->decode(*ids, false), "hi");
  std::optional<std::string> source = loadChatTemplateGguf(*file, error);
  EXPECT_FALSE(source);
  EXPECT_NE(error.find("'tokenizer.chat_template'"), std::string::npos) << error;
}

TEST(GgufTokenizer, ReadsAQwenVocabularyAsGgufQwen2ConverterBuildsIt) {
  std::string error;
  std::unique_ptr<GgufFile> file = GgufFile::open(write(validQwen(), "qwen"), error);
  ASSERT_NE(file, nullptr) << error;
  std::unique_ptr<Tokenizer> tok = Tokenizer::fromGguf(*file, error);
  ASSERT_NE(tok, nullptr) << error;
  // <|im_start|>, absent, is numbered after the vocabulary; add_space_prefix puts a space
  // before each piece, one the vocabulary lacks ("Ġ"), which BPE without byte fallback drops.
  auto ids = tok->encode("ab<|im_start|>a<|im_end|>", true, error);
  ASSERT_TRUE(ids) << error;
  EXPECT_EQ(*ids, (std::vector<int64_t>{2, 6, 0, 5}));
  EXPECT_EQ(tok->idEnd(), 7);
  EXPECT_EQ(tok->bosToken(), "");
  EXPECT_EQ(tok->eosToken(), "<|endoftext|>"); // Qwen2Tokenizer's, not the file's <|im_end|>
}

TEST(GgufTokenizer, RefusesHostileMetadata) {
  struct Case {
    const char *name;
    std::function<void(std::map<std::string, Value> &)> change;
    std::vector<std::string> expected; // substrings of the error
  };
  std::vector<Case> cases = {
      {"merges-not-strings",
       [](auto &m) { m["tokenizer.ggml.merges"] = i32s({1, 2}); },
       {"'tokenizer.ggml.merges'", "not an array of strings"}},
      {"merge-without-space",
       [](auto &m) { m["tokenizer.ggml.merges"] = strings({"a b", "ab"}); },
       {"tokenizer.ggml.merges[1]", "not two tokens"}},
      {"merge-not-in-vocabulary",
       [](auto &m) { m["tokenizer.ggml.merges"] = strings({"a b", "b a"}); },
       {"tokenizer.ggml.merges[1]", "not in the vocabulary"}},
      {"token-types-short",
       [](auto &m) { m["tokenizer.ggml.token_type"] = i32s({1, 1, 3}); },
       {"tokenizer.ggml.token_type", "3 entries for 4 tokens"}},
      {"bos-out-of-range",
       [](auto &m) { m["tokenizer.ggml.bos_token_id"] = u32(4); },
       {"'tokenizer.ggml.bos_token_id'", "outside [0, 3]"}},
      {"unk-out-of-range",
       [](auto &m) { m["tokenizer.ggml.unknown_token_id"] = u32(1000); },
       {"'tokenizer.ggml.unknown_token_id'"}},
      {"bert", [](auto &m) { m["tokenizer.ggml.model"] = str("bert"); },
       {"tokenizer.ggml.model", "'bert'", "not supported"}},
      {"t5", [](auto &m) { m["general.architecture"] = str("t5"); },
       {"general.architecture", "Unigram"}},
      {"phi3-gpt2", [](auto &m) { m["general.architecture"] = str("phi3"); },
       {"tokenizer.ggml.model: 'gpt2' under architecture 'phi3'", "SentencePiece"}},
      {"qwen35", [](auto &m) { m["general.architecture"] = str("qwen35"); },
       {"general.architecture", "'qwen35'", "other special tokens"}},
      {"no-merges-no-scores", [](auto &m) { m.erase("tokenizer.ggml.merges"); },
       {"tokenizer.ggml.merges: missing"}},
      {"token-not-utf8",
       [](auto &m) { m["tokenizer.ggml.tokens"] = strings({"a", "b", "ab", "\xFF"}); },
       {"tokenizer.ggml.tokens[3]", "UTF-8"}},
      {"no-tokens", [](auto &m) { m.erase("tokenizer.ggml.tokens"); },
       {"'tokenizer.ggml.tokens'"}},
      {"space-prefix-not-bool",
       [](auto &m) { m["tokenizer.ggml.add_space_prefix"] = u32(1); },
       {"'tokenizer.ggml.add_space_prefix'"}},
      // Read as llama.cpp reads them: the pre-tokenizer named must be one tpc knows, and a
      // BOS to be added must be there.
      {"olmo2-no-pre", [](auto &m) { m["general.architecture"] = str("olmo2"); },
       {"tokenizer.ggml.pre: none", "'olmo2'", "llama-bpe"}},
      {"deepseek2-unknown-pre",
       [](auto &m) {
         m["general.architecture"] = str("deepseek2");
         m["tokenizer.ggml.pre"] = str("chatglm-bpe");
       },
       {"tokenizer.ggml.pre: 'chatglm-bpe'", "does not know"}},
      {"llama4-bos-missing",
       [](auto &m) {
         m["general.architecture"] = str("llama4");
         m["tokenizer.ggml.pre"] = str("llama4");
         m["tokenizer.ggml.add_bos_token"] = boolean(true);
         m.erase("tokenizer.ggml.bos_token_id");
       },
       {"BOS is to be added", "no tokenizer.ggml.bos_token_id"}},
      {"gpt-oss-spm",
       [](auto &m) {
         m["general.architecture"] = str("gpt-oss");
         m["tokenizer.ggml.model"] = str("llama");
       },
       {"tokenizer.ggml.model: 'llama' under architecture 'gpt-oss'", "byte-level"}},
  };
  for (const Case &c : cases) {
    std::map<std::string, Value> metadata = validGpt2();
    c.change(metadata);
    std::string error = loadError(metadata, c.name);
    for (const std::string &want : c.expected)
      EXPECT_NE(error.find(want), std::string::npos) << c.name << ": " << error;
  }

  std::map<std::string, Value> qwen = validQwen();
  qwen["tokenizer.ggml.merges"] = strings({});
  std::string error = loadError(qwen, "qwen-no-merges");
  EXPECT_NE(error.find("tokenizer.ggml.merges: none"), std::string::npos) << error;
  qwen = validQwen();
  qwen["tokenizer.ggml.model"] = str("llama");
  error = loadError(qwen, "qwen-llama-model");
  EXPECT_NE(error.find("tokenizer.ggml.model: 'llama'"), std::string::npos) << error;

  std::map<std::string, Value> llama = validLlama();
  llama["tokenizer.ggml.scores"] = f32s({0, 0, -1, -2, std::nanf(""), -4, -5});
  error = loadError(llama, "nan-score");
  EXPECT_NE(error.find("tokenizer.ggml.scores[4]"), std::string::npos) << error;
  llama["tokenizer.ggml.scores"] = f32s({0, 0, -1});
  error = loadError(llama, "scores-short");
  EXPECT_NE(error.find("tokenizer.ggml.scores: 3 entries for 7 tokens"), std::string::npos)
      << error;
}

/// validLlama() under an architecture read as llama.cpp reads it, with a user-defined token
/// "<u>" and a control token "<c>" beside <s>.
std::map<std::string, Value> validSentencePiece(const char *arch) {
  std::map<std::string, Value> m = validLlama();
  m["general.architecture"] = str(arch);
  m["tokenizer.ggml.tokens"] = strings(
      {"<unk>", "<s>", "\xE2\x96\x81", "h", "i", "hi", "\xE2\x96\x81hi", "<u>", "<c>", " "});
  m["tokenizer.ggml.scores"] = f32s({0, 0, -1, -2, -3, -4, -5, 0, 0, 0});
  m["tokenizer.ggml.token_type"] = i32s({2, 3, 1, 1, 1, 1, 1, 4, 3, 1});
  return m;
}

// The rules of llama.cpp's SentencePiece reading on a vocabulary small enough to follow by
// hand; conformance/tokenizers-spm-llama-cpp.test checks them against llama-tokenize.
TEST(GgufTokenizer, ReadsGemmaAndPhi3AsLlamaCppDoes) {
  std::string error;
  std::unique_ptr<GgufFile> file =
      GgufFile::open(write(validSentencePiece("gemma3"), "spm-gemma3"), error);
  ASSERT_NE(file, nullptr) << error;
  std::unique_ptr<Tokenizer> tok = Tokenizer::fromGguf(*file, error);
  ASSERT_NE(tok, nullptr) << error;
  // BOS where the file (by default) asks; a user-defined token cut out as a control one is,
  // and the space prefix again after each.
  auto ids = tok->encode("hi<u>hi<c> hi", true, error);
  ASSERT_TRUE(ids) << error;
  EXPECT_EQ(*ids, (std::vector<int64_t>{1, 6, 7, 6, 8, 2, 6}));
  ids = tok->encode("hi", false, error);
  ASSERT_TRUE(ids) << error;
  EXPECT_EQ(*ids, (std::vector<int64_t>{6}));
  // A character the vocabulary lacks, with no byte tokens: unk for each of its bytes.
  ids = tok->encode("\xC3\xA9", false, error);
  ASSERT_TRUE(ids) << error;
  EXPECT_EQ(*ids, (std::vector<int64_t>{2, 0, 0}));
  EXPECT_FALSE(tok->encode("h\xFF", false, error));
  EXPECT_NE(error.find("not valid UTF-8"), std::string::npos) << error;
  // The user-defined token is shown when special ones are skipped; the control one is not.
  EXPECT_EQ(tok->decode({6, 7, 8, 6}, true), "hi<u> hi");
  EXPECT_EQ(tok->bosToken(), "<s>"); // the file's, not swapped as transformers swaps them

  // A phi3 file named Phi-3 drops the whitespace after a special token but <s>.
  std::map<std::string, Value> phi3 = validSentencePiece("phi3");
  phi3["general.name"] = str("Phi-3-mini");
  phi3["tokenizer.ggml.add_bos_token"] = boolean(false);
  file = GgufFile::open(write(phi3, "spm-phi3"), error);
  ASSERT_NE(file, nullptr) << error;
  tok = Tokenizer::fromGguf(*file, error);
  ASSERT_NE(tok, nullptr) << error;
  ids = tok->encode("<c>  hi<s> hi", true, error);
  ASSERT_TRUE(ids) << error;
  EXPECT_EQ(*ids, (std::vector<int64_t>{8, 6, 1, 2, 6}));
}

// The cut at special tokens against llama.cpp's own way of making it (tokenizer_st_partition:
// each special token in turn, longest first, searched for in every raw stretch left), written
// here as llama.cpp writes it, on random texts over a small alphabet whose special tokens
// overlap each other everywhere, with and without Phi-3's rstrip. The raw stretches left hold
// no special token whole, so no pair of their characters merges: each is its characters.
TEST(GgufTokenizer, CutsSpecialTokensAsLlamaCppDoes) {
  const std::vector<std::string> specials = {"ab", "ba", "aba", "b", "bab", "abab", "ca", "cab"};
  // The vocabulary: <unk>, <s>, the raw characters (a, b, c and the escaped space), byte
  // tokens for nothing else, then the special tokens (user-defined, so none is skipped).
  std::vector<std::string> tokens = {"<unk>", "<s>", "a", "c", "\xE2\x96\x81"};
  std::vector<int64_t> types = {2, 3, 1, 1, 1};
  for (const std::string &sp : specials) {
    tokens.push_back(sp);
    types.push_back(4);
  }
  auto idOf = [&](const std::string &t) {
    return int64_t(std::find(tokens.begin(), tokens.end(), t) - tokens.begin());
  };
  // Longest first; of equal lengths, the lower id (the order they are listed in).
  std::vector<std::string> order = specials;
  std::stable_sort(order.begin(), order.end(),
                   [](const std::string &a, const std::string &b) { return a.size() > b.size(); });

  uint64_t seed = 12345;
  auto next = [&](uint64_t n) {
    seed = seed * 6364136223846793005ull + 1442695040888963407ull;
    return (seed >> 33) % n;
  };
  for (bool phi3 : {false, true}) {
    std::map<std::string, Value> m = validSentencePiece("gemma3");
    m["tokenizer.ggml.tokens"] = strings(tokens);
    m["tokenizer.ggml.token_type"] = i32s(types);
    m["tokenizer.ggml.scores"] = f32s(std::vector<float>(tokens.size(), 0.0f));
    m["tokenizer.ggml.add_bos_token"] = boolean(false);
    m["general.name"] = str(phi3 ? "phi3 test" : "test");
    std::string error;
    std::unique_ptr<GgufFile> file =
        GgufFile::open(write(m, phi3 ? "spm-cut-phi3" : "spm-cut"), error);
    ASSERT_NE(file, nullptr) << error;
    std::unique_ptr<Tokenizer> tok = Tokenizer::fromGguf(*file, error);
    ASSERT_NE(tok, nullptr) << error;
    for (int trial = 0; trial < 2000; ++trial) {
      std::string text;
      for (uint64_t n = next(24); n > 0; --n)
        text += "abc "[next(4)];
      // llama.cpp's partition: fragments are raw (offset, length) or a token.
      struct Frag {
        size_t off, len;
        int64_t token;
      };
      std::vector<Frag> frags;
      if (!text.empty())
        frags.push_back({0, text.size(), -1});
      for (const std::string &sp : order) {
        std::vector<Frag> out;
        for (const Frag &f : frags) {
          if (f.token >= 0) {
            out.push_back(f);
            continue;
          }
          size_t base = f.off, len = f.len;
          for (;;) {
            size_t match = std::string_view(text.data(), base + len).find(sp, base);
            if (match == std::string_view::npos) {
              out.push_back({base, len, -1});
              break;
            }
            if (match > base)
              out.push_back({base, match - base, -1});
            out.push_back({0, 0, idOf(sp)});
            size_t rest = match + sp.size(), restLen = base + len - rest;
            if (phi3)
              while (restLen > 0 && std::isspace(static_cast<unsigned char>(text[rest]))) {
                ++rest;
                --restLen;
              }
            if (restLen == 0)
              break;
            base = rest;
            len = restLen;
          }
        }
        frags.swap(out);
      }
      std::vector<int64_t> want;
      for (const Frag &f : frags) {
        if (f.token >= 0) {
          want.push_back(f.token);
          continue;
        }
        // The space prefix (validSentencePiece's files keep the default) and the characters.
        want.push_back(idOf("\xE2\x96\x81"));
        for (char c : text.substr(f.off, f.len))
          want.push_back(c == ' ' ? idOf("\xE2\x96\x81") : idOf(std::string(1, c)));
      }
      auto got = tok->encode(text, false, error);
      ASSERT_TRUE(got) << error;
      ASSERT_EQ(*got, want) << "text \"" << text << "\"" << (phi3 ? " (phi3)" : "");
    }
  }
}

TEST(GgufTokenizer, RefusesSentencePieceFilesItCannotEncode) {
  std::map<std::string, Value> m = validSentencePiece("gemma2");
  m["tokenizer.ggml.tokens"] = strings({"h", "i", "hi"});
  m["tokenizer.ggml.scores"] = f32s({0, 0, 0});
  m["tokenizer.ggml.token_type"] = i32s({1, 1, 1});
  m.erase("tokenizer.ggml.bos_token_id");
  m.erase("tokenizer.ggml.unknown_token_id");
  m["tokenizer.ggml.add_bos_token"] = boolean(false);
  std::string error = loadError(m, "spm-no-bytes");
  EXPECT_NE(error.find("no <0xXX> token for some byte, and no unknown token"),
            std::string::npos) << error;
  m["tokenizer.ggml.tokens"] = strings({"<unk>"});
  m["tokenizer.ggml.scores"] = f32s({0});
  m["tokenizer.ggml.token_type"] = i32s({2});
  m["tokenizer.ggml.add_bos_token"] = boolean(true);
  error = loadError(m, "spm-no-bos");
  EXPECT_NE(error.find("tokenizer.ggml.add_bos_token"), std::string::npos) << error;
  m = validSentencePiece("gemma");
  m["tokenizer.ggml.add_eos_token"] = u32(1);
  error = loadError(m, "spm-eos-not-bool");
  EXPECT_NE(error.find("'tokenizer.ggml.add_eos_token'"), std::string::npos) << error;
}

TEST(GgufTokenizer, AppliesTheLimits) {
  TokenizerLimits limits;
  limits.maxTokenBytes = 1;
  std::string error = loadError(validGpt2(), "token-bytes", limits);
  EXPECT_NE(error.find("tokenizer.ggml.tokens[2]"), std::string::npos) << error;
  EXPECT_NE(error.find("maxTokenBytes"), std::string::npos) << error;
  limits = TokenizerLimits();
  limits.maxVocab = 3;
  error = loadError(validGpt2(), "vocab", limits);
  EXPECT_NE(error.find("maxVocab"), std::string::npos) << error;
  limits = TokenizerLimits();
  limits.maxMerges = 1;
  error = loadError(validLlama(), "merges-built", limits);
  EXPECT_NE(error.find("tokenizer.ggml.scores"), std::string::npos) << error;
  EXPECT_NE(error.find("maxMerges"), std::string::npos) << error;
  limits = TokenizerLimits();
  limits.maxAddedTokens = 0;
  error = loadError(validGpt2(), "added", limits);
  EXPECT_NE(error.find("tokenizer.ggml.token_type"), std::string::npos) << error;
  EXPECT_NE(error.find("maxAddedTokens"), std::string::npos) << error;
}
