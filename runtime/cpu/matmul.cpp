// The CPU kernels that read weights (tpcrt/cpu/kernels.h): linear and embedding, for fp32,
// bf16 and f16 weights and ggml's block-quantized types as stored (Q8_0, Q4_0, Q4_1, Q5_0,
// Q5_1, Q4_K, Q5_K and Q6_K: what llama.cpp's quantizations write), in fp32 arithmetic (x
// is never rounded or quantized); the K types' one row of x, on a CPU whose rule says so, in
// int32 over x split into two 16-bit limbs (limbs.h), and with --int8-activations over x
// rounded to int8 (int8.h).
//
// One row of x (a decode step) is memory-bound: the product must stream W once at the
// machine's read bandwidth, so a 16-bit or quantized W is read as it is and decoded in
// registers (half the bytes of fp32, or an eighth to a quarter). Several rows (a prefill) are
// compute-bound: W is widened a panel of rows at a time into an fp32 scratch that stays in
// cache, and OpenBLAS's fp32 GEMM multiplies x by it, so the arithmetic is the same as for
// fp32 weights.
#include "tpcrt/cpu/kernels.h"
#include "tpcrt/cpu/blas.h"
#include "tpcrt/cpu/choice.h"

#include "groups.h"
#include "int8.h"
#include "limbs.h"
#include "rows.h"

#include <cblas.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <iterator>
#include <mutex>
#include <type_traits>
#include <vector>

#if defined(__x86_64__)
#include <immintrin.h>
#endif

namespace tpcrt::cpu {

namespace {

std::atomic<bool> forcedScalar{false}, forcedAvx2{false};
// --int8-activations: W of the types int8::takes met by x rounded to int8 (int8.cpp).
std::atomic<bool> int8Activations{false};
// The K types' one-row products in 16-bit limbs of x (limbs.cpp): -1 where limbs::preferred()
// says, else off (0) or on (1) for tests and benchmarks.
std::atomic<int> forcedLimbs{-1};
// The fp32 panel a prefill widens W into. Each panel is one sgemm call, which packs all of x
// again, so small panels lose: measured on Zen 3 (512 KiB L2) from 64 KiB to 2 MiB
// (bench/results/matmul.txt, `tpc-matmul-bench panels`), 128 rows of x ran at 10-25 GFLOP/s
// with 64-128 KiB panels, ~30 at 256-512 KiB and 34-44 at 768 KiB-1 MiB, about fp32's rate.
std::atomic<size_t> panelBytes{size_t(1) << 20};
// The most rows of x a linear takes through a matrix-vector kernel (W read once, every row of
// x against it in registers; quantized W with AVX-512 only) rather than a panel and sgemm: a
// batch's decode step. Measured: see linear() and docs/engine.md.
constexpr int64_t kBatchedGemvRows = 8;

/// Element `index` of a row of a float `type` as fp32 (the vector kernels' column tails;
/// quantized rows have none, being whole blocks).
inline float elementAt(const void *row, DType type, int64_t index) {
  if (type == DType::BF16)
    return bf16ToFloat(static_cast<const uint16_t *>(row)[index]);
  if (type == DType::F16)
    return f16ToFloat(static_cast<const uint16_t *>(row)[index]);
  return static_cast<const float *>(row)[index];
}

/// Row `row` of a row-major matrix of `type` with `cols` columns (whole blocks if quantized).
inline const void *rowOf(Matrix w, int64_t row, int64_t cols) {
  return static_cast<const char *>(w.data) + size_t(row) * dtypeBytesFor(w.type, cols);
}

/// y = W x (+ bias) without vector extensions beyond the baseline: each row of W widened
/// (dtype.h; a quantized row dequantized) into a scratch row, then an eight-lane dot product.
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

/// Eight rows of W of T from `rows` (each rowBytes long) times kX rows of x, each in its own
/// running sum per row of W, sixteen columns a step: acc[k][j] is W's row k times x's row j,
/// in eight lanes. `xs[j]` is x's row j in the order load16 gives W's elements (bf16's
/// permutation), `x[j]` as given (for the last eight columns and the scalar tail). The sums
/// of row k with row j are the same whatever kX: each is its own chain of FMAs in the same
/// order, so a batch's rows get the one-row product's values bit for bit.
template <DType T, int64_t kX>
TPC_AVX2 inline void eightRows(const char *rows, size_t rowBytes, const float *const *xs,
                               const float *const *x, int64_t in, int64_t blocked,
                               const char *next, const char *last, float totals[][8]) {
  constexpr int64_t kRows = 8;
  __m256 acc[kX][kRows];
  for (int64_t j = 0; j < kX; ++j)
    for (int64_t k = 0; k < kRows; ++k)
      acc[j][k] = _mm256_setzero_ps();
  for (int64_t c = 0; c < blocked; c += 16) {
    // The next eight rows, which follow these in memory, requested a step's worth of bytes
    // per step: rows of a few KiB are too short for the hardware's prefetch to find alone.
    for (int64_t line = 0; line < kPrefetchLines<T>; ++line, next += 64)
      if (next < last)
        _mm_prefetch(next, _MM_HINT_T0);
    __m256 xFirst[kX], xSecond[kX];
    for (int64_t j = 0; j < kX; ++j) {
      xFirst[j] = _mm256_loadu_ps(xs[j] + c);
      xSecond[j] = _mm256_loadu_ps(xs[j] + c + 8);
    }
    for (int64_t k = 0; k < kRows; ++k) {
      __m256 first, second;
      load16<T>(rows + k * rowBytes, c, first, second);
      for (int64_t j = 0; j < kX; ++j) {
        acc[j][k] = _mm256_fmadd_ps(first, xFirst[j], acc[j][k]);
        acc[j][k] = _mm256_fmadd_ps(second, xSecond[j], acc[j][k]);
      }
    }
  }
  int64_t c = blocked;
  if (c + 8 <= in) {
    for (int64_t k = 0; k < kRows; ++k) {
      __m256 widened = load8<T>(rows + k * rowBytes, c);
      for (int64_t j = 0; j < kX; ++j)
        acc[j][k] = _mm256_fmadd_ps(widened, _mm256_loadu_ps(x[j] + c), acc[j][k]);
    }
    c += 8;
  }
  for (int64_t j = 0; j < kX; ++j) {
    _mm256_storeu_ps(totals[j], sumEach(acc[j]));
    for (int64_t k = 0; k < kRows; ++k)
      for (int64_t tail = c; tail < in; ++tail)
        totals[j][k] += elementAt(rows + k * rowBytes, T, tail) * x[j][tail];
  }
}

/// Y = X W^T (+ bias) for `count` rows of X [count, in] (Y [count, out]) and W [out, in] of
/// T, row-major, with AVX2 and FMA: eight rows of W at a time, each in its own running sum
/// per row of X, so that eight streams of loads are in flight, sixteen columns a step (a
/// 16-bit row is read 32 bytes at a time). W streams from memory once: its eight rows stay
/// in cache while every row of X meets them, two at a time (one, two and three at a time
/// measured alike, 110-112 tokens/s of SmolLM2's f32 weights at tp 1 in batches of eight: the
/// FMAs bound it, eight lanes wide, not the loads). Each row of Y is bit for bit what it would be
/// alone (eightRows), so a decode step's result does not depend on the batch. Measured in
/// bench/results/matmul.txt against the machine's read bandwidth. Where the CPU has AVX-512,
/// gemvWide runs instead (sixteen lanes, every row of x at once).
template <DType T>
TPC_AVX2 void gemvAvx2(const void *w, const float *x, int64_t count, int64_t out, int64_t in,
                       const float *bias, float *y) {
  constexpr int64_t kRows = 8, kAtOnce = 2;
  const size_t rowBytes = size_t(in) * dtypeBytes(T);
  const char *base = static_cast<const char *>(w);
  const int64_t blocked = in / 16 * 16; // the columns the sixteen-wide steps cover
  // For bf16, each row of x in the order load16 gives W's elements: of each sixteen, the
  // eight even ones, then the eight odd ones.
  thread_local std::vector<float> permuted;
  thread_local std::vector<const float *> xs, xRows;
  xs.resize(size_t(count));
  xRows.resize(size_t(count));
  if constexpr (T == DType::BF16)
    permuted.resize(size_t(count * blocked));
  for (int64_t j = 0; j < count; ++j) {
    const float *row = x + j * in;
    xRows[size_t(j)] = xs[size_t(j)] = row;
    if constexpr (T == DType::BF16) {
      float *mine = permuted.data() + j * blocked;
      for (int64_t c = 0; c < blocked; c += 16)
        for (int64_t i = 0; i < 8; ++i) {
          mine[c + i] = row[c + 2 * i];
          mine[c + 8 + i] = row[c + 2 * i + 1];
        }
      xs[size_t(j)] = mine;
    }
  }
  int64_t r = 0;
  const char *last = base + size_t(out) * rowBytes;
  for (; r + kRows <= out; r += kRows) {
    const char *rows = base + size_t(r) * rowBytes, *next = rows + kRows * rowBytes;
    float totals[kAtOnce][kRows];
    for (int64_t j = 0; j < count; j += kAtOnce) {
      int64_t n = std::min(kAtOnce, count - j);
      const float *const *xj = &xs[size_t(j)], *const *rawj = &xRows[size_t(j)];
      if (n == 2)
        eightRows<T, 2>(rows, rowBytes, xj, rawj, in, blocked, next, last, totals);
      else
        eightRows<T, 1>(rows, rowBytes, xj, rawj, in, blocked, next, last, totals);
      next = last; // prefetched by the first rows of x
      for (int64_t i = 0; i < n; ++i)
        for (int64_t k = 0; k < kRows; ++k)
          y[(j + i) * out + r + k] = bias ? totals[i][k] + bias[r + k] : totals[i][k];
    }
  }
  for (; r < out; ++r) { // the last out % 8 rows, one at a time
    const char *row = base + size_t(r) * rowBytes;
    for (int64_t j = 0; j < count; ++j) {
      const float *xj = xRows[size_t(j)];
      __m256 acc = _mm256_setzero_ps();
      int64_t c = 0;
      for (; c + 8 <= in; c += 8)
        acc = _mm256_fmadd_ps(load8<T>(row, c), _mm256_loadu_ps(xj + c), acc);
      alignas(32) float lanes[8];
      _mm256_store_ps(lanes, acc);
      float total = 0;
      for (float lane : lanes)
        total += lane;
      for (; c < in; ++c)
        total += elementAt(row, T, c) * xj[c];
      y[j * out + r] = bias ? total + bias[r] : total;
    }
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

// ggml's block-quantized types. A row of W is whole blocks; each block is groups of 32
// elements, element i of group g being scale(g) * q_i + offset(g) with q_i a small integer:
//   Q8_0: f16 d, then 32 int8 q;                          one group, d * q
//   Q4_0: f16 d, then 16 bytes of nibbles;                one group, d * (q - 8)
//   Q4_1: f16 d, f16 m, then 16 bytes of nibbles;         one group, d * q + m
//   Q5_0: f16 d, 4 bytes of fifth bits, 16 of nibbles;  one group, d * (q - 16)
//   Q5_1: f16 d, f16 m, then as Q5_0;                     one group, d * q + m
//   Q4_K: f16 d, f16 dmin, 12 bytes of eight 6-bit scales s_g and mins m_g, then 128 bytes
//         of nibbles;                                     eight groups, (d s_g) q - dmin m_g
//   Q5_K: as Q4_K with 32 bytes of fifth bits before the nibbles
//   Q6_K: 6-bit q in 192 bytes, sixteen int8 scales s_k (one per 16 elements), f16 d;
//                                                         eight groups, (d s_k) (q - 32)
//   MXFP4: E8M0 e, then 16 bytes of nibbles;               one group, 2^(e-128) v(q), v being
//          E2M1's values doubled (kMxfp4Values, rows.h) and the scale a power of two
// In Q4_0 and Q4_1 element j < 16 is the low nibble of byte j and element j + 16 its high
// nibble; in Q4_K group 2c takes the low nibbles of bytes 32c .. 32c + 31 in order, group
// 2c + 1 their high nibbles; Q5_0, Q5_1 and Q5_K add a fifth bit to each, and Q6_K is laid
// out as its Quant says (runtime/weights/gguf.cpp's reference, after gguf-py's).
//
// Every q converts to fp32 exactly, and so do d s_g and dmin m_g (11 by 6 significant bits)
// and each scale * q (at most 22 bits), so scale * q + offset in one FMA rounds once, as the
// reference's d * q + m and (d s) q - dmin m do: the AVX2 dequantizer below is bit for bit
// the reference's.
//
// A decode step streams W once, and the work per byte must keep up with memory, so a block's
// scale multiplies the dot product of its integers with x (sum_i q_i x_i times the scale, not
// 32 products by it) and its offsets join as offset(g) * sum_i x_i with x's group sums
// computed once per product, not per row. Both are fp32 roundings of the same sum: the result
// is the product with the dequantized W up to the order of fp32 summation.

/// Eight bytes from `p` as int32 lanes, zero- or sign-extended.
TPC_AVX2 inline __m256i unsigned8(const uint8_t *p) {
  return _mm256_cvtepu8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i *>(p)));
}
TPC_AVX2 inline __m256i signed8(const uint8_t *p) {
  return _mm256_cvtepi8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i *>(p)));
}
/// The f16 at `p` (any alignment) as fp32 in every lane.
TPC_AVX2 inline __m256 broadcastHalf(const uint8_t *p) {
  uint16_t bits;
  std::memcpy(&bits, p, sizeof bits);
  // Converted in an xmm and broadcast: cheaper than converting eight copies.
  return _mm256_broadcastss_ps(_mm_cvtph_ps(_mm_cvtsi32_si128(bits)));
}
/// The 32 nibbles of 16 bytes in Q4_0 and Q4_1's order, less `bias`, as fp32.
TPC_AVX2 inline void nibbles(const uint8_t *bytes, int bias, __m256 q[4]) {
  const __m256i low = _mm256_set1_epi32(0xf), minus = _mm256_set1_epi32(bias);
  for (int half = 0; half < 2; ++half) {
    __m256i lanes = unsigned8(bytes + 8 * half); // elements 8 half .. and 16 + 8 half ..
    q[half] = _mm256_cvtepi32_ps(_mm256_sub_epi32(_mm256_and_si256(lanes, low), minus));
    q[half + 2] = _mm256_cvtepi32_ps(_mm256_sub_epi32(_mm256_srli_epi32(lanes, 4), minus));
  }
}

