// linear's int8 path (int8.h), which --int8-activations turns on: W held in ggml's block
// types times x rounded to int8 in W's blocks (256 elements for Q4_K, Q5_K and Q6_K; 32 for
// Q8_0, Q4_0, Q4_1, Q5_0 and Q5_1), the products summed in int32.
//
// Why: the exact kernels (matmul.cpp) widen each of W's 4- to 8-bit integers to fp32 and
// multiply it by an fp32 element of x, sixteen a step. On a core whose memory outruns that
// (two AVX-512 cores here read 40 GB/s), a Q4_K decode is bound by the widening, not by W's
// bytes, and a prefill more so. Rounded to int8, x meets W's integers sixty-four at a time,
// and the fp32 work is a multiply-add per sub-block. llama.cpp computes these types the same
// way (its Q8_K and Q8_0), so the answer is its kind of answer, not transformers': each
// element of x moves by up to half of max |x| / 127 of its block.
//
// Two forms:
// - The K types' one to eight rows (decode): each block of W decoded in registers and met by
//   64 bytes of x through vpmaddubsw (unsigned bytes of W times signed bytes of x, pairs
//   summed to int16) and vpdpwssd (those times the 16-bit sub-block scales, summed into
//   int32). A block of x is 256 int8 (its step d = max |x| / 127, nearest even), its sixteen
//   sums of 16 (Q6_K's offset of 32), and d times its eight sums of 32 (Q4_K's and Q5_K's
//   minimums). Q4_K and Q5_K keep groups 2c and 2c + 1 (32 elements each) as the low and high
//   nibbles of the same 32 bytes; a 64-byte load gives the low nibbles of groups 0 and 2 (or
//   4 and 6) in one vector and the high ones of 1 and 3 in another, so x's groups are stored
//   in that order (0, 2, 1, 3, 4, 6, 5, 7) and each vector of W meets 64 consecutive bytes of
//   x. Q6_K's 64-byte loads give its elements in order.
// - Panels (below): more than eight rows of every block type. The 32-element types' one to
//   eight rows keep the exact kernels (int8.h's takes): a kernel that decoded each block in
//   registers for vpdpbusd on 32 bytes of x ran at 0.54-0.91 times their rates on a Zen 4
//   core (its per-block scale and offset work outweighed the products; Q8_0's exact decode
//   is near the memory's rate already).
#include "int8.h"
#include "rows.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

#if defined(__x86_64__)
#include <immintrin.h>
#endif

