// libtpcrt's tokenizer: streaming decode that never returns half a character and always adds
// up to decode(), the errors of load() for files it cannot read, and what it does with hostile
// files and text (issue 26): every limit named, nothing that crashes, hangs or grows without
// bound. Conformance with transformers is test/conformance/tokenizers.test; expected texts
// here that are not plain reasoning come from the tokenizers library (0.23, transformers
// 5.17's), as the comments say.
#include "tpcrt/tokenizer.h"

#include <gtest/gtest.h>

#include <chrono>
#include <cstdio>
#include <fstream>
#include <limits>
#include <random>
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
std::string tokenizerDir(const std::string &name, const std::string &json) {
  return tokenizerDir(name, json.c_str());
}

/// Loads tokenizer.json text, failing the test (with load's error) when it cannot.
std::unique_ptr<Tokenizer> loaded(const std::string &name, const std::string &json,
                                  const TokenizerLimits &limits = TokenizerLimits()) {
  std::string error;
  auto tok = Tokenizer::load(tokenizerDir(name, json), error, limits);
  EXPECT_TRUE(tok) << error;
  return tok;
}

/// load()'s error for tokenizer.json text, without the directory ("" when it loads).
std::string loadError(const std::string &name, const std::string &json,
                      const TokenizerLimits &limits = TokenizerLimits()) {
  std::string error, dir = tokenizerDir(name, json);
  if (Tokenizer::load(dir, error, limits))
    return "";
  std::string prefix = dir + "/";
  return error.compare(0, prefix.size(), prefix) == 0 ? error.substr(prefix.size()) : error;
}

/// encode()'s ids, or {-1} with the error in `error`.
std::vector<int64_t> encoded(const Tokenizer &tok, const std::string &text,
                             std::string *error = nullptr, bool addSpecial = false) {
  std::string e;
  std::optional<std::vector<int64_t>> ids = tok.encode(text, addSpecial, e);
  if (error)
    *error = e;
  return ids ? *ids : std::vector<int64_t>{-1};
}

/// A BPE model with `vocab` (JSON members), `merges` and the rest of tokenizer.json.
std::string bpeJson(const std::string &vocab, const std::string &rest = "",
                    const std::string &merges = "") {
  return R"({"model": {"type": "BPE", "vocab": {)" + vocab + R"(}, "merges": [)" + merges + "]}" +
         (rest.empty() ? "" : ", " + rest) + "}";
}

/// GPT-2's byte-level alphabet as JSON escapes: each byte's stand-in character.
std::string byteLevelChar(int b) {
  static int order[256];
  static bool made = false;
  if (!made) {
    for (int c = 0, next = 0; c < 256; ++c) {
      bool self = (c >= 33 && c <= 126) || (c >= 161 && c <= 172) || (c >= 174 && c <= 255);
      order[c] = self ? c : 256 + next++;
    }
    made = true;
  }
  char esc[8];
  std::snprintf(esc, sizeof esc, "\\u%04X", order[b]);
  return esc;
}