/// How a block of T decodes (see above), how many rows a product takes at once (kRows: see
/// gemvQuantized) and whether its one-row product has an AVX-512 kernel (kWide: see
/// quants512): kGroups groups of 32 elements in kBytes; Scales,
/// built from a block, gives group g's scale(g) in every lane and, where kOffsets, its
/// offset(g) likewise and offsets(): group g's offset in lane g (the other lanes finite);
/// quants(block, g, scales, q) gives group g's integers as fp32 in four vectors, in element
/// order.
template <DType T> struct Quant;

/// A block type's bytes, types.def's column (each Quant's kBytes).
constexpr size_t blockBytes(DType type) { return kDTypeLines[size_t(type)].blockBytes; }

template <> struct Quant<DType::Q8_0> {
  static constexpr int64_t kRows = 2;
  static constexpr int kGroups = 1;
  static constexpr size_t kBytes = blockBytes(DType::Q8_0);
  static constexpr bool kOffsets = false;
  static constexpr bool kWide = true;
  struct Scales {
    __m256 d;
    TPC_AVX2 explicit Scales(const uint8_t *block) : d(broadcastHalf(block)) {}
    TPC_AVX2 __m256 scale(int) const { return d; }
  };
  TPC_AVX2 static void quants(const uint8_t *block, int, const Scales &, __m256 q[4]) {
    for (int i = 0; i < 4; ++i)
      q[i] = _mm256_cvtepi32_ps(signed8(block + 2 + 8 * i));
  }
};

template <> struct Quant<DType::Q4_0> {
  static constexpr int64_t kRows = 8;
  static constexpr int kGroups = 1;
  static constexpr size_t kBytes = blockBytes(DType::Q4_0);
  static constexpr bool kOffsets = false;
  static constexpr bool kWide = true;
  using Scales = Quant<DType::Q8_0>::Scales; // d first, no offset
  TPC_AVX2 static void quants(const uint8_t *block, int, const Scales &, __m256 q[4]) {
    nibbles(block + 2, 8, q);
  }
};

template <> struct Quant<DType::Q4_1> {
  static constexpr int64_t kRows = 8;
  static constexpr int kGroups = 1;
  static constexpr size_t kBytes = blockBytes(DType::Q4_1);
  static constexpr bool kOffsets = true;
  static constexpr bool kWide = false;
  struct Scales {
    __m256 d, m;
    TPC_AVX2 explicit Scales(const uint8_t *block) {
      uint32_t both; // d and m converted together
      std::memcpy(&both, block, sizeof both);
      __m128 dm = _mm_cvtph_ps(_mm_cvtsi32_si128(int(both)));
      d = _mm256_broadcastss_ps(dm);
      m = _mm256_broadcastss_ps(_mm_movehdup_ps(dm));
    }
    TPC_AVX2 __m256 scale(int) const { return d; }
    TPC_AVX2 __m256 offset(int) const { return m; }
    TPC_AVX2 __m256 offsets() const { return m; }
  };
  TPC_AVX2 static void quants(const uint8_t *block, int, const Scales &, __m256 q[4]) {
    nibbles(block + 4, 0, q);
  }
};

