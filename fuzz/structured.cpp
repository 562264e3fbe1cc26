// Fuzzes structured outputs (runtime/serve/structured.h): a grammar compiled from a request's
// text and driven as the engine drives it. The input's first byte chooses the kind (byte % 4:
// 0 a JSON schema, 1 a regex, 2 an EBNF grammar, 3 choices, one a line), how the constraint is
// driven (bit 2: take the lowest allowed token other than the stop id while there is one, so
// that the drive goes past the first place the grammar may end) and how many constraints
// are made (bit 3: two, each driven on its own); the rest is the text. The seeds in
// fuzz/corpus/structured/ begin with '0' to '3' (the four kinds: lowest token, one
// constraint), '4' to '7' (avoiding the stop id), '8' to ';' (two constraints) or '<' to '?'
// (both).
//
// A schema goes the API's way (readSchema in runtime/serve/api.cpp): bounded parse, read again
// in its order, an object, checkSchemaKeywords, and only then compiled, from its dump. The
// grammars are a server's (vocabulary 256, the example's byte-level tokenizer, stop id 0) with
// a compile limit of 2 s, so that no input holds the replay longer: a compile that runs over is
// refused, and the next input may be refused as the compiler is still busy.
//
// The oracle: make() never throws, and gives either n constraints and no error or none and an
// error: the size error for a text over kMaxGrammarBytes (checked once per process as well,
// for choices that only together are over it; StructuredTest checks a regex), the missing
// engine's where this build has none. Each constraint, for up to 64 tokens: next(), given a
// zeroed mask of the vocabulary's 8 words as the engine gives it, says true exactly when the
// mask then allows a token; the token taken from the mask is accepted; once the stop id is
// accepted nothing more may come.
#include "structured.h"

#include "tpcrt/json.h"
#include "tpcrt/tokenizer.h"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace {

using tpcrt::serve::StructuredSpec;

constexpr int64_t kVocab = 256;
constexpr int64_t kStop = 0; // the byte 0 stands for end of sequence, as in StructuredTest
constexpr size_t kWords = size_t(kVocab / 32);

void check(bool ok) {
  if (!ok)
    __builtin_trap();
}

tpcrt::serve::Grammars &grammars() {
  static tpcrt::serve::Grammars *made = [] {
    std::string error;
    static std::unique_ptr<tpcrt::Tokenizer> tokenizer =
        tpcrt::Tokenizer::load(TPC_FUZZ_EXAMPLES, error);
    if (!tokenizer)
      __builtin_trap(); // the harness itself is broken
    // Destroyed at exit, waiting there for a compile that ran over.
    static tpcrt::serve::Grammars compiled(*tokenizer, kVocab, {kStop},
                                           std::chrono::milliseconds(2000));
    return &compiled;
  }();
  return *made;
}

/// make() for `spec`, held to its contract; the constraints it gave.
std::vector<std::shared_ptr<tpcrt::TokenConstraint>> make(const StructuredSpec &spec, int64_t n) {
  size_t bytes = spec.text.size();
  for (const std::string &choice : spec.choices)
    bytes += choice.size();
  std::string error;
  std::vector<std::shared_ptr<tpcrt::TokenConstraint>> made;
  try {
    made = grammars().make(spec, n, error);
  } catch (...) {
    __builtin_trap(); // a grammar it cannot compile is an error, never an exception
  }
  check(made.empty() ? !error.empty() : error.empty() && made.size() == size_t(n));
  for (const auto &constraint : made)
    check(constraint != nullptr);
  if (!tpcrt::serve::structuredOutputsBuilt())
    check(made.empty() && error.find("without its grammar engine") != std::string::npos);
  else if (bytes > tpcrt::serve::kMaxGrammarBytes)
    check(made.empty() && error == "its grammar is " + std::to_string(bytes) +
                                       " bytes, more than the " +
                                       std::to_string(tpcrt::serve::kMaxGrammarBytes) +
                                       " this server compiles");
  return made;
}

bool allows(const std::vector<uint32_t> &mask, int64_t token) {
  return mask[size_t(token / 32)] >> (token % 32) & 1;
}

/// Drives `c` up to 64 tokens: the lowest allowed one each time (other than the stop id,
/// while there is another, where `avoidStop`).
void drive(tpcrt::TokenConstraint &c, bool avoidStop) {
  std::vector<uint32_t> mask(kWords);
  for (int step = 0; step < 64; ++step) {
    std::fill(mask.begin(), mask.end(), 0); // as the engine hands it over
    bool more = c.next(mask);
    check(mask.size() == kWords);
    int64_t token = -1;
    for (int64_t t = 0; t < kVocab && token < 0; ++t)
      if (allows(mask, t) && !(avoidStop && t == kStop))
        token = t;
    if (token < 0 && allows(mask, kStop))
      token = kStop;
    check(more == (token >= 0)); // false exactly where the mask allows nothing
    if (!more)
      return;
    check(c.accept(token));
    if (token == kStop) { // the output has ended: nothing may follow
      check(!c.next(mask));
      return;
    }
  }
}

/// Once a process: choices that only together are over kMaxGrammarBytes are refused too.
void checkSizeLimitOnce() {
  static bool checked = [] {
    StructuredSpec spec{StructuredSpec::Choice, "", {}, "structured_outputs"};
    spec.choices.assign(2, std::string(tpcrt::serve::kMaxGrammarBytes / 2, 'a'));
    spec.choices.back() += 'b';
    check(make(spec, 1).empty());
    return true;
  }();
  (void)checked;
}

} // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  checkSizeLimitOnce();
  if (size == 0)
    return 0;
  bool avoidStop = data[0] >> 2 & 1;
  int64_t n = data[0] >> 3 & 1 ? 2 : 1;
  std::string text(reinterpret_cast<const char *>(data) + 1, size - 1);
  StructuredSpec spec;
  spec.field = "structured_outputs";
  switch (data[0] % 4) {
  case 0: { // a schema, read as the API reads one
    nlohmann::ordered_json schema;
    try {
      tpcrt::parseUntrustedJson(text, 32, 4096, 65536); // (the API's bounds on keys)
      schema = nlohmann::ordered_json::parse(text);
    } catch (const std::exception &) {
      return 0;
    }
    if (!schema.is_object() || !tpcrt::serve::checkSchemaKeywords(schema).empty())
      return 0;
    spec.kind = StructuredSpec::JsonSchema;
    spec.text = schema.dump();
    break;
  }
  case 1:
  case 2: // the API refuses an empty regex or grammar before it gets here
    if (text.empty())
      return 0;
    spec.kind = data[0] % 4 == 1 ? StructuredSpec::Regex : StructuredSpec::Grammar;
    spec.text = text;
    break;
  default: // choices, the empty lines left out (the API refuses an empty choice)
    spec.kind = StructuredSpec::Choice;
    for (size_t start = 0; start <= text.size();) {
      size_t end = std::min(text.find('\n', start), text.size());
      if (end > start)
        spec.choices.push_back(text.substr(start, end - start));
      start = end + 1;
    }
    if (spec.choices.empty())
      return 0;
    break;
  }
  for (const auto &constraint : make(spec, n))
    drive(*constraint, avoidStop);
  return 0;
}
