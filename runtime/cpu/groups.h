// A K-quant block's group of 32 integers as 32 bytes, in element order: what matmul.cpp's fp32
// kernels widen to fp32 and limbs.cpp's multiply by their scales in 16 bits. Internal to
// runtime/cpu, for x86-64 only (AVX2, AVX-512 BW and VL); callers' targets include these.
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

#undef TPC_GROUPS

} // namespace tpcrt::cpu::groups

#endif // TPCRT_CPU_GROUPS_H
