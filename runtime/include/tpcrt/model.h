// What code emitted by `tpc compile` and libtpcrt's core share, whatever the backend: the
// model's description (its parameters and KV caches; the forwards are the backend's), the
// calls main() builds it with, the driver that runs it on a backend (tpcrt/backend.h), and
// the descriptors the ops of every backend take. No backend's header is included here: the
// CPU program's context and kernels are in tpcrt/cpu/, the CUDA device's in tpcrt/cuda/.
#ifndef TPCRT_MODEL_H
#define TPCRT_MODEL_H

#include "tpcrt/comm.h"
#include "tpcrt/dtype.h"
#include "tpcrt/failure.h"
#include "tpcrt/kv_groups.h"
#include "tpcrt/weights.h"

#include <algorithm>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace tpcrt {

struct ParamDesc {
  const char *name;
  std::vector<int64_t> hfShape; // as in the checkpoint
  SliceSpec slice;              // piece left 0: the driver sets rank * chunks / tp
  std::vector<std::string> sources; // checkpoint tensors it stacks, when saved in pieces
  DType dtype = DType::F32;         // how the rank holds it (the program's tp-weight-storage)
};

struct ModelSpec {
  const char *name;
  int64_t tp;
  int64_t vocab;
  int64_t floatsPerToken;            // the activation arena, per token
  std::vector<ParamDesc> params;
  std::vector<int64_t> kvWidths;     // per attention layer: kv heads * head_dim, local
  std::vector<int64_t> kvValueWidths; // the same for values (kv heads * value head dim)
  bool lastTokenOnly = false;        // forwards return the last token's row only
  std::vector<int64_t> eosIds;       // generation stops at these (config.json's eos_token_id)
  /// config.json's max_position_embeddings (the module's tp.max_position_embeddings), which
  /// bounds --max-model-len; 0 where unknown. Last, so that specs written without it still
  /// initialize every other field.
  int64_t maxPositions = 0;
  /// The program's rule for its sequence-parallel forward (tp.sequence_parallel): it runs
  /// the token counts that are positive multiples of this; 0: the program has none.
  int64_t sequenceParallelTokens = 0;
  /// The program's #tp.target gather mode: a gather of pieces tp does not split evenly sends
  /// only the real columns (true) or pieces padded to the largest (false).
  bool variableGathers = false;
  /// Tokens per block of the paged KV cache (tpcrt/batch.h): tp-plan-arena's choice.
  int64_t kvBlockSize = 16;
  /// Whether the forward's gather of the logits is marked argmax_if_greedy
  /// (tp-greedy-argmax): on a greedy step the ranks find each row's argmax instead.
  bool argmaxOnRanks = false;
  /// Pipeline stages (the mesh's pp): the ranks are stages * tp, stage-major. Each stage
  /// holds the parameters `paramStages` gives it (per parameter; empty: every stage) and
  /// the KV caches whose `kvStages` is its own.
  int64_t stages = 1;
  std::vector<std::vector<int64_t>> paramStages;
  std::vector<int64_t> kvStages;
  /// Per attention layer: which keys its queries read (tpcrt/kv_groups.h).
  std::vector<KvReach> kvReaches;
  /// The stage whose ranks send the first stage the logits, and the transfer's module.
  int64_t logitsStage = 0;
  const char *logitsModule = "";

  /// Whether stage `stage`'s ranks hold parameter `param`.
  bool holds(size_t param, int64_t stage) const {
    if (param >= paramStages.size() || paramStages[param].empty())
      return true;
    for (int64_t s : paramStages[param])
      if (s == stage)
        return true;
    return false;
  }
};

// The model, as main() describes it: calls.def's TPC_SPEC_CALLs, declared from that table,
// which the lowering checks main()'s calls against (each target's own, such as runModel, are
// declared by its program header). Written out by hand they could drift from what main()
// passes, and the first to notice would be the C++ compiler of a generated program.
#define TPC_ARG(type, name) , type name
#define TPC_OPT(type, name, value) , type name = value
// The arguments without the comma TPC_ARG puts before the first: these calls have no context
// before them.
#define TPC_PARAMS(none, ...) __VA_ARGS__
#define TPC_SPEC_CALL(result, name, args) result name(TPC_PARAMS(args));
#define TPC_CALL(result, name, args)
#define TPC_CPU_CALL(result, name, args)
#define TPC_TARGET_SPEC_CALL(result, name, args)
#define TPC_CUDA_SPEC_CALL(result, name, args)
#include "tpcrt/calls.def"
#undef TPC_ARG
#undef TPC_OPT
#undef TPC_PARAMS
#undef TPC_SPEC_CALL
#undef TPC_CALL
#undef TPC_CPU_CALL
#undef TPC_TARGET_SPEC_CALL
#undef TPC_CUDA_SPEC_CALL

/// --max-model-len when none is given: 2048 tokens, or the model's max_position_embeddings
/// where that is fewer (`maxPositions` 0: unknown). `tpc analyze` reports with it too.
inline constexpr int64_t kDefaultMaxSeqLen = 2048;
inline int64_t defaultMaxSeqLen(int64_t maxPositions) {
  return maxPositions > 0 ? std::min(kDefaultMaxSeqLen, maxPositions) : kDefaultMaxSeqLen;
}
/// The context a run holds: `requested` (--max-model-len) or the default. Empty, with `error`
/// naming both numbers, when the request is longer than the model's positions. Inline, like
/// the default: the compiler (`tpc analyze`) asks it too, and links no runtime layer above the
/// formats.
inline std::optional<int64_t> chooseMaxSeqLen(std::optional<int64_t> requested,
                                              int64_t maxPositions, std::string &error) {
  if (!requested)
    return defaultMaxSeqLen(maxPositions);
  // Positions past the ones the model was trained on give rotary angles it never saw.
  if (maxPositions > 0 && *requested > maxPositions) {
    error = "--max-model-len " + std::to_string(*requested) + " is more than the model's " +
            std::to_string(maxPositions) + " positions (config.json's max_position_embeddings)";
    return std::nullopt;
  }
  return requested;
}

/// Which heads a rank holds where tp does not divide them (the attention's rank_heads):
/// `heads` query heads of the model from `firstHead`, and KV heads from `firstKvHead`, `group`
/// query heads reading each KV head of the model. group 0: the even split. Every backend's
/// attention takes it.
struct HeadSplit {
  int64_t group = 0, firstHead = 0, heads = 0, firstKvHead = 0;
};

/// Llama 4's changes to which keys a query sees and how hard it looks: `chunkSize` C > 0
/// limits the query at position p to the keys of its chunk (C * floor(p / C) .. p); a
/// positive `temperatureFloor` F scales its scores by log(floor((p + 1) / F) + 1) *
/// `temperatureScale` + 1.
struct AttentionMask {
  int64_t chunkSize = 0;
  double temperatureFloor = 0, temperatureScale = 0;
};

class Backend;
/// The emitted binary's main: arguments, rank identity, weights loaded into `backend`,
/// prefill and greedy decode. Each target's program calls it with its backend, which it owns
/// (tpcrt::runModel in tpcrt/program.h, tpcrt::cuda::runModel): a rank that stops on an error
/// leaves it as it is, since a device's communicator would wait for its peers to finalize.
int runModel(const ModelSpec &spec, Backend &backend, int argc, char **argv);

} // namespace tpcrt

#endif // TPCRT_MODEL_H
