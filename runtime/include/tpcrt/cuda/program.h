// What a program emitted by `tpc compile --target cuda` calls: the names of the CPU target's
// program (tpcrt/program.h) in tpcrt::cuda, on the rank's Device and bf16 device pointers,
// plus what only the device needs to know (weight groups, attention bounds). The generated
// kernels of fused units launch themselves on the Device's stream (tpcrt/cuda/fused.h).
#ifndef TPCRT_CUDA_PROGRAM_H
#define TPCRT_CUDA_PROGRAM_H

#include "tpcrt/cuda/device.h"
#include "tpcrt/cuda/fused.h"
#include "tpcrt/program.h"

namespace tpcrt::cuda {

/// The parameters (by index) the device lays one after the other, so that linears reading
/// one input run as one GEMM for one row.
void addWeightGroup(ModelSpec *spec, std::vector<int> group);
/// The most local query heads and the largest head size of any attention layer.
void setAttentionBounds(ModelSpec *spec, int64_t maxHeads, int64_t maxHeadDim);
/// The forwards run on the device; the driver's host forwards call them through the Device.
void setForwards(ModelSpec *spec, DeviceForwardFn forward, DeviceForwardFn sequenceParallel);
/// tpcrt::runModel, then the Device freed once every rank is done (NCCL finalizes together).
int runModel(ModelSpec *spec, int argc, char **argv);

inline const act *weight(Device &cx, int64_t i) { return cx.weight(size_t(i)); }
inline act *slot(Device &cx, int64_t offset, int64_t n) { return cx.arena + offset * n; }
inline const act *onRankZero(Device &cx, const act *bias) {
  return cx.rank == 0 ? bias : nullptr;
}
inline const int64_t *localPositions(Device &cx, const int64_t *positions, int64_t perRank) {
  return positions + cx.rank * perRank;
}

inline void embedding(Device &cx, const int64_t *ids, int64_t n, const act *table,
                      int64_t localRows, int64_t vocab, int64_t width, bool byVocab,
                      act *out) {
  int64_t offset = byVocab ? cx.rank * localRows : 0;
  if (!embedding(ids, n, table, offset, std::min(localRows, vocab - offset), vocab, width, out))
    cx.fail("a token id is outside the vocabulary of " + std::to_string(vocab));
}
inline void rmsNorm(Device &, const act *x, int64_t rows, int64_t cols, int64_t width,
                    const act *weight, double epsilon, double weightOffset, act *out) {
  rmsNorm(x, rows * (cols / width), width, weight, epsilon, weightOffset, out);
}
inline void linear(Device &, const act *x, int64_t rows, int64_t in, const act *w, int64_t out,
                   const act *bias, act *y) {
  linear(x, rows, in, w, out, bias, y);
}
inline void rotary(Device &, const act *x, int64_t rows, int64_t cols, int64_t headDim,
                   double theta, const double *invFreq, const int64_t *positions, act *out) {
  rotary(x, rows, cols, headDim, theta, invFreq, positions, out);
}
inline void attention(Device &cx, const act *q, const act *k, const act *v, int64_t n,
                      int64_t heads, int64_t kvHeads, int64_t headDim, double scale,
                      int64_t slidingWindow, double softcap, int64_t layer, act *out) {
  attention(q, k, v, n, heads, kvHeads, headDim, scale, slidingWindow, softcap,
            cx.caches[size_t(layer)], out);
}

inline void silu(Device &, const act *x, int64_t rows, int64_t cols, act *out) {
  silu(x, rows * cols, out);
}
inline void gelu(Device &, const act *x, int64_t rows, int64_t cols, bool tanh, act *out) {
  gelu(x, rows * cols, tanh, out);
}
inline void scale(Device &, const act *x, int64_t rows, int64_t cols, double factor, act *out) {
  scale(x, rows * cols, factor, out);
}
inline void softcap(Device &, const act *x, int64_t rows, int64_t cols, double cap, act *out) {
  softcap(x, rows * cols, cap, out);
}
inline void add(Device &, const act *a, const act *b, int64_t rows, int64_t cols, act *out) {
  add(a, b, rows * cols, out);
}
inline void mul(Device &, const act *a, const act *b, int64_t rows, int64_t cols, act *out) {
  mul(a, b, rows * cols, out);
}
inline void copy(Device &, const act *x, int64_t rows, int64_t cols, act *out) {
  copyRows(out, 0, x, 0, 1, rows * cols);
}
inline void lastRow(Device &, const act *x, int64_t rows, int64_t cols, act *out) {
  copyRows(out, cols, x + (rows - 1) * cols, cols, 1, cols);
}
inline void sliceColumns(Device &, const act *x, int64_t rows, int64_t cols, int64_t offset,
                         int64_t size, act *out) {
  sliceColumns(x, rows, cols, offset, size, out);
}
inline void placeColumns(Device &, const act *in, int64_t rows, int64_t inCols, act *out,
                         int64_t outCols, int64_t at) {
  copyRows(out + at, outCols, in, inCols, rows, inCols);
}

inline void allReduce(Device &cx, const act *in, int64_t rows, int64_t cols, act *out,
                      const char *module) {
  cx.allReduce(in, rows, cols, out, module);
}
inline void allGatherRows(Device &cx, const act *in, int64_t rows, int64_t cols, act *out,
                          const char *module) {
  cx.allGatherRows(in, rows, cols, out, module);
}
inline void allGatherColumns(Device &cx, const act *in, int64_t rows,
                             const std::vector<int64_t> &blocks, act *out, const char *module) {
  cx.allGatherColumns(in, rows, blocks, out, module);
}
inline void reduceScatterRows(Device &cx, const act *in, int64_t rows, int64_t cols, act *out,
                              const char *module) {
  cx.reduceScatterRows(in, rows, cols, out, module);
}
inline void reduceScatterColumns(Device &cx, const act *in, int64_t rows,
                                 const std::vector<int64_t> &blocks, act *out,
                                 const char *module) {
  cx.reduceScatterColumns(in, rows, blocks, out, module);
}
inline void allToAll(Device &cx, const act *in, int64_t tokens,
                     const std::vector<int64_t> &blocks, bool rowsToColumns, act *out,
                     const char *module) {
  cx.allToAll(in, tokens, blocks, rowsToColumns, out, module);
}
inline void partialFromReplicate(Device &cx, const act *in, int64_t rows, int64_t cols,
                                 act *out) {
  cx.partialFromReplicate(in, rows * cols, out);
}
inline void takeRows(Device &cx, const act *in, int64_t rows, int64_t cols, act *out) {
  cx.takeRows(in, rows, cols, out);
}
inline void takeColumns(Device &cx, const act *in, int64_t rows,
                        const std::vector<int64_t> &blocks, act *out) {
  cx.takeColumns(in, rows, blocks, out);
}
inline void partialFromRows(Device &cx, const act *in, int64_t tokens, int64_t cols, act *out) {
  cx.partialFromRows(in, tokens, cols, out);
}
inline void partialFromColumns(Device &cx, const act *in, int64_t rows,
                               const std::vector<int64_t> &blocks, act *out) {
  cx.partialFromColumns(in, rows, blocks, out);
}

} // namespace tpcrt::cuda

#endif // TPCRT_CUDA_PROGRAM_H