/// A byte-level tokenizer as examples/tokenizer.json is (GPT-2's): the 256 bytes' stand-ins,
/// id = the byte, no merges, the ByteLevel pre-tokenizer and decoder.
std::string byteLevelJson() {
  std::string vocab;
  for (int b = 0; b < 256; ++b)
    vocab += (b ? ", \"" : "\"") + byteLevelChar(b) + "\": " + std::to_string(b);
  return bpeJson(vocab, R"("pre_tokenizer": {"type": "ByteLevel", "add_prefix_space": false},
    "decoder": {"type": "ByteLevel"})");
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

/// Whether s is valid UTF-8 as Rust's str is: no overlong forms, surrogates, or code points
/// past U+10FFFF, no character cut short.
bool validUtf8(const std::string &s) {
  for (size_t i = 0; i < s.size();) {
    auto c = static_cast<unsigned char>(s[i]);
    size_t n = c < 0x80                 ? 1
               : c >= 0xC2 && c <= 0xDF ? 2
               : c >= 0xE0 && c <= 0xEF ? 3
               : c >= 0xF0 && c <= 0xF4 ? 4
                                        : 0;
    if (n == 0 || i + n > s.size())
      return false;
    unsigned char lo = c == 0xE0 ? 0xA0 : c == 0xF0 ? 0x90 : 0x80;
    unsigned char hi = c == 0xED ? 0x9F : c == 0xF4 ? 0x8F : 0xBF;
    for (size_t k = 1; k < n; ++k, lo = 0x80, hi = 0xBF) {
      auto d = static_cast<unsigned char>(s[i + k]);
      if (d < lo || d > hi)
        return false;
    }
    i += n;
  }
  return true;
}

/// Streams ids; checks every piece is valid UTF-8 and that they add up to decode().
std::vector<std::string> streamed(const Tokenizer &tok, const std::vector<int64_t> &ids,
                                  bool skipSpecial) {
  Tokenizer::Stream stream = tok.stream(skipSpecial);
  std::vector<std::string> chunks;
  for (int64_t id : ids)
    chunks.push_back(stream.push(id));
  chunks.push_back(stream.finish());
  std::string all;
  for (const std::string &c : chunks) {
    EXPECT_TRUE(validUtf8(c)) << "a piece of " << ::testing::PrintToString(ids);
    all += c;
  }
  std::string whole = tok.decode(ids, skipSpecial);
  EXPECT_TRUE(validUtf8(whole)) << ::testing::PrintToString(ids);
  EXPECT_EQ(all, whole) << ::testing::PrintToString(ids);
  return chunks;
}

double secondsSince(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

const std::string kFFFD = "\xEF\xBF\xBD";

} // namespace

TEST(Tokenizer, ByteFallbackEncodesAndDecodes) {
  std::string error;
  auto tok = Tokenizer::load(tokenizerDir("llama", llamaStyleJson().c_str()), error);
  ASSERT_TRUE(tok) << error;
  // "a 😀": ▁a, ▁, then the emoji's four bytes F0 9F 98 80 as byte tokens.
  std::vector<int64_t> ids = encoded(*tok, "a \xF0\x9F\x98\x80", nullptr, true);
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
  // The run of byte tokens is held until ▁a ends it: a fifth byte that made it invalid would
  // turn all of it into U+FFFD. At the end, the two bytes of the cut 😀 are one U+FFFD each.
  std::vector<int64_t> ids = {1,        262, 3 + 0xF0, 3 + 0x9F, 3 + 0x98,
                              3 + 0x80, 262, 3 + 0xF0, 3 + 0x9F};
  std::vector<std::string> want(10, "");
  want[1] = "a";
  want[6] = "\xF0\x9F\x98\x80 a";
  want[9] = kFFFD + kFFFD;
  EXPECT_EQ(streamed(*tok, ids, true), want);
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

// --- Untrusted text and files (issue 26) ------------------------------------------------------

// `printf 'ab\xff' | tpc-tokenize DIR encode` with a byte-level tokenizer died in PCRE2, which
// was told not to check the text. encode() now names the first byte that begins no valid
// character.
TEST(Tokenizer, InvalidUtf8IsRefusedWithItsOffset) {
  auto tok = loaded("invalid-utf8", byteLevelJson());
  ASSERT_TRUE(tok);
  std::string error;
  EXPECT_EQ(encoded(*tok, "ab\xff", &error), std::vector<int64_t>{-1});
  EXPECT_EQ(error, "not valid UTF-8: byte 0xFF at offset 2 begins no valid character");
  struct Case {
    std::string text, where;
  };
  for (const Case &c :
       std::vector<Case>{{"\xE2\x82", "byte 0xE2 at offset 0"},         // cut short
                         {"a\xC0\x80", "byte 0xC0 at offset 1"},        // overlong
                         {"ab\xED\xA0\x80", "byte 0xED at offset 2"},   // surrogate
                         {"\xF4\x90\x80\x80", "byte 0xF4 at offset 0"}, // > U+10FFFF
                         {"ok \xF0\x9F\x98", "byte 0xF0 at offset 3"}}) {
    EXPECT_EQ(encoded(*tok, c.text, &error), std::vector<int64_t>{-1}) << c.where;
    EXPECT_EQ(error, "not valid UTF-8: " + c.where + " begins no valid character");
  }
  // Valid text still encodes: each byte is a token of its own here.
  EXPECT_EQ(encoded(*tok, "h\xC3\xA9 \xF0\x9F\x98\x80"),
            (std::vector<int64_t>{'h', 0xC3, 0xA9, ' ', 0xF0, 0x9F, 0x98, 0x80}));

  // The SentencePiece-style pipeline (no regex) refuses it too, rather than guess.
  auto llama = loaded("invalid-utf8-llama", llamaStyleJson());
  ASSERT_TRUE(llama);
  EXPECT_EQ(encoded(*llama, "a\x80", &error), std::vector<int64_t>{-1});
  EXPECT_EQ(error, "not valid UTF-8: byte 0x80 at offset 1 begins no valid character");
}

// (a|a)+$ backtracks 2^n ways before the "!": PCRE2's match-limit error was taken for "no
// more matches", and the text silently lost its pieces. It is an error, reported at once.
TEST(Tokenizer, CatastrophicRegexIsStoppedByItsLimits) {
  std::string dir = tokenizerDir("regex-limit", bpeJson(R"("a": 0, "!": 1)", R"(
    "pre_tokenizer": {"type": "Split", "pattern": {"Regex": "(a|a)+$"}, "behavior": "Isolated"})"));
  std::string error;
  auto tok = Tokenizer::load(dir, error);
  ASSERT_TRUE(tok) << error;
  auto start = std::chrono::steady_clock::now();
  EXPECT_EQ(encoded(*tok, std::string(40, 'a') + "!", &error), std::vector<int64_t>{-1});
  EXPECT_EQ(error, dir + "/tokenizer.json: pre_tokenizer.pattern: a match takes more than "
                         "1000000 steps (limit regexMatchLimit)");
  EXPECT_LT(secondsSince(start), 5.0);

  // All matches of one encode() together: 1 step a byte beyond three times one match's 1000
  // here. Each match of "a" is charged its first limit (32 steps), so 100 of them run out.
  TokenizerLimits small;
  small.regexMatchLimit = 1000;
  small.regexStepsPerByte = 1;
  dir = tokenizerDir("regex-budget", bpeJson(R"("a": 0)", R"(
    "pre_tokenizer": {"type": "Split", "pattern": {"Regex": "a"}, "behavior": "Isolated"})"));
  tok = Tokenizer::load(dir, error, small);
  ASSERT_TRUE(tok) << error;
  EXPECT_EQ(encoded(*tok, std::string(10, 'a')), std::vector<int64_t>(10, 0));
  EXPECT_EQ(encoded(*tok, std::string(100, 'a'), &error), std::vector<int64_t>{-1});
  EXPECT_EQ(error, dir + "/tokenizer.json: pre_tokenizer.pattern: a text of 100 bytes takes "
                         "more than 3101 regex steps (limit regexStepsPerByte)");

  // Nested backtracking: each repetition of the group is a level.
  small = TokenizerLimits();
  small.regexDepthLimit = 50;
  dir = tokenizerDir("regex-depth", bpeJson(R"("a": 0, "b": 1)", R"(
    "pre_tokenizer": {"type": "Split", "pattern": {"Regex": "(?:a|b)+"},
                      "behavior": "Isolated"})"));
  tok = Tokenizer::load(dir, error, small);
  ASSERT_TRUE(tok) << error;
  EXPECT_EQ(encoded(*tok, std::string(1000, 'a'), &error), std::vector<int64_t>{-1});
  EXPECT_EQ(error, dir + "/tokenizer.json: pre_tokenizer.pattern: a match nests more than 50 "
                         "backtracking levels (limit regexDepthLimit)");
}

// A Strip decoder with an empty content and a huge start matched the content 2^64 times at
// one place: decode never returned. The tokenizers library reads the content as one
// character, and so does load().
TEST(Tokenizer, StripDecoderCannotHang) {
  EXPECT_EQ(loadError("strip-empty", bpeJson(R"("a": 0)", R"(
              "decoder": {"type": "Strip", "content": "", "start": 18446744073709551615,
                          "stop": 0})")),
            "tokenizer.json: decoder.content: \"\" is not one character");
  // A huge start and stop cost no more than the text: stripping stops at another character.
  // Fuse, then Strip both ends of "  a b  " (the tokenizers library decodes it "a b").
  auto tok = loaded("strip-huge", bpeJson(R"(" ": 0, "a": 1, "b": 2)", R"(
    "decoder": {"type": "Sequence", "decoders": [{"type": "Fuse"},
      {"type": "Strip", "content": " ", "start": 18446744073709551615,
       "stop": 18446744073709551615}]})"));
  ASSERT_TRUE(tok);
  std::vector<int64_t> ids = {0, 0, 1, 0, 2, 0, 0};
  EXPECT_EQ(tok->decode(ids, false), "a b");
  std::vector<std::string> want = {"", "", "a", "", " b", "", "", ""};
  EXPECT_EQ(streamed(*tok, ids, false), want); // trailing spaces held until the end
}

// Each position of the text was compared with each added token: 10000 tokens over 10^6 bytes
// took 10^10 comparisons (two minutes), more where the tokens share a long beginning the
// text keeps matching. Matching is linear now, and keeps the tokenizers library's rule:
// leftmost, the longest there.
TEST(Tokenizer, ManyLongAddedTokensMatchInLinearTime) {
  auto start = std::chrono::steady_clock::now();
  std::string prefix = "<" + std::string(40, 'a');
  std::string vocab = R"("a": 0, "<": 1, ">": 2)", added;
  for (int d = 0; d < 10; ++d)
    vocab += ", \"" + std::to_string(d) + "\": " + std::to_string(3 + d);
  for (int i = 0; i < 10000; ++i)
    added += std::string(i ? ", " : "") + R"({"id": )" + std::to_string(13 + i) +
             R"(, "content": ")" + prefix + std::to_string(i) + R"(>", "special": true})";
  auto tok = loaded("added-many", bpeJson(vocab, R"("added_tokens": [)" + added + "]"));
  ASSERT_TRUE(tok);
  std::string text = prefix + "5>" + std::string(1000000, 'a') + prefix + "9999>a<a>";
  std::vector<int64_t> want = {13 + 5};
  want.insert(want.end(), 1000000, 0);
  want.insert(want.end(), {13 + 9999, 0, 1, 0, 2});
  EXPECT_EQ(encoded(*tok, text), want);
  std::string near;
  for (int i = 0; i < 10000; ++i)
    near += prefix; // never a whole token
  EXPECT_EQ(encoded(*tok, near).size(), near.size());
  EXPECT_LT(secondsSince(start), 10.0);

  // Leftmost, then longest: "abc" at 0 (not "ab"), so "bcd" and "cd" never start.
  tok = loaded("added-longest", bpeJson(R"("a": 0, "b": 1, "c": 2, "d": 3, "x": 4)", R"(
    "added_tokens": [{"id": 5, "content": "ab"}, {"id": 6, "content": "abc"},
                     {"id": 7, "content": "bcd"}, {"id": 8, "content": "cd"},
                     {"id": 9, "content": "xab", "single_word": true}])"));
  ASSERT_TRUE(tok);
  EXPECT_EQ(encoded(*tok, "abcd"), (std::vector<int64_t>{6, 3}));
  // A single_word token with a word character beside it is skipped, and the search goes on
  // after it: the "ab" inside "xab" is not tried.
  EXPECT_EQ(encoded(*tok, "xabd"), (std::vector<int64_t>{4, 0, 1, 3}));
  EXPECT_EQ(encoded(*tok, "xab"), (std::vector<int64_t>{9}));
}

/// `count` components nested in one another: {"type": "Sequence", key: [... inner ...]}.
std::string nested(const char *key, const std::string &inner, int count) {
  std::string s;
  for (int i = 0; i < count; ++i)
    s += std::string(R"({"type": "Sequence", ")") + key + "\": [";
  s += inner;
  for (int i = 0; i < count; ++i)
    s += "]}";
  return s;
}

// Components nested 10^5 deep: the loaders recursed (and built a longer name at each level),
// exhausting the stack or memory. The nesting is checked before parsing.
TEST(Tokenizer, DeeplyNestedComponentsAreRefusedBeforeParsing) {
  auto start = std::chrono::steady_clock::now();
  for (auto [field, key, inner] : std::vector<std::tuple<const char *, const char *, const char *>>{
           {"normalizer", "normalizers", R"({"type": "NFC"})"},
           {"pre_tokenizer", "pretokenizers", R"({"type": "ByteLevel"})"},
           {"decoder", "decoders", R"({"type": "Fuse"})"}}) {
    std::string json =
        bpeJson(R"("a": 0)", "\"" + std::string(field) + "\": " + nested(key, inner, 100000));
    // The 65th bracket open at once is the first past the limit.
    size_t at = 0;
    for (int depth = 0; depth < 65; ++at)
      if (json[at] == '{' || json[at] == '[')
        ++depth;
      else if (json[at] == '}' || json[at] == ']')
        --depth;
    EXPECT_EQ(loadError("nested", json), "tokenizer.json: nested more than 64 deep (limit "
                                         "maxJsonDepth) at byte " +
                                             std::to_string(at - 1))
        << field;
  }
  // Nesting within the limit loads.
  EXPECT_EQ(loadError("nested-ok",
                      bpeJson(R"("a": 0)", R"("normalizer": )" + nested("normalizers", "", 30))),
            "");
  EXPECT_LT(secondsSince(start), 10.0);
}

// Twenty Replace normalizers, each "a" -> "aaaa": one "a" became 4^20 bytes. Components that
// can make text more than maxTextGrowth times longer are refused when the file is loaded.
TEST(Tokenizer, ChainedReplaceCannotGrowTextWithoutBound) {
  std::string replaces;
  for (int i = 0; i < 20; ++i)
    replaces += std::string(i ? ", " : "") +
                R"({"type": "Replace", "pattern": {"String": "a"}, "content": "aaaa"})";
  EXPECT_EQ(
      loadError("grow-normalizer",
                bpeJson(R"("a": 0)", R"("normalizer": {"type": "Sequence", "normalizers": [)" +
                                         replaces + "]}")),
      "tokenizer.json: normalizer and pre_tokenizer: they can make an n-byte text "
      "1.1e+12 * n + 0 bytes long, more than 64 times (n + 1) (limit maxTextGrowth)");
  EXPECT_EQ(loadError("grow-decoder",
                      bpeJson(R"("a": 0)", R"("decoder": {"type": "Sequence", "decoders": [)" +
                                               replaces + "]}")),
            "tokenizer.json: decoder: the decoders can make a token's text 1.1e+12 times "
            "longer, more than 64 times (limit maxTextGrowth)");
  // Llama's own, " " -> "\u2581" after a Prepend, is well within it.
  EXPECT_EQ(loadError("grow-llama", bpeJson(R"("a": 0)", R"("normalizer": {"type": "Sequence",
    "normalizers": [{"type": "Prepend", "prepend": "\u2581"},
                    {"type": "Replace", "pattern": {"String": " "}, "content": "\u2581"}]})")),
            "");
}

// Each id left the text inside a character (0xE2 begins one, the next 0xE2 breaks it): the
// stream decoded a window that grew with every id, so 10^5 ids took some 10^10 steps.
TEST(Tokenizer, StreamingIsLinear) {
  auto start = std::chrono::steady_clock::now();
  auto bl = loaded("linear-bytelevel", byteLevelJson());
  ASSERT_TRUE(bl);
  std::vector<int64_t> ids(100000, 0xE2);
  std::vector<std::string> chunks = streamed(*bl, ids, false);
  std::vector<std::string> want(ids.size() + 1, kFFFD);
  want[0] = ""; // a 0xE2 is held until the next byte settles it
  EXPECT_EQ(chunks, want);

  // Byte fallback: a run that is invalid from its first byte gives each byte's U+FFFD at
  // once; a valid run is held whole until it ends.
  auto llama = loaded("linear-llama", llamaStyleJson());
  ASSERT_TRUE(llama);
  ids.assign(100000, 3 + 0x80);
  chunks = streamed(*llama, ids, false);
  want.assign(ids.size() + 1, kFFFD);
  want.back() = "";
  EXPECT_EQ(chunks, want);
  ids.clear();
  for (int i = 0; i < 25000; ++i)
    ids.insert(ids.end(), {3 + 0xF0, 3 + 0x9F, 3 + 0x98, 3 + 0x80});
  chunks = streamed(*llama, ids, false);
  std::string emoji;
  for (int i = 0; i < 25000; ++i)
    emoji += "\xF0\x9F\x98\x80";
  EXPECT_EQ(chunks.back(), emoji);
  EXPECT_LT(secondsSince(start), 10.0);
}

// A ByteLevel decoder after the join (SmolLM2's chain) reads the whole text as bytes only if
// every character stands for a byte: an exact stream holds the text to the end; an
// incremental one (a server's) gives each token's text as it comes, and the same whole.
TEST(Tokenizer, IncrementalStreamOfByteLevelAfterJoin) {
  std::string json = byteLevelJson();
  size_t decoder = json.find(R"("decoder")");
  json.replace(decoder, json.find('}', decoder) + 1 - decoder,
               R"("decoder": {"type": "Sequence", "decoders": [{"type": "Fuse"},
                  {"type": "ByteLevel"}]})");
  auto tok = loaded("incremental", json);
  ASSERT_TRUE(tok);
  std::vector<int64_t> ids = {0x41, ' ', 0xC3, 0xA9, 0x42};
  ASSERT_EQ(tok->decode(ids, false), "A \xC3\xA9" "B");
  std::vector<std::string> exact = streamed(*tok, ids, false);
  EXPECT_EQ(exact, (std::vector<std::string>{"", "", "", "", "", "A \xC3\xA9" "B"}));
  Tokenizer::Stream stream = tok->stream(false, /*incremental=*/true);
  std::vector<std::string> pieces;
  for (int64_t id : ids)
    pieces.push_back(stream.push(id));
  pieces.push_back(stream.finish());
  EXPECT_EQ(pieces, (std::vector<std::string>{"A", " ", "", "\xC3\xA9", "B", ""}));
  // A character cut short at the end is one U+FFFD, as decode() renders it.
  Tokenizer::Stream cut = tok->stream(false, true);
  EXPECT_EQ(cut.push(0xC3), "");
  EXPECT_EQ(cut.finish(), kFFFD);
  EXPECT_EQ(tok->decode({0xC3}, false), kFFFD);
}

// Streaming used to decode a window of the last ids and return what it added: a later byte
// token that made a run of byte tokens invalid changed text already returned, and finish()
// then returned half a character. The pieces must add up to decode() for any ids.
TEST(Tokenizer, StreamAddsUpToDecodeForAnyIds) {
  // ▁a, then 😀's four bytes and 0xFF: the run is invalid, each of its bytes one U+FFFD.
  auto llama = loaded("any-llama", llamaStyleJson());
  ASSERT_TRUE(llama);
  std::vector<int64_t> ids = {262, 3 + 0xF0, 3 + 0x9F, 3 + 0x98, 3 + 0x80, 3 + 0xFF};
  EXPECT_EQ(llama->decode(ids, true), "a" + kFFFD + kFFFD + kFFFD + kFFFD + kFFFD);
  streamed(*llama, ids, true);

  // Random ids over the interesting tokens of several decoder chains, ids that name nothing
  // included.
  std::string metaspace = llamaStyleJson();
  size_t decoder = metaspace.find(R"("decoder")"), model = metaspace.find(R"("model")");
  metaspace.replace(decoder, model - decoder, R"("decoder": {"type": "Sequence", "decoders": [
    {"type": "ByteFallback"}, {"type": "Metaspace", "replacement": "\u2581",
     "prepend_scheme": "always"}]}, )");
  std::string noDecoder = llamaStyleJson();
  noDecoder.replace(decoder, model - decoder, "");
  std::string fused = llamaStyleJson();
  fused.replace(decoder, model - decoder, R"("decoder": {"type": "Sequence", "decoders": [
    {"type": "ByteFallback"}, {"type": "Fuse"},
    {"type": "Replace", "pattern": {"String": "\u2581a\u2581"}, "content": "<>"},
    {"type": "Strip", "content": "\u2581", "start": 1, "stop": 2}, {"type": "ByteLevel"}]}, )");
  std::vector<int64_t> llamaIds = {0, 1, 2, 259, 260, 261, 262, -1, 1ll << 40, 99999};
  for (int b : {0x41, 0x80, 0xC3, 0xA9, 0xE2, 0x82, 0xAC, 0xF0, 0x9F, 0x98, 0xFF, 0xED, 0xA0})
    llamaIds.push_back(3 + b);
  std::vector<int64_t> byteIds = {0x41, ' ',  0x80, 0xC3, 0xA9, 0xE2, 0x82, 0xAC, 0xF0,
                                  0x9F, 0x98, 0xFF, 0xED, 0xA0, 0xC0, -5,   256};
  std::mt19937 rng(26);
  for (auto [name, json, pool] :
       std::vector<std::tuple<const char *, std::string, std::vector<int64_t> *>>{
           {"any-l", llamaStyleJson(), &llamaIds},
           {"any-meta", metaspace, &llamaIds},
           {"any-none", noDecoder, &llamaIds},
           {"any-fused", fused, &llamaIds},
           {"any-bl", byteLevelJson(), &byteIds}}) {
    auto tok = loaded(name, json);
    ASSERT_TRUE(tok);
    for (int i = 0; i < 1500 && !HasFailure(); ++i) {
      std::vector<int64_t> seq(rng() % 13);
      for (int64_t &id : seq)
        id = (*pool)[rng() % pool->size()];
      streamed(*tok, seq, i % 2 == 0);
    }
  }
}

// What the tokenizers library does where tpc did otherwise (each expected text is the
// library's): without a decoder the tokens are joined with spaces; Metaspace drops every
// replacement character of the first token; ByteLevel takes a token whose characters do not
// all stand for bytes as it is.
TEST(Tokenizer, DecodersAsTheTokenizersLibrary) {
  auto tok =
      loaded("no-decoder", bpeJson(R"("a": 0, "b": 1, "ab": 2, "c": 3)", "", R"(["a", "b"])"));
  ASSERT_TRUE(tok);
  EXPECT_EQ(encoded(*tok, "abc"), (std::vector<int64_t>{2, 3}));
  EXPECT_EQ(tok->decode({2, 3, 0}, false), "ab c a");
  tok = loaded("metaspace-first", bpeJson(R"("\u2581\u2581a\u2581b": 0, "\u2581c\u2581": 1)",
                                          R"("decoder": {"type": "Metaspace",
                                             "replacement": "\u2581",
                                             "prepend_scheme": "always"})"));
  ASSERT_TRUE(tok);
  EXPECT_EQ(tok->decode({0, 1}, false), "ab c ");
  tok = loaded("bytelevel-mixed", bpeJson(R"("\u00e9 ": 0, "\u00e9": 1, "\u0120a": 2,
                                            "\u0120\u4f60": 3)",
                                          R"("decoder": {"type": "ByteLevel"})"));
  ASSERT_TRUE(tok);
  EXPECT_EQ(tok->decode({0, 1, 2, 3}, false), "\xC3\xA9 " + kFFFD + " a\xC4\xA0\xE4\xBD\xA0");
}

// Ids name no token past the vocabulary, nor negative ones: decode skips them, as the
// tokenizers library does, and never reads outside a table.
TEST(Tokenizer, DecodeSkipsIdsThatNameNoToken) {
  auto tok = loaded("skip-ids", llamaStyleJson());
  ASSERT_TRUE(tok);
  EXPECT_EQ(tok->decode({-1, std::numeric_limits<int64_t>::min(), 262, 1ll << 32, 1ll << 40, 263,
                         std::numeric_limits<int64_t>::max()},
                        false),
            "a");
}

TEST(Tokenizer, IdsAreIntegersBelow2To32) {
  for (auto [id, shown] :
       std::vector<std::pair<const char *, const char *>>{{"-1", "-1"},
                                                          {"1.5", "1.5"},
                                                          {"4294967296", "4294967296"},
                                                          {"1e30", "1e+30"},
                                                          {"\"5\"", "\"5\""}}) {
    EXPECT_EQ(loadError("ids", bpeJson(R"("b": 0, "a": )" + std::string(id))),
              "tokenizer.json: model.vocab[\"a\"]: id " + std::string(shown) +
                  " is not an integer in [0, 2^32)");
  }
  EXPECT_EQ(loadError("ids-added", bpeJson(R"("a": 0)", R"("added_tokens": [{"id": -1,
              "content": "<x>"}])")),
            "tokenizer.json: added_tokens[0].id: id -1 is not an integer in [0, 2^32)");
  EXPECT_EQ(loadError("ids-post", bpeJson(R"("a": 0)", R"("post_processor": {"type":
              "TemplateProcessing", "single": [{"SpecialToken": {"id": "<s>"}}],
              "special_tokens": {"<s>": {"ids": [1.5]}}})")),
            "tokenizer.json: post_processor.special_tokens[\"<s>\"].ids[0]: id 1.5 is not an "
            "integer in [0, 2^32)");
  // Two strings, one id.
  EXPECT_EQ(loadError("ids-twice", bpeJson(R"("a": 0, "b": 0)")),
            "tokenizer.json: model.vocab[\"b\"]: id 0 is \"a\"'s too");
}

