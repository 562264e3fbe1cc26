// linear's one-row product of Q4_K, Q5_K and Q6_K in integers (limbs.h), fp32's answer.
//
// Why: the fp32 kernels (matmul.cpp) widen each of W's 4- to 6-bit integers to fp32 and
// multiply it by an fp32 element of x, sixteen a 512-bit instruction, with four to five more
// instructions to unpack and convert them. A Zen 4 core executes each 512-bit instruction as
// two 256-bit halves, and there that work, not W's bytes, bounds a decode: Q4_K streamed at
// 8.7 GB/s against 36 GB/s of read bandwidth (`tpc-matmul-bench quantized`), a ~1B Llama's
// Q4_K_M decode took 2.6x llama.cpp's time (bench/results/weights-kquants.txt).
//
// Here x is split once a product into integers: each block of 256 elements (W's block) is
// scaled by a power of two 2^e so that its largest |x| lies in [2^28, 2^29), rounded to the
// nearest integer X, and X kept as two 16-bit limbs, X = hi 2^15 + lo (|hi| <= 2^14,
// -2^14 <= lo < 2^14). Each of W's integers is multiplied by its sub-block's scale in 16 bits
// (at most 32 x 128 = 4096 in magnitude, Q6_K's) and meets both limbs through vpdpwssd, 32
// products an instruction summed in int32 lanes: sixteen products a lane over a block, at
// most 2^12 2^14 each, so the sums are exact (below 2^30). A block's two sums convert to fp32
// once and take d 2^-e (times 2^15 for hi's). Q4_K's and Q5_K's minimums meet x's fp32 sums
// over each group, as in the fp32 kernels.
//
// What moves: only the rounding to X, at most 2^-29 of the block's largest |x| (an fp32 step
// of that largest is 2^-23 of it): elements within 2^5 of the largest keep every bit, smaller
// ones move by less than 1/32 of half a step of the largest. Then fp32 rounds each block's
// sum once, where the fp32 kernels round each group's. int8.cpp does this with one 8-bit
// limb (x rounded to int8): llama.cpp's answer, not fp32's.
//
// The instructions a group takes: a widening of 32 bytes to words (shared by two groups in
// Q4_K), a mask or shift, a 16-bit multiply by the scale and two vpdpwssd, against the fp32
// kernels' two widenings, two conversions, two multiply-adds and a third for the scale. On
// the Zen 4 core (`tpc-matmul-bench limbs`, bench/results/matmul.txt) Q4_K streams 1.2-1.4x,
// Q5_K 1.2-1.3x and Q6_K 1.1-1.8x as fast this way, and a ~1B Llama's Q4_K_M decode takes
// 0.67x the time (weights-kquants.txt).
#include "limbs.h"
#include "rows.h"

#include <cmath>
#include <cstring>
#include <vector>

#if defined(__x86_64__)
#include "groups.h"

#include <cpuid.h>
#include <immintrin.h>
#endif

