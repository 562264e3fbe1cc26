// The generated weights' formula, in one place for the CPU and the CUDA backend: element i of
// a parameter is a hash of (seed, name, i), so any rank generates its slice alone and every tp
// sees the same model.
#ifndef TPCRT_RANDOM_WEIGHT_H
#define TPCRT_RANDOM_WEIGHT_H

#include <cstdint>
#include <string>

#ifdef __CUDACC__
#define TPCRT_HOST_DEVICE __host__ __device__
#else
#define TPCRT_HOST_DEVICE
#endif

namespace tpcrt {

TPCRT_HOST_DEVICE inline uint64_t splitmix(uint64_t x) { // splitmix64's finalizer
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

/// What a parameter's elements are drawn from: its seed and name, hashed once.
struct RandomWeightKey {
  uint64_t key;
  bool norm; // norm weights sit near 1, everything else near 0
};

inline RandomWeightKey randomWeightKey(uint64_t seed, const std::string &name) {
  uint64_t h = 1469598103934665603ull; // FNV-1a of the name
  for (unsigned char c : name)
    h = (h ^ c) * 1099511628211ull;
  return {splitmix(seed ^ h), name.find("norm") != std::string::npos};
}

TPCRT_HOST_DEVICE inline float randomWeightAt(RandomWeightKey k, uint64_t index) {
  uint64_t bits = splitmix(k.key + index);
#ifdef __CUDA_ARCH__
  // The same roundings as the host: nvcc would fuse these multiply-adds.
  float unit = __fadd_rn(__fmul_rn(__fdiv_rn(float(bits >> 40), float(1ull << 24)), 2.0f), -1.0f);
  return k.norm ? __fadd_rn(1.0f, __fmul_rn(0.1f, unit)) : __fmul_rn(0.05f, unit);
#else
  float unit = float(bits >> 40) / float(1ull << 24) * 2.0f - 1.0f; // [-1, 1)
  return k.norm ? 1.0f + 0.1f * unit : 0.05f * unit;
#endif
}

} // namespace tpcrt

#endif // TPCRT_RANDOM_WEIGHT_H