template <> struct Quant<DType::Q4_K> {
  static constexpr int64_t kRows = 8;
  static constexpr int kGroups = 8;
  static constexpr size_t kBytes = blockBytes(DType::Q4_K);
  static constexpr bool kOffsets = true;
  static constexpr bool kWide = true;
  struct Scales {
    alignas(32) float scales[8], offsets_[8]; // d s_g and -dmin m_g
    Scales() = default;
    TPC_AVX2 explicit Scales(const uint8_t *block) { read(block); }
    TPC_AVX2 void read(const uint8_t *block) {
      uint64_t sBytes, mBytes;
      kScales(block + 4, sBytes, mBytes); // rows.h
      __m128i packed = _mm_set_epi64x(int64_t(mBytes), int64_t(sBytes));
      __m256 s = _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(packed));
      __m256 m = _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(_mm_srli_si128(packed, 8)));
      _mm256_store_ps(scales, _mm256_mul_ps(broadcastHalf(block), s));
      // -(dmin m_g) by its sign bit, so that q * scale + offset is the reference's
      // q * scale - dmin m_g down to the sign of a zero.
      _mm256_store_ps(offsets_, _mm256_xor_ps(_mm256_mul_ps(broadcastHalf(block + 2), m),
                                              _mm256_set1_ps(-0.0f)));
    }
    TPC_AVX2 __m256 scale(int g) const { return _mm256_broadcast_ss(scales + g); }
    TPC_AVX2 __m256 offset(int g) const { return _mm256_broadcast_ss(offsets_ + g); }
    TPC_AVX2 __m256 offsets() const { return _mm256_load_ps(offsets_); }
  };
  TPC_AVX2 static void quants(const uint8_t *block, int g, const Scales &, __m256 q[4]) {
    const uint8_t *bytes = block + 16 + 32 * (g / 2);
    const __m256i low = _mm256_set1_epi32(0xf);
    for (int i = 0; i < 4; ++i) {
      __m256i lanes = unsigned8(bytes + 8 * i);
      q[i] = _mm256_cvtepi32_ps(g % 2 ? _mm256_srli_epi32(lanes, 4) : _mm256_and_si256(lanes, low));
    }
  }
};

/// MXFP4: Q4_0's nibbles, each the index of an E2M1 value (kMxfp4Values, looked up sixteen
/// at a time by a byte shuffle), and one power-of-two scale.
template <> struct Quant<DType::MXFP4> {
  static constexpr int64_t kRows = 8;
  static constexpr int kGroups = 1;
  static constexpr size_t kBytes = blockBytes(DType::MXFP4);
  static constexpr bool kOffsets = false;
  static constexpr bool kWide = true;
  struct Scales {
    __m256 d;
    TPC_AVX2 explicit Scales(const uint8_t *block) : d(_mm256_set1_ps(mxfp4Scale(block[0]))) {}
    TPC_AVX2 __m256 scale(int) const { return d; }
  };
  /// The values of the block's 32 nibbles as int8, elements 0..15 then 16..31.
  TPC_AVX2 static void values(const uint8_t *block, __m128i &first, __m128i &second) {
    const __m128i table = _mm_loadu_si128(reinterpret_cast<const __m128i *>(kMxfp4Values));
    const __m128i low = _mm_set1_epi8(0x0f);
    __m128i bytes = _mm_loadu_si128(reinterpret_cast<const __m128i *>(block + 1));
    first = _mm_shuffle_epi8(table, _mm_and_si128(bytes, low));
    second = _mm_shuffle_epi8(table, _mm_and_si128(_mm_srli_epi16(bytes, 4), low));
  }
  TPC_AVX2 static void quants(const uint8_t *block, int, const Scales &, __m256 q[4]) {
    __m128i half[2];
    values(block, half[0], half[1]);
    for (int i = 0; i < 4; ++i)
      q[i] = _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(
          i % 2 ? _mm_srli_si128(half[i / 2], 8) : half[i / 2]));
  }
};