namespace tpcrt::cpu::limbs {

bool preferredOn(const char *vendor, int family) {
  return std::strcmp(vendor, "AuthenticAMD") == 0 && family == 25;
}

#if defined(__x86_64__)

bool preferred() {
  static const bool answer = [] {
    unsigned eax, ebx, ecx, edx;
    if (!__get_cpuid(0, &eax, &ebx, &ecx, &edx))
      return false;
    char vendor[13] = {};
    std::memcpy(vendor, &ebx, 4);
    std::memcpy(vendor + 4, &edx, 4);
    std::memcpy(vendor + 8, &ecx, 4);
    if (!__get_cpuid(1, &eax, &ebx, &ecx, &edx))
      return false;
    int family = int((eax >> 8) & 0xf);
    if (family == 0xf)
      family += int((eax >> 20) & 0xff);
    return preferredOn(vendor, family);
  }();
  return answer;
}

bool takes(DType type) {
  static const bool cpu = __builtin_cpu_supports("avx512f") &&
                          __builtin_cpu_supports("avx512bw") &&
                          __builtin_cpu_supports("avx512vl") &&
                          __builtin_cpu_supports("avx512vnni") && __builtin_cpu_supports("f16c");
  return cpu && (type == DType::Q4_K || type == DType::Q5_K || type == DType::Q6_K);
}

namespace {

#define TPC_LIMBS __attribute__((target("avx512f,avx512bw,avx512vl,avx512vnni,avx2,fma,f16c")))
// GCC 12's AVX-512 intrinsics and -Wmaybe-uninitialized: see matmul.cpp.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"

constexpr int64_t kBlock = 256;

/// One row of x in limbs.
struct Split {
  int16_t *hi = nullptr, *lo = nullptr; // [block][256], in x's order, on cache lines
  std::vector<float> unit;              // [block]: 2^-e
  std::vector<float> sums;              // [block][8]: x's sums over each group of 32
  std::vector<int16_t> storage;         // hi's and lo's, and a line to align them
  void resize(int64_t blocks) {
    const size_t each = size_t(blocks * kBlock);
    storage.resize(2 * each + 32);
    auto at = reinterpret_cast<uintptr_t>(storage.data());
    hi = reinterpret_cast<int16_t *>((at + 63) / 64 * 64); // the kernels load 64 bytes at once
    lo = hi + each;
    unit.resize(size_t(blocks));
    sums.resize(size_t(blocks * 8));
  }
};

/// x's `blocks` blocks into `out`; false where a block is not finite or its largest |x|,
/// unless zero, lies outside [2^-64, 2^64] (there d 2^-e could leave fp32's normal range).
TPC_LIMBS bool split(const float *x, int64_t blocks, Split &out) {
  out.resize(blocks);
  const __m512 zero = _mm512_setzero_ps();
  const __m512i half = _mm512_set1_epi32(1 << 14);
  for (int64_t b = 0; b < blocks; ++b) {
    const float *xs = x + b * kBlock;
    __m512 largest = zero, poison = zero; // poison: x times 0, which only inf and NaN spoil
    for (int i = 0; i < 16; ++i) {
      __m512 v = _mm512_loadu_ps(xs + 16 * i);
      largest = _mm512_max_ps(largest, _mm512_abs_ps(v));
      poison = _mm512_add_ps(poison, _mm512_mul_ps(v, zero));
    }
    const float most = _mm512_reduce_max_ps(largest);
    if (_mm512_cmpneq_ps_mask(poison, zero) != 0 ||
        (most != 0 && !(most >= 0x1p-64f && most <= 0x1p64f)))
      return false;
    const int e = most > 0 ? 28 - std::ilogb(most) : 0;
    const __m512 exponent = _mm512_set1_ps(float(e));
    int16_t *hi = out.hi + b * kBlock, *lo = out.lo + b * kBlock;
    for (int i = 0; i < 16; ++i) {
      // x 2^e exactly (scalef), then the nearest integer, ties to even (whatever MXCSR says).
      __m512i X = _mm512_cvt_roundps_epi32(
          _mm512_scalef_ps(_mm512_loadu_ps(xs + 16 * i), exponent),
          _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
      __m512i high = _mm512_srai_epi32(_mm512_add_epi32(X, half), 15);
      __m512i low = _mm512_sub_epi32(X, _mm512_slli_epi32(high, 15));
      _mm256_storeu_si256(reinterpret_cast<__m256i *>(hi + 16 * i), _mm512_cvtepi32_epi16(high));
      _mm256_storeu_si256(reinterpret_cast<__m256i *>(lo + 16 * i), _mm512_cvtepi32_epi16(low));
    }
    out.unit[size_t(b)] = std::ldexp(1.0f, -e);
    for (int g = 0; g < 8; ++g)
      out.sums[size_t(b * 8 + g)] = _mm512_reduce_add_ps(
          _mm512_add_ps(_mm512_loadu_ps(xs + 32 * g), _mm512_loadu_ps(xs + 32 * g + 16)));
  }
  return true;
}

TPC_LIMBS inline float f16At(const uint8_t *p) {
  uint16_t bits;
  std::memcpy(&bits, p, sizeof bits);
  return _cvtsh_ss(bits);
}

/// A block of T read for the products: its sub-block scales as 16-bit integers, d, and for
/// Q4_K and Q5_K -dmin m_g in lane g of `minimums`; then each group g (32 elements, in x's
/// order) as 32 words of its integers times their scales.
template <DType T> struct Block;

template <> struct Block<DType::Q4_K> {
  static constexpr size_t kBytes = kDTypeLines[size_t(DType::Q4_K)].blockBytes;
  static constexpr bool kMinimums = true;
  // Rows of W at once, each with its two int32 sums and its fp32 sum in registers: measured
  // on the Zen 4 core (`tpc-matmul-bench limbs`), four streamed Q4_K at 11.7-12.0 GB/s,
  // three at 7.2-8.6, six at 8.7-9.9, eight at 10.6-10.7; Q5_K likewise.
  static constexpr int64_t kRows = 4;
  // Kept in memory, not registers: four rows' blocks would take as many vector registers as
  // the products need. A group's scale is then one broadcast from memory.
  const uint8_t *block;
  alignas(16) int16_t scales[8];
  alignas(32) float minimums[8];
  float d;
  TPC_LIMBS void read(const uint8_t *at) {
    block = at;
    const __m128i packed = groups::kScalesAndMinimums(at + 4);
    _mm_store_si128(reinterpret_cast<__m128i *>(scales), _mm_cvtepu8_epi16(packed));
    const __m256 m = _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(_mm_srli_si128(packed, 8)));
    _mm256_store_ps(minimums, _mm256_mul_ps(_mm256_set1_ps(-f16At(at + 2)), m));
    d = f16At(at);
  }
  /// Groups 2c and 2c + 1: the low and the high nibbles of bytes 32c .. 32c + 31.
  TPC_LIMBS void pair(int c, __m512i &first, __m512i &second) const {
    __m512i words = _mm512_cvtepu8_epi16(groups::bytes32(block + 16 + 32 * c));
    first = _mm512_mullo_epi16(_mm512_and_si512(words, _mm512_set1_epi16(0xf)), scale(2 * c));
    second = _mm512_mullo_epi16(_mm512_srli_epi16(words, 4), scale(2 * c + 1));
  }
  TPC_LIMBS __m512i scale(int g) const { return _mm512_set1_epi16(scales[g]); }
};

/// Q5_K: Q4_K's scales, then 32 bytes of fifth bits, then Q4_K's nibbles (groups.h).
template <> struct Block<DType::Q5_K> : Block<DType::Q4_K> {
  static constexpr size_t kBytes = kDTypeLines[size_t(DType::Q5_K)].blockBytes;
  TPC_LIMBS void pair(int c, __m512i &first, __m512i &second) const {
    first = _mm512_mullo_epi16(_mm512_cvtepu8_epi16(groups::q5k(block, 2 * c)), scale(2 * c));
    second = _mm512_mullo_epi16(_mm512_cvtepu8_epi16(groups::q5k(block, 2 * c + 1)),
                                scale(2 * c + 1));
  }
};

/// Q6_K (210 bytes: 128 of low nibbles, 64 of 2-bit highs, sixteen int8 scales, f16 d): its
/// groups as groups.h makes them, the first sixteen elements of group g taking scale 2g, the
/// others 2g + 1.
template <> struct Block<DType::Q6_K> {
  static constexpr size_t kBytes = kDTypeLines[size_t(DType::Q6_K)].blockBytes;
  static constexpr bool kMinimums = false;
  // Two rows at once: 12.6-12.7 GB/s on the Zen 4 core; three 12.1-12.4, four 9.6-9.8 (its
  // decoding's registers spilled).
  static constexpr int64_t kRows = 2;
  const uint8_t *block;
  alignas(64) int16_t scales[32]; // sixteen, then zeros (a vector for vpermw)
  float d;
  TPC_LIMBS void read(const uint8_t *at) {
    block = at;
    _mm512_store_si512(scales, _mm512_castsi256_si512(_mm256_cvtepi8_epi16(
                                   _mm_loadu_si128(reinterpret_cast<const __m128i *>(at + 192)))));
    d = f16At(at + 208);
  }
  TPC_LIMBS __m512i group(int g) const {
    const __m256i values = groups::q6k(block, g); // -32 .. 31 (groups.h)
    // Scale 2g in the first sixteen words, 2g + 1 in the others.
    __m512i index = _mm512_inserti64x4(_mm512_set1_epi16(short(2 * g)),
                                       _mm256_set1_epi16(short(2 * g + 1)), 1);
    return _mm512_mullo_epi16(_mm512_cvtepi8_epi16(values),
                              _mm512_permutexvar_epi16(index, _mm512_load_si512(scales)));
  }
  TPC_LIMBS void pair(int c, __m512i &first, __m512i &second) const {
    first = group(2 * c);
    second = group(2 * c + 1);
  }
};

/// y[first, first + kR) of the product: kR rows of W side by side, a block of each at a time,
/// the next kR rows prefetched at the pace these are read.
template <DType T, int64_t kR>
TPC_LIMBS inline void rowsOf(const uint8_t *w, size_t rowBytes, size_t totalBytes, int64_t first,
                             const Split &x, int64_t blocks, const float *bias, float *y) {
  using B = Block<T>;
  const uint8_t *rows = w + size_t(first) * rowBytes;
  __m512 acc[kR];
  __m256 minimums[kR];
  for (int64_t k = 0; k < kR; ++k) {
    acc[k] = _mm512_setzero_ps();
    minimums[k] = _mm256_setzero_ps();
  }
  NextRows next(w, rowBytes, totalBytes, first + kR); // rows.h
  for (int64_t b = 0; b < blocks; ++b) {
    next.through(size_t(b + 1) * kR * B::kBytes);
    const int16_t *hi = x.hi + b * kBlock, *lo = x.lo + b * kBlock;
    B block[kR];
    __m512i high[kR], low[kR];
    for (int64_t k = 0; k < kR; ++k) {
      block[k].read(rows + size_t(k) * rowBytes + size_t(b) * B::kBytes);
      high[k] = low[k] = _mm512_setzero_si512();
    }
    for (int c = 0; c < 4; ++c) {
      const __m512i hi0 = _mm512_loadu_si512(hi + 64 * c),
                    hi1 = _mm512_loadu_si512(hi + 64 * c + 32),
                    lo0 = _mm512_loadu_si512(lo + 64 * c),
                    lo1 = _mm512_loadu_si512(lo + 64 * c + 32);
      for (int64_t k = 0; k < kR; ++k) {
        __m512i a, z;
        block[k].pair(c, a, z);
        high[k] = _mm512_dpwssd_epi32(_mm512_dpwssd_epi32(high[k], a, hi0), z, hi1);
        low[k] = _mm512_dpwssd_epi32(_mm512_dpwssd_epi32(low[k], a, lo0), z, lo1);
      }
    }
    for (int64_t k = 0; k < kR; ++k) {
      const float scale = block[k].d * x.unit[size_t(b)];
      acc[k] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(high[k]), _mm512_set1_ps(scale * 0x1p15f),
                               acc[k]);
      acc[k] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(low[k]), _mm512_set1_ps(scale), acc[k]);
      if constexpr (B::kMinimums)
        minimums[k] = _mm256_fmadd_ps(_mm256_load_ps(block[k].minimums),
                                      _mm256_loadu_ps(x.sums.data() + 8 * b), minimums[k]);
    }
  }
  for (int64_t k = 0; k < kR; ++k) {
    float total = _mm512_reduce_add_ps(acc[k]);
    if constexpr (B::kMinimums) {
      alignas(32) float lanes[8];
      _mm256_store_ps(lanes, minimums[k]);
      for (float lane : lanes)
        total += lane;
    }
    y[first + k] = bias ? total + bias[first + k] : total;
  }
}

