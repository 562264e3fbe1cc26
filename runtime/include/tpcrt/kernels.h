// libtpcrt's CPU kernels: fp32, row-major activations [tokens, features]. Plain C++17.
#ifndef TPCRT_KERNELS_H
#define TPCRT_KERNELS_H

#include <cstdint>

namespace tpcrt {

/// Rows of `table` for each id. The table holds rows [rowOffset, rowOffset + rows) of the
/// vocabulary (a vocab-split embedding): ids outside that range give zero rows, so summing
/// the ranks' outputs gives the full lookup. Ids outside [0, vocab) are an error (false).
bool embedding(const int64_t *ids, int64_t tokens, const float *table, int64_t rowOffset,
               int64_t rows, int64_t vocab, int64_t width, float *out);

/// out = x / rms(x) * (weight + weightOffset), per row of `cols`.
void rmsNorm(const float *x, int64_t rows, int64_t cols, const float *weight, double epsilon,
             double weightOffset, float *out);

/// y[rows, out] = x[rows, in] @ w[out, in]^T (+ bias[out] when bias is not null).
void linear(const float *x, int64_t rows, int64_t in, const float *w, int64_t out,
            const float *bias, float *y);

/// Rotary embedding of each head of `headDim` (HF's rotate_half layout) at `positions`.
void rotary(const float *x, int64_t rows, int64_t cols, int64_t headDim, double theta,
            const int64_t *positions, float *out);

/// One layer's keys and values for up to `capacity` tokens: [capacity, kvHeads * headDim].
struct KVCache {
  float *keys = nullptr, *values = nullptr;
  int64_t capacity = 0, width = 0, length = 0;
};

/// Causal attention of `rows` new tokens (at positions cache.length ..) with GQA: query head
/// h reads KV head h / (heads / kvHeads). Appends k and v to the cache first.
void attention(const float *q, const float *k, const float *v, int64_t rows, int64_t heads,
               int64_t kvHeads, int64_t headDim, double scale, int64_t slidingWindow,
               KVCache &cache, float *out);

void silu(const float *x, int64_t n, float *out);
void gelu(const float *x, int64_t n, bool tanhApproximation, float *out);
void add(const float *a, const float *b, int64_t n, float *out);
void mul(const float *a, const float *b, int64_t n, float *out);

/// Columns [offset, offset + size) of a [rows, cols] matrix.
void sliceColumns(const float *x, int64_t rows, int64_t cols, int64_t offset, int64_t size,
                  float *out);

/// Index of the largest of n values (the first on ties).
int64_t argmax(const float *x, int64_t n);

} // namespace tpcrt

#endif // TPCRT_KERNELS_H
