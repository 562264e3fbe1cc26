// libtpcrt's tokenizer: streaming decode that never returns half a character, and the errors
// of load() for files it cannot read. Conformance with transformers is
// test/conformance/tokenizers.test.
#include "tpcrt/tokenizer.h"

#include <gtest/gtest.h>

#include <cstdio>
#include <fstream>
#include <sys/stat.h>
#include <unistd.h>

using namespace tpcrt;

namespace {

/// A fresh directory holding tokenizer.json with `json` (nothing when null).
std::string tokenizerDir(const std::string &name, const char *json) {
  std::string dir = ::testing::TempDir() + "tpc-tok-" + std::to_string(getpid()) + "-" + name;
  mkdir(dir.c_str(), 0755);
  std::remove((dir + "/tokenizer.json").c_str());
  if (json)
    std::ofstream(dir + "/tokenizer.json") << json;
  return dir;
}

/// A SentencePiece-style vocabulary (Llama 2): <unk> <s> </s>, the 256 byte tokens, ▁, a, b,
/// ▁a, with a Metaspace pipeline and the decoders Llama lists.
std::string llamaStyleJson() {
  std::string vocab = R"("<unk>": 0, "<s>": 1, "</s>": 2)";
  for (int b = 0; b < 256; ++b) {
    char entry[32];
    std::snprintf(entry, sizeof entry, R"(, "<0x%02X>": %d)", b, 3 + b);
    vocab += entry;
  }
  vocab += ", \"\xE2\x96\x81\": 259, \"a\": 260, \"b\": 261, \"\xE2\x96\x81"
           "a\": 262";
  return R"({"added_tokens": [
    {"id": 0, "content": "<unk>", "special": true},
    {"id": 1, "content": "<s>", "special": true},
    {"id": 2, "content": "</s>", "special": true}],
  "normalizer": null,
  "pre_tokenizer": {"type": "Metaspace", "replacement": "\u2581", "prepend_scheme": "first",
                    "split": false},
  "post_processor": {"type": "TemplateProcessing",
    "single": [{"SpecialToken": {"id": "<s>", "type_id": 0}},
               {"Sequence": {"id": "A", "type_id": 0}}],
    "special_tokens": {"<s>": {"id": "<s>", "ids": [1], "tokens": ["<s>"]}}},
  "decoder": {"type": "Sequence", "decoders": [
    {"type": "Replace", "pattern": {"String": "\u2581"}, "content": " "},
    {"type": "ByteFallback"}, {"type": "Fuse"},
    {"type": "Strip", "content": " ", "start": 1, "stop": 0}]},
  "model": {"type": "BPE", "byte_fallback": true, "fuse_unk": true, "unk_token": "<unk>",
    "vocab": {)" +
         vocab + R"(}, "merges": [["\u2581", "a"]]}})";
}

bool validUtf8(const std::string &s) {
  for (size_t i = 0; i < s.size();) {
    auto c = static_cast<unsigned char>(s[i]);
    size_t n = c < 0x80 ? 1 : (c >> 5) == 6 ? 2 : (c >> 4) == 14 ? 3 : (c >> 3) == 30 ? 4 : 0;
    if (n == 0 || i + n > s.size())
      return false;
    for (size_t k = 1; k < n; ++k)
      if ((static_cast<unsigned char>(s[i + k]) & 0xC0) != 0x80)
        return false;
    i += n;
  }
  return true;
}

} // namespace

TEST(Tokenizer, ByteFallbackEncodesAndDecodes) {
  std::string error;
  auto tok = Tokenizer::load(tokenizerDir("llama", llamaStyleJson().c_str()), error);
  ASSERT_TRUE(tok) << error;
  // "a 😀": ▁a, ▁, then the emoji's four bytes F0 9F 98 80 as byte tokens.
  std::vector<int64_t> ids = tok->encode("a \xF0\x9F\x98\x80", true);
  std::vector<int64_t> want = {1, 262, 259, 3 + 0xF0, 3 + 0x9F, 3 + 0x98, 3 + 0x80};
  EXPECT_EQ(ids, want);
  EXPECT_EQ(tok->decode(ids, true), "a \xF0\x9F\x98\x80");
  EXPECT_EQ(tok->decode(ids, false), "<s> a \xF0\x9F\x98\x80");
  EXPECT_EQ(tok->id("</s>"), 2);
  EXPECT_EQ(tok->id("\xE2\x96\x81"
                    "a"),
            262);
  EXPECT_FALSE(tok->id("nope"));
}

