// The CPU kernels that read weights (tpcrt/cpu/kernels.h): linear and embedding, for fp32,
// bf16 and f16 weights as stored, always in fp32 arithmetic.
//
// One row of x (a decode step) is memory-bound: the product must stream W once at the
// machine's read bandwidth, so a 16-bit W is read as it is and widened in registers (half the
// bytes of fp32). Several rows (a prefill) are compute-bound: W is widened a panel of rows at
// a time into an fp32 scratch that stays in cache, and OpenBLAS's fp32 GEMM multiplies x by it,
// so x is never rounded and the arithmetic is the same as for fp32 weights.
#include "tpcrt/cpu/kernels.h"
#include "tpcrt/cpu/blas.h"

#include "rows.h"

#include <cblas.h>

#include <algorithm>
#include <atomic>
#include <cstring>
#include <vector>

#if defined(__x86_64__)
#include <immintrin.h>
#endif

namespace tpcrt::cpu {

namespace {

std::atomic<bool> forcedScalar{false};
// The fp32 panel a prefill widens W into. Each panel is one sgemm call, which packs all of x
// again, so small panels lose: measured on Zen 3 (512 KiB L2) from 64 KiB to 2 MiB
// (bench/results/matmul.txt, `tpc-matmul-bench panels`), 128 rows of x ran at 10-25 GFLOP/s
// with 64-128 KiB panels, ~30 at 256-512 KiB and 34-44 at 768 KiB-1 MiB, about fp32's rate.
std::atomic<size_t> panelBytes{size_t(1) << 20};

/// Element `index` of a row of `type` as fp32.
inline float elementAt(const void *row, DType type, int64_t index) {
  switch (type) {
  case DType::F32:
    return static_cast<const float *>(row)[index];
  case DType::BF16:
    return bf16ToFloat(static_cast<const uint16_t *>(row)[index]);
  case DType::F16:
    return f16ToFloat(static_cast<const uint16_t *>(row)[index]);
  }
  return 0;
}

/// Row `row` of a row-major matrix of `type` with `cols` columns.
inline const void *rowOf(Matrix w, int64_t row, int64_t cols) {
  return static_cast<const char *>(w.data) + size_t(row) * size_t(cols) * dtypeBytes(w.type);
}

/// y = W x (+ bias) without vector extensions beyond the baseline: each row of W widened
/// (dtype.h) into a scratch row, then an eight-lane dot product.
void gemvScalar(Matrix w, const float *x, int64_t out, int64_t in, const float *bias, float *y) {
  thread_local std::vector<float> row;
  row.resize(size_t(in));
  for (int64_t r = 0; r < out; ++r) {
    const float *values = static_cast<const float *>(rowOf(w, r, in));
    if (w.type != DType::F32) {
      widen(rowOf(w, r, in), w.type, row.data(), size_t(in));
      values = row.data();
    }
    float total = dot(values, x, in);
    y[r] = bias ? total + bias[r] : total;
  }
}

#if defined(__x86_64__)
#define TPC_AVX2 __attribute__((target("avx2,fma,f16c")))

/// Eight elements of a row of T from `index` as fp32: bf16 zero-extended to 32 bits and
/// shifted into the top half, f16 by the F16C conversion. Both are exact.
template <DType T> TPC_AVX2 inline __m256 load8(const void *row, int64_t index) {
  if constexpr (T == DType::F32) {
    return _mm256_loadu_ps(static_cast<const float *>(row) + index);
  } else {
    __m128i halves = _mm_loadu_si128(
        reinterpret_cast<const __m128i *>(static_cast<const uint16_t *>(row) + index));
    if constexpr (T == DType::BF16)
      return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(halves), 16));
    else
      return _mm256_cvtph_ps(halves);
  }
}

/// The eight lanes of each of a[0..7] summed: lane k of the result is the sum of a[k].
TPC_AVX2 inline __m256 sumEach(const __m256 *a) {
  __m256 t0 = _mm256_hadd_ps(a[0], a[1]), t1 = _mm256_hadd_ps(a[2], a[3]);
  __m256 t2 = _mm256_hadd_ps(a[4], a[5]), t3 = _mm256_hadd_ps(a[6], a[7]);
  // u0's low 128 bits are the low halves' sums of a[0..3], its high 128 bits the high halves'.
  __m256 u0 = _mm256_hadd_ps(t0, t1), u1 = _mm256_hadd_ps(t2, t3);
  return _mm256_add_ps(_mm256_permute2f128_ps(u0, u1, 0x20),
                       _mm256_permute2f128_ps(u0, u1, 0x31));
}