/// Q5_0's and Q5_1's fifth bits for elements 8i .. 8i + 7 of a block, as 16 or 0 in
/// int32 lanes: bit j of the little-endian word `qh` is element j's.
TPC_AVX2 inline __m256i fifthBits(uint32_t qh, int i) {
  __m256i shifts = _mm256_add_epi32(_mm256_set1_epi32(8 * i), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
  __m256i bits = _mm256_and_si256(_mm256_srlv_epi32(_mm256_set1_epi32(int(qh)), shifts),
                                  _mm256_set1_epi32(1));
  return _mm256_slli_epi32(bits, 4);
}
/// The 32 five-bit integers of Q5_0 and Q5_1 (nibbles in Q4_0's order, fifth bits in `qh`),
/// less `bias`, as fp32.
TPC_AVX2 inline void fiveBits(const uint8_t *bytes, uint32_t qh, int bias, __m256 q[4]) {
  const __m256i low = _mm256_set1_epi32(0xf), minus = _mm256_set1_epi32(bias);
  for (int half = 0; half < 2; ++half) {
    __m256i lanes = unsigned8(bytes + 8 * half); // elements 8 half .. and 16 + 8 half ..
    __m256i first = _mm256_or_si256(_mm256_and_si256(lanes, low), fifthBits(qh, half));
    __m256i second = _mm256_or_si256(_mm256_srli_epi32(lanes, 4), fifthBits(qh, half + 2));
    q[half] = _mm256_cvtepi32_ps(_mm256_sub_epi32(first, minus));
    q[half + 2] = _mm256_cvtepi32_ps(_mm256_sub_epi32(second, minus));
  }
}

/// Q5_0 and Q5_1 (T): Q4_0's or Q4_1's scales (TheScales, at the block's start), the 32 fifth
/// bits at kHigh, then the nibbles; the integers less kBias.
template <DType T, size_t kHighAt, int kBias, class TheScales, bool kWithOffsets>
struct FiveBitQuant {
  static constexpr int64_t kRows = 8;
  static constexpr int kGroups = 1;
  static constexpr size_t kBytes = blockBytes(T), kHigh = kHighAt;
  static constexpr bool kOffsets = kWithOffsets;
  static constexpr bool kWide = true;
  using Scales = TheScales;
  TPC_AVX2 static void quants(const uint8_t *block, int, const Scales &, __m256 q[4]) {
    uint32_t qh;
    std::memcpy(&qh, block + kHigh, sizeof qh);
    fiveBits(block + kHigh + 4, qh, kBias, q);
  }
};
template <>
struct Quant<DType::Q5_0>
    : FiveBitQuant<DType::Q5_0, 2, 16, Quant<DType::Q8_0>::Scales, false> {};
template <>
struct Quant<DType::Q5_1>
    : FiveBitQuant<DType::Q5_1, 4, 0, Quant<DType::Q4_1>::Scales, true> {};

/// Q5_K: Q4_K's scales, then 32 bytes of fifth bits (bit g of byte l for element l of group
/// g), then Q4_K's nibbles.
template <> struct Quant<DType::Q5_K> {
  static constexpr int64_t kRows = 8;
  static constexpr int kGroups = 8;
  static constexpr size_t kBytes = blockBytes(DType::Q5_K);
  static constexpr bool kOffsets = true;
  static constexpr bool kWide = true;
  using Scales = Quant<DType::Q4_K>::Scales;
  TPC_AVX2 static void quants(const uint8_t *block, int g, const Scales &, __m256 q[4]) {
    const uint8_t *bytes = block + 48 + 32 * (g / 2), *high = block + 16;
    const __m256i low = _mm256_set1_epi32(0xf), one = _mm256_set1_epi32(1);
    const __m128i shift = _mm_cvtsi32_si128(g);
    for (int i = 0; i < 4; ++i) {
      __m256i lanes = unsigned8(bytes + 8 * i);
      __m256i nibble = g % 2 ? _mm256_srli_epi32(lanes, 4) : _mm256_and_si256(lanes, low);
      __m256i fifth = _mm256_and_si256(_mm256_srl_epi32(unsigned8(high + 8 * i), shift), one);
      q[i] = _mm256_cvtepi32_ps(_mm256_or_si256(nibble, _mm256_slli_epi32(fifth, 4)));
    }
  }
};

/// Q6_K: 128 bytes of low nibbles, 64 of 2-bit highs, sixteen int8 scales (one per 16
/// elements) and f16 d last. Group g = 4h + t (half h of 128 elements, quarter t) takes the
/// nibbles of bytes 64h + 32(t % 2) + l, low ones for t < 2, and bits 2t, 2t + 1 of high byte
/// 32h + l, for l < 32. Its integers are given times their 16-element scale, (q - 32) s
/// (exact: at most 4096 in magnitude), and d is the group's scale, so that d ((q - 32) s) is
/// the reference's (d s)(q - 32): both products are exact, being of at most 24 bits.
template <> struct Quant<DType::Q6_K> {
  static constexpr int64_t kRows = 8;
  static constexpr int kGroups = 8;
  static constexpr size_t kBytes = blockBytes(DType::Q6_K);
  static constexpr bool kOffsets = false;
  static constexpr bool kWide = true;
  struct Scales {
    __m256 d;
    alignas(64) float sub[16]; // the int8 scales s_k, converted once per block
    Scales() = default;
    TPC_AVX2 explicit Scales(const uint8_t *block) { read(block); }
    TPC_AVX2 void read(const uint8_t *block) {
      d = broadcastHalf(block + 208);
      for (int i = 0; i < 2; ++i) {
        _mm256_store_ps(sub + 8 * i, _mm256_cvtepi32_ps(signed8(block + 192 + 8 * i)));
      }
    }
    TPC_AVX2 __m256 scale(int) const { return d; }
  };
  TPC_AVX2 static void quants(const uint8_t *block, int g, const Scales &scales, __m256 q[4]) {
    const int h = g / 4, t = g % 4;
    const uint8_t *ql = block + 64 * h + 32 * (t % 2), *qh = block + 128 + 32 * h;
    const __m256i low = _mm256_set1_epi32(0xf), bits = _mm256_set1_epi32(0x30),
                  bias = _mm256_set1_epi32(32);
    for (int i = 0; i < 4; ++i) {
      __m256i bytes = unsigned8(ql + 8 * i), highs = unsigned8(qh + 8 * i);
      __m256i nibble = t < 2 ? _mm256_and_si256(bytes, low) : _mm256_srli_epi32(bytes, 4);
      // Bits 2t and 2t + 1 of the high byte moved to bits 4 and 5.
      __m256i top = t == 0   ? _mm256_slli_epi32(highs, 4)
                    : t == 1 ? _mm256_slli_epi32(highs, 2)
                    : t == 2 ? highs
                             : _mm256_srli_epi32(highs, 2);
      __m256i value = _mm256_sub_epi32(_mm256_or_si256(nibble, _mm256_and_si256(top, bits)), bias);
      q[i] = _mm256_mul_ps(_mm256_cvtepi32_ps(value), _mm256_broadcast_ss(scales.sub + 2 * g + i / 2));
    }
  }
};

/// The elements of a block of T per group: 32.
constexpr int64_t kGroupElements = 32;

/// For each block of T that x's `blocks` blocks meet, eight floats: the sums of x over the
/// block's groups (group g's in lane g, zeros after), for Quant<T>::offsets().
template <DType T> const float *groupSums(const float *x, int64_t blocks) {
  thread_local std::vector<float> sums;
  sums.assign(size_t(blocks) * 8, 0.0f);
  for (int64_t b = 0; b < blocks; ++b)
    for (int g = 0; g < Quant<T>::kGroups; ++g) {
      const float *group = x + (b * Quant<T>::kGroups + g) * kGroupElements;
      float total = 0;
      for (int64_t i = 0; i < kGroupElements; ++i)
        total += group[i];
      sums[size_t(b * 8 + g)] = total;
    }
  return sums.data();
}

/// acc plus group g of a block of T, whose scales are given, times the group's elements of x
/// (in its lanes' sum).
template <DType T>
TPC_AVX2 inline __m256 accumulateGroup(const uint8_t *block, int g,
                                       const typename Quant<T>::Scales &scales, const float *x,
                                       __m256 acc) {
  __m256 q[4];
  Quant<T>::quants(block, g, scales, q);
  const float *xs = x + g * kGroupElements;
  __m256 dot = _mm256_mul_ps(q[0], _mm256_loadu_ps(xs));
  for (int i = 1; i < 4; ++i)
    dot = _mm256_fmadd_ps(q[i], _mm256_loadu_ps(xs + 8 * i), dot);
  return _mm256_fmadd_ps(dot, scales.scale(g), acc);
}

/// y[first, first + kRows) of a quantized gemv: W's rows `first` on, each in its own running
/// sum, a block of each row a step, so that kRows streams of loads are in flight; the next
/// kRows rows are prefetched at the pace these are read, as gemvAvx2 does. A block of several
/// groups (Q4_K) is taken a group of each row at a time: one row's groups are a chain of
/// FMAs into its sum, which the other rows' work between them hides.
template <DType T, int64_t kRows>
TPC_AVX2 inline void quantizedRows(const uint8_t *w, size_t rowBytes, size_t totalBytes,
                                   int64_t first, const float *x, const float *sums,
                                   int64_t blocks, const float *bias, float *y) {
  using Q = Quant<T>;
  constexpr int64_t kElements = Q::kGroups * kGroupElements;
  const uint8_t *rows = w + size_t(first) * rowBytes;
  __m256 acc[kRows];
  for (int64_t k = 0; k < kRows; ++k)
    acc[k] = _mm256_setzero_ps();
  NextRows next(w, rowBytes, totalBytes, first + kRows);
  for (int64_t b = 0; b < blocks; ++b) {
    next.through(size_t(b + 1) * kRows * Q::kBytes);
    const uint8_t *column = rows + size_t(b) * Q::kBytes; // block b of the first row
    const float *xs = x + b * kElements;
    if constexpr (Q::kGroups == 1) {
      for (int64_t k = 0; k < kRows; ++k) {
        const uint8_t *block = column + size_t(k) * rowBytes;
        typename Q::Scales scales(block);
        acc[k] = accumulateGroup<T>(block, 0, scales, xs, acc[k]);
        if constexpr (Q::kOffsets)
          acc[k] = _mm256_fmadd_ps(scales.offsets(), _mm256_loadu_ps(sums + 8 * b), acc[k]);
      }
    } else {
      typename Q::Scales scales[kRows];
      for (int64_t k = 0; k < kRows; ++k)
        scales[k].read(column + size_t(k) * rowBytes);
      for (int g = 0; g < Q::kGroups; ++g)
        for (int64_t k = 0; k < kRows; ++k)
          acc[k] = accumulateGroup<T>(column + size_t(k) * rowBytes, g, scales[k], xs, acc[k]);
      for (int64_t k = 0; k < kRows; ++k)
        if constexpr (Q::kOffsets)
          acc[k] = _mm256_fmadd_ps(scales[k].offsets(), _mm256_loadu_ps(sums + 8 * b), acc[k]);
    }
  }
  alignas(32) float totals[8];
  if constexpr (kRows == 8) {
    _mm256_store_ps(totals, sumEach(acc));
  } else {
    for (int64_t k = 0; k < kRows; ++k) {
      alignas(32) float lanes[8];
      _mm256_store_ps(lanes, acc[k]);
      totals[k] = 0;
      for (float lane : lanes)
        totals[k] += lane;
    }
  }
  for (int64_t k = 0; k < kRows; ++k)
    y[first + k] = bias ? totals[k] + bias[first + k] : totals[k];
}

/// quantizedRows with AVX-512 (below), compiled as such and called from AVX2 code.
template <DType T, int64_t kRows>
void quantizedRowsWide(const uint8_t *w, size_t rowBytes, size_t totalBytes, int64_t first,
                       const float *x, const float *sums, int64_t blocks, const float *bias,
                       float *y);

/// quantizedRows, or with AVX-512 where `wide`.
template <DType T, bool wide, int64_t kRows>
TPC_AVX2 inline void rowsOf(const uint8_t *w, size_t rowBytes, size_t totalBytes, int64_t first,
                            const float *x, const float *sums, int64_t blocks, const float *bias,
                            float *y) {
  if constexpr (wide)
    quantizedRowsWide<T, kRows>(w, rowBytes, totalBytes, first, x, sums, blocks, bias, y);
  else
    quantizedRows<T, kRows>(w, rowBytes, totalBytes, first, x, sums, blocks, bias, y);
}

/// y = W x (+ bias) for one row x and W [out, in] of the quantized T, `in` whole blocks:
/// Quant<T>::kRows rows at a time, then the last out % kRows one at a time; with AVX-512 where
/// `wide`. The rows at once are measured (`tpc-matmul-bench quantized`, one Sapphire Rapids
/// core): eight for the 4-bit types, whose decoding bounds them, and two for Q8_0, whose eight
/// streams read W at 11.4-11.9 GB/s and two at 13.4-14.7 (four: 12.1-13.7), with AVX2 and
/// AVX-512 alike (bench/results/matmul.txt).
template <DType T, bool wide = false>
TPC_AVX2 void gemvQuantized(const void *w, const float *x, int64_t out, int64_t in,
                            const float *bias, float *y) {
  const int64_t blocks = in / (Quant<T>::kGroups * kGroupElements);
  const size_t rowBytes = size_t(blocks) * Quant<T>::kBytes, totalBytes = size_t(out) * rowBytes;
  const float *sums = Quant<T>::kOffsets ? groupSums<T>(x, blocks) : nullptr;
  const auto *base = static_cast<const uint8_t *>(w);
  constexpr int64_t kRows = Quant<T>::kRows;
  int64_t r = 0;
  for (; r + kRows <= out; r += kRows)
    rowsOf<T, wide, kRows>(base, rowBytes, totalBytes, r, x, sums, blocks, bias, y);
  for (; r < out; ++r)
    rowsOf<T, wide, 1>(base, rowBytes, totalBytes, r, x, sums, blocks, bias, y);
}

// The block types' products with AVX-512 (F, BW and VL) where the CPU has it, all but Q4_1's
// (Quant's kWide): a group of 32 elements is two sixteen-lane vectors, so a group takes about
// half the instructions of AVX2's, which a 4-bit W needs to keep up with memory (AVX2's Q4_K
// ran at 2.2x its bandwidth floor on a ~1B Llama, bench/results/weights-llama1b.txt). On a
// Sapphire Rapids core they stream Q4_K 16%, Q4_0 7% and Q8_0 (two rows at once in both)
// 7-10% faster than AVX2's (`tpc-matmul-bench quantized` against `quantized-avx2`); on a Zen 4
// class core Q5_0, Q5_1, Q5_K and Q6_K likewise (bench/results/matmul.txt); Q4_1's, written
// the same way, was 4% slower, its per-block scale conversions weighing as much as its
// products, so it stays AVX2. The scales are AVX2's (Quant<T>::Scales), the sums the same in
// another order.
#define TPC_AVX512 __attribute__((target("avx512f,avx512bw,avx512vl,avx2,fma,f16c")))
// GCC 12's AVX-512 intrinsics fill their unused mask operand with _mm512_undefined_*(), which
// -Wmaybe-uninitialized and -Wuninitialized then report in every caller (GCC bug 105593,
// fixed in GCC 13).
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"

/// Sixteen bytes from `p` as int32 lanes, zero- or sign-extended.
TPC_AVX512 inline __m512i unsigned16(const uint8_t *p) {
  return _mm512_cvtepu8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i *>(p)));
}

