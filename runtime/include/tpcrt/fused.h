// Helpers of the loops tpc generates for fused units on the CPU target (tp.fused, when the
// target is asked to fuse): the same straight-line code the CUDA target puts in a kernel,
// with `acc` double as in the runtime's own kernels, so a fused chain computes what the
// separate calls would, less the float rounding between them.
#ifndef TPCRT_FUSED_H
#define TPCRT_FUSED_H

#include <cmath>
#include <cstdint>

namespace tpcrt::fused {

using acc = double;

inline acc load(const float *p, int64_t i) { return p[i]; }
inline void store(float *p, int64_t i, acc v) { p[i] = float(v); }

inline acc silu(acc v) { return v / (1.0 + std::exp(-v)); }
inline acc gelu(acc v) { return 0.5 * v * (1.0 + std::erf(v / std::sqrt(2.0))); }
inline acc geluTanh(acc v) {
  return 0.5 * v * (1.0 + std::tanh(0.7978845608028654 * (v + 0.044715 * v * v * v)));
}
inline acc softcap(acc v, acc cap) { return cap * std::tanh(v / cap); }
inline acc cosine(acc v) { return std::cos(v); }
inline acc sine(acc v) { return std::sin(v); }

} // namespace tpcrt::fused

#endif // TPCRT_FUSED_H
