// A K-quant block's group of 32 integers as 32 bytes, in element order: what matmul.cpp's fp32
// kernels widen to fp32 and limbs.cpp's multiply by their scales in 16 bits; and Q4_K's and
// Q5_K's packed scales as bytes. Internal to runtime/cpu, for x86-64 only (AVX2, AVX-512 BW
// and VL); callers' targets include these.
#ifndef TPCRT_CPU_GROUPS_H
#define TPCRT_CPU_GROUPS_H

#include <cstdint>

#include <immintrin.h>

namespace tpcrt::cpu::groups {

#define TPC_GROUPS __attribute__((target("avx512f,avx512bw,avx512vl,avx2")))

TPC_GROUPS inline __m256i bytes32(const uint8_t *p) {
  return _mm256_loadu_si256(reinterpret_cast<const __m256i *>(p));
}

/// Q5_K's group g (0..7) as unsigned bytes, 0..31: Q4_K's nibbles (group 2c the low nibbles of
/// bytes 48 + 32c ..., 2c + 1 the high ones) with a fifth bit each, bit g of bytes 16 .. 47
/// (byte l for element l). The bit is a byte mask: half the instructions of widening each
/// byte first and shifting its bits as a 32-bit lane.
TPC_GROUPS inline __m256i q5k(const uint8_t *block, int g) {
  __m256i bytes = bytes32(block + 48 + 32 * (g / 2));
  __m256i nibbles =
      _mm256_and_si256(g % 2 ? _mm256_srli_epi16(bytes, 4) : bytes, _mm256_set1_epi8(0x0f));
  __mmask32 fifth = _mm256_test_epi8_mask(bytes32(block + 16), _mm256_set1_epi8(char(1 << g)));
  return _mm256_mask_add_epi8(nibbles, fifth, nibbles, _mm256_set1_epi8(16));
}

/// Q6_K's group g = 4h + t (half h, quarter t; 0..7) as signed bytes, -32..31: the low (t < 2)
/// or high nibbles of bytes 64h + 32 (t % 2) ..., bits 2t and 2t + 1 of bytes 128 + 32h ...
/// on top, less 32. Its first sixteen elements take scale 2g, the others 2g + 1.
TPC_GROUPS inline __m256i q6k(const uint8_t *block, int g) {
  const int h = g / 4, t = g % 4;
  __m256i bytes = bytes32(block + 64 * h + 32 * (t % 2)), highs = bytes32(block + 128 + 32 * h);
  __m256i nibbles =
      _mm256_and_si256(t < 2 ? bytes : _mm256_srli_epi16(bytes, 4), _mm256_set1_epi8(0x0f));
  // Bits 2t and 2t + 1 of the high byte moved to bits 4 and 5 (a 16-bit lane's shift moves
  // bits across its two bytes; the mask keeps each byte's own).
  __m256i top = t == 0   ? _mm256_slli_epi16(highs, 4)
                : t == 1 ? _mm256_slli_epi16(highs, 2)
                : t == 2 ? highs
                         : _mm256_srli_epi16(highs, 2);
  return _mm256_sub_epi8(_mm256_or_si256(nibbles, _mm256_and_si256(top, _mm256_set1_epi8(0x30))),
                         _mm256_set1_epi8(32));
}

/// Q4_K's and Q5_K's twelve bytes of packed scales and minimums (`packed`, at byte 4 of the
/// block; rows.h's kScales says the layout) as sixteen bytes, s_0..7 then m_0..7: kScales's
/// answer in a vector register, for a few instructions where kScales takes a dozen scalar
/// ones and two moves into vectors. Reads 16 bytes at `packed` (the block goes on).
TPC_GROUPS inline __m128i kScalesAndMinimums(const uint8_t *packed) {
  const __m128i raw = _mm_loadu_si128(reinterpret_cast<const __m128i *>(packed));
  // Bytes 0..3 s_0..3 and 8..11 m_0..3 from bytes 0..3 and 4..7; bytes 4..7 and 12..15 take
  // the low and the high nibbles of bytes 8..11, and the top two bits of bytes 0..3 and 4..7.
  const __m128i low = _mm_shuffle_epi8(raw, _mm_setr_epi8(0, 1, 2, 3, 8, 9, 10, 11, 4, 5, 6, 7,
                                                          8, 9, 10, 11));
  const __m128i top = _mm_shuffle_epi8(raw, _mm_setr_epi8(-1, -1, -1, -1, 0, 1, 2, 3, -1, -1,
                                                          -1, -1, 4, 5, 6, 7));
  const __m128i bits = _mm_and_si128(
      _mm_blend_epi16(low, _mm_srli_epi16(low, 4), 0xc0), // high nibbles into bytes 12..15
      _mm_setr_epi8(63, 63, 63, 63, 15, 15, 15, 15, 63, 63, 63, 63, 15, 15, 15, 15));
  return _mm_or_si128(bits, _mm_and_si128(_mm_srli_epi16(top, 2), _mm_set1_epi8(0x30)));
}

#undef TPC_GROUPS

} // namespace tpcrt::cpu::groups

#endif // TPCRT_CPU_GROUPS_H