namespace tpcrt::cpu::int8 {

#if defined(__x86_64__)
namespace {

#define TPC_INT8 __attribute__((target("avx512f,avx512bw,avx512vl,avx512vnni,avx2,fma,f16c")))
// GCC 12's AVX-512 intrinsics and -Wmaybe-uninitialized: see matmul.cpp.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"

constexpr int64_t kBlock = 256;
/// The most rows of x one pass over W's rows meets (their sums stay in registers).
constexpr int64_t kRowsOfX = 8;
/// The bytes of W's rows one pass takes, which stay in L2 while every eight rows of x meet them.
constexpr size_t kPanelBytes = size_t(256) << 10;

/// Where group g of a block of x is kept for Q4_K and Q5_K (see above); swapping 1 and 2
/// (and 5 and 6) is its own inverse.
constexpr int kNibbleOrder[8] = {0, 2, 1, 3, 4, 6, 5, 7};

/// How a block type meets x: blocks of kElements (x rounded with one step per as many), kSubs
/// sub-blocks of a scale each, kBytes per block of W; the sizes are types.def's.
template <DType T> struct Layout {
  static constexpr bool kK = T == DType::Q4_K || T == DType::Q5_K || T == DType::Q6_K;
  static constexpr int64_t kElements = kDTypeLines[size_t(T)].blockElements;
  static constexpr int kSubs = T == DType::Q6_K ? 16 : kK ? 8 : 1;
  static constexpr size_t kBytes = kDTypeLines[size_t(T)].blockBytes;
  static_assert(kElements == (kK ? 256 : 32), "a block type int8.cpp does not know");
};

/// x's rows rounded to int8, a block (of 256 or 32) at a time.
struct Rounded {
  int64_t blocks = 0;        // per row
  std::vector<int8_t> q;     // [row][block][elements]
  std::vector<float> d;      // [row][block]: the step
  std::vector<int16_t> s16;  // [row][block][elements / 16]: sums of q over each 16, in order
  std::vector<float> sums;   // [row][block][sub-blocks]: d times the sums over each sub-block
};

/// x's rows, `in` whole blocks of kElements, into `out`, with kSubs sums a block; a block of
/// 256 in the nibbles' order where `nibbleOrder`.
template <int64_t kElements, int kSubs>
TPC_INT8 void roundRows(const float *x, int64_t rows, int64_t in, bool nibbleOrder, Rounded &out) {
  constexpr int kSixteens = int(kElements / 16), kPerSub = kSixteens / kSubs;
  const int64_t blocks = in / kElements;
  out.blocks = blocks;
  out.q.resize(size_t(rows * in));
  out.d.resize(size_t(rows * blocks));
  out.s16.resize(size_t(rows * blocks * kSixteens));
  out.sums.resize(size_t(rows * blocks * kSubs));
  const __m512 zero = _mm512_setzero_ps();
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t b = 0; b < blocks; ++b) {
      const float *xs = x + r * in + b * kElements;
      const int64_t at = r * blocks + b;
      __m512 largest = zero, poison = zero; // poison: x times 0, which only inf and NaN spoil
      for (int i = 0; i < kSixteens; ++i) {
        __m512 v = _mm512_loadu_ps(xs + 16 * i);
        largest = _mm512_max_ps(largest, _mm512_abs_ps(v));
        poison = _mm512_add_ps(poison, _mm512_mul_ps(v, zero));
      }
      float most = _mm512_reduce_max_ps(largest);
      bool finite = _mm512_cmpneq_ps_mask(poison, zero) == 0;
      float step = finite ? most / 127 : NAN;
      // 127 / most overflows fp32 below about 3.7e-37: such a block is scaled by 2^64 first
      // (exactly), so that its elements still round to their own steps.
      const float early = most < 0x1p-100f ? 0x1p64f : 1.0f;
      __m512 first = _mm512_set1_ps(early),
             inverse = _mm512_set1_ps(finite && most > 0 ? 127 / (most * early) : 0);
      int8_t *q = out.q.data() + at * kElements;
      int16_t *sixteens = out.s16.data() + at * kSixteens;
      for (int i = 0; i < kSixteens; ++i) { // sixteen elements: half of group i / 2
        // Nearest even (MXCSR's default); at most 127 in magnitude, saturated all the same.
        __m512i ints = _mm512_cvtps_epi32(
            _mm512_mul_ps(_mm512_mul_ps(_mm512_loadu_ps(xs + 16 * i), first), inverse));
        const int group = i / 2, slot = nibbleOrder ? kNibbleOrder[group] : group;
        _mm_storeu_si128(reinterpret_cast<__m128i *>(q + 32 * slot + 16 * (i % 2)),
                         _mm512_cvtsepi32_epi8(ints));
        sixteens[i] = int16_t(_mm512_reduce_add_epi32(ints));
      }
      out.d[size_t(at)] = step;
      for (int g = 0; g < kSubs; ++g) {
        int total = 0;
        for (int i = g * kPerSub; i < (g + 1) * kPerSub; ++i)
          total += sixteens[i];
        out.sums[size_t(at * kSubs + g)] = step * float(total);
      }
    }
}

/// A block of W decoded for the int8 products: w[i] is 64 unsigned integers meeting bytes
/// 64 i .. 64 i + 63 of x's block (in x's order), scales[i] their 32 pairs' 16-bit scales;
/// d its fp32 scale in every lane. Q4_K and Q5_K: `minimums` holds -dmin m_g in lane g, to
/// meet x's s32. Q6_K: `offsets` holds -32 s_k as 16-bit lane k (sixteen
/// lanes, then zeros), to meet x's s16.
struct Decoded {
  __m512i w[4], scales[4];
  __m512 d;
  __m256 minimums;
  __m512i offsets;
};

TPC_INT8 inline float f16At(const uint8_t *p) {
  uint16_t bits;
  std::memcpy(&bits, p, sizeof bits);
  return _cvtsh_ss(bits);
}

/// Sixteen-bit lane p of scales[i] is the scale of lane pair p of w[i]: table lane first[i]
/// for p < 16 and second[i] after (Q4_K, Q5_K: a group's), or 4 i + p / 8 (Q6_K: a 16's).
TPC_INT8 inline __m512i lanesOf(int first, int second) {
  return _mm512_inserti64x4(_mm512_set1_epi16(short(first)),
                            _mm256_set1_epi16(short(second)), 1);
}

/// Q4_K (144 bytes: f16 d and dmin, 12 bytes of 6-bit scales s_g and minimums m_g, 128 of
/// nibbles) and Q5_K (the same with 32 bytes of fifth bits before the nibbles: bit g of byte l
/// is element l of group g's).
template <DType T> TPC_INT8 inline void decodeK(const uint8_t *block, Decoded &out) {
  constexpr bool kFive = T == DType::Q5_K;
  const uint8_t *nibbles = block + (kFive ? 48 : 16);
  uint64_t sBytes, mBytes;
  kScales(block + 4, sBytes, mBytes); // rows.h
  __m128i packed = _mm_set_epi64x(int64_t(mBytes), int64_t(sBytes));
  __m512i table = _mm512_castsi128_si512(_mm_cvtepu8_epi16(packed)); // s_0 .. s_7
  static const int first[4] = {0, 1, 4, 5}, second[4] = {2, 3, 6, 7};
  for (int i = 0; i < 4; ++i)
    out.scales[i] = _mm512_permutexvar_epi16(lanesOf(first[i], second[i]), table);
  __m256 minimums = _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(_mm_srli_si128(packed, 8)));
  out.minimums = _mm256_mul_ps(minimums, _mm256_set1_ps(-f16At(block + 2)));
  out.d = _mm512_set1_ps(f16At(block));
  const __m512i low = _mm512_set1_epi8(0x0f);
  __m512i fifths;
  if constexpr (kFive)
    fifths = _mm512_broadcast_i64x4(_mm256_loadu_si256(reinterpret_cast<const __m256i *>(block + 16)));
  for (int h = 0; h < 2; ++h) {
    __m512i bytes = _mm512_loadu_si512(nibbles + 64 * h);
    out.w[2 * h] = _mm512_and_si512(bytes, low);                          // groups 4h, 4h + 2
    out.w[2 * h + 1] = _mm512_and_si512(_mm512_srli_epi16(bytes, 4), low); // 4h + 1, 4h + 3
    if constexpr (kFive)
      for (int i = 2 * h; i < 2 * h + 2; ++i) {
        // Group first[i]'s bit in the low 32 bytes, second[i]'s in the high ones.
        __m512i bit = _mm512_inserti64x4(_mm512_set1_epi8(char(1 << first[i])),
                                         _mm256_set1_epi8(char(1 << second[i])), 1);
        __mmask64 set = _mm512_test_epi8_mask(fifths, bit);
        out.w[i] = _mm512_mask_add_epi8(out.w[i], set, out.w[i], _mm512_set1_epi8(16));
      }
  }
}