/// Sixteen elements of a row of T from `index` as fp32, in two vectors to multiply by
/// those of `xs` from `index` and `index + 8` (see gemvAvx2's x for bf16).
template <DType T>
TPC_AVX2 inline void load16(const void *row, int64_t index, __m256 &first, __m256 &second) {
  if constexpr (T == DType::BF16) {
    // Each 32-bit lane holds two bf16: the even element in its low half (shifted up, it is
    // that element's fp32) and the odd one in its high half (the low half cleared, likewise).
    // No shuffle, so a row widens at two cheap operations per 32 bytes.
    __m256i pairs = _mm256_loadu_si256(
        reinterpret_cast<const __m256i *>(static_cast<const uint16_t *>(row) + index));
    first = _mm256_castsi256_ps(_mm256_slli_epi32(pairs, 16));
    second = _mm256_castsi256_ps(_mm256_and_si256(pairs, _mm256_set1_epi32(int(0xffff0000u))));
  } else {
    first = load8<T>(row, index);
    second = load8<T>(row, index + 8);
  }
}

/// The cache lines eight rows' sixteen columns of T take.
template <DType T> constexpr int64_t kPrefetchLines = T == DType::F32 ? 8 : 4;

/// y = W x (+ bias) for one row x and W [out, in] of T, row-major, with AVX2 and FMA: eight
/// rows of W at a time, each in its own running sum, so that eight streams of loads are in
/// flight, sixteen columns a step (a 16-bit row is read 32 bytes at a time). Eight sums and
/// the two vectors of x fit the sixteen registers. Measured in bench/results/matmul.txt
/// against the machine's read bandwidth.
template <DType T>
TPC_AVX2 void gemvAvx2(const void *w, const float *x, int64_t out, int64_t in, const float *bias,
                       float *y) {
  constexpr int64_t kRows = 8;
  const size_t rowBytes = size_t(in) * dtypeBytes(T);
  const char *base = static_cast<const char *>(w);
  const int64_t blocked = in / 16 * 16; // the columns the sixteen-wide steps cover
  // For bf16, x in the order load16 gives W's elements: of each sixteen, the eight even
  // ones, then the eight odd ones.
  const float *xs = x;
  if constexpr (T == DType::BF16) {
    thread_local std::vector<float> permuted;
    permuted.resize(size_t(blocked));
    for (int64_t c = 0; c < blocked; c += 16)
      for (int64_t i = 0; i < 8; ++i) {
        permuted[size_t(c + i)] = x[c + 2 * i];
        permuted[size_t(c + 8 + i)] = x[c + 2 * i + 1];
      }
    xs = permuted.data();
  }
  int64_t r = 0;
  for (; r + kRows <= out; r += kRows) {
    const char *rows = base + size_t(r) * rowBytes;
    __m256 acc[kRows];
    for (int64_t k = 0; k < kRows; ++k)
      acc[k] = _mm256_setzero_ps();
    // The next eight rows, which follow these in memory, requested a step's worth of bytes
    // per step: rows of a few KiB are too short for the hardware's prefetch to find alone.
    const char *next = rows + kRows * rowBytes, *last = base + size_t(out) * rowBytes;
    for (int64_t c = 0; c < blocked; c += 16) {
      for (int64_t line = 0; line < kPrefetchLines<T>; ++line, next += 64)
        if (next < last)
          _mm_prefetch(next, _MM_HINT_T0);
      __m256 xFirst = _mm256_loadu_ps(xs + c), xSecond = _mm256_loadu_ps(xs + c + 8);
      for (int64_t k = 0; k < kRows; ++k) {
        __m256 first, second;
        load16<T>(rows + k * rowBytes, c, first, second);
        acc[k] = _mm256_fmadd_ps(first, xFirst, acc[k]);
        acc[k] = _mm256_fmadd_ps(second, xSecond, acc[k]);
      }
    }
    int64_t c = blocked;
    if (c + 8 <= in) {
      __m256 xFirst = _mm256_loadu_ps(x + c);
      for (int64_t k = 0; k < kRows; ++k)
        acc[k] = _mm256_fmadd_ps(load8<T>(rows + k * rowBytes, c), xFirst, acc[k]);
      c += 8;
    }
    alignas(32) float totals[kRows];
    _mm256_store_ps(totals, sumEach(acc));
    for (int64_t k = 0; k < kRows; ++k) {
      for (int64_t tail = c; tail < in; ++tail)
        totals[k] += elementAt(rows + k * rowBytes, T, tail) * x[tail];
      y[r + k] = bias ? totals[k] + bias[r + k] : totals[k];
    }
  }
  for (; r < out; ++r) { // the last out % 8 rows, one at a time
    const char *row = base + size_t(r) * rowBytes;
    __m256 acc = _mm256_setzero_ps();
    int64_t c = 0;
    for (; c + 8 <= in; c += 8)
      acc = _mm256_fmadd_ps(load8<T>(row, c), _mm256_loadu_ps(x + c), acc);
    alignas(32) float lanes[8];
    _mm256_store_ps(lanes, acc);
    float total = 0;
    for (float lane : lanes)
      total += lane;
    for (; c < in; ++c)
      total += elementAt(row, T, c) * x[c];
    y[r] = bias ? total + bias[r] : total;
  }
}

/// `count` elements of T at `in` as fp32 at `out`, eight at a time.
template <DType T> TPC_AVX2 void widenAvx2(const void *in, float *out, size_t count) {
  size_t i = 0;
  for (; i + 8 <= count; i += 8)
    _mm256_storeu_ps(out + i, load8<T>(in, int64_t(i)));
  for (; i < count; ++i)
    out[i] = elementAt(in, T, int64_t(i));
}

