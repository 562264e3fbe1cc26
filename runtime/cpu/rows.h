// What the CPU kernels share (kernels.cpp, matmul.cpp, int8.cpp): loops over rows of floats,
// the block types by type, Q4_K's and Q5_K's packed scales. Internal to runtime/cpu. Plain
// C++17.
#ifndef TPCRT_CPU_ROWS_H
#define TPCRT_CPU_ROWS_H

#include "tpcrt/dtype.h"

#include <cstdint>
#include <cstring>
#include <type_traits>

namespace tpcrt::cpu {

/// Whether the AVX-512 kernels may run: the CPU has AVX-512 F and BW, and no test switched
/// them off (detail::forceAvx2Kernels; matmul.cpp).
bool avx512Allowed();

/// `count` elements of `type` at `in` (whole blocks of a block type) as fp32, as widen()
/// gives them bit for bit, vectorized where the CPU allows (matmul.cpp).
void widenFast(const void *in, DType type, float *out, size_t count);

/// A bf16 element read where it lies: its fp32 value is its bits shifted up (so loops over
/// it vectorize).
struct Bf16 {
  uint16_t bits;
};
inline float fp32(float x) { return x; }
inline float fp32(Bf16 x) { return bf16ToFloat(x.bits); }

/// The dot product of a row of `n` floats and one of `n` E (float or Bf16), eight running
/// sums wide (so it vectorizes).
template <class E> inline float dot(const float *a, const E *b, int64_t n) {
  float lanes[8] = {};
  int64_t i = 0;
  for (; i + 8 <= n; i += 8)
    for (int j = 0; j < 8; ++j)
      lanes[j] += a[i + j] * fp32(b[i + j]);
  float total = 0;
  for (float lane : lanes)
    total += lane;
  for (; i < n; ++i)
    total += a[i] * fp32(b[i]);
  return total;
}

/// MXFP4's E2M1 values doubled (what a nibble indexes: 8 is a zero, not -0) and the scale of
/// its E8M0 byte `e`, halved to match: 2^(e - 128), exact for every e; for e of 2 and more a
/// float whose exponent field is e - 1, below that a subnormal. Once a block, so no call.
constexpr int8_t kMxfp4Values[16] = {0, 1, 2, 3, 4, 6, 8, 12, 0, -1, -2, -3, -4, -6, -8, -12};
inline float mxfp4Scale(uint8_t e) {
  if (e < 2)
    return e ? 0x1p-127f : 0x1p-128f;
  uint32_t bits = uint32_t(e - 1) << 23;
  float scale;
  std::memcpy(&scale, &bits, sizeof scale);
  return scale;
}

/// visit(Block<T>{}) for the block type `type`, and true; false for a float type. The cases
/// are types.def's held types, so a held block type without its kernels' traits does not
/// compile.
template <DType T> using Block = std::integral_constant<DType, T>;
template <class Visit> bool visitBlocks(DType type, Visit &&visit) {
  switch (type) {
#define TPC_TYPE(NAME, ID, ELEMENTS, BYTES, READS)
#define TPC_HELD_TYPE(NAME, ID, ELEMENTS, BYTES, READS)                                         \
  case DType::NAME:                                                                            \
    if constexpr (ELEMENTS > 1)                                                                \
      return visit(Block<DType::NAME>{}), true;                                                \
    else                                                                                       \
      return false;
#include "tpcrt/types.def"
#undef TPC_TYPE
#undef TPC_HELD_TYPE
  }
  return false;
}

/// The next rows of a W in blocks (from row `next`) requested a cache line at a time, at the
/// pace the current rows are read: through(bytes) after the current rows' first `bytes` bytes
/// (all of them together) requests as many of the next rows'. The hardware's prefetchers lose
/// track of several rows read side by side; this keeps the next ones coming.
struct NextRows {
  const uint8_t *w;
  size_t begin, totalBytes, ahead; // the next rows' first byte, W's size, the next line
  NextRows(const uint8_t *w, size_t rowBytes, size_t totalBytes, int64_t next)
      : w(w), begin(size_t(next) * rowBytes), totalBytes(totalBytes), ahead(begin / 64 * 64) {}
  void through(size_t bytes) {
    size_t until = begin + bytes < totalBytes ? begin + bytes : totalBytes;
    for (; ahead < until; ahead += 64)
      __builtin_prefetch(w + ahead, 0, 3); // prefetcht0
  }
};

/// Q4_K's and Q5_K's twelve bytes of 6-bit scales and minimums (at block + 4) as eight bytes
/// each: s_0 .. s_7 in `scales`, m_0 .. m_7 in `minimums`, byte g at bits 8g. Bytes 0..3 hold
/// s_0..3 in their low six bits, bytes 4..7 m_0..3 likewise, and bytes 8..11 the low four bits
/// of s_4..7 (low nibbles) and m_4..7 (high nibbles), whose top two bits are the top two of
/// bytes 0..3 (for s) and 4..7 (for m); byte j of (word >> 2) & 0x30.. is bits 6-7 of byte j.
inline void kScales(const uint8_t *packed, uint64_t &scales, uint64_t &minimums) {
  uint32_t word[3];
  std::memcpy(word, packed, sizeof word);
  uint32_t s0 = word[0] & 0x3f3f3f3fu, m0 = word[1] & 0x3f3f3f3fu;
  uint32_t s4 = (word[2] & 0x0f0f0f0fu) | ((word[0] >> 2) & 0x30303030u);
  uint32_t m4 = ((word[2] >> 4) & 0x0f0f0f0fu) | ((word[1] >> 2) & 0x30303030u);
  scales = uint64_t(s0) | uint64_t(s4) << 32;
  minimums = uint64_t(m0) | uint64_t(m4) << 32;
}

} // namespace tpcrt::cpu

#endif // TPCRT_CPU_ROWS_H
