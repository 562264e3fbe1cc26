// What the CPU kernels share (kernels.cpp, matmul.cpp): loops over rows of floats. Internal to
// runtime/cpu. Plain C++17.
#ifndef TPCRT_CPU_ROWS_H
#define TPCRT_CPU_ROWS_H

#include <cstdint>

namespace tpcrt::cpu {

/// The dot product of two rows of `n` floats, eight running sums wide (so it vectorizes).
inline float dot(const float *a, const float *b, int64_t n) {
  float lanes[8] = {};
  int64_t i = 0;
  for (; i + 8 <= n; i += 8)
    for (int j = 0; j < 8; ++j)
      lanes[j] += a[i + j] * b[i + j];
  float total = 0;
  for (float lane : lanes)
    total += lane;
  for (; i < n; ++i)
    total += a[i] * b[i];
  return total;
}

} // namespace tpcrt::cpu

#endif // TPCRT_CPU_ROWS_H