/// Q6_K (210 bytes: 128 of low nibbles, 64 of 2-bit highs, sixteen int8 scales, f16 d): half
/// h's 64 bytes of nibbles hold its elements 0..63 (low nibbles) and 64..127 (high ones),
/// their top bits in bits (0, 1 | 2, 3) and (4, 5 | 6, 7) of its 32 high bytes (the first 32
/// elements of each 64 | the second).
TPC_INT8 inline void decodeQ6K(const uint8_t *block, Decoded &out) {
  const __m512i low = _mm512_set1_epi8(0x0f), two = _mm512_set1_epi8(0x03);
  const __m512i lowShift = lanesOf(0, 2), highShift = lanesOf(4, 6);
  for (int h = 0; h < 2; ++h) {
    __m512i bytes = _mm512_loadu_si512(block + 64 * h);
    __m512i tops = _mm512_broadcast_i64x4(
        _mm256_loadu_si256(reinterpret_cast<const __m256i *>(block + 128 + 32 * h)));
    __m512i first = _mm512_and_si512(_mm512_srlv_epi16(tops, lowShift), two);
    __m512i second = _mm512_and_si512(_mm512_srlv_epi16(tops, highShift), two);
    out.w[2 * h] = _mm512_or_si512(_mm512_and_si512(bytes, low), _mm512_slli_epi16(first, 4));
    out.w[2 * h + 1] = _mm512_or_si512(_mm512_and_si512(_mm512_srli_epi16(bytes, 4), low),
                                       _mm512_slli_epi16(second, 4));
  }
  __m256i scales = _mm256_cvtepi8_epi16(_mm_loadu_si128(reinterpret_cast<const __m128i *>(block + 192)));
  __m512i table = _mm512_castsi256_si512(scales);
  // Lane pair p of w[i] is elements 64 i + 2 p and the next: scale 4 i + p / 8.
  alignas(64) static constexpr int16_t kEighths[32] = {0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1,
                                                       2, 2, 2, 2, 2, 2, 2, 2, 3, 3, 3, 3, 3, 3, 3, 3};
  const __m512i eighths = _mm512_load_si512(kEighths);
  for (int i = 0; i < 4; ++i)
    out.scales[i] = _mm512_permutexvar_epi16(
        _mm512_add_epi16(eighths, _mm512_set1_epi16(short(4 * i))), table);
  out.offsets = _mm512_zextsi256_si512(_mm256_mullo_epi16(scales, _mm256_set1_epi16(-32)));
  out.d = _mm512_set1_ps(f16At(block + 208));
}


