// What a program emitted by `tpc compile --target cpu` calls: the description of the model
// (newSpec, addParam, ... in tpcrt/model.h; setForwards and runModel here, which run it on the
// CPU backend) and one function per tp op, the rank's Context first and the op's placement
// spelled out in the arguments. Each is a thin inline call into the CPU kernels
// (tpcrt/cpu/kernels.h) or the Context's collectives (tpcrt/cpu/context.h), so the program
// costs nothing over calling those directly. The CUDA target's program calls the same names in
// tpcrt::cuda (tpcrt/cuda/program.h).
#ifndef TPCRT_PROGRAM_H
#define TPCRT_PROGRAM_H

#include "tpcrt/cpu/context.h"
#include "tpcrt/fused.h"
#include "tpcrt/model.h"

#include <stdexcept>
#include <string>
#include <vector>

namespace tpcrt {

using ProgramContext = Context;
using ProgramAct = float;
/// What setForwards takes; it and runModel (on the CPU backend, runtime/cpu) are declared
/// from tpcrt/calls.def with the calls below.
using ProgramForward = ForwardFn;
/// A weight matrix as the rank holds it (fp32, bf16 or f16): what linear and embedding take.
using ProgramMatrix = cpu::Matrix;
/// The state the CPU kernels take: none (tpcrt/cpu/kernels.h).
inline cpu::Host kernels(Context &) { return {}; }
/// Layer `layer`'s KV cache as the step under way reads it.
inline cpu::StepCache kvCache(Context &cx, int64_t layer) {
  return {cx.caches[size_t(layer)], *cx.step};
}
#include "tpcrt/program_ops.inc"

// What only the CPU target runs (TPC_CPU_CALL in tpcrt/calls.def): mixtures of experts,
// DeepSeek's multi-head latent attention and a greedy step's argmax on the ranks.
inline ProgramMatrix matrix(Context &cx, int64_t i) { return cx.matrix(size_t(i)); }
inline void router(Context &cx, const float *x, int64_t rows, int64_t hidden, const float *w,
                   int64_t experts, int64_t topK, bool normalize, float *out, const float *bias,
                   bool softmaxAfterTopK, double scale, int64_t groups, int64_t topGroups,
                   bool sigmoid) {
  router(kernels(cx), x, rows, hidden, w, experts, topK, normalize, out, bias, softmaxAfterTopK,
         scale, groups, topGroups, sigmoid);
}
inline void experts(Context &cx, const float *x, int64_t rows, int64_t hidden, const float *routing,
                    int64_t count, const float *gateUp, const float *down, int64_t inter,
                    bool geluTanh, float *out, bool inOutInterleaved, const float *gateUpBias,
                    const float *downBias, double alpha, double limit, bool inOut,
                    bool scaleInput) {
  experts(kernels(cx), x, rows, hidden, routing, count, gateUp, down, inter, geluTanh,
          cpu::ExpertsForm{inOutInterleaved, gateUpBias, downBias, alpha, limit, inOut,
                           scaleInput},
          out);
}
inline void allGatherLogits(Context &cx, const float *x, int64_t rows,
                            const std::vector<int64_t> &blocks, float *out, const char *module) {
  if (cx.poisonNextLogits) // TPC_FAULT=nan
    x = cx.poisonedLogits(x, rows, blocks);
  if (cx.step && cx.step->argmax)
    cx.argmaxColumns(x, rows, blocks, module);
  else
    cx.collectives().allGatherColumns(x, rows, blocks, out, module);
}
/// The logits' transfer to the first pipeline stage marked argmax_if_greedy: on a step with
/// Step::argmax, each row's argmax (the gather before it found it on the stage's ranks, else
/// this rank finds it in its whole rows) goes as one fp32 value a row (exact below 2^24; -2
/// where a logit is not finite) instead of the row; other steps send the rows.
inline void sendLogitsToStage(Context &cx, const float *x, int64_t rows, int64_t cols,
                              int64_t stage, const char *module) {
  if (!(cx.step && cx.step->argmax))
    return sendToStage(cx, x, rows, cols, stage, module);
  if (cols >= int64_t(1) << 24)
    throw std::runtime_error("a vocabulary of " + std::to_string(cols) +
                             " ids is too large to send each row's argmax as fp32");
  if (!cx.argmaxReady)
    cx.argmaxRows(x, rows, cols);
  cx.sentIds.assign(cx.argmax.begin(), cx.argmax.end());
  sendToStage(cx, cx.sentIds.data(), rows, 1, stage, module);
}
inline void l2Norm(Context &cx, const float *x, int64_t rows, int64_t cols, int64_t width,
                   double epsilon, float *out) {
  rmsNorm(kernels(cx), x, rows * (cols / width), width, nullptr, epsilon, 0.0, out);
}
inline void headSlice(Context &cx, const float *x, int64_t rows, int64_t cols, int64_t headDim,
                      int64_t offset, int64_t size, float *out) {
  headSlice(kernels(cx), x, rows, cols, headDim, offset, size, out);
}
inline void concatHeads(Context &cx, const float *heads, int64_t rows, int64_t cols,
                        int64_t headDim, const float *shared, int64_t sharedCols, float *out) {
  concatHeads(kernels(cx), heads, rows, cols, headDim, shared, sharedCols, out);
}

} // namespace tpcrt

#endif // TPCRT_PROGRAM_H