TEST(Tokenizer, StreamHoldsBytesOfAnUnfinishedCharacter) {
  std::string error;
  auto tok = Tokenizer::load(tokenizerDir("stream", llamaStyleJson().c_str()), error);
  ASSERT_TRUE(tok) << error;
  // ▁a, then 😀 split over four byte-fallback tokens, then ▁a, then 😀 again, cut short.
  std::vector<int64_t> ids = {1,        262, 3 + 0xF0, 3 + 0x9F, 3 + 0x98,
                              3 + 0x80, 262, 3 + 0xF0, 3 + 0x9F};
  Tokenizer::Stream stream = tok->stream(true);
  std::vector<std::string> chunks;
  for (int64_t id : ids)
    chunks.push_back(stream.push(id));
  chunks.push_back(stream.finish());
  std::vector<std::string> want = {
      "", "a", "", "", "", "\xF0\x9F\x98\x80", " a", "", "", "\xEF\xBF\xBD\xEF\xBF\xBD"};
  EXPECT_EQ(chunks, want);
  std::string all;
  for (const std::string &c : chunks) {
    EXPECT_TRUE(validUtf8(c)) << c;
    all += c;
  }
  EXPECT_EQ(all, tok->decode(ids, true));
}

TEST(Tokenizer, MissingFileIsNamed) {
  std::string error;
  std::string dir = tokenizerDir("missing", nullptr);
  EXPECT_FALSE(Tokenizer::load(dir, error));
  EXPECT_EQ(error, dir + "/tokenizer.json: cannot be opened");
}

TEST(Tokenizer, MalformedJsonIsNamed) {
  std::string error;
  std::string dir = tokenizerDir("malformed", R"({"model": {"type": "BPE", )");
  EXPECT_FALSE(Tokenizer::load(dir, error));
  EXPECT_EQ(error, dir + "/tokenizer.json: not valid JSON");
}

TEST(Tokenizer, OtherModelKindsAreRefused) {
  for (const char *kind : {"WordPiece", "Unigram", "WordLevel"}) {
    std::string error;
    std::string json = std::string(R"({"model": {"type": ")") + kind + R"(", "vocab": {}}})";
    std::string dir = tokenizerDir(kind, json.c_str());
    EXPECT_FALSE(Tokenizer::load(dir, error));
    EXPECT_EQ(error, dir + "/tokenizer.json: model.type: a " + kind +
                         " model is not supported (tpc reads BPE tokenizers only)");
  }
}

TEST(Tokenizer, MissingFieldIsNamed) {
  std::string error;
  std::string dir = tokenizerDir("nomerges", R"({"model": {"type": "BPE", "vocab": {"a": 0}}})");
  EXPECT_FALSE(Tokenizer::load(dir, error));
  EXPECT_EQ(error, dir + "/tokenizer.json: model.merges: missing or not a list");

  dir = tokenizerDir("badpre", R"({"model": {"type": "BPE", "vocab": {}, "merges": []},
    "pre_tokenizer": {"type": "Digits"}})");
  EXPECT_FALSE(Tokenizer::load(dir, error));
  EXPECT_EQ(error, dir + "/tokenizer.json: pre_tokenizer: pre-tokenizer type 'Digits' is not "
                         "supported");

  dir = tokenizerDir("badflag", R"({"model": {"type": "BPE", "vocab": {}, "merges": [],
    "byte_fallback": "yes"}})");
  EXPECT_FALSE(Tokenizer::load(dir, error));
  EXPECT_EQ(error, dir + "/tokenizer.json: model.byte_fallback: not a boolean");
}
