// linear's opt-in int8 path (--int8-activations; int8.cpp): W held in ggml's block types met
// by x rounded to int8, as llama.cpp's dot products meet it. Internal to runtime/cpu. Plain
// C++17.
#ifndef TPCRT_CPU_INT8_H
#define TPCRT_CPU_INT8_H

#include "tpcrt/dtype.h"

#include <cstdint>
#include <string>

namespace tpcrt::cpu::int8 {

/// Whether the int8 path reads W of `type` on this CPU: every block type tpc holds (Q8_0,
/// Q4_0, Q4_1, Q5_0, Q5_1, Q4_K, Q5_K, Q6_K), with AVX-512 F, BW, VL and VNNI.
bool takes(DType type);

/// Whether linear of `rows` rows of x and W of `type` goes through the int8 path: the K types
/// always; the 32-element types only for more than eight rows (a prefill): their exact
/// one-row kernels are faster than an int8 one was (int8.cpp).
bool rounds(DType type, int64_t rows);

/// y[rows, out] = x'[rows, in] @ w[out, in]^T (+ bias), for a type and row count rounds()
/// holds (else y is all NaN), `in` whole blocks of the type, where x' is x with each block (256 elements for the K types, as llama.cpp's
/// Q8_K; 32 for the others, as its Q8_0) rounded to the nearest of 255 steps of max |x| / 127:
/// an element moves by at most half a step.
/// A block holding an infinity or NaN makes its row's results NaN.
void linear(const float *x, int64_t rows, int64_t in, const void *w, DType type, int64_t out,
            const float *bias, float *y);

} // namespace tpcrt::cpu::int8

#endif // TPCRT_CPU_INT8_H