/// Rows [first, first + count) of W (rowBytes each) times kX rows of x from `xRow`: y's row
/// xRow + j at y + (xRow + j) out.
template <DType T, int64_t kX>
TPC_INT8 void rowsTimes(const uint8_t *w, size_t rowBytes, int64_t first, int64_t count,
                        const Rounded &x, int64_t xRow, int64_t out, const float *bias, float *y) {
  const int64_t blocks = x.blocks;
  // Row xRow + j's blocks, as plain pointers (the loops store nothing they could alias).
  const int8_t *__restrict q = x.q.data() + xRow * blocks * kBlock;
  const float *__restrict steps = x.d.data() + xRow * blocks;
  const int16_t *__restrict sums16 = x.s16.data() + xRow * blocks * 16;
  const float *__restrict sums32 = x.sums.data() + xRow * blocks * 8;
  for (int64_t r = first; r < first + count; ++r) {
    const uint8_t *row = w + size_t(r) * rowBytes;
    // The minimums' terms in sums of their own, eight lanes wide (their products are eight),
    // so that a block's two multiply-adds do not wait on each other.
    __m512 acc[kX];
    __m256 minimums[kX];
    for (int64_t j = 0; j < kX; ++j) {
      acc[j] = _mm512_setzero_ps();
      minimums[j] = _mm256_setzero_ps();
    }
    for (int64_t b = 0; b < blocks; ++b) {
      Decoded u;
      if constexpr (T == DType::Q6_K)
        decodeQ6K(row + size_t(b) * Layout<T>::kBytes, u);
      else
        decodeK<T>(row + size_t(b) * Layout<T>::kBytes, u);
      for (int64_t j = 0; j < kX; ++j) {
        const int64_t at = j * blocks + b;
        const int8_t *values = q + at * kBlock;
        __m512i sum = _mm512_madd_epi16(
            _mm512_maddubs_epi16(u.w[0], _mm512_loadu_si512(values)), u.scales[0]);
        for (int i = 1; i < 4; ++i)
          sum = _mm512_dpwssd_epi32(
              sum, _mm512_maddubs_epi16(u.w[i], _mm512_loadu_si512(values + 64 * i)),
              u.scales[i]);
        if constexpr (T == DType::Q6_K) // sum_k -32 s_k (sum of x's 16), in the low lanes
          sum = _mm512_dpwssd_epi32(sum, u.offsets, _mm512_maskz_loadu_epi16(0xffff, sums16 + at * 16));
        __m512 scale = _mm512_mul_ps(u.d, _mm512_set1_ps(steps[at]));
        acc[j] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(sum), scale, acc[j]);
        if constexpr (T != DType::Q6_K)
          minimums[j] = _mm256_fmadd_ps(u.minimums, _mm256_loadu_ps(sums32 + at * 8), minimums[j]);
      }
    }
    for (int64_t j = 0; j < kX; ++j) {
      float total = _mm512_reduce_add_ps(acc[j]);
      if constexpr (T != DType::Q6_K) {
        alignas(32) float lanes[8];
        _mm256_store_ps(lanes, minimums[j]);
        for (float lane : lanes)
          total += lane;
      }
      y[(xRow + j) * out + r] = bias ? total + bias[r] : total;
    }
  }
}

/// A 32-element block of W of T (Q8_0, Q4_0, Q4_1, Q5_0, Q5_1, MXFP4) as 32 unsigned
/// integers in element order, its scale d and its offset (what meets d times x's sum over the
/// block: -128 d, -8 d, -16 d, m, or -12 d).
template <DType T>
TPC_INT8 inline __m256i unsigned32(const uint8_t *block, float &d, float &offset) {
  if constexpr (T == DType::MXFP4) { // E2M1's values doubled, -12 to 12: v + 12 is unsigned
    d = mxfp4Scale(block[0]);
    offset = -12 * d;
    const __m128i table = _mm_add_epi8(
        _mm_loadu_si128(reinterpret_cast<const __m128i *>(kMxfp4Values)), _mm_set1_epi8(12));
    const __m128i low = _mm_set1_epi8(0x0f);
    __m128i bytes = _mm_loadu_si128(reinterpret_cast<const __m128i *>(block + 1));
    return _mm256_set_m128i(_mm_shuffle_epi8(table, _mm_and_si128(_mm_srli_epi16(bytes, 4), low)),
                            _mm_shuffle_epi8(table, _mm_and_si128(bytes, low)));
  }
  d = f16At(block);
  if constexpr (T == DType::Q8_0) { // signed int8: w + 128 is unsigned
    offset = -128 * d;
    return _mm256_xor_si256(_mm256_loadu_si256(reinterpret_cast<const __m256i *>(block + 2)),
                            _mm256_set1_epi8(char(0x80)));
  } else {
    // Element i < 16 is byte i's low nibble, 16 + i its high one; bit j of the fifth bits'
    // word is element j's.
    constexpr bool kMin = T == DType::Q4_1 || T == DType::Q5_1;
    constexpr bool kFive = T == DType::Q5_0 || T == DType::Q5_1;
    offset = kMin ? f16At(block + 2) : (kFive ? -16 : -8) * d;
    const uint8_t *nibbles = block + (kMin ? 4 : 2) + (kFive ? 4 : 0);
    __m128i bytes = _mm_loadu_si128(reinterpret_cast<const __m128i *>(nibbles));
    const __m128i low = _mm_set1_epi8(0x0f);
    __m256i values = _mm256_set_m128i(_mm_and_si128(_mm_srli_epi16(bytes, 4), low),
                                      _mm_and_si128(bytes, low));
    if constexpr (kFive) {
      uint32_t fifth;
      std::memcpy(&fifth, block + (kMin ? 4 : 2), sizeof fifth);
      values = _mm256_or_si256(values, _mm256_maskz_mov_epi8(__mmask32(fifth),
                                                             _mm256_set1_epi8(16)));
    }
    return values;
  }
}