// Ids of 2^32 and more were packed into one 64-bit merge key with their high bits lost: with
// "b" at 2^32 + 1, the pair (a, b) was the merge (a, a), and "ab" encoded as "aa". Such an id
// is refused now; below 2^32, a pair packs exactly.
TEST(Tokenizer, IdsDifferingBy2To32CannotCollide) {
  EXPECT_EQ(
      loadError("collide", bpeJson(R"("a": 1, "b": 4294967297, "aa": 5)", "", R"(["a", "a"])")),
      "tokenizer.json: model.vocab[\"b\"]: id 4294967297 is not an integer in [0, 2^32)");
  auto tok =
      loaded("no-collide", bpeJson(R"("a": 1, "b": 4294967295, "aa": 5)", "", R"(["a", "a"])"));
  ASSERT_TRUE(tok);
  EXPECT_EQ(encoded(*tok, "ab"), (std::vector<int64_t>{1, 4294967295}));
  EXPECT_EQ(encoded(*tok, "aa"), (std::vector<int64_t>{5}));
  EXPECT_EQ(tok->idEnd(), 4294967296);
}

// The tokenizers library ignores an added token's id in the file: it gives the token its
// vocabulary entry's id, or the next one after the vocabulary (the library numbers "<x>" 4
// after a, b, ab and c, and "b" 1 wherever the file says). A file that says otherwise is
// refused rather than followed.
TEST(Tokenizer, AddedTokenIdsAreTheOnesTransformersGives) {
  std::string vocab = R"("a": 0, "b": 1, "ab": 2, "c": 3)";
  auto added = [&](const char *name, const std::string &tokens) {
    return loadError(name, bpeJson(vocab, R"("added_tokens": [)" + tokens + "]"));
  };
  EXPECT_EQ(added("added-other", R"({"id": 1, "content": "<x>", "special": true})"),
            "tokenizer.json: added_tokens[0]: \"<x>\" has id 1, but transformers gives it 4; "
            "id 1 is \"b\"");
  EXPECT_EQ(added("added-gap", R"({"id": 10, "content": "<x>", "special": true})"),
            "tokenizer.json: added_tokens[0]: \"<x>\" has id 10, but transformers gives it 4");
  EXPECT_EQ(added("added-moved", R"({"id": 3, "content": "b", "special": true})"),
            "tokenizer.json: added_tokens[0]: \"b\" has id 3, but transformers gives it 1; id 3 "
            "is \"c\"");
  // Its own vocabulary entry's id, as real tokenizers have it; the library encodes
  // "a<x>b c" as [0, 1, 3] and decodes [0, 1, 3, 4, 10] as "a b c" ("a c" skipping "b").
  std::string error;
  auto tok = Tokenizer::load(
      tokenizerDir("added-same", bpeJson(vocab, R"("added_tokens": [{"id": 1, "content": "b",
                                                  "special": true}])")),
      error);
  ASSERT_TRUE(tok) << error;
  EXPECT_EQ(encoded(*tok, "a<x>b c"), (std::vector<int64_t>{0, 1, 3}));
  EXPECT_EQ(tok->decode({0, 1, 3, 4, 10}, false), "a b c");
  EXPECT_EQ(tok->decode({0, 1, 3, 4, 10}, true), "a c");
  EXPECT_EQ(tok->idEnd(), 4);
}

