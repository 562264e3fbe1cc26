// linear's opt-in int8 path (--int8-activations; int8.cpp): quantized W of the K types met by
// x rounded to int8, as llama.cpp's dot products meet it. Internal to runtime/cpu. Plain C++17.
#ifndef TPCRT_CPU_INT8_H
#define TPCRT_CPU_INT8_H

#include "tpcrt/dtype.h"

#include <cstdint>
#include <string>

namespace tpcrt::cpu::int8 {

/// Whether the int8 path reads W of `type` on this CPU: Q4_K, Q5_K and Q6_K, with AVX-512
/// F, BW and VNNI.
bool takes(DType type);

/// y[rows, out] = x'[rows, in] @ w[out, in]^T (+ bias), w of a type takes() holds, `in` whole
/// blocks of 256, where x' is x with each block of 256 elements rounded to the nearest of
/// 255 steps of max |x| / 127 (llama.cpp's Q8_K): an element moves by at most half a step.
/// A block holding an infinity or NaN makes its row's results NaN.
void linear(const float *x, int64_t rows, int64_t in, const void *w, DType type, int64_t out,
            const float *bias, float *y);

} // namespace tpcrt::cpu::int8

#endif // TPCRT_CPU_INT8_H