/// Many rows of x (a prefill), of every block type: W taken sixteen rows at a time and repacked so that one vector holds four consecutive integers of each of
/// the sixteen rows. vpdpbusd then meets it with four bytes of a row of x broadcast to every
/// lane, and sixteen outputs grow at once: each vector of W loaded serves eight rows of x,
/// each byte of x is loaded once per sixteen rows of W, and the scales apply once per
/// sub-block to sixteen sums. (The one-row kernel above loads 64 bytes of x per 64 products
/// of each row of W: loads bound it here, vpdpbusd with a broadcast runs about 2.5 times as
/// many products a cycle.) The repacking is paid once per sixteen rows of W, whatever the
/// rows of x.
constexpr int64_t kPanelRowsOfW = 16;

/// Sixteen rows of W, repacked: for each block, its runs of four elements (64 or 8), each run
/// as a vector of the sixteen rows' four integers (unsigned: 0 to 63, or 255 for Q8_0); then
/// for each of its sub-blocks the rows' scales (d s, or d) and offsets (what meets d times
/// the sub-block's sum of x: -dmin m for Q4_K and Q5_K, -32 d s for Q6_K, -128 d, -8 d and
/// -16 d for Q8_0, Q4_0 and Q5_0, m for Q4_1 and Q5_1), sixteen floats each. Rows past W's
/// last are zeros.
struct Panel {
  std::vector<uint8_t> values;        // [block][run][16][4]
  std::vector<float> scales, offsets; // [block][sub][16]
};

/// Block `block` of a row of W of T: its integers in element order (unsigned), and its
/// sub-blocks' scales and offsets (Panel's).
template <DType T>
TPC_INT8 inline void naturalBlock(const uint8_t *block, uint8_t *natural, float *scales,
                                  float *offsets) {
  if constexpr (T == DType::Q6_K) {
    Decoded u;
    decodeQ6K(block, u);
    for (int i = 0; i < 4; ++i)
      _mm512_storeu_si512(natural + 64 * i, u.w[i]);
    const float d = f16At(block + 208);
    for (int sub = 0; sub < 16; ++sub) {
      scales[sub] = d * float(int8_t(block[192 + sub]));
      offsets[sub] = -32 * scales[sub];
    }
  } else if constexpr (Layout<T>::kK) {
    Decoded u;
    decodeK<T>(block, u);
    static const int first[4] = {0, 1, 4, 5}, second[4] = {2, 3, 6, 7};
    for (int i = 0; i < 4; ++i) {
      _mm256_storeu_si256(reinterpret_cast<__m256i *>(natural + 32 * first[i]),
                          _mm512_castsi512_si256(u.w[i]));
      _mm256_storeu_si256(reinterpret_cast<__m256i *>(natural + 32 * second[i]),
                          _mm512_extracti64x4_epi64(u.w[i], 1));
    }
    // Sixteen-bit lane 0 of scales[i] is w[i]'s first group's s_g, lane 16 its second's.
    alignas(64) int16_t table[4][32];
    for (int i = 0; i < 4; ++i)
      _mm512_store_si512(table[i], u.scales[i]);
    const float d = f16At(block);
    for (int i = 0; i < 4; ++i) {
      scales[first[i]] = d * float(table[i][0]);
      scales[second[i]] = d * float(table[i][16]);
    }
    _mm256_storeu_ps(offsets, u.minimums);
  } else {
    _mm256_storeu_si256(reinterpret_cast<__m256i *>(natural),
                        unsigned32<T>(block, scales[0], offsets[0]));
  }
}