/// 0x0f in every byte.
TPC_AVX512 inline __m256i nibble8() { return _mm256_set1_epi8(0xf); }

/// Thirty-two byte values as fp32 in two vectors, in order.
TPC_AVX512 inline void widen(__m256i values, __m512 q[2], bool signedBytes = false) {
  __m128i half[2] = {_mm256_castsi256_si128(values), _mm256_extracti128_si256(values, 1)};
  for (int i = 0; i < 2; ++i)
    q[i] = _mm512_cvtepi32_ps(signedBytes ? _mm512_cvtepi8_epi32(half[i])
                                          : _mm512_cvtepu8_epi32(half[i]));
}

/// Group g of a block of T as fp32 integers in two vectors, in element order.
template <DType T>
TPC_AVX512 inline void quants512(const uint8_t *block, int g,
                                const typename Quant<T>::Scales &scales, __m512 q[2]) {
  static_assert(Quant<T>::kWide);
  const __m512i low = _mm512_set1_epi32(0xf);
  if constexpr (T == DType::Q8_0) {
    for (int i = 0; i < 2; ++i)
      q[i] = _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(
          _mm_loadu_si128(reinterpret_cast<const __m128i *>(block + 2 + 16 * i))));
  } else if constexpr (T == DType::Q4_0) {
    // Elements 0..15 are the low nibbles of the 16 bytes, 16..31 the high ones, less 8.
    __m512i lanes = unsigned16(block + 2), eight = _mm512_set1_epi32(8);
    q[0] = _mm512_cvtepi32_ps(_mm512_sub_epi32(_mm512_and_si512(lanes, low), eight));
    q[1] = _mm512_cvtepi32_ps(_mm512_sub_epi32(_mm512_srli_epi32(lanes, 4), eight));
  } else if constexpr (T == DType::MXFP4) {
    __m128i half[2];
    Quant<T>::values(block, half[0], half[1]);
    for (int i = 0; i < 2; ++i)
      q[i] = _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(half[i]));
  } else if constexpr (T == DType::Q5_0 || T == DType::Q5_1) {
    // Q4_0's nibbles with a fifth bit each, bit j of the word before them for element j.
    // Made as bytes, as Q5_K's are; the word of fifth bits is the byte mask itself.
    constexpr size_t kHigh = Quant<T>::kHigh;
    uint32_t qh;
    std::memcpy(&qh, block + kHigh, sizeof qh);
    __m128i bytes = _mm_loadu_si128(reinterpret_cast<const __m128i *>(block + kHigh + 4));
    __m256i nibbles = _mm256_and_si256(
        _mm256_set_m128i(_mm_srli_epi16(bytes, 4), bytes), nibble8());
    __m256i values = _mm256_mask_add_epi8(nibbles, _cvtu32_mask32(qh), nibbles,
                                          _mm256_set1_epi8(16));
    if constexpr (T == DType::Q5_0)
      values = _mm256_sub_epi8(values, _mm256_set1_epi8(16)); // -16 .. 15
    widen(values, q, /*signedBytes=*/T == DType::Q5_0);
  } else if constexpr (T == DType::Q4_K) {
    // Group 2c is the low nibbles of bytes 32c .. 32c + 31, 2c + 1 the high ones.
    const uint8_t *bytes = block + 16 + 32 * (g / 2);
    for (int i = 0; i < 2; ++i) {
      __m512i lanes = unsigned16(bytes + 16 * i);
      q[i] = _mm512_cvtepi32_ps(g % 2 ? _mm512_srli_epi32(lanes, 4) : _mm512_and_si512(lanes, low));
    }
  } else if constexpr (T == DType::Q5_K) { // Q4_K's nibbles after 32 bytes of fifth bits
    widen(groups::q5k(block, g), q); // made as bytes, then widened (groups.h)
  } else { // Q6_K (Quant<Q6_K>): each sixteen lanes one scale's elements
    const __m256i values = groups::q6k(block, g); // -32 .. 31
    widen(values, q, /*signedBytes=*/true);
    for (int i = 0; i < 2; ++i)
      q[i] = _mm512_mul_ps(q[i], _mm512_set1_ps(scales.sub[2 * g + i]));
  }
}

/// Group g's scale in all sixteen lanes: Q4_K's and Q5_K's from their Scales' table, Q6_K's d
/// and MXFP4's from their Scales, the others' converted from the block's f16 d straight into sixteen lanes.
template <DType T>
TPC_AVX512 inline __m512 scale512(const uint8_t *block, const typename Quant<T>::Scales &scales,
                                  int g) {
  if constexpr (T == DType::Q4_K || T == DType::Q5_K) {
    return _mm512_set1_ps(scales.scales[g]);
  } else if constexpr (T == DType::Q6_K || T == DType::MXFP4) {
    return _mm512_set1_ps(_mm256_cvtss_f32(scales.d)); // converted once per block
  } else {
    uint16_t bits;
    std::memcpy(&bits, block, sizeof bits);
    return _mm512_broadcastss_ps(_mm_cvtph_ps(_mm_cvtsi32_si128(bits)));
  }
}

/// acc plus group g of a block of T, whose scales are given, times x's elements of the
/// group; after the last group, offsetAcc plus the block's offset terms (sums: x's group sums
/// for the block).
template <DType T>
TPC_AVX512 inline void group512(const uint8_t *block, int g,
                                const typename Quant<T>::Scales &scales, const float *xs,
                                const float *sums, __m512 &acc, __m256 &offsetAcc) {
  __m512 q[2];
  quants512<T>(block, g, scales, q);
  const float *xg = xs + g * kGroupElements;
  __m512 dot =
      _mm512_fmadd_ps(q[1], _mm512_loadu_ps(xg + 16), _mm512_mul_ps(q[0], _mm512_loadu_ps(xg)));
  acc = _mm512_fmadd_ps(dot, scale512<T>(block, scales, g), acc);
  if constexpr (Quant<T>::kOffsets)
    if (g == Quant<T>::kGroups - 1)
      offsetAcc = _mm256_fmadd_ps(scales.offsets(), _mm256_loadu_ps(sums), offsetAcc);
}

/// quantizedRows with AVX-512: the same rows, blocks, prefetches and sums; the offsets'
/// terms go to eight-lane sums of their own, added at the end.
template <DType T, int64_t kRows>
TPC_AVX512 inline void quantizedRows512(const uint8_t *w, size_t rowBytes, size_t totalBytes,
                                        int64_t first, const float *x, const float *sums,
                                        int64_t blocks, const float *bias, float *y) {
  using Q = Quant<T>;
  constexpr int64_t kElements = Q::kGroups * kGroupElements;
  const uint8_t *rows = w + size_t(first) * rowBytes;
  __m512 acc[kRows];
  __m256 offsetAcc[kRows];
  for (int64_t k = 0; k < kRows; ++k) {
    acc[k] = _mm512_setzero_ps();
    offsetAcc[k] = _mm256_setzero_ps();
  }
  NextRows next(w, rowBytes, totalBytes, first + kRows);
  for (int64_t b = 0; b < blocks; ++b) {
    next.through(size_t(b + 1) * kRows * Q::kBytes);
    const uint8_t *column = rows + size_t(b) * Q::kBytes;
    const float *xs = x + b * kElements;
    const float *blockSums = sums + 8 * b;
    if constexpr (Q::kGroups == 1) {
      for (int64_t k = 0; k < kRows; ++k) {
        typename Q::Scales scales(column + size_t(k) * rowBytes);
        group512<T>(column + size_t(k) * rowBytes, 0, scales, xs, blockSums, acc[k], offsetAcc[k]);
      }
    } else {
      typename Q::Scales scales[kRows];
      for (int64_t k = 0; k < kRows; ++k)
        scales[k].read(column + size_t(k) * rowBytes);
      for (int g = 0; g < Q::kGroups; ++g)
        for (int64_t k = 0; k < kRows; ++k)
          group512<T>(column + size_t(k) * rowBytes, g, scales[k], xs, blockSums, acc[k],
                      offsetAcc[k]);
    }
  }
  for (int64_t k = 0; k < kRows; ++k) {
    alignas(32) float lanes[8];
    _mm256_store_ps(lanes, offsetAcc[k]);
    float total = _mm512_reduce_add_ps(acc[k]);
    for (float lane : lanes)
      total += lane;
    y[first + k] = bias ? total + bias[first + k] : total;
  }
}

