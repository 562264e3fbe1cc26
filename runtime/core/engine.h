// The engine: many requests at once on the group's ranks, continuous batching decided on rank
// 0 alone. Each step, rank 0's scheduler chooses which sequences run and how many of their
// tokens (decodes first, then prompts in chunks, under a token budget), places their keys and
// values in the paged KV cache's blocks, and sends every rank one fixed-layout step
// descriptor; every rank runs the same forward from it; rank 0 samples. A peer decides
// nothing: it runs the descriptors it is sent until one says the run is over, so the ranks
// cannot fall out of step.
#ifndef TPCRT_CORE_ENGINE_H
#define TPCRT_CORE_ENGINE_H

#include "tpcrt/backend.h"
#include "tpcrt/sampling.h"

#include <cstdint>
#include <functional>
#include <vector>

namespace tpcrt {

/// What the engine may hold at once (the flags of the same names).
struct EngineLimits {
  int64_t maxNumSeqs = 1;      // --max-num-seqs: sequences in one step
  int64_t maxBatchTokens = 1;  // --max-batch-tokens: tokens in one step
  int64_t blocks = 1;          // the KV cache's blocks (--kv-cache-tokens / block size)
  int64_t blockSize = 16;      // tokens per block (the program's)
  int64_t maxSeqLen = 1;       // --max-seq-len: the longest sequence (prompt + output)
};

/// One request, as rank 0's engine runs it, and what came of it.
struct EngineRequest {
  std::vector<int64_t> prompt;
  int64_t maxTokens = 16;
  SamplingParams sampling;
  std::vector<int64_t> stopIds; // end-of-sequence ids (unless ignored) and stop ids
  int logprobs = -1;            // -1: none
  /// Teacher forcing (--force-ids): the tokens fed back instead of the chosen ones, which
  /// are still the output; the stop rules are then ignored, as max_tokens alone ends it.
  std::vector<int64_t> forced;

  std::vector<int64_t> output;
  std::vector<TokenLogprobs> outputLogprobs;
  const char *finishReason = nullptr; // "stop" or "length", once finished
  int64_t preempted = 0;              // times its blocks were taken back and it was recomputed
  double firstTokenMs = 0, finishedMs = 0; // since the run began (every request arrives then)
};

/// What a run tells its caller. All optional.
struct EngineHooks {
  /// Rank 0: token `id` of request i, as it is chosen; true ends the request there (a stop
  /// string met in its text).
  std::function<bool(size_t, int64_t)> onToken;
  /// Rank 0: request i has its last token.
  std::function<void(size_t)> onFinish;
  /// Rank 0: the logits request i's next token is chosen from (vocab of them).
  std::function<void(size_t, const float *)> onLogits;
  /// Every rank, before step n's forward (0 is the first): TPC_FAULT strikes here.
  std::function<void(int64_t)> beforeStep;
};

class Engine {
public:
  Engine(const ModelSpec &spec, Backend &backend, const RankInfo &rank, EngineLimits limits);

  /// Rank 0: runs every request to its end, admitted in order, as many at once as the
  /// limits allow, telling `hooks` as it goes. The other ranks pass no requests: they run
  /// rank 0's steps until it ends.
  void run(std::vector<EngineRequest> &requests, const EngineHooks &hooks = {});

  /// Steps run, preemptions, and each step's wall time in ms (forward and sampling).
  int64_t steps() const { return stepCount; }
  int64_t preemptions() const { return preemptionCount; }
  const std::vector<double> &stepMs() const { return stepTimes; }

private:
  struct Sequence;
  /// The descriptor's length, in int64: the same on every rank, from the limits alone.
  size_t descriptorLength() const;
  /// Every rank: the step a descriptor describes (`tables` keeps its block tables).
  void readDescriptor(const std::vector<int64_t> &d, std::vector<int64_t> &ids,
                      std::vector<int64_t> &positions, std::vector<int32_t> &tables, Step &step);
  /// Sends rank 0's descriptor to every rank (into `d` on each).
  void share(std::vector<int64_t> &d);
  const float *forward(const Step &step, const EngineHooks &hooks);
  void follow(const EngineHooks &hooks);

  const ModelSpec &spec;
  Backend &backend;
  const RankInfo &rank;
  EngineLimits limits;
  int64_t blocksPerSequence;
  int64_t stepCount = 0, preemptionCount = 0;
  std::vector<double> stepTimes;
  std::vector<int64_t> gathered; // every rank's descriptor, from share()
};

} // namespace tpcrt

#endif // TPCRT_CORE_ENGINE_H
