// What one request asks for: its prompt, its length, its sampling and its stop rules. A
// --requests line and an API body are read into one of these, starting from the command
// line's defaults; the process's own configuration (its weights, its limits, its server)
// is not in it, so a client's request can change nothing but its own run.
#ifndef TPCRT_ENGINE_REQUEST_H
#define TPCRT_ENGINE_REQUEST_H

#include "tpcrt/sampling.h"

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace tpcrt {

/// What a request may generate, beyond its sampling (a grammar: structured outputs), on rank 0
/// alone: before each of its tokens it says which may come, and it learns the one chosen. The
/// engine knows no grammar; the server makes these (runtime/serve/structured.h).
class TokenConstraint {
public:
  virtual ~TokenConstraint() = default;
  /// The tokens that may come next, a bit each (token t: bit t % 32 of word t / 32, set where
  /// it may), into `allowed` (sized by the caller: the vocabulary's words); false where none
  /// may (the grammar cannot go on).
  virtual bool next(std::vector<uint32_t> &allowed) = 0;
  /// The token chosen: false where the constraint refuses it.
  virtual bool accept(int64_t token) = 0;
};

struct RequestParams {
  std::vector<int64_t> prompt;
  int64_t maxTokens = 16; // --max-new-tokens, max_tokens
  SamplingParams sampling;
  /// Generation goes on past the model's end-of-sequence ids; stop strings and stop ids still
  /// end it.
  bool ignoreEos = false;
  /// Stop strings (withheld from the text) and stop ids.
  std::vector<std::string> stop;
  std::vector<int64_t> stopIds;
  /// Log-probabilities of each generated token and of this many most likely ones (0 to
  /// kMaxLogprobs); -1: none.
  int logprobs = -1;
  /// Teacher forcing (--force-ids): the tokens fed back instead of the chosen ones, which
  /// are still the output; the stop rules are then ignored, as max_tokens alone ends it.
  std::vector<int64_t> forced;
  /// cache_salt (vLLM's): the prefix cache finds this request's blocks only for requests of
  /// the same salt, so a client cannot probe another's prompts by what is cached.
  std::string cacheSalt;
  /// Log-probabilities of the prompt's own tokens (each but the first, from the row before
  /// it) and of this many most likely ones there (0 to kMaxLogprobs); -1: none. With
  /// maxTokens 0 the request scores its prompt and generates nothing.
  int promptLogprobs = -1;
  /// A completion's `echo`: its text (and log-probabilities, where asked) begin with the
  /// prompt's.
  bool echo = false;
};

/// One request as rank 0's engine runs it (its stop ids resolved: the model's end-of-sequence
/// ids unless ignored, and the request's own), and what came of it.
struct EngineRequest {
  std::vector<int64_t> prompt;
  int64_t maxTokens = 16;
  SamplingParams sampling;
  std::vector<int64_t> stopIds;
  int logprobs = -1;            // -1: none
  std::vector<int64_t> forced;  // see RequestParams::forced
  std::string cacheSalt;        // see RequestParams::cacheSalt
  int promptLogprobs = -1;      // see RequestParams::promptLogprobs
  /// Each token chosen among those it allows (its own state: one a request); none: any.
  std::shared_ptr<TokenConstraint> constraint;

  std::vector<int64_t> output;
  std::vector<TokenLogprobs> outputLogprobs;
  /// Prompt tokens 1, 2, ... as the model scores them, once promptLogprobs >= 0 (complete
  /// when the first token is chosen, or the request finishes).
  std::vector<TokenLogprobs> promptTokenLogprobs;
  /// "stop", "length" or "abort", once finished; "error" when it could not run or go on
  /// (`error` says why: more than the context at submit, the model's logits not finite).
  const char *finishReason = nullptr;
  std::string error;
  int64_t preempted = 0;              // times its blocks were taken back and it was recomputed
  int64_t cachedTokens = 0;           // its prompt's tokens found in the prefix cache
  double firstTokenMs = 0, finishedMs = 0; // since it arrived (submit)
};

/// Whether a prompt of `prompt` tokens and up to `maxTokens` more fit a context of `context`
/// tokens, all three at least 0: compared without a sum that could overflow (a client's
/// max_tokens of 2^63 - 1 is refused, not wrapped into a small number).
inline bool fitsContext(int64_t prompt, int64_t maxTokens, int64_t context) {
  return prompt <= context && maxTokens <= context - prompt;
}
/// The tokens such a request needs, exact: two int64s of at least 0 add up below 2^64.
inline uint64_t tokensNeeded(int64_t prompt, int64_t maxTokens) {
  return uint64_t(prompt) + uint64_t(maxTokens);
}

} // namespace tpcrt

#endif // TPCRT_ENGINE_REQUEST_H