bool hasAvx2Fma() {
  static const bool has = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
  return has;
}
bool hasF16c() {
  static const bool has = __builtin_cpu_supports("f16c");
  return has;
}
#undef TPC_AVX2
#endif

/// Whether the AVX2 kernels may read W of `type` on this CPU (and are not switched off).
bool vectorKernels(DType type) {
#if defined(__x86_64__)
  if (forcedScalar.load(std::memory_order_relaxed) || !hasAvx2Fma())
    return false;
  return type != DType::F16 || hasF16c();
#else
  (void)type;
  return false;
#endif
}

void gemv(Matrix w, const float *x, int64_t out, int64_t in, const float *bias, float *y) {
#if defined(__x86_64__)
  if (vectorKernels(w.type)) {
    switch (w.type) {
    case DType::F32:
      return gemvAvx2<DType::F32>(w.data, x, out, in, bias, y);
    case DType::BF16:
      return gemvAvx2<DType::BF16>(w.data, x, out, in, bias, y);
    case DType::F16:
      return gemvAvx2<DType::F16>(w.data, x, out, in, bias, y);
    }
  }
#endif
  if (w.type == DType::F32) { // without AVX2, OpenBLAS's matrix-vector product: no packing
    if (bias)
      std::memcpy(y, bias, size_t(out) * sizeof(float));
    cblas_sgemv(CblasRowMajor, CblasNoTrans, int(out), int(in), 1.0f,
                static_cast<const float *>(w.data), int(in), x, 1, bias ? 1.0f : 0.0f, y, 1);
    return;
  }
  gemvScalar(w, x, out, in, bias, y);
}

/// `count` elements of `type` at `in` as fp32, vectorized where the CPU allows.
void widenFast(const void *in, DType type, float *out, size_t count) {
#if defined(__x86_64__)
  if (vectorKernels(type)) {
    if (type == DType::BF16)
      return widenAvx2<DType::BF16>(in, out, count);
    if (type == DType::F16)
      return widenAvx2<DType::F16>(in, out, count);
  }
#endif
  widen(in, type, out, count);
}

} // namespace

namespace detail {
void forceScalarKernels(bool scalar) { forcedScalar.store(scalar); }
bool vectorKernelsFor(DType type) { return vectorKernels(type); }
void setPanelBytes(size_t bytes) { panelBytes.store(bytes); }
} // namespace detail

void linear(Host, const float *x, int64_t rows, int64_t in, Matrix w, int64_t out,
            const float *bias, float *y) {
  if (rows == 1) // a decode step: W read once, as fast as it streams
    return gemv(w, x, out, in, bias, y);
  if (bias)
    for (int64_t r = 0; r < rows; ++r)
      std::memcpy(y + r * out, bias, size_t(out) * sizeof(float));
  float beta = bias ? 1.0f : 0.0f;
  if (w.type == DType::F32) {
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, int(rows), int(out), int(in), 1.0f, x,
                int(in), static_cast<const float *>(w.data), int(in), beta, y, int(out));
    return;
  }
  // A panel of W's rows at a time, widened into fp32 that stays in cache while OpenBLAS
  // multiplies x by it: output columns [first, first + count) of y (leading dimension out).
  int64_t panelRows = int64_t(panelBytes.load(std::memory_order_relaxed) / (size_t(in) * 4));
  panelRows = std::min(std::max<int64_t>(panelRows / 8 * 8, 8), out);
  thread_local std::vector<float> panel;
  panel.resize(size_t(panelRows) * size_t(in));
  for (int64_t first = 0; first < out; first += panelRows) {
    int64_t count = std::min(panelRows, out - first);
    widenFast(rowOf(w, first, in), w.type, panel.data(), size_t(count) * size_t(in));
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, int(rows), int(count), int(in), 1.0f, x,
                int(in), panel.data(), int(in), beta, y + first, int(out));
  }
}

bool embedding(Host, const int64_t *ids, int64_t tokens, Matrix table, int64_t rowOffset,
               int64_t rows, int64_t vocab, int64_t width, float *out) {
  for (int64_t t = 0; t < tokens; ++t) {
    int64_t id = ids[t];
    if (id < 0 || id >= vocab)
      return false;
    float *row = out + t * width;
    int64_t local = id - rowOffset;
    if (local >= 0 && local < rows)
      widen(rowOf(table, local, width), table.type, row, size_t(width));
    else
      std::fill(row, row + width, 0.0f); // another rank's row: this summand is zero
  }
  return true;
}

std::string matrixKernels() {
  std::string vector;
  for (DType type : {DType::F32, DType::BF16, DType::F16})
    vector += std::string(vector.empty() ? "" : ", ") + dtypeName(type) +
              (vectorKernels(type) ? " AVX2" : " scalar");
  return "one-row linear: " + vector + "; matrix products: " + blasDescription() +
         " sgemm (bf16 and f16 widened a panel at a time)";
}

} // namespace tpcrt::cpu