/// The 16 x 16 matrix of 32-bit lanes in `rows` transposed in place: lane c of rows[i]
/// becomes lane i of rows[c].
TPC_INT8 inline void transpose16(__m512i rows[16]) {
  __m512i pairs[16], quads[16];
  for (int k = 0; k < 8; ++k) { // within each 128 bits: lanes 0, 1 and 2, 3 of two rows
    pairs[2 * k] = _mm512_unpacklo_epi32(rows[2 * k], rows[2 * k + 1]);
    pairs[2 * k + 1] = _mm512_unpackhi_epi32(rows[2 * k], rows[2 * k + 1]);
  }
  for (int k = 0; k < 4; ++k) { // quads[4k + e]: lane 4L + e of rows 4k .. 4k + 3, in 128 bits L
    quads[4 * k] = _mm512_unpacklo_epi64(pairs[4 * k], pairs[4 * k + 2]);
    quads[4 * k + 1] = _mm512_unpackhi_epi64(pairs[4 * k], pairs[4 * k + 2]);
    quads[4 * k + 2] = _mm512_unpacklo_epi64(pairs[4 * k + 1], pairs[4 * k + 3]);
    quads[4 * k + 3] = _mm512_unpackhi_epi64(pairs[4 * k + 1], pairs[4 * k + 3]);
  }
  for (int e = 0; e < 4; ++e) { // the 128-bit pieces L of quads[e], [4 + e], [8 + e], [12 + e]
    __m512i low = _mm512_shuffle_i32x4(quads[e], quads[4 + e], 0x44),
            high = _mm512_shuffle_i32x4(quads[e], quads[4 + e], 0xee),
            low2 = _mm512_shuffle_i32x4(quads[8 + e], quads[12 + e], 0x44),
            high2 = _mm512_shuffle_i32x4(quads[8 + e], quads[12 + e], 0xee);
    rows[e] = _mm512_shuffle_i32x4(low, low2, 0x88);
    rows[4 + e] = _mm512_shuffle_i32x4(low, low2, 0xdd);
    rows[8 + e] = _mm512_shuffle_i32x4(high, high2, 0x88);
    rows[12 + e] = _mm512_shuffle_i32x4(high, high2, 0xdd);
  }
}

/// Rows [first, first + count) of W (count at most sixteen; rowBytes apart) into `panel`: 64
/// elements of each row at a time (a quarter of a K-quant block, or two 32-element blocks).
template <DType T>
TPC_INT8 void repack(const uint8_t *w, size_t rowBytes, int64_t first, int64_t count,
                     int64_t blocks, Panel &panel) {
  using L = Layout<T>;
  constexpr int64_t kAtOnce = L::kElements >= 64 ? 1 : 64 / L::kElements; // blocks per pass
  constexpr int64_t kWidth = L::kElements * kAtOnce, kRuns = L::kElements / 4;
  alignas(64) uint8_t natural[kPanelRowsOfW][kWidth] = {};
  float scales[kPanelRowsOfW][16 * kAtOnce] = {}, offsets[kPanelRowsOfW][16 * kAtOnce] = {};
  for (int64_t b = 0; b < blocks; b += kAtOnce) {
    const int64_t taken = std::min(kAtOnce, blocks - b); // the last pass may hold one block
    for (int64_t k = 0; k < count; ++k)
      for (int64_t i = 0; i < taken; ++i)
        naturalBlock<T>(w + size_t(first + k) * rowBytes + size_t(b + i) * L::kBytes,
                        natural[k] + i * L::kElements, scales[k] + i * L::kSubs,
                        offsets[k] + i * L::kSubs);
    auto *values = reinterpret_cast<__m512i *>(panel.values.data()) + b * kRuns;
    for (int64_t quarter = 0; quarter < kWidth / 64; ++quarter) { // runs 16 quarter ..
      __m512i rows[16];
      for (int k = 0; k < 16; ++k)
        rows[k] = _mm512_load_si512(natural[k] + 64 * quarter);
      transpose16(rows);
      for (int64_t run = 0; run < std::min<int64_t>(16, taken * kRuns); ++run)
        _mm512_storeu_si512(values + 16 * quarter + run, rows[run]);
    }
    float *s = panel.scales.data() + b * L::kSubs * kPanelRowsOfW;
    float *o = panel.offsets.data() + b * L::kSubs * kPanelRowsOfW;
    for (int64_t sub = 0; sub < taken * L::kSubs; ++sub)
      for (int k = 0; k < kPanelRowsOfW; ++k) {
        s[sub * kPanelRowsOfW + k] = scales[k][sub];
        o[sub * kPanelRowsOfW + k] = offsets[k][sub];
      }
  }
}

/// x's rounded rows for the panels, eight rows at a time and block by block: chunk c's block
/// b holds rows 8c .. 8c + 7's block b one after another (zeros past the last row), so that a
/// pass reads every row's bytes at constant offsets from one pointer. (Apart, eight pointers
/// were more than GCC kept in registers: it moved them through vector registers per run.)
struct Interleaved {
  std::vector<int8_t> q;     // [chunk][block][8][elements]
  std::vector<float> steps;  // [chunk][block][8]
  std::vector<float> sums;   // [chunk][block][8][sub-blocks]
};

