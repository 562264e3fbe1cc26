// Fuzzes the --requests reader (readRequestsText, runtime/core/requests.cpp): the input is a
// requests file, one JSON object a line (seeds: the e2e test's file), read against a model of
// 256 tokens with the example's byte-level tokenizer and a 64-token context. Each request must
// come out either refused with an error or runnable: a non-empty prompt of the vocabulary's
// ids that fits the context with its max_tokens, and sampling parameters in range. Nothing
// may crash or hang.
#include "core.h"

#include "tpcrt/tokenizer.h"

#include <cstdint>
#include <string>

namespace {

const tpcrt::Tokenizer *exampleTokenizer() {
  static std::unique_ptr<tpcrt::Tokenizer> tokenizer = [] {
    std::string error;
    std::unique_ptr<tpcrt::Tokenizer> loaded = tpcrt::Tokenizer::load(TPC_FUZZ_EXAMPLES, error);
    if (!loaded)
      __builtin_trap(); // the harness itself is broken
    return loaded;
  }();
  return tokenizer.get();
}

} // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  tpcrt::ModelSpec spec{};
  spec.name = "fuzz";
  spec.tp = 1;
  spec.vocab = 256;
  tpcrt::Args command;
  command.maxSeqLen = 64;
  command.params.maxTokens = 4;
  command.params.sampling.temperature = 0;
  std::vector<tpcrt::BatchRequest> jobs;
  std::string text(reinterpret_cast<const char *>(data), size);
  // Every other input without a tokenizer, as for a checkpoint that has none.
  const tpcrt::Tokenizer *tokenizer = size % 2 ? exampleTokenizer() : nullptr;
  if (!tpcrt::readRequestsText(text, command, spec, tokenizer, "no tokenizer.json", jobs))
    __builtin_trap(); // at most 16 KiB of input: far fewer than 2^20 requests
  for (const tpcrt::BatchRequest &job : jobs) {
    if (!job.error.empty())
      continue;
    const tpcrt::RequestParams &a = job.params;
    // Each bounded by the context first, so that the sum cannot wrap (a max_tokens of
    // 2^63 - 1 must be refused, not pass as a small total).
    uint64_t most = uint64_t(command.maxSeqLen);
    // (max_tokens 0 only for a request that scores its prompt)
    if (a.prompt.empty() || a.maxTokens < (a.promptLogprobs >= 0 ? 0 : 1) ||
        a.promptLogprobs < -1 || a.promptLogprobs > tpcrt::kMaxLogprobs ||
        uint64_t(a.maxTokens) > most ||
        a.prompt.size() > most || a.prompt.size() + uint64_t(a.maxTokens) > most ||
        !a.sampling.validate().empty() || !tpcrt::checkStopStrings(a.stop).empty())
      __builtin_trap();
    for (int64_t id : a.prompt)
      if (id < 0 || id >= spec.vocab)
        __builtin_trap();
    for (const auto &[id, bias] : a.sampling.logitBias) // each id the vocabulary's, in range
      if (id < 0 || id >= spec.vocab || !(bias >= -100 && bias <= 100))
        __builtin_trap();
    if (a.sampling.minTokens < 0 || a.sampling.minTokens > a.maxTokens)
      __builtin_trap();
  }
  return 0;
}