template <DType T, int64_t kRows>
TPC_AVX512 void quantizedRowsWide(const uint8_t *w, size_t rowBytes, size_t totalBytes,
                                  int64_t first, const float *x, const float *sums,
                                  int64_t blocks, const float *bias, float *y) {
  quantizedRows512<T, kRows>(w, rowBytes, totalBytes, first, x, sums, blocks, bias, y);
}
/// Sixteen elements of a row of T from `index` as fp32, in order.
template <DType T> TPC_AVX512 inline __m512 load16Wide(const void *row, int64_t index) {
  if constexpr (T == DType::F32) {
    return _mm512_loadu_ps(static_cast<const float *>(row) + index);
  } else {
    __m256i halves = _mm256_loadu_si256(
        reinterpret_cast<const __m256i *>(static_cast<const uint16_t *>(row) + index));
    if constexpr (T == DType::BF16) // a bf16 is the high half of its fp32
      return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(halves), 16));
    else
      return _mm512_cvtph_ps(halves);
  }
}

/// kRows (1 to 4) rows of W of T from `rows` times kX rows of x, sixteen columns a step:
/// each pair of a row of W and a row of x is its own chain of FMAs in sixteen lanes, in
/// column order, then reduced and the columns past the last sixteen added one by one; so a
/// pair's sum is the same whatever kX and kRows, and a batch's rows get the one-row product's
/// values bit for bit. With kPrefetch the next rows (from `next`, before `last`) are
/// prefetched at the pace these are read. totals[j kRows + k]: row k of W times row j of x.
template <DType T, int64_t kRows, int64_t kX, bool kPrefetch>
TPC_AVX512 inline void rows512(const char *rows, size_t rowBytes, const float *const *x,
                               int64_t in, int64_t blocked, const char *next, const char *last,
                               float *totals) {
  // The cache lines of W a step reads, rounded up: the prefetch keeps pace or runs ahead.
  constexpr int64_t kLines = (kRows * 16 * (T == DType::F32 ? 4 : 2) + 63) / 64;
  __m512 acc[kX][kRows];
  for (int64_t j = 0; j < kX; ++j)
    for (int64_t k = 0; k < kRows; ++k)
      acc[j][k] = _mm512_setzero_ps();
  for (int64_t c = 0; c < blocked; c += 16) {
    // Into L2 alone where several rows of x share the step: x stays in L1 (on a Zen 4 core
    // an 8-row step's products took 0.7 of their time with W fetched to L2, not L1).
    if constexpr (kPrefetch)
      for (int64_t line = 0; line < kLines; ++line, next += 64)
        if (next < last)
          _mm_prefetch(next, kX > 1 ? _MM_HINT_T1 : _MM_HINT_T0);
    __m512 wide[kRows];
    for (int64_t k = 0; k < kRows; ++k)
      wide[k] = load16Wide<T>(rows + k * rowBytes, c);
    for (int64_t j = 0; j < kX; ++j) {
      __m512 xs = _mm512_loadu_ps(x[j] + c);
      // Held in a register for its kRows FMAs: GCC otherwise folds the load into each of
      // them, and a Zen 4 core, whose loads of 64 bytes were then the bound, ran an 8-row
      // step's products 1.6x slower (docs/weights.md, "Batched rows").
      if constexpr (kRows > 1)
        __asm__("" : "+v"(xs));
      for (int64_t k = 0; k < kRows; ++k)
        acc[j][k] = _mm512_fmadd_ps(wide[k], xs, acc[j][k]);
    }
  }
  for (int64_t j = 0; j < kX; ++j)
    for (int64_t k = 0; k < kRows; ++k) {
      float total = _mm512_reduce_add_ps(acc[j][k]);
      for (int64_t c = blocked; c < in; ++c)
        total += elementAt(rows + k * rowBytes, T, c) * x[j][c];
      totals[j * kRows + k] = total;
    }
}

/// Y = X W^T (+ bias) for kX rows of X with AVX-512: W kRows rows at a time, streamed from
/// memory once, each group of rows meeting every row of x while in registers (rows512); the
/// rows left over one at a time.
template <DType T, int64_t kX, int64_t kRows, bool kPrefetch>
TPC_AVX512 void gemv512(const void *w, const float *x, int64_t out, int64_t in,
                        const float *bias, float *y, int64_t ldy) {
  const size_t rowBytes = size_t(in) * dtypeBytes(T);
  const char *base = static_cast<const char *>(w), *last = base + size_t(out) * rowBytes;
  const int64_t blocked = in / 16 * 16;
  const float *xs[kX];
  for (int64_t j = 0; j < kX; ++j)
    xs[j] = x + j * in;
  float totals[kX * kRows];
  auto store = [&](int64_t r, int64_t rows) {
    for (int64_t j = 0; j < kX; ++j)
      for (int64_t k = 0; k < rows; ++k)
        y[j * ldy + r + k] = bias ? totals[j * rows + k] + bias[r + k] : totals[j * rows + k];
  };
  int64_t r = 0;
  for (; r + kRows <= out; r += kRows) {
    const char *rows = base + size_t(r) * rowBytes;
    rows512<T, kRows, kX, kPrefetch>(rows, rowBytes, xs, in, blocked, rows + kRows * rowBytes,
                                     last, totals);
    store(r, kRows);
  }
  for (; r < out; ++r) {
    rows512<T, 1, kX, false>(base + size_t(r) * rowBytes, rowBytes, xs, in, blocked, last, last,
                             totals);
    store(r, 1);
  }
}

/// The ways gemv512 may walk W, all giving the same bits (rows512): how many rows of W at
/// once and whether the next ones are prefetched. Walk 0 is one row of x's default (what was
/// measured fastest on a Sapphire Rapids core, bench/results/matmul.txt); the first
/// kBatchWalks serve 2 to 8 rows of x (four rows of W for eight of x would need more than the
/// 32 registers; three, 24 sums, fit, and read x once for three rows of W where two read it
/// once for two).
struct Walk {
  int64_t rows;
  bool prefetch;
};
constexpr Walk kWalks[] = {{2, true}, {1, true}, {2, false}, {1, false},
                           {3, true}, {3, false}, {4, true}, {4, false}};
constexpr int kBatchWalks = 6;
/// The walks 2 to 8 rows of x time, the default first: three rows of W, prefetched. With eight
/// rows of x, three rows of W took 0.88 of two rows' time over whole runs on a Zen 4 core
/// (bench/results/batching.txt) and were 4-12% faster on an Emerald Rapids (bench/results/
/// matmul.txt), yet the first step's timing, a few calls a walk, could not tell them apart.
constexpr int kBatchOrder[kBatchWalks] = {4, 0, 1, 2, 3, 5};
/// The walk a timing's variant runs: one row of x's variants are the walks themselves.
constexpr int walkOf(bool batch, int variant) { return batch ? kBatchOrder[variant] : variant; }

template <DType T, int64_t kX>
TPC_AVX512 void gemv512Walk(int walk, const void *w, const float *x, int64_t out, int64_t in,
                            const float *bias, float *y, int64_t ldy) {
  static_assert(std::size(kWalks) == 8, "one case per walk");
  switch (walk) {
  case 1:
    return gemv512<T, kX, 1, true>(w, x, out, in, bias, y, ldy);
  case 2:
    return gemv512<T, kX, 2, false>(w, x, out, in, bias, y, ldy);
  case 3:
    return gemv512<T, kX, 1, false>(w, x, out, in, bias, y, ldy);
  case 4:
    return gemv512<T, kX, 3, true>(w, x, out, in, bias, y, ldy);
  case 5:
    return gemv512<T, kX, 3, false>(w, x, out, in, bias, y, ldy);
  case 6:
    if constexpr (kX == 1)
      return gemv512<T, kX, 4, true>(w, x, out, in, bias, y, ldy);
    break;
  case 7:
    if constexpr (kX == 1)
      return gemv512<T, kX, 4, false>(w, x, out, in, bias, y, ldy);
    break;
  default:
    break;
  }
  gemv512<T, kX, 2, true>(w, x, out, in, bias, y, ldy);
}