inline void interleave(const Rounded &x, int64_t rows, int64_t elements, int subs,
                       Interleaved &out) {
  const int64_t chunks = (rows + kRowsOfX - 1) / kRowsOfX, blocks = x.blocks;
  out.q.assign(size_t(chunks * blocks * kRowsOfX * elements), 0);
  out.steps.assign(size_t(chunks * blocks * kRowsOfX), 0.0f);
  out.sums.assign(size_t(chunks * blocks * kRowsOfX * subs), 0.0f);
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t b = 0; b < blocks; ++b) {
      const int64_t at = ((r / kRowsOfX) * blocks + b) * kRowsOfX + r % kRowsOfX;
      std::memcpy(out.q.data() + at * elements, x.q.data() + (r * blocks + b) * elements,
                  size_t(elements));
      out.steps[size_t(at)] = x.d[size_t(r * blocks + b)];
      std::memcpy(out.sums.data() + at * subs, x.sums.data() + (r * blocks + b) * subs,
                  sizeof(float) * size_t(subs));
    }
}

/// The four bytes at `p` as one 32-bit lane.
inline int fourBytes(const int8_t *p) {
  int32_t four;
  std::memcpy(&four, p, sizeof four);
  return four;
}

/// The panel's sixteen rows of W times kX rows of x from `xRow`: outputs [first, first +
/// count) of y's rows xRow + j.
template <DType T, int64_t kX>
TPC_INT8 void panelTimes(const Panel &panel, const Interleaved &x, int64_t blocks, int64_t xRow,
                         int64_t first, int64_t count, int64_t out, const float *bias, float *y) {
  using L = Layout<T>;
  constexpr int kSubs = L::kSubs, kRuns = int(L::kElements / 4) / kSubs;
  const int64_t chunk = xRow / kRowsOfX;
  const int8_t *q = x.q.data() + chunk * blocks * kRowsOfX * L::kElements;
  const float *stepsOf = x.steps.data() + chunk * blocks * kRowsOfX;
  const float *sumsOf = x.sums.data() + chunk * blocks * kRowsOfX * kSubs;
  __m512 acc[kX];
  for (int64_t j = 0; j < kX; ++j)
    acc[j] = _mm512_setzero_ps();
  for (int64_t b = 0; b < blocks; ++b) {
    const auto *values =
        reinterpret_cast<const __m512i *>(panel.values.data()) + b * (L::kElements / 4);
    const float *scales = panel.scales.data() + b * kSubs * kPanelRowsOfW;
    const float *offsets = panel.offsets.data() + b * kSubs * kPanelRowsOfW;
    // Row j's block b at constant offsets from one pointer (Interleaved).
    const int8_t *xs = q + b * kRowsOfX * L::kElements;
    const float *sums = sumsOf + b * kRowsOfX * kSubs, *steps = stepsOf + b * kRowsOfX;
    __m512 block[kX];
    for (int64_t j = 0; j < kX; ++j)
      block[j] = _mm512_setzero_ps();
    for (int sub = 0; sub < kSubs; ++sub) {
      __m512i dots[kX];
      for (int64_t j = 0; j < kX; ++j)
        dots[j] = _mm512_setzero_si512();
      // Unrolled: a loop over runs made GCC copy the eight sums between registers each time.
#pragma GCC unroll 16
      for (int run = sub * kRuns; run < (sub + 1) * kRuns; ++run) {
        const __m512i w = _mm512_loadu_si512(values + run);
        for (int64_t j = 0; j < kX; ++j)
          dots[j] = _mm512_dpbusd_epi32(
              dots[j], w, _mm512_set1_epi32(fourBytes(xs + j * L::kElements + 4 * run)));
      }
      const __m512 scale = _mm512_loadu_ps(scales + sub * kPanelRowsOfW),
                   offset = _mm512_loadu_ps(offsets + sub * kPanelRowsOfW);
      for (int64_t j = 0; j < kX; ++j) {
        block[j] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(dots[j]), scale, block[j]);
        acc[j] = _mm512_fmadd_ps(offset, _mm512_set1_ps(sums[j * kSubs + sub]), acc[j]);
      }
    }
    for (int64_t j = 0; j < kX; ++j)
      acc[j] = _mm512_fmadd_ps(block[j], _mm512_set1_ps(steps[j]), acc[j]);
  }
  const __mmask16 lanes = __mmask16((1u << count) - 1);
  const __m512 biases = bias ? _mm512_maskz_loadu_ps(lanes, bias + first) : _mm512_setzero_ps();
  for (int64_t j = 0; j < kX; ++j)
    _mm512_mask_storeu_ps(y + (xRow + j) * out + first, lanes, _mm512_add_ps(acc[j], biases));
}

