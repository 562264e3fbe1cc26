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

/// A weight's element type as stored: a float type, or one of ggml's block-quantized types
/// kept as the GGUF file stores them (runs of `dtypeBlockElements` elements in
/// `dtypeBlockBytes` bytes, laid out as ggml's block_q8_0, block_q4_0 and so on; a row of a
/// matrix is whole blocks). The types are tpcrt/types.def's held ones.
enum class DType {
#define TPC_TYPE(NAME, ID, ELEMENTS, BYTES, READS)
#define TPC_HELD_TYPE(NAME, ID, ELEMENTS, BYTES, READS) NAME,
#include "tpcrt/types.def"
#undef TPC_TYPE
#undef TPC_HELD_TYPE
};

/// types.def's line of each DType, in DType's order, so that the size of a type is read
/// from the one table (inline: the kernels ask it per matrix).
struct DTypeLine {
  const char *ggmlName;
  int64_t blockElements;
  size_t blockBytes;
};
inline constexpr DTypeLine kDTypeLines[] = {
#define TPC_TYPE(NAME, ID, ELEMENTS, BYTES, READS)
#define TPC_HELD_TYPE(NAME, ID, ELEMENTS, BYTES, READS) {#NAME, ELEMENTS, BYTES},
#include "tpcrt/types.def"
#undef TPC_TYPE
#undef TPC_HELD_TYPE
};

/// Elements per block: 1 for the float types.
inline int64_t dtypeBlockElements(DType type) { return kDTypeLines[size_t(type)].blockElements; }
/// Bytes per block (of one element for the float types).
inline size_t dtypeBlockBytes(DType type) { return kDTypeLines[size_t(type)].blockBytes; }
/// A block type: one whose blocks hold more than one element.
inline bool isQuantized(DType type) { return dtypeBlockElements(type) > 1; }
/// The bytes of one element of a float type (of a quantized type: of its block).
inline size_t dtypeBytes(DType type) { return dtypeBlockBytes(type); }
/// The bytes of `count` elements, `count` a multiple of the block size.
inline uint64_t dtypeBytesFor(DType type, int64_t count) {
  return uint64_t(count / dtypeBlockElements(type)) * dtypeBlockBytes(type);
}
/// "f32", "f16", "bf16", "q8_0", ...: types.def's names in lower case, as the compiler's
/// `storage` attribute and --weights-dtype spell them.
const char *dtypeName(DType type);
/// The type a name spells (as dtypeName, or safetensors' and GGUF's F32, BF16, F16, Q8_0,
/// Q4_K, ...); none for others.
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

/// `count` values of `type` at `in` as fp32 (exact; a quantized type's blocks dequantized bit
/// for bit as gguf-py does, `count` a multiple of its block size).
void widen(const void *in, DType type, float *out, size_t count);
/// `count` fp32 values stored as `type` at `out`: rounded to nearest even, or quantized into
/// Q8_0 or Q4_0 blocks as llama.cpp's reference quantizers do (--quantize; `count` whole
/// blocks). Throws std::invalid_argument for the other block types, which are only ever
/// loaded as a file stores them.
void narrow(const float *in, DType type, void *out, size_t count);

} // namespace tpcrt

#endif // TPCRT_DTYPE_H
