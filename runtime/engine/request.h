// What one request asks for: its prompt, its length, its sampling and its stop rules. A
// --requests line and an API body are read into one of these, starting from the command
// line's defaults; the process's own configuration (its weights, its limits, its server)
// is not in it, so a client's request can change nothing but its own run.
#ifndef TPCRT_ENGINE_REQUEST_H
#define TPCRT_ENGINE_REQUEST_H

#include "tpcrt/sampling.h"

#include <cstdint>
#include <string>
#include <vector>

namespace tpcrt {

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

  std::vector<int64_t> output;
  std::vector<TokenLogprobs> outputLogprobs;
  const char *finishReason = nullptr; // "stop", "length" or "abort", once finished
  int64_t preempted = 0;              // times its blocks were taken back and it was recomputed
  double firstTokenMs = 0, finishedMs = 0; // since it arrived (submit)
};

} // namespace tpcrt

#endif // TPCRT_ENGINE_REQUEST_H