/// Calls pass(std::integral_constant<int64_t, n>) for n (1 to kRowsOfX) rows of x.
template <class Pass> TPC_INT8 inline void forRowsOfX(int64_t n, Pass &&pass) {
  static_assert(kRowsOfX == 8, "one instantiation per row count");
  switch (n) {
  case 1: return pass(std::integral_constant<int64_t, 1>{});
  case 2: return pass(std::integral_constant<int64_t, 2>{});
  case 3: return pass(std::integral_constant<int64_t, 3>{});
  case 4: return pass(std::integral_constant<int64_t, 4>{});
  case 5: return pass(std::integral_constant<int64_t, 5>{});
  case 6: return pass(std::integral_constant<int64_t, 6>{});
  case 7: return pass(std::integral_constant<int64_t, 7>{});
  default: return pass(std::integral_constant<int64_t, 8>{});
  }
}

/// linear through panels (above): sixteen rows of W repacked at a time, then met by every
/// eight rows of x.
template <DType T>
TPC_INT8 void panelsOf(const Rounded &rounded, int64_t rows, int64_t in, const uint8_t *w,
                       int64_t out, const float *bias, float *y) {
  using L = Layout<T>;
  const int64_t blocks = in / L::kElements;
  thread_local Interleaved x;
  interleave(rounded, rows, L::kElements, L::kSubs, x);
  const size_t rowBytes = size_t(blocks) * L::kBytes;
  thread_local Panel panel;
  panel.values.resize(size_t(blocks * L::kElements) * kPanelRowsOfW);
  panel.scales.resize(size_t(blocks) * L::kSubs * kPanelRowsOfW);
  panel.offsets.resize(panel.scales.size());
  for (int64_t first = 0; first < out; first += kPanelRowsOfW) {
    const int64_t count = std::min(kPanelRowsOfW, out - first);
    repack<T>(w, rowBytes, first, count, blocks, panel); // rows past W's last: zeros
    for (int64_t xRow = 0; xRow < rows; xRow += kRowsOfX)
      forRowsOfX(std::min(kRowsOfX, rows - xRow), [&](auto kX) {
        panelTimes<T, decltype(kX)::value>(panel, x, blocks, xRow, first, count, out, bias, y);
      });
  }
}

template <DType T>
TPC_INT8 void linearOf(const float *x, int64_t rows, int64_t in, const void *w, int64_t out,
                       const float *bias, float *y) {
  using L = Layout<T>;
  thread_local Rounded rounded;
  const bool panels = rows > kRowsOfX; // else a K type: rounds() sends the others elsewhere
  // The K types' one-row kernel meets x in the order W's nibbles come (see above); the others
  // and the panels in order.
  roundRows<L::kElements, L::kSubs>(x, rows, in, L::kK && T != DType::Q6_K && !panels, rounded);
  if (panels)
    return panelsOf<T>(rounded, rows, in, static_cast<const uint8_t *>(w), out, bias, y);
  if constexpr (!L::kK) { // not sent here (rounds()): say so loudly rather than leave y
    std::fill(y, y + rows * out, NAN);
    return;
  }
  const size_t rowBytes = size_t(in / L::kElements) * L::kBytes;
  const int64_t panel = std::max<int64_t>(1, int64_t(kPanelBytes / rowBytes));
  const auto *base = static_cast<const uint8_t *>(w);
  for (int64_t first = 0; first < out; first += panel) {
    const int64_t count = std::min(panel, out - first);
    for (int64_t xRow = 0; xRow < rows; xRow += kRowsOfX)
      forRowsOfX(std::min(kRowsOfX, rows - xRow), [&](auto kX) {
        rowsTimes<T, decltype(kX)::value>(base, rowBytes, first, count, rounded, xRow, out,
                                           bias, y);
      });
  }
}

#pragma GCC diagnostic pop
#undef TPC_INT8

bool cpuHasIt() {
  static const bool has = __builtin_cpu_supports("avx512f") &&
                          __builtin_cpu_supports("avx512bw") &&
                          __builtin_cpu_supports("avx512vl") &&
                          __builtin_cpu_supports("avx512vnni");
  return has;
}

} // namespace

bool takes(DType type) {
  return visitBlocks(type, [](auto) {}) && cpuHasIt();
}

bool rounds(DType type, int64_t rows) {
  bool k = false;
  return visitBlocks(type, [&](auto block) { k = Layout<decltype(block)::value>::kK; }) &&
         cpuHasIt() && (k || rows > kRowsOfX);
}

void linear(const float *x, int64_t rows, int64_t in, const void *w, DType type, int64_t out,
            const float *bias, float *y) {
  visitBlocks(type, [&](auto block) {
    linearOf<decltype(block)::value>(x, rows, in, w, out, bias, y);
  });
}

#else // not x86-64: the exact kernels only

bool takes(DType) { return false; }
bool rounds(DType, int64_t) { return false; }
void linear(const float *, int64_t, int64_t, const void *, DType, int64_t, const float *,
            float *) {}

#endif

} // namespace tpcrt::cpu::int8