template <DType T>
TPC_LIMBS void product(const Split &x, int64_t blocks, const void *w, int64_t out,
                       const float *bias, float *y) {
  const size_t rowBytes = size_t(blocks) * Block<T>::kBytes, totalBytes = size_t(out) * rowBytes;
  const auto *base = static_cast<const uint8_t *>(w);
  constexpr int64_t kRows = Block<T>::kRows;
  int64_t r = 0;
  for (; r + kRows <= out; r += kRows)
    rowsOf<T, kRows>(base, rowBytes, totalBytes, r, x, blocks, bias, y);
  for (; r < out; ++r)
    rowsOf<T, 1>(base, rowBytes, totalBytes, r, x, blocks, bias, y);
}

#pragma GCC diagnostic pop
#undef TPC_LIMBS

} // namespace

bool gemv(const float *x, int64_t in, const void *w, DType type, int64_t out, const float *bias,
          float *y) {
  if (!takes(type) || in % kBlock != 0)
    return false;
  const int64_t blocks = in / kBlock;
  thread_local Split limbs;
  if (!split(x, blocks, limbs))
    return false;
  switch (type) {
  case DType::Q4_K:
    product<DType::Q4_K>(limbs, blocks, w, out, bias, y);
    return true;
  case DType::Q5_K:
    product<DType::Q5_K>(limbs, blocks, w, out, bias, y);
    return true;
  case DType::Q6_K:
    product<DType::Q6_K>(limbs, blocks, w, out, bias, y);
    return true;
  default:
    return false;
  }
}

#else // not x86-64: the fp32 kernels answer

bool preferred() { return false; }
bool takes(DType) { return false; }
bool gemv(const float *, int64_t, const void *, DType, int64_t, const float *, float *) {
  return false;
}

#endif

} // namespace tpcrt::cpu::limbs
