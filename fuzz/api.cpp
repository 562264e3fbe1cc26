// Fuzzes tpc serve's request readers (serve::readRequest, readTokenize and readDetokenize,
// runtime/serve/api.cpp): the input is a request body, its first byte choosing the route: with
// bit 1 clear, /v1/chat/completions (odd) or /v1/completions (even), with it set /detokenize
// (odd) or /tokenize (even) (seeds: bodies of the completions), read against a model of 256 tokens with the example's byte-level
// tokenizer, a chat template that prints each message, and a 64-token context. Each body must
// come out refused with a 400 or 404 and a message, whose error body is JSON, or runnable: a
// non-empty prompt of the vocabulary's ids that fits the context with its max_tokens, and
// sampling parameters in range, and log-probabilities (0 to 20 more, or none) whose response
// is JSON, whatever the tokens and values, and tools whose choice asks for what it should (a
// required or named one its grammar); the tokenizer's answer is JSON. Nothing may crash or hang.
#include "api.h"

#include "tpcrt/tokenizer.h"

#include <nlohmann/json.hpp>

#include <cmath>
#include <cstdint>
#include <string>

namespace {

std::shared_ptr<tpcrt::Tokenizer> exampleTokenizer() {
  static std::shared_ptr<tpcrt::Tokenizer> tokenizer = [] {
    std::string error;
    std::shared_ptr<tpcrt::Tokenizer> loaded = tpcrt::Tokenizer::load(TPC_FUZZ_EXAMPLES, error);
    if (!loaded)
      __builtin_trap(); // the harness itself is broken
    return loaded;
  }();
  return tokenizer;
}

} // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  if (size == 0)
    return 0;
  tpcrt::ModelSpec spec{};
  spec.name = "fuzz";
  spec.tp = 1;
  spec.vocab = 256;
  tpcrt::Args defaults;
  defaults.maxSeqLen = 64;
  defaults.params.sampling.temperature = 0;
  tpcrt::serve::ApiContext context;
  context.spec = &spec;
  context.defaults = &defaults;
  context.tokenizer = exampleTokenizer();
  context.chatTemplate = "{% for m in messages %}{{ m['role'] }}: {{ m['content'] }}\n"
                         "{% endfor %}{% if add_generation_prompt %}assistant: {% endif %}";
  context.modelName = "fuzz";
  bool chat = data[0] & 1, tokenizer = data[0] & 2;
  std::string body(reinterpret_cast<const char *>(data) + 1, size - 1);
  auto refused = [](const std::optional<tpcrt::serve::ApiError> &error) {
    if (error && ((error->status != 400 && error->status != 404) || error->message.empty() ||
                  !nlohmann::json::accept(tpcrt::serve::errorBody(*error))))
      __builtin_trap();
    return error.has_value();
  };
  if (tokenizer) { // /detokenize (odd) or /tokenize (even)
    std::string answer;
    if (chat) {
      std::string text;
      if (!refused(tpcrt::serve::readDetokenize(body, context, text)))
        answer = tpcrt::serve::dump({{"prompt", text}});
    } else {
      std::vector<int64_t> ids;
      bool strings = false;
      if (!refused(tpcrt::serve::readTokenize(body, context, ids, strings)))
        answer = tpcrt::serve::dump(tpcrt::serve::tokenizeResponse(ids, context, strings));
    }
    if (!answer.empty() && !nlohmann::json::accept(answer))
      __builtin_trap();
    return 0;
  }
  tpcrt::serve::ApiRequest request;
  if (refused(tpcrt::serve::readRequest(body, chat, context, request)))
    return 0;
  const tpcrt::RequestParams &a = request.params;
  // Each bounded by the 64-token context first, so that the sum cannot wrap (a max_tokens of
  // 2^63 - 1 must be refused, not pass as a small total).
  uint64_t most = uint64_t(defaults.maxSeqLen);
  // (max_tokens 0 only for a request that scores its prompt: echo or prompt_logprobs)
  bool scores = a.echo || a.promptLogprobs >= 0;
  if (a.prompt.empty() || a.maxTokens < (scores ? 0 : 1) || uint64_t(a.maxTokens) > most ||
      a.prompt.size() > most || a.prompt.size() + uint64_t(a.maxTokens) > most ||
      !a.sampling.validate().empty() || !tpcrt::checkStopStrings(a.stop).empty() ||
      request.chat != chat || (request.includeUsage && !request.stream) || request.n < 1 ||
      request.n > tpcrt::serve::kMaxChoices)
    __builtin_trap();
  for (int64_t id : a.prompt)
    if (id < 0 || id >= spec.vocab)
      __builtin_trap();
  // Tools: a required or named choice asks for its grammar; none is a completion's; a call's
  // id is nine letters and digits.
  bool constrainedCall = request.toolFormat == tpcrt::serve::ToolFormat::JsonList ||
                         request.toolFormat == tpcrt::serve::ToolFormat::Named;
  if ((request.toolFormat && !chat) ||
      constrainedCall != (request.structured.field == "tool_choice") ||
      (constrainedCall && request.structured.kind != tpcrt::serve::StructuredSpec::JsonSchema) ||
      (request.toolFormat == tpcrt::serve::ToolFormat::Named) == request.namedTool.empty() ||
      tpcrt::serve::toolCallId("x", 0, 0).size() != 9)
    __builtin_trap();
  for (const auto &[id, bias] : a.sampling.logitBias) // each id the vocabulary's, in range
    if (id < 0 || id >= spec.vocab || !(bias >= -100 && bias <= 100))
      __builtin_trap();
  if (a.sampling.minTokens < 0 || a.sampling.minTokens > a.maxTokens)
    __builtin_trap();
  if (a.logprobs < -1 || a.logprobs > tpcrt::kMaxLogprobs)
    __builtin_trap();
  // Prompt scoring: in range, for completions' echo only, never streamed with
  // prompt_logprobs, and the engine asked for at least what the response shows.
  if (request.promptLogprobs < -1 || request.promptLogprobs > tpcrt::kMaxLogprobs ||
      (a.echo && chat) || (request.promptLogprobs >= 0 && request.stream) ||
      a.promptLogprobs < request.promptLogprobs ||
      (a.echo && a.logprobs >= 0 && a.promptLogprobs < a.logprobs))
    __builtin_trap();
  if (a.logprobs >= 0) {
    // The response's log-probabilities, with the prompt's ids standing for generated tokens
    // (bytes of partial characters among them) and their tops, -inf and NaN too: valid JSON.
    std::vector<tpcrt::TokenLogprobs> tokens;
    for (size_t i = 0; i < a.prompt.size(); ++i) {
      double value = i % 3 == 0 ? -INFINITY : i % 3 == 1 ? NAN : -double(i);
      tokens.push_back({a.prompt[i], value, {}});
      for (int k = 0; k < a.logprobs; ++k)
        tokens.back().top.emplace_back(a.prompt[(i + size_t(k)) % a.prompt.size()], value);
    }
    int64_t offset = 0;
    nlohmann::ordered_json logprobs = tpcrt::serve::logprobsOf(
        chat, *context.tokenizer, tokens.data(), tokens.data() + tokens.size(), offset);
    if (!nlohmann::json::accept(tpcrt::serve::dump(tpcrt::serve::response(
            {"id", 0, "fuzz", chat}, {{"", "stop", logprobs}}, {}))))
      __builtin_trap();
    if (a.promptLogprobs >= 0) { // the prompt's own, as echo and prompt_logprobs show them
      std::vector<tpcrt::TokenLogprobs> scored(tokens.begin() + 1, tokens.end());
      offset = 0;
      nlohmann::ordered_json echoed = tpcrt::serve::echoLogprobs(
          *context.tokenizer, a.prompt, scored, a.logprobs, offset);
      tpcrt::serve::appendLogprobs(echoed, logprobs);
      nlohmann::ordered_json prompt =
          tpcrt::serve::promptLogprobsOf(*context.tokenizer, scored, a.promptLogprobs);
      if (!nlohmann::json::accept(tpcrt::serve::dump(tpcrt::serve::response(
              {"id", 0, "fuzz", chat}, {{"", "stop", echoed}, {"", "length", nullptr}}, {},
              prompt))))
        __builtin_trap();
    }
  }
  return 0;
}
