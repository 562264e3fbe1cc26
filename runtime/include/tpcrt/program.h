// What a program emitted by `tpc compile --target cpu` calls: the description of the model
// (newSpec, addParam, ..., runModel) and one function per tp op, the rank's Context first and
// the op's placement spelled out in the arguments. Each is a thin inline call into the
// kernels (kernels.h) or the Context's collectives (model.h), so the program costs nothing
// over calling those directly. The CUDA target's program calls the same names in
// tpcrt::cuda (tpcrt/cuda/program.h).
#ifndef TPCRT_PROGRAM_H
#define TPCRT_PROGRAM_H

#include "tpcrt/fused.h"
#include "tpcrt/model.h"

#include <string>
#include <vector>

namespace tpcrt {

// The model, as main() describes it. The spec lives as long as the program.
ModelSpec *newSpec(const char *name, int64_t tp, int64_t vocab, int64_t arenaPerToken,
                   bool lastTokenOnly);
void addParam(ModelSpec *spec, const char *name, std::vector<int64_t> hfShape, SliceSpec slice,
              std::vector<std::string> sources);
void addKvCache(ModelSpec *spec, int64_t width);
void addEosId(ModelSpec *spec, int64_t id);
/// config.json's max_position_embeddings: the default --max-seq-len is no more than that.
void setMaxPositions(ModelSpec *spec, int64_t positions);
void setForwards(ModelSpec *spec, ForwardFn forward, ForwardFn sequenceParallel);
int runModel(ModelSpec *spec, int argc, char **argv);

inline const float *weight(Context &cx, int64_t i) { return cx.weight(size_t(i)); }
/// The arena slot at `offset` elements per token, for a forward over n tokens.
inline float *slot(Context &cx, int64_t offset, int64_t n) { return cx.arena + offset * n; }
/// A bias added to a Partial result: by rank 0 only, so it counts once in the sum.
inline const float *onRankZero(Context &cx, const float *bias) {
  return cx.rank == 0 ? bias : nullptr;
}
/// The positions of this rank's tokens where tokens are split evenly, `perRank` each.
inline const int64_t *localPositions(Context &cx, const int64_t *positions, int64_t perRank) {
  return positions + cx.rank * perRank;
}

/// A table split by vocabulary (`byVocab`) holds `localRows` rows from rank * localRows.
inline void embedding(Context &cx, const int64_t *ids, int64_t n, const float *table,
                      int64_t localRows, int64_t vocab, int64_t width, bool byVocab,
                      float *out) {
  int64_t offset = byVocab ? cx.rank * localRows : 0;
  if (!embedding(ids, n, table, offset, std::min(localRows, vocab - offset), vocab, width, out))
    cx.fail("a token id is outside the vocabulary of " + std::to_string(vocab));
}
/// A row norm over each `width` columns of [rows, cols] (width < cols: per head).
inline void rmsNorm(Context &, const float *x, int64_t rows, int64_t cols, int64_t width,
                    const float *weight, double epsilon, double weightOffset, float *out) {
  rmsNorm(x, rows * (cols / width), width, weight, epsilon, weightOffset, out);
}
inline void linear(Context &, const float *x, int64_t rows, int64_t in, const float *w,
                   int64_t out, const float *bias, float *y) {
  linear(x, rows, in, w, out, bias, y);
}
inline void rotary(Context &, const float *x, int64_t rows, int64_t cols, int64_t headDim,
                   double theta, const double *invFreq, const int64_t *positions, float *out) {
  rotary(x, rows, cols, headDim, theta, invFreq, positions, out);
}
/// Attention of layer `layer` (its KV cache), over the forward's n tokens.
inline void attention(Context &cx, const float *q, const float *k, const float *v, int64_t n,
                      int64_t heads, int64_t kvHeads, int64_t headDim, double scale,
                      int64_t slidingWindow, double softcap, int64_t layer, float *out) {
  attention(q, k, v, n, heads, kvHeads, headDim, scale, slidingWindow, softcap,
            cx.caches[size_t(layer)], out);
}
inline void router(Context &, const float *x, int64_t rows, int64_t hidden, const float *w,
                   int64_t experts, int64_t topK, bool normalize, float *out) {
  router(x, rows, hidden, w, experts, topK, normalize, out);
}
inline void experts(Context &, const float *x, int64_t rows, int64_t hidden,
                    const float *routing, int64_t count, const float *gateUp, const float *down,
                    int64_t inter, bool geluTanh, float *out) {
  experts(x, rows, hidden, routing, count, gateUp, down, inter, geluTanh, out);
}

// Elementwise ops over [rows, cols].
inline void silu(Context &, const float *x, int64_t rows, int64_t cols, float *out) {
  silu(x, rows * cols, out);
}
inline void gelu(Context &, const float *x, int64_t rows, int64_t cols, bool tanh, float *out) {
  gelu(x, rows * cols, tanh, out);
}
inline void scale(Context &, const float *x, int64_t rows, int64_t cols, double factor,
                  float *out) {
  scale(x, rows * cols, factor, out);
}
inline void softcap(Context &, const float *x, int64_t rows, int64_t cols, double cap,
                    float *out) {
  softcap(x, rows * cols, cap, out);
}
inline void add(Context &, const float *a, const float *b, int64_t rows, int64_t cols,
                float *out) {
  add(a, b, rows * cols, out);
}
inline void mul(Context &, const float *a, const float *b, int64_t rows, int64_t cols,
                float *out) {
  mul(a, b, rows * cols, out);
}
inline void copy(Context &, const float *x, int64_t rows, int64_t cols, float *out) {
  copyRows(out, 0, x, 0, 1, rows * cols);
}
/// The last of `rows` rows.
inline void lastRow(Context &, const float *x, int64_t rows, int64_t cols, float *out) {
  copyRows(out, cols, x + (rows - 1) * cols, cols, 1, cols);
}
inline void sliceColumns(Context &, const float *x, int64_t rows, int64_t cols, int64_t offset,
                         int64_t size, float *out) {
  sliceColumns(x, rows, cols, offset, size, out);
}
/// [rows, inCols] into columns [at, at + inCols) of [rows, outCols] (a concat's piece).
inline void placeColumns(Context &, const float *in, int64_t rows, int64_t inCols, float *out,
                         int64_t outCols, int64_t at) {
  copyRows(out + at, outCols, in, inCols, rows, inCols);
}

// Collectives and reshards: the Context's.
inline void allReduce(Context &cx, const float *in, int64_t rows, int64_t cols, float *out,
                      const char *module) {
  cx.allReduce(in, rows, cols, out, module);
}
inline void allGatherRows(Context &cx, const float *in, int64_t rows, int64_t cols, float *out,
                          const char *module) {
  cx.allGatherRows(in, rows, cols, out, module);
}
inline void allGatherColumns(Context &cx, const float *in, int64_t rows,
                             const std::vector<int64_t> &blocks, float *out,
                             const char *module) {
  cx.allGatherColumns(in, rows, blocks, out, module);
}
inline void reduceScatterRows(Context &cx, const float *in, int64_t rows, int64_t cols,
                              float *out, const char *module) {
  cx.reduceScatterRows(in, rows, cols, out, module);
}
inline void reduceScatterColumns(Context &cx, const float *in, int64_t rows,
                                 const std::vector<int64_t> &blocks, float *out,
                                 const char *module) {
  cx.reduceScatterColumns(in, rows, blocks, out, module);
}
inline void allToAll(Context &cx, const float *in, int64_t tokens,
                     const std::vector<int64_t> &blocks, bool rowsToColumns, float *out,
                     const char *module) {
  cx.allToAll(in, tokens, blocks, rowsToColumns, out, module);
}
inline void partialFromReplicate(Context &cx, const float *in, int64_t rows, int64_t cols,
                                 float *out) {
  cx.partialFromReplicate(in, rows * cols, out);
}
inline void takeRows(Context &cx, const float *in, int64_t rows, int64_t cols, float *out) {
  cx.takeRows(in, rows, cols, out);
}
inline void takeColumns(Context &cx, const float *in, int64_t rows,
                        const std::vector<int64_t> &blocks, float *out) {
  cx.takeColumns(in, rows, blocks, out);
}
inline void partialFromRows(Context &cx, const float *in, int64_t tokens, int64_t cols,
                            float *out) {
  cx.partialFromRows(in, tokens, cols, out);
}
inline void partialFromColumns(Context &cx, const float *in, int64_t rows,
                               const std::vector<int64_t> &blocks, float *out) {
  cx.partialFromColumns(in, rows, blocks, out);
}

} // namespace tpcrt

#endif // TPCRT_PROGRAM_H