TEST(Tokenizer, IdEndCoversEveryIdEncodeGives) {
  auto tok = loaded("idend", llamaStyleJson());
  ASSERT_TRUE(tok);
  EXPECT_EQ(tok->idEnd(), 263); // <unk> <s> </s>, 256 bytes, ▁ a b ▁a
  tok = loaded("idend-added", bpeJson(R"("a": 0, "b": 1)", R"("added_tokens": [{"id": 2,
    "content": "<x>"}], "post_processor": {"type": "TemplateProcessing",
    "single": [{"SpecialToken": {"id": "<s>"}}, {"Sequence": {"id": "A"}}],
    "special_tokens": {"<s>": {"ids": [500]}}})"));
  ASSERT_TRUE(tok);
  EXPECT_EQ(encoded(*tok, "a<x>", nullptr, true), (std::vector<int64_t>{500, 0, 2}));
  EXPECT_EQ(tok->idEnd(), 501);
}

// Each limit of TokenizerLimits, small, is named when a file passes it.
TEST(Tokenizer, LimitsAreNamed) {
  TokenizerLimits limits;
  std::string json = bpeJson(R"("a": 0, "b": 1, "ab": 2, "abcd": 3)", R"(
    "added_tokens": [{"id": 4, "content": "<xyz>"}, {"id": 5, "content": "<w>"}],
    "normalizer": {"type": "Sequence", "normalizers": [{"type": "NFC"}, {"type": "NFC"},
                                                        {"type": "NFC"}]})",
                             R"(["a", "b"])");
  EXPECT_EQ(loadError("limits", json, limits), "");
  limits.maxFileBytes = 64;
  EXPECT_EQ(loadError("limits", json, limits),
            "tokenizer.json: " + std::to_string(json.size()) +
                " bytes, more than 64 bytes (limit maxFileBytes)");
  limits = TokenizerLimits();
  limits.maxJsonDepth = 3;
  EXPECT_EQ(loadError("limits", json, limits).substr(0, 64),
            "tokenizer.json: nested more than 3 deep (limit maxJsonDepth) at ");
  limits = TokenizerLimits();
  limits.maxVocab = 3;
  EXPECT_EQ(loadError("limits", json, limits),
            "tokenizer.json: model.vocab: more than 3 entries (limit maxVocab)");
  limits = TokenizerLimits();
  limits.maxMerges = 0;
  EXPECT_EQ(loadError("limits", json, limits),
            "tokenizer.json: model.merges: more than 0 entries (limit maxMerges)");
  limits = TokenizerLimits();
  limits.maxTokenBytes = 3;
  EXPECT_EQ(loadError("limits", json, limits),
            "tokenizer.json: model.vocab[\"abcd\"]: \"abcd\" is 4 bytes, more than 3 bytes "
            "(limit maxTokenBytes)");
  limits = TokenizerLimits();
  limits.maxAddedTokens = 1;
  EXPECT_EQ(loadError("limits", json, limits),
            "tokenizer.json: added_tokens[1]: more than 1 added tokens (limit maxAddedTokens)");
  limits = TokenizerLimits();
  limits.maxAddedTokenBytes = 7;
  EXPECT_EQ(loadError("limits", json, limits),
            "tokenizer.json: added_tokens[1]: added tokens of more than 7 bytes in all (limit "
            "maxAddedTokenBytes)");
  limits = TokenizerLimits();
  limits.maxComponents = 2;
  EXPECT_EQ(loadError("limits", json, limits),
            "tokenizer.json: normalizer.normalizers[2]: more than 2 normalizers (limit "
            "maxComponents)");
  limits = TokenizerLimits();
  limits.maxTextGrowth = 20; // three NFC: 27 times
  EXPECT_EQ(loadError("limits", json, limits),
            "tokenizer.json: normalizer and pre_tokenizer: they can make an n-byte text 27 * "
            "n + 0 bytes long, more than 20 times (n + 1) (limit maxTextGrowth)");
}
