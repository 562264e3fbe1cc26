// Choosing the next token from a row of logits, as vLLM's sampler does, with vLLM's parameter
// names and meanings: penalties on the raw logits, then temperature, min_p, top_k, top_p, and
// a draw from what is left with the request's own generator. Temperature 0 is greedy: the
// argmax of the (penalized) logits, and with no penalty the argmax of the logits as they are.
// And stop strings, matched on the generated text across token boundaries and withheld from
// it. Rank 0 runs these; the other ranks are told what it chose. Plain C++17.
#ifndef TPCRT_SAMPLING_H
#define TPCRT_SAMPLING_H

#include "tpcrt/batch.h"

#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace tpcrt {

/// What a request asks of the sampler. The defaults are vLLM's SamplingParams' (temperature
/// 1); tpc run and the binary start from greedy instead, as transformers' generate does,
/// unless generation_config.json sets do_sample (see readGenerationConfig in core/core.h).
struct SamplingParams {
  double temperature = 1.0;       // 0: greedy
  int64_t topK = 0;               // 0 or -1: every token
  double topP = 1.0;              // (0, 1]
  double minP = 0.0;              // [0, 1]: drop tokens below minP x the top probability
  double repetitionPenalty = 1.0; // > 0; over the prompt's and the output's tokens
  double presencePenalty = 0.0;   // [-2, 2]; over the output's tokens
  double frequencyPenalty = 0.0;  // [-2, 2]; over the output's tokens, per occurrence
  std::optional<uint64_t> seed;   // none: a seed drawn from the system's entropy
  /// logit_bias: added to these tokens' logits (each bias in [-100, 100]) before anything
  /// else, as vLLM applies it before the penalties.
  std::vector<std::pair<int64_t, double>> logitBias;
  /// min_tokens: the sequence's stop ids (its end-of-sequence ids and stop_token_ids) cannot
  /// be chosen until this many tokens are out (their logits are -inf until then).
  int64_t minTokens = 0;

  /// Below vLLM's _SAMPLING_EPS a temperature is greedy.
  bool greedy() const { return temperature < 1e-5; }
  bool penalized() const {
    return repetitionPenalty != 1.0 || presencePenalty != 0.0 || frequencyPenalty != 0.0;
  }
  /// "" when every field is in range, else what is wrong, naming the field as vLLM's
  /// parameter ("top_p must be in (0, 1], got 0"). (Whether logit_bias's ids are the
  /// vocabulary's is the reader's to check: it knows the model.)
  std::string validate() const;
};

/// A 64-bit generator with a state of its own per request (xoshiro256**, seeded through
/// splitmix64): the same seed draws the same numbers on every machine, whatever else runs.
class Rng {
public:
  explicit Rng(uint64_t seed);
  uint64_t next();
  /// Uniform in [0, 1), 53 bits.
  double uniform();

private:
  uint64_t s[4];
};

/// One sequence's sampler: its parameters, what the penalties count (the prompt's tokens
/// and the output's, as the sequence grows), the stop ids min_tokens holds back, and its
/// generator.
class Sampler {
public:
  Sampler(const SamplingParams &params, const std::vector<int64_t> &prompt, int64_t vocab,
          const std::vector<int64_t> &stopIds = {});

  /// The next token from `logits` (vocab of them), recorded as the output's. The logits are
  /// not changed.
  int64_t sample(const float *logits);
  /// Records a token as the output's without choosing it (teacher forcing, or an argmax
  /// found elsewhere).
  void record(int64_t token);
  /// Whether the next token depends on the logits as they come and on draw() alone: nothing
  /// (a penalty, a bias, min_tokens still holding a stop id back) changes them first. Only
  /// then may a backend pick it for the sampler.
  bool plain() const;
  /// Whether the next token is the argmax of the logits as they come: greedy, and plain().
  bool argmaxOfRaw() const { return params_.greedy() && plain(); }
  /// The next token's draw, for a backend that picks it (plain()): the temperature (0 where
  /// greedy), top_k, top_p and min_p, and unless greedy the next uniform number of the
  /// generator, the one sample() would draw. The token picked is then record()ed.
  Draw draw();

  /// The logits as the draw sees them, into `out`: logit_bias added, the stop ids at -inf
  /// while min_tokens holds them back, then the penalties (vLLM's order, all before
  /// temperature).
  void adjust(const float *logits, std::vector<float> &out) const;
  /// The probability of every token that the filters keep (the rest 0), from adjusted
  /// logits: softmax(logits / temperature), min_p, then top_k, then top_p, as vLLM orders
  /// them. Exposed for tests; sample() draws from exactly these.
  std::vector<double> distribution(const std::vector<float> &penalized) const;

  const SamplingParams &params() const { return params_; }

private:
  SamplingParams params_;
  int64_t vocab_;
  std::vector<uint8_t> inPrompt_;     // per token: seen in the prompt
  std::vector<uint32_t> outputCount_; // per token: times in the output
  std::vector<int64_t> outputTokens_; // the output's distinct tokens: what the penalties visit
  std::vector<int64_t> stopIds_;      // held back while fewer than minTokens are out
  int64_t produced_ = 0;              // tokens out so far
  Rng rng_;
  std::vector<float> scratch_;
};

/// The most stop strings a request may give, and the most bytes of one.
constexpr size_t kMaxStopStrings = 64, kMaxStopStringBytes = 1024;
/// The most bytes of a request's cache_salt.
constexpr size_t kMaxCacheSaltBytes = 1024;
/// "" when `stops` are stop strings StopStrings can match (each non-empty, valid UTF-8, within
/// the limits above), else what is wrong with which.
std::string checkStopStrings(const std::vector<std::string> &stops);

/// The log-probability of each generated token and of the most likely ones at its step, from
/// the model's raw logits (before penalties and temperature, as vLLM's default
/// raw_logprobs).
struct TokenLogprobs {
  int64_t token;
  double logprob;
  std::vector<std::pair<int64_t, double>> top; // the `count` most likely, most likely first
  int64_t rank = 1; // vLLM's: how many tokens are at least as likely as `token`, itself too
};
/// At most this many top log-probabilities a token (vLLM's default max_logprobs).
constexpr int kMaxLogprobs = 20;
/// log_softmax of `logits` (vocab of them) at `token`, its rank, and the `count` largest with
/// their ids (ties by id).
TokenLogprobs logprobsOf(const float *logits, int64_t vocab, int64_t token, int count);

/// Stop strings over a growing text: push() each new piece of decoded text and get back what
/// may be shown now. Text that could still be the start of a stop string is held back until
/// it is resolved; once a stop string appears, the text before it is released, the rest
/// (the stop string included) never is, and stopped() is true.
///
/// A piece pushed unarmed (`armed` false: its token is one of the first min_tokens) is
/// released whole and ends nothing: as vLLM's, a stop string counts only where it ends in
/// text of a later token (it may begin in the text before, which is then shown already).
class StopStrings {
public:
  explicit StopStrings(std::vector<std::string> stops);
  std::string push(const std::string &piece, bool armed = true);
  /// At the end of the generation (no stop string met): the text held back.
  std::string finish();
  bool stopped() const { return stopped_; }
  /// The stop string that ended the text, if one did.
  const std::string &matched() const { return matched_; }

private:
  std::vector<std::string> stops_;
  size_t longest_ = 0;
  std::string held_;
  std::string shown_; // the end of the text released unarmed, where a stop string may begin
  std::string matched_;
  bool stopped_ = false;
};

} // namespace tpcrt

#endif // TPCRT_SAMPLING_H
