// Weight element types and their conversions (tpcrt/dtype.h).
#include "tpcrt/dtype.h"

#include "tpcrt/gguf.h"

#include <array>
#include <iterator>
#include <stdexcept>

namespace tpcrt {

namespace {

constexpr size_t kDTypes = std::size(kDTypeLines);

/// types.def's names in lower case, as the storage attribute and --weights-dtype spell them.
const std::string *lowerNames() {
  static const auto names = [] {
    std::array<std::string, kDTypes> lower;
    for (size_t i = 0; i < kDTypes; ++i)
      for (const char *c = kDTypeLines[i].ggmlName; *c; ++c)
        lower[i] += char(*c >= 'A' && *c <= 'Z' ? *c - 'A' + 'a' : *c);
    return lower;
  }();
  return names.data();
}

} // namespace

const char *dtypeName(DType type) {
  return size_t(type) < kDTypes ? lowerNames()[size_t(type)].c_str() : "?";
}

std::optional<DType> parseDType(const std::string &name) {
  for (size_t i = 0; i < kDTypes; ++i)
    if (name == lowerNames()[i] || name == kDTypeLines[i].ggmlName)
      return DType(i);
  return std::nullopt;
}

float f16ToFloat(uint16_t bits) {
  uint32_t sign = uint32_t(bits & 0x8000) << 16, exponent = (bits >> 10) & 0x1f,
           mantissa = bits & 0x3ff, out;
  if (exponent == 0x1f) { // infinity or NaN
    out = sign | 0x7f800000u | (mantissa << 13);
  } else if (exponent != 0) {
    out = sign | ((exponent + 112) << 23) | (mantissa << 13);
  } else if (mantissa == 0) {
    out = sign;
  } else { // subnormal: normalize
    int shift = 0;
    while (!(mantissa & 0x400)) {
      mantissa <<= 1;
      ++shift;
    }
    out = sign | (uint32_t(113 - shift) << 23) | ((mantissa & 0x3ff) << 13);
  }
  float value;
  std::memcpy(&value, &out, sizeof value);
  return value;
}

uint16_t floatToF16(float value) {
  uint32_t bits;
  std::memcpy(&bits, &value, sizeof bits);
  uint16_t sign = uint16_t((bits >> 16) & 0x8000);
  uint32_t magnitude = bits & 0x7fffffffu;
  if (magnitude > 0x7f800000u) // NaN: keep it quiet and a NaN
    return uint16_t(sign | 0x7e00 | ((magnitude >> 13) & 0x3ff));
  if (magnitude >= 0x477ff000u) // rounds to 65520 or more: infinity
    return uint16_t(sign | 0x7c00);
  if (magnitude < 0x38800000u) { // below the smallest normal half: a subnormal or zero
    if (magnitude < 0x33000000u) // below half the smallest subnormal: zero
      return sign;
    uint32_t exponent = magnitude >> 23, mantissa = (magnitude & 0x7fffff) | 0x800000;
    uint32_t shift = 126 - exponent; // 14..24: the value is mantissa >> shift subnormal units
    uint32_t half = mantissa >> shift, rest = mantissa & ((1u << shift) - 1),
             midpoint = 1u << (shift - 1);
    if (rest > midpoint || (rest == midpoint && (half & 1)))
      ++half;
    return uint16_t(sign | half);
  }
  // Normal: rebias the exponent and round the 13 dropped mantissa bits to nearest even (a
  // carry into the exponent is the right answer, up to infinity).
  uint32_t rebased = magnitude - (uint32_t(112) << 23);
  rebased += 0xfffu + ((rebased >> 13) & 1);
  return uint16_t(sign | (rebased >> 13));
}

void widen(const void *in, DType type, float *out, size_t count) {
  if (type == DType::F32) {
    std::memcpy(out, in, count * sizeof(float));
    return;
  }
  if (isQuantized(type)) {
    std::string error; // none: a held type is one tpc reads (types.def), counts whole blocks
    dequantize(ggmlTypeOf(type), in, int64_t(count), out, error);
    return;
  }
  const auto *halves = static_cast<const uint16_t *>(in);
  if (type == DType::BF16)
    for (size_t i = 0; i < count; ++i)
      out[i] = bf16ToFloat(halves[i]);
  else
    for (size_t i = 0; i < count; ++i)
      out[i] = f16ToFloat(halves[i]);
}

void narrow(const float *in, DType type, void *out, size_t count) {
  if (type == DType::F32) {
    std::memcpy(out, in, count * sizeof(float));
    return;
  }
  if (isQuantized(type)) {
    std::string error;
    if (!quantize(ggmlTypeOf(type), in, int64_t(count), out, error))
      throw std::invalid_argument(error);
    return;
  }
  auto *halves = static_cast<uint16_t *>(out);
  if (type == DType::BF16)
    for (size_t i = 0; i < count; ++i)
      halves[i] = floatToBf16(in[i]);
  else
    for (size_t i = 0; i < count; ++i)
      halves[i] = floatToF16(in[i]);
}

} // namespace tpcrt
