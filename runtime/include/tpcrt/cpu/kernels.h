// The CPU backend's kernels: fp32, row-major activations [tokens, features], matrix products
// through OpenBLAS. Only the CPU backend and the programs of the CPU target see them; the core
// does not. Plain C++17.
#ifndef TPCRT_CPU_KERNELS_H
#define TPCRT_CPU_KERNELS_H

#include "tpcrt/batch.h"
#include "tpcrt/dtype.h"
#include "tpcrt/model.h"

#include <cstdint>
#include <string>

namespace tpcrt::cpu {

/// The CPU kernels' state, which is none today: they run on the calling thread with one
/// OpenBLAS thread. Each kernel takes it first all the same, as the CUDA kernels take their
/// Device's state, so that the generated program calls both targets' kernels alike.
struct Host {};

/// A weight matrix as the rank holds it: row-major elements of `type` from `data` (of a
/// quantized type, each row whole ggml blocks, as a GGUF file stores it). An fp32 pointer
/// converts to one, so kernels that take a Matrix take the fp32 weights as before.
struct Matrix {
  const void *data = nullptr;
  DType type = DType::F32;
  Matrix() = default;
  Matrix(const float *values) : data(values) {} // NOLINT: implicit, an fp32 weight
  Matrix(const void *data, DType type) : data(data), type(type) {}
};

/// Rows of `table` for each id. The table holds rows [rowOffset, rowOffset + rows) of the
/// vocabulary (a vocab-split embedding): ids outside that range give zero rows, so summing
/// the ranks' outputs gives the full lookup. Ids outside [0, vocab) are an error (false).
bool embedding(Host, const int64_t *ids, int64_t tokens, Matrix table, int64_t rowOffset,
               int64_t rows, int64_t vocab, int64_t width, float *out);

/// out = x / rms(x) * (weight + weightOffset), per row of `cols`.
void rmsNorm(Host, const float *x, int64_t rows, int64_t cols, const float *weight, double epsilon,
             double weightOffset, float *out);

/// out[r] = sum of x[r, c]^2 over the row's cols (0 when not `contribute`), out [rows, 1].
void sumSquares(Host, const float *x, int64_t rows, int64_t cols, bool contribute, float *out);

/// out = x * rsqrt(totals[r] / features + epsilon) * (weight + weightOffset), per row of
/// `cols`: a row norm whose sums of squares (over `features` columns) are given.
void rmsNormOfTotals(Host, const float *x, int64_t rows, int64_t cols, const float *totals,
                     int64_t features, const float *weight, double epsilon, double weightOffset,
                     float *out);

/// y[rows, out] = x[rows, in] @ w[out, in]^T (+ bias[out] when bias is not null), in fp32
/// arithmetic whatever w's type: a bf16, f16 or quantized w is widened (dequantized) in
/// registers (one row of x) or a panel at a time (several rows), never rounding x; or, for
/// one row of x and a Q4_K, Q5_K or Q6_K w on a CPU where detail::limbsKernelsFor says so, in
/// int32 over x split into 16-bit limbs (cpu/limbs.h: an element moves by at most 2^-29 of
/// its block's largest |x|). For a quantized w, `in` is a multiple of its block (32 or 256
/// elements).
void linear(Host, const float *x, int64_t rows, int64_t in, Matrix w, int64_t out,
            const float *bias, float *y);

/// --int8-activations: from now on, linear meets W held in a block type with x rounded to
/// int8 in blocks of W's (256 elements for Q4_K, Q5_K and Q6_K, as llama.cpp's Q8_K; 32 for
/// the others, as its Q8_0, and for them only in products of more than eight rows), on a CPU
/// with AVX-512 VNNI: faster, and no longer fp32's answer (each element of x moves by up to
/// half of max |x| / 127 of its block). Float weights, and CPUs without it, keep the fp32
/// kernels.
void setInt8Activations(bool on);

/// How linear computes on this CPU, for --verbose: the matrix-vector kernels of each type and
/// the BLAS behind the matrix products.
std::string matrixKernels();

/// What the float types' matrix-vector kernels chose by timing on this CPU (how they walk W;
/// cpu/choice.h), for --verbose at the end of a run; empty before any choice.
std::string kernelChoices();

/// Switches for tests and benchmarks, not for programs.
namespace detail {
/// linear, embedding and a decode step's attention without the AVX2 and AVX-512 kernels (as on
/// a CPU without them) while `scalar`.
void forceScalarKernels(bool scalar);
/// Whether linear reads a W of `type` with the AVX2 kernels now.
bool vectorKernelsFor(DType type);
/// The linears and a decode step's attention without AVX-512 while `avx2`.
void forceAvx2Kernels(bool avx2);
/// The float types' AVX-512 matrix-vector kernels walk W as walk `walk` (0 to floatWalks() - 1;
/// for 2 to 8 rows of x, a one-row-only walk runs as walk 0) instead of as timing chose; -1:
/// as timing chose. Every walk gives the same bits.
void forceFloatWalk(int walk);
int floatWalks();
/// Whether the one-row linear reads a W of `type` with AVX-512 now (the float types and the block
/// types but Q4_1, on a CPU with AVX-512 F and BW).
bool avx512KernelsFor(DType type);
/// Whether linear meets W of `type` with x rounded to int8 now (setInt8Activations, and a
/// type and CPU the int8 path takes).
bool int8KernelsFor(DType type);
/// The one-row linear of Q4_K, Q5_K and Q6_K with x split into 16-bit limbs (cpu/limbs.h) on
/// a CPU that has them: where the rule says (-1, the default), never (0) or always (1).
void forceLimbs(int limbs);
/// Whether the one-row linear of `type` splits x into limbs now.
bool limbsKernelsFor(DType type);
/// Whether the rule splits x into limbs on a CPU of this cpuid vendor and family (where the
/// CPU has the kernels): AMD's family 25, where they were measured faster.
bool limbsPreferredOn(const char *vendor, int family);
/// The size of the fp32 panel a several-row linear widens a 16-bit or quantized W into
/// (1 MiB).
void setPanelBytes(size_t bytes);
} // namespace detail

/// Rotary embedding of each head of `headDim` (HF's rotate_half layout) at `positions`, with
/// the inverse frequencies of `invFreq` (the compiler's table: tp.rotary's getFrequencies);
/// cos and sin are multiplied by `scaling` (YaRN's attention factor). `interleaved`: pairs
/// (2i, 2i+1), DeepSeek's complex form; `unrotated`: the first elements of each head left as
/// they are, the rest rotated (frequencies over that many dims).
void rotary(Host, const float *x, int64_t rows, int64_t cols, int64_t headDim,
            const double *invFreq, const int64_t *positions, float *out, double scaling = 1.0,
            bool interleaved = false, int64_t unrotated = 0);

/// Columns [offset, offset + size) of each head of `headDim` of a [rows, cols] matrix.
void headSlice(Host, const float *x, int64_t rows, int64_t cols, int64_t headDim, int64_t offset,
               int64_t size, float *out);

/// Each head of `headDim` of `heads` [rows, cols], followed by the row of `shared` [rows,
/// sharedCols]: [rows, cols / headDim * (headDim + sharedCols)].
void concatHeads(Host, const float *heads, int64_t rows, int64_t cols, int64_t headDim,
                 const float *shared, int64_t sharedCols, float *out);

/// One layer's keys and values, paged (tpcrt/batch.h): `blocks` blocks of `blockSize`
/// tokens, [blocks * blockSize, width] keys (kvHeads * headDim) and [.., valueWidth] values,
/// of `type`: F32, or BF16, F16 or Q8_0 (--kv-cache-dtype: rounded to nearest even, or
/// quantized, as they are written, widened exactly as they are read). Its blocks are those of
/// KV group `group` (tpcrt/kv_groups.h), whose table of each sequence a step carries.
struct KVCache {
  void *keys = nullptr, *values = nullptr;
  int64_t blocks = 0, blockSize = 0, width = 0, valueWidth = 0;
  DType type = DType::F32;
  int64_t group = 0;
};

/// A layer's cache as one step reads and writes it.
struct StepCache {
  KVCache &cache;
  const Step &step;
};

/// Causal attention of a step's `rows` new tokens, each sequence's own (at positions
/// sequence.cached .., read and written through its block table) with GQA: query head
/// h reads KV head h / (heads / kvHeads), or with an uneven `split` (local) KV head
/// (split.firstHead + h) / split.group - split.firstKvHead, its heads from split.heads on
/// being padding that comes out zero. Appends k and v to the cache first. A positive
/// slidingWindow W limits each query to the W latest keys; a positive softcap c maps each
/// scaled score s to c * tanh(s / c). `sinks` (one logit per local head, or null) joins each
/// row's softmax denominator and is then dropped. Values (and so outputs) have heads of
/// `valueHeadDim` (DeepSeek's MLA; 0: headDim).
void attention(Host, const float *q, const float *k, const float *v, int64_t rows, int64_t heads,
               int64_t kvHeads, int64_t headDim, double scale, int64_t slidingWindow,
               double softcap, const HeadSplit &split, StepCache cache, float *out,
               const float *sinks = nullptr, int64_t valueHeadDim = 0,
               const AttentionMask &mask = {});

void silu(Host, const float *x, int64_t n, float *out);
void gelu(Host, const float *x, int64_t n, bool tanhApproximation, float *out);
void scale(Host, const float *x, int64_t n, double factor, float *out);
void softcap(Host, const float *x, int64_t n, double cap, float *out);

/// MoE routing: logits = x @ w^T (+ bias) ([rows, experts]); softmax; the topK largest kept
/// (divided by their sum when `normalize`), every other weight 0; kept weights times `scale`.
/// With softmaxAfterTopK the topK largest logits are chosen first and the softmax runs over
/// them alone (GPT-OSS). With `groups` > 0 only experts of the `topGroups` groups with the
/// largest best score compete (DeepSeek). out is [rows, experts].
void router(Host, const float *x, int64_t rows, int64_t hidden, const float *w, int64_t experts,
            int64_t topK, bool normalize, float *out, const float *bias = nullptr,
            bool softmaxAfterTopK = false, double scale = 1.0, int64_t groups = 0,
            int64_t topGroups = 0, bool sigmoid = false);

/// MoE experts: out[t] = sum over local experts e with routing[t, e] != 0 of
/// routing[t, e] * down[e] (act(gate) * up), where [gate | up] = gateUp[e] x[t].
/// gateUp is [experts, 2 * inter, hidden]; down [experts, hidden, inter].
void experts(Host, const float *x, int64_t rows, int64_t hidden, const float *routing,
             int64_t experts, const float *gateUp, const float *down, int64_t inter, bool geluTanh,
             float *out);

/// How an experts op's weights are laid out and what its activation is, beyond the above.
struct ExpertsForm {
  /// gateUp [experts, hidden, 2 * inter] with gate and up interleaved column by column, down
  /// [experts, inter, hidden] (x @ W, GPT-OSS); else as above.
  bool inOutInterleaved = false;
  /// Per-expert biases [experts, 2 * inter] and [experts, hidden], or null.
  const float *gateUpBias = nullptr, *downBias = nullptr;
  /// A positive alpha: GPT-OSS's clamped SwiGLU, (clamp(up, -limit, limit) + 1) * g *
  /// sigmoid(alpha * g) with g = min(gate, limit).
  double alpha = 0, limit = 0;
  /// Llama 4's: gateUp [experts, hidden, 2 * inter] with gate's columns first and up's after,
  /// down [experts, inter, hidden] (x @ W); the routing weight scaling the input rather than
  /// the output.
  bool inOut = false, scaleInput = false;
};
void experts(Host, const float *x, int64_t rows, int64_t hidden, const float *routing,
             int64_t experts, const float *gateUp, const float *down, int64_t inter, bool geluTanh,
             const ExpertsForm &form, float *out);

void add(Host, const float *a, const float *b, int64_t n, float *out);
void mul(Host, const float *a, const float *b, int64_t n, float *out);

/// rows x cols elements from src (row stride srcStride) to dst (row stride dstStride).
void copyRows(Host, float *dst, int64_t dstStride, const float *src, int64_t srcStride,
              int64_t rows, int64_t cols);

/// Columns [offset, offset + size) of a [rows, cols] matrix.
void sliceColumns(Host, const float *x, int64_t rows, int64_t cols, int64_t offset, int64_t size,
                  float *out);

} // namespace tpcrt::cpu

#endif // TPCRT_CPU_KERNELS_H