/// gemv512 for `count` (1 to kBatchedGemvRows) rows of x, walking W as `walk` says (kWalks;
/// one beyond kBatchWalks for one row only); row j of the result at y + j ldy (default: out).
template <DType T>
TPC_AVX512 void gemvWalk(int walk, const void *w, const float *x, int64_t count, int64_t out,
                         int64_t in, const float *bias, float *y, int64_t ldy = 0) {
  static_assert(kBatchedGemvRows == 8, "one instantiation per row count");
  if (ldy == 0)
    ldy = out;
  switch (count) {
  case 1:
    return gemv512Walk<T, 1>(walk, w, x, out, in, bias, y, ldy);
  case 2:
    return gemv512Walk<T, 2>(walk, w, x, out, in, bias, y, ldy);
  case 3:
    return gemv512Walk<T, 3>(walk, w, x, out, in, bias, y, ldy);
  case 4:
    return gemv512Walk<T, 4>(walk, w, x, out, in, bias, y, ldy);
  case 5:
    return gemv512Walk<T, 5>(walk, w, x, out, in, bias, y, ldy);
  case 6:
    return gemv512Walk<T, 6>(walk, w, x, out, in, bias, y, ldy);
  case 7:
    return gemv512Walk<T, 7>(walk, w, x, out, in, bias, y, ldy);
  default:
    return gemv512Walk<T, 8>(walk, w, x, out, in, bias, y, ldy);
  }
}
/// The float types' walks of W, chosen per type and per kind of call (one row of x, or 2 to
/// kBatchedGemvRows) by timing each on the process's first calls (KernelChoice): the walks
/// give the same bits, so the choice is a speed and never an answer.
constexpr int kWalkSamples = 24;
struct WalkChoices {
  std::mutex mutex;
  KernelChoice one{int(std::size(kWalks)), kWalkSamples}, batch{kBatchWalks, kWalkSamples};
  std::atomic<int> chosenOne{-1}, chosenBatch{-1}; // read without the lock once decided
};
WalkChoices &walkChoices(DType type) {
  static WalkChoices choices[3]; // f32, bf16, f16
  return choices[type == DType::F32 ? 0 : type == DType::BF16 ? 1 : 2];
}
std::atomic<int> forcedWalk{-1};

/// gemvWalk with the walk chosen for T and `count`'s kind, timing the call while choosing.
template <DType T> void gemvWide(const void *w, const float *x, int64_t count, int64_t out,
                                 int64_t in, const float *bias, float *y) {
  const bool batch = count > 1;
  if (int forced = forcedWalk.load(std::memory_order_relaxed); forced >= 0)
    return gemvWalk<T>(batch && forced >= kBatchWalks ? walkOf(true, 0) : forced, w, x, count,
                       out, in, bias, y);
  WalkChoices &choices = walkChoices(T);
  std::atomic<int> &chosen = batch ? choices.chosenBatch : choices.chosenOne;
  // chosenOne and chosenBatch hold walks; the choices count variants (walkOf).
  if (int walk = chosen.load(std::memory_order_acquire); walk >= 0)
    return gemvWalk<T>(walk, w, x, count, out, in, bias, y);
  KernelChoice &choice = batch ? choices.batch : choices.one;
  int variant;
  {
    std::lock_guard<std::mutex> lock(choices.mutex);
    variant = choice.next();
  }
  auto start = std::chrono::steady_clock::now();
  gemvWalk<T>(walkOf(batch, variant), w, x, count, out, in, bias, y);
  double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  std::lock_guard<std::mutex> lock(choices.mutex);
  choice.record(variant, seconds, double(out) * double(in) * double(dtypeBytes(T)));
  if (choice.decided())
    chosen.store(walkOf(batch, choice.chosen()), std::memory_order_release);
}

/// Two eight-lane halves as one sixteen-lane vector, in element order.
TPC_AVX512 inline __m512 join512(__m256 low, __m256 high) {
  return _mm512_castpd_ps(_mm512_insertf64x4(_mm512_castpd256_pd512(_mm256_castps_pd(low)),
                                             _mm256_castps_pd(high), 1));
}

/// Y = X W^T (+ bias) for kX rows of X (a batch's decode step) and a quantized W, `in` whole
/// blocks, with AVX-512: W a row at a time, each group of a block decoded and dequantized once
/// in registers (d q, or d q + m rounded once, as dequantizeAvx2 gives them) and met by every
/// row of X, so that W is read and decoded once for the batch, as the one-row kernels read
/// and decode it once for one row. A row's sums are not the one-row kernel's (which scales a
/// group's dot product), so its values may differ from its one-row product in the last bits.
template <DType T, int64_t kX>
TPC_AVX512 void quantizedBatch512(const void *w, const float *x, int64_t out, int64_t in,
                                  const float *bias, float *y) {
  using Q = Quant<T>;
  constexpr int64_t kElements = Q::kGroups * kGroupElements;
  const int64_t blocks = in / kElements;
  const size_t rowBytes = size_t(blocks) * Q::kBytes, totalBytes = size_t(out) * rowBytes;
  const auto *base = static_cast<const uint8_t *>(w);
  // x's rows interleaved a group at a time (group G of row j at (G kX + j) 32), so that a
  // group's loads are one pointer and constant offsets.
  thread_local std::vector<float> packed;
  const int64_t groups = in / kGroupElements;
  packed.resize(size_t(groups * kX * kGroupElements));
  for (int64_t G = 0; G < groups; ++G)
    for (int64_t j = 0; j < kX; ++j)
      std::copy(x + j * in + G * kGroupElements, x + j * in + (G + 1) * kGroupElements,
                packed.begin() + (G * kX + j) * kGroupElements);
  for (int64_t r = 0; r < out; ++r) {
    const uint8_t *row = base + size_t(r) * rowBytes;
    NextRows next(base, rowBytes, totalBytes, r + 1);
    __m512 acc[kX];
    for (int64_t j = 0; j < kX; ++j)
      acc[j] = _mm512_setzero_ps();
    for (int64_t b = 0; b < blocks; ++b) {
      next.through(size_t(b + 1) * Q::kBytes);
      const uint8_t *block = row + size_t(b) * Q::kBytes;
      typename Q::Scales scales(block);
      for (int g = 0; g < Q::kGroups; ++g) {
        __m256 q[4];
        Q::quants(block, g, scales, q);
        for (int i = 0; i < 4; ++i) {
          if constexpr (Q::kOffsets)
            q[i] = _mm256_fmadd_ps(q[i], scales.scale(g), scales.offset(g));
          else
            q[i] = _mm256_mul_ps(q[i], scales.scale(g));
        }
        __m512 first = join512(q[0], q[1]), second = join512(q[2], q[3]);
        const float *xs = packed.data() + (b * Q::kGroups + g) * kX * kGroupElements;
        for (int64_t j = 0; j < kX; ++j) {
          acc[j] = _mm512_fmadd_ps(first, _mm512_loadu_ps(xs + j * kGroupElements), acc[j]);
          acc[j] = _mm512_fmadd_ps(second, _mm512_loadu_ps(xs + j * kGroupElements + 16),
                                   acc[j]);
        }
      }
    }
    for (int64_t j = 0; j < kX; ++j) {
      float total = _mm512_reduce_add_ps(acc[j]);
      y[j * out + r] = bias ? total + bias[r] : total;
    }
  }
}

/// quantizedBatch512 for `count` (2 to kBatchedGemvRows) rows of x.
template <DType T>
TPC_AVX512 void quantizedBatchWide(const void *w, const float *x, int64_t count, int64_t out,
                                   int64_t in, const float *bias, float *y) {
  static_assert(kBatchedGemvRows == 8, "one instantiation per row count");
  switch (count) {
  case 2:
    return quantizedBatch512<T, 2>(w, x, out, in, bias, y);
  case 3:
    return quantizedBatch512<T, 3>(w, x, out, in, bias, y);
  case 4:
    return quantizedBatch512<T, 4>(w, x, out, in, bias, y);
  case 5:
    return quantizedBatch512<T, 5>(w, x, out, in, bias, y);
  case 6:
    return quantizedBatch512<T, 6>(w, x, out, in, bias, y);
  case 7:
    return quantizedBatch512<T, 7>(w, x, out, in, bias, y);
  default:
    return quantizedBatch512<T, 8>(w, x, out, in, bias, y);
  }
}
#pragma GCC diagnostic pop
#undef TPC_AVX512

/// `count` elements of the quantized T at `in` (whole blocks) as fp32 at `out`: bit for bit
/// widen()'s (see above).
template <DType T> TPC_AVX2 void dequantizeAvx2(const void *in, float *out, size_t count) {
  using Q = Quant<T>;
  const auto *block = static_cast<const uint8_t *>(in);
  for (size_t done = 0; done < count; done += Q::kGroups * kGroupElements, block += Q::kBytes) {
    typename Q::Scales scales(block);
    for (int g = 0; g < Q::kGroups; ++g) {
      __m256 q[4];
      Q::quants(block, g, scales, q);
      for (int i = 0; i < 4; ++i) {
        __m256 value; // d * q as the reference, or d * q + m rounded once, as it is
        if constexpr (Q::kOffsets)
          value = _mm256_fmadd_ps(q[i], scales.scale(g), scales.offset(g));
        else
          value = _mm256_mul_ps(q[i], scales.scale(g));
        _mm256_storeu_ps(out + done + size_t(g * kGroupElements + 8 * i), value);
      }
    }
  }
}

bool hasAvx2Fma() {
  static const bool has = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
  return has;
}
bool hasAvx512() {
  static const bool has =
      __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
      __builtin_cpu_supports("avx512vl");
  return has;
}
bool hasF16c() {
  static const bool has = __builtin_cpu_supports("f16c");
  return has;
}
#undef TPC_AVX2
#endif


