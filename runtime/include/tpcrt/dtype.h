// How weights are stored: the element types a checkpoint holds and a backend keeps (fp32,
// bf16, f16), their sizes and names, and the exact conversions between them and fp32. Plain
// C++17, shared by the core, the loader and the backends.
#ifndef TPCRT_DTYPE_H
#define TPCRT_DTYPE_H

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <optional>
#include <string>

namespace tpcrt {

/// A weight's element type as stored. Block-quantized types join here, with their bytes per
/// block.
enum class DType { F32, BF16, F16 };

inline size_t dtypeBytes(DType type) { return type == DType::F32 ? 4 : 2; }
/// "f32", "bf16", "f16": the names the compiler's `storage` attribute and --weights-dtype use.
const char *dtypeName(DType type);
/// The type a name spells (as dtypeName, or safetensors' F32, BF16, F16); none for others.
std::optional<DType> parseDType(const std::string &name);

/// bf16 is the top half of an fp32: widening is exact.
inline float bf16ToFloat(uint16_t bits) {
  uint32_t wide = uint32_t(bits) << 16;
  float value;
  std::memcpy(&value, &wide, sizeof value);
  return value;
}
/// Round to nearest, ties to even, as torch's .to(torch.bfloat16); a NaN stays a (quiet) NaN.
inline uint16_t floatToBf16(float value) {
  uint32_t bits;
  std::memcpy(&bits, &value, sizeof bits);
  if ((bits & 0x7fffffffu) > 0x7f800000u)
    return uint16_t((bits >> 16) | 0x40);
  bits += 0x7fffu + ((bits >> 16) & 1);
  return uint16_t(bits >> 16);
}
/// IEEE half to fp32, exact (subnormals, infinities and NaNs included).
float f16ToFloat(uint16_t bits);
/// fp32 to IEEE half, round to nearest even (overflow to infinity), as torch's .half().
uint16_t floatToF16(float value);

/// `count` values of `type` at `in` as fp32 (exact).
void widen(const void *in, DType type, float *out, size_t count);
/// `count` fp32 values stored as `type` at `out` (rounded to nearest even).
void narrow(const float *in, DType type, void *out, size_t count);

} // namespace tpcrt

#endif // TPCRT_DTYPE_H
