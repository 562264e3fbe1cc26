// linear's one-row product of the K types in integers (limbs.cpp): each element of x split
// into two 16-bit limbs that meet W's integers, its sub-block scales applied, with VNNI.
// Internal to runtime/cpu. Plain C++17.
#ifndef TPCRT_CPU_LIMBS_H
#define TPCRT_CPU_LIMBS_H

#include "tpcrt/dtype.h"

#include <cstdint>

namespace tpcrt::cpu::limbs {

/// Whether this CPU has the limbs kernels for W of `type`: Q4_K, Q5_K and Q6_K, with AVX-512
/// F, BW, VL and VNNI.
bool takes(DType type);

/// Whether the rule picks the limbs kernels over the fp32 ones (matmul.cpp's) on a CPU of
/// this vendor (cpuid's twelve characters) and family (cpuid's, extended family included):
/// where they were measured faster, AMD's family 25 (Zen 4). Elsewhere the fp32 kernels stay.
bool preferredOn(const char *vendor, int family);
/// preferredOn for the running CPU.
bool preferred();

/// y = W x (+ bias) for one row x of `in` (whole 256-element blocks) and W [out, in] of
/// `type` (takes() holds): each element of x moved by at most 2^-29 of its block's largest
/// |x| (1/32 of half an fp32 step of that largest; the elements within 2^5 of it not at all),
/// the products summed exactly in int32 over each block of W, then scaled in fp32. False, and
/// y untouched, where a block of x is not finite or its largest |x| lies outside
/// [2^-64, 2^64]: the caller's fp32 kernels answer then.
bool gemv(const float *x, int64_t in, const void *w, DType type, int64_t out, const float *bias,
          float *y);

} // namespace tpcrt::cpu::limbs

#endif // TPCRT_CPU_LIMBS_H