/// Whether the one-row linear of `type` uses AVX-512 on this CPU (the block types whose
/// Quant says kWide, unless switched off); only where vectorKernels() holds.
bool wideQuantizedKernels(DType type) {
#if defined(__x86_64__)
  bool wide = false;
  visitBlocks(type, [&](auto block) { wide = Quant<decltype(block)::value>::kWide; });
  return wide && avx512Allowed();
#else
  (void)type;
  return false;
#endif
}

/// Whether the linears of 1 to kBatchedGemvRows rows with float W of `type` use AVX-512 on
/// this CPU (unless switched off); only where vectorKernels() holds.
bool wideFloatKernels(DType type) {
  return (type == DType::F32 || type == DType::BF16 || type == DType::F16) && avx512Allowed();
}

/// Whether the AVX2 kernels may read W of `type` on this CPU (and are not switched off).
bool vectorKernels(DType type) {
#if defined(__x86_64__)
  if (forcedScalar.load(std::memory_order_relaxed) || !hasAvx2Fma())
    return false;
  // f16 and the quantized types' f16 scales convert with F16C.
  return type == DType::F32 || type == DType::BF16 || hasF16c();
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
      return wideFloatKernels(w.type) ? gemvWide<DType::F32>(w.data, x, 1, out, in, bias, y)
                                      : gemvAvx2<DType::F32>(w.data, x, 1, out, in, bias, y);
    case DType::BF16:
      return wideFloatKernels(w.type) ? gemvWide<DType::BF16>(w.data, x, 1, out, in, bias, y)
                                      : gemvAvx2<DType::BF16>(w.data, x, 1, out, in, bias, y);
    case DType::F16:
      return wideFloatKernels(w.type) ? gemvWide<DType::F16>(w.data, x, 1, out, in, bias, y)
                                      : gemvAvx2<DType::F16>(w.data, x, 1, out, in, bias, y);
    default: {
      if (detail::limbsKernelsFor(w.type) && limbs::gemv(x, in, w.data, w.type, out, bias, y))
        return;
      const bool wide = wideQuantizedKernels(w.type);
      visitBlocks(w.type, [&](auto block) {
        constexpr DType T = decltype(block)::value;
        if constexpr (Quant<T>::kWide)
          if (wide)
            return gemvQuantized<T, true>(w.data, x, out, in, bias, y);
        gemvQuantized<T>(w.data, x, out, in, bias, y);
      });
      return;
    }
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

} // namespace

bool avx512Allowed() {
#if defined(__x86_64__)
  return !forcedAvx2.load(std::memory_order_relaxed) && hasAvx512();
#else
  return false;
#endif
}

/// `count` elements of `type` at `in` as fp32 (as widen() gives them, bit for bit),
/// vectorized where the CPU allows.
void widenFast(const void *in, DType type, float *out, size_t count) {
#if defined(__x86_64__)
  if (vectorKernels(type)) {
    switch (type) {
    case DType::F32:
      break;
    case DType::BF16:
      return widenAvx2<DType::BF16>(in, out, count);
    case DType::F16:
      return widenAvx2<DType::F16>(in, out, count);
    default:
      visitBlocks(type, [&](auto block) {
        dequantizeAvx2<decltype(block)::value>(in, out, count);
      });
      return;
    }
  }
#endif
  widen(in, type, out, count);
}

namespace detail {
void forceScalarKernels(bool scalar) { forcedScalar.store(scalar); }
void forceAvx2Kernels(bool avx2) { forcedAvx2.store(avx2); }
void forceFloatWalk(int walk) {
#if defined(__x86_64__)
  forcedWalk.store(walk >= 0 && walk < int(std::size(kWalks)) ? walk : -1);
#else
  (void)walk;
#endif
}
int floatWalks() {
#if defined(__x86_64__)
  return int(std::size(kWalks));
#else
  return 1;
#endif
}
bool avx512KernelsFor(DType type) {
  return vectorKernels(type) && (wideQuantizedKernels(type) || wideFloatKernels(type));
}
bool vectorKernelsFor(DType type) { return vectorKernels(type); }
bool int8KernelsFor(DType type) { // AVX-512 kernels: not while a test asks for fewer
  return int8Activations.load(std::memory_order_relaxed) && int8::takes(type) &&
         !forcedScalar.load(std::memory_order_relaxed) &&
         !forcedAvx2.load(std::memory_order_relaxed);
}
void forceLimbs(int limbs) { forcedLimbs.store(limbs < 0 ? -1 : limbs > 0 ? 1 : 0); }
bool limbsKernelsFor(DType type) {
  const int forced = forcedLimbs.load(std::memory_order_relaxed);
  return (forced == 1 || (forced == -1 && limbs::preferred())) && limbs::takes(type) &&
         wideQuantizedKernels(type) && vectorKernels(type);
}
bool limbsPreferredOn(const char *vendor, int family) {
  return limbs::preferredOn(vendor, family);
}
void setPanelBytes(size_t bytes) { panelBytes.store(bytes); }
} // namespace detail

void setInt8Activations(bool on) { int8Activations.store(on); }

void linear(Host, const float *x, int64_t rows, int64_t in, Matrix w, int64_t out,
            const float *bias, float *y) {
  if (detail::int8KernelsFor(w.type) && int8::rounds(w.type, rows))
    return int8::linear(x, rows, in, w.data, w.type, out, bias, y);
  if (rows == 1) // a decode step: W read once, as fast as it streams
    return gemv(w, x, out, in, bias, y);
#if defined(__x86_64__)
  // A batch's decode step: W read once for all its rows; float W's rows each the one-row
  // product's values, quantized W (with AVX-512) decoded once for all of them.
  if (rows <= kBatchedGemvRows && vectorKernels(w.type)) {
    if (wideFloatKernels(w.type))
      switch (w.type) {
      case DType::F32:
        return gemvWide<DType::F32>(w.data, x, rows, out, in, bias, y);
      case DType::BF16:
        return gemvWide<DType::BF16>(w.data, x, rows, out, in, bias, y);
      case DType::F16:
        return gemvWide<DType::F16>(w.data, x, rows, out, in, bias, y);
      default:
        break;
      }
    if (avx512Allowed() && visitBlocks(w.type, [&](auto block) {
          quantizedBatchWide<decltype(block)::value>(w.data, x, rows, out, in, bias, y);
        }))
      return;
    switch (w.type) {
    case DType::F32:
      return gemvAvx2<DType::F32>(w.data, x, rows, out, in, bias, y);
    case DType::BF16:
      return gemvAvx2<DType::BF16>(w.data, x, rows, out, in, bias, y);
    case DType::F16:
      return gemvAvx2<DType::F16>(w.data, x, rows, out, in, bias, y);
    default:
      break;
    }
  }
#endif
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
      widenFast(rowOf(table, local, width), table.type, row, size_t(width));
    else
      std::fill(row, row + width, 0.0f); // another rank's row: this summand is zero
  }
  return true;
}

std::string kernelChoices() {
  std::string said;
#if defined(__x86_64__)
  const DType types[] = {DType::F32, DType::BF16, DType::F16};
  for (DType type : types) {
    WalkChoices &choices = walkChoices(type);
    std::lock_guard<std::mutex> lock(choices.mutex);
    for (bool batch : {false, true}) {
      const KernelChoice &choice = batch ? choices.batch : choices.one;
      if (!choice.decided())
        continue;
      const Walk &walk = kWalks[walkOf(batch, choice.chosen())];
      char line[200];
      std::snprintf(line, sizeof line,
                    "%s%s, %s: W %lld row%s at a time%s (%.1f GB/s timed; the default %.1f)",
                    said.empty() ? "" : "; ", dtypeName(type),
                    batch ? "2 to 8 rows of x" : "one row of x", static_cast<long long>(walk.rows),
                    walk.rows == 1 ? "" : "s", walk.prefetch ? ", the next prefetched" : "",
                    choice.rate(choice.chosen()) / 1e9, choice.rate(0) / 1e9);
      said += line;
    }
  }
#endif
  return said;
}

std::string matrixKernels() {
  std::string vector;
  for (size_t i = 0; i < std::size(kDTypeLines); ++i) {
    DType type = DType(i);
    vector += std::string(vector.empty() ? "" : ", ") + dtypeName(type) +
              (!vectorKernels(type)                                   ? " scalar"
               : detail::limbsKernelsFor(type)                        ? " AVX-512 (x in limbs)"
               : wideQuantizedKernels(type) || wideFloatKernels(type) ? " AVX-512"
                                                                      : " AVX2");
  }
  std::string rounded;
  for (size_t i = 0; i < std::size(kDTypeLines); ++i)
    if (DType type = DType(i); detail::int8KernelsFor(type))
      rounded += std::string(rounded.empty() ? "" : ", ") + dtypeName(type) +
                 (int8::rounds(type, 1) ? "" : " (prefills)");
  return "one-row linear: " + vector + "; matrix products: " + blasDescription() +
         " sgemm (16-bit and quantized weights widened to fp32 a panel at a time)" +
         (rounded.empty() ? std::string()
                          : "; " + rounded + " times x rounded to int8 (--int8-activations)");
}

} // namespace tpcrt::cpu
