// GGUF reading (llama.cpp's format): a file from elsewhere, so every count,
// length, offset and size in it is checked against the limits and the file's
// size before anything is allocated or read by it, and errors name the field.
// The header, metadata and tensor table are read through a small buffer with
// pread (a file may be many gigabytes); tensor data by rows.
#include "tpcrt/gguf.h"

#include "tpcrt/dtype.h"

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstring>
#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>
#include <utility>

namespace tpcrt {

namespace {

// types.def's lines, in its order (the order ggmlDequantizableTypes lists them in).
const GgmlTypeInfo kTypes[] = {
#define TPC_TYPE(NAME, ID, ELEMENTS, BYTES, READS)                                              \
  {GgmlType::NAME, #NAME, ELEMENTS, BYTES, READS},
#define TPC_HELD_TYPE TPC_TYPE
#include "tpcrt/types.def"
#undef TPC_TYPE
#undef TPC_HELD_TYPE
};

// The held types' lines: each DType beside its ggml type.
const std::pair<DType, GgmlType> kHeld[] = {
#define TPC_TYPE(NAME, ID, ELEMENTS, BYTES, READS)
#define TPC_HELD_TYPE(NAME, ID, ELEMENTS, BYTES, READS) {DType::NAME, GgmlType::NAME},
#include "tpcrt/types.def"
#undef TPC_TYPE
#undef TPC_HELD_TYPE
};

constexpr uint32_t kMagic = 0x46554747; // "GGUF", little-endian
constexpr uint32_t kMaxDims = 4;        // GGML_MAX_DIMS

/// pread until `bytes` are in or the file ends.
bool preadAll(int fd, void *into, size_t bytes, uint64_t at) {
  char *p = static_cast<char *>(into);
  while (bytes) {
    ssize_t got = pread(fd, p, bytes, off_t(at));
    if (got < 0 && errno == EINTR)
      continue;
    if (got <= 0)
      return false;
    p += got;
    bytes -= size_t(got);
    at += uint64_t(got);
  }
  return true;
}

uint16_t load16(const uint8_t *p) { return uint16_t(p[0] | p[1] << 8); }
uint32_t load32(const uint8_t *p) {
  return uint32_t(p[0]) | uint32_t(p[1]) << 8 | uint32_t(p[2]) << 16 |
         uint32_t(p[3]) << 24;
}
uint64_t load64(const uint8_t *p) {
  return uint64_t(load32(p)) | uint64_t(load32(p + 4)) << 32;
}
float half(const uint8_t *p) { return f16ToFloat(load16(p)); }

/// Bytes one scalar of `type` takes; 0 for strings, arrays and unknown ids.
uint64_t scalarBytes(GgufValueType type) {
  switch (type) {
  case GgufValueType::U8:
  case GgufValueType::I8:
  case GgufValueType::Bool:
    return 1;
  case GgufValueType::U16:
  case GgufValueType::I16:
    return 2;
  case GgufValueType::U32:
  case GgufValueType::I32:
  case GgufValueType::F32:
    return 4;
  case GgufValueType::U64:
  case GgufValueType::I64:
  case GgufValueType::F64:
    return 8;
  default:
    return 0;
  }
}

bool isSigned(GgufValueType t) {
  return t == GgufValueType::I8 || t == GgufValueType::I16 ||
         t == GgufValueType::I32 || t == GgufValueType::I64;
}
bool isUnsigned(GgufValueType t) {
  return t == GgufValueType::U8 || t == GgufValueType::U16 ||
         t == GgufValueType::U32 || t == GgufValueType::U64;
}
bool isFloat(GgufValueType t) {
  return t == GgufValueType::F32 || t == GgufValueType::F64;
}

/// A scalar's little-endian bytes as a 64-bit word: unsigned and bool
/// zero-extended, signed as int64_t's bits, floats as double's bits (f32
/// widened exactly).
uint64_t scalarWord(GgufValueType type, const uint8_t *p) {
  switch (type) {
  case GgufValueType::U8:
  case GgufValueType::Bool:
    return p[0];
  case GgufValueType::I8:
    return uint64_t(int64_t(int8_t(p[0])));
  case GgufValueType::U16:
    return load16(p);
  case GgufValueType::I16:
    return uint64_t(int64_t(int16_t(load16(p))));
  case GgufValueType::U32:
    return load32(p);
  case GgufValueType::I32:
    return uint64_t(int64_t(int32_t(load32(p))));
  case GgufValueType::U64:
  case GgufValueType::I64:
    return load64(p);
  case GgufValueType::F32: {
    uint32_t bits = load32(p);
    float f;
    std::memcpy(&f, &bits, 4);
    double d = f;
    uint64_t word;
    std::memcpy(&word, &d, 8);
    return word;
  }
  case GgufValueType::F64:
    return load64(p);
  default:
    return 0;
  }
}

double wordToDouble(uint64_t word) {
  double d;
  std::memcpy(&d, &word, 8);
  return d;
}

void setScalar(GgufValue &value, GgufValueType type, uint64_t word) {
  value.type = type;
  if (isSigned(type))
    value.i = int64_t(word);
  else if (isFloat(type))
    value.f = wordToDouble(word);
  else
    value.u = word;
}

} // namespace

const GgmlTypeInfo *ggmlTypeInfo(uint32_t id) {
  for (const GgmlTypeInfo &info : kTypes)
    if (uint32_t(info.type) == id)
      return &info;
  return nullptr;
}

std::string ggmlDequantizableTypes() {
  std::string names;
  for (const GgmlTypeInfo &info : kTypes)
    if (info.dequantizable)
      names += (names.empty() ? "" : ", ") + std::string(info.name);
  return names;
}

const char *ggufValueTypeName(GgufValueType type) {
  static const char *names[] = {"u8",  "i8",  "u16",  "i16",    "u32",
                                "i32", "f32", "bool", "string", "array",
                                "u64", "i64", "f64"};
  return uint32_t(type) <= 12 ? names[uint32_t(type)] : "unknown";
}

// Dequantization. Each formula is gguf-py's, in its order of fp32 operations (a
// product, then a sum or difference, each rounded; this file is compiled
// without contraction into fused multiply-adds), so that the results are bit
// for bit the same.
namespace {

// Q4_0: f16 d, 16 bytes of nibbles (low nibbles are elements 0..15,
// high 16..31); d * (q - 8).
void dequantQ4_0(const uint8_t *b, float *out) {
  float d = half(b);
  for (int j = 0; j < 16; ++j) {
    out[j] = d * float(int(b[2 + j] & 0xf) - 8);
    out[j + 16] = d * float(int(b[2 + j] >> 4) - 8);
  }
}

// Q4_1: f16 d, f16 m, nibbles as Q4_0; d * q + m.
void dequantQ4_1(const uint8_t *b, float *out) {
  float d = half(b), m = half(b + 2);
  for (int j = 0; j < 16; ++j) {
    out[j] = d * float(b[4 + j] & 0xf) + m;
    out[j + 16] = d * float(b[4 + j] >> 4) + m;
  }
}

// Q5_0: f16 d, 32 high bits (bit j of a little-endian u32 for element j),
// nibbles as Q4_0; d * (q - 16).
void dequantQ5_0(const uint8_t *b, float *out) {
  float d = half(b);
  uint32_t qh = load32(b + 2);
  for (int j = 0; j < 16; ++j) {
    int lo = (b[6 + j] & 0xf) | int((qh >> j) & 1) << 4;
    int hi = (b[6 + j] >> 4) | int((qh >> (j + 16)) & 1) << 4;
    out[j] = d * float(lo - 16);
    out[j + 16] = d * float(hi - 16);
  }
}

// Q5_1: f16 d, f16 m, high bits and nibbles as Q5_0; d * q + m.
void dequantQ5_1(const uint8_t *b, float *out) {
  float d = half(b), m = half(b + 2);
  uint32_t qh = load32(b + 4);
  for (int j = 0; j < 16; ++j) {
    int lo = (b[8 + j] & 0xf) | int((qh >> j) & 1) << 4;
    int hi = (b[8 + j] >> 4) | int((qh >> (j + 16)) & 1) << 4;
    out[j] = d * float(lo) + m;
    out[j + 16] = d * float(hi) + m;
  }
}

// Q8_0: f16 d, 32 signed bytes; q * d.
void dequantQ8_0(const uint8_t *b, float *out) {
  float d = half(b);
  for (int j = 0; j < 32; ++j)
    out[j] = float(int8_t(b[2 + j])) * d;
}

// MXFP4 (OCP microscaling FP4, GPT-OSS's experts): one E8M0 byte e, then 16 bytes of
// nibbles as Q4_0; each nibble indexes E2M1's values doubled (0, 1, 2, 3, 4, 6, 8, 12 and
// their negatives, 8 being -0 as 0), times half the scale, 2^(e - 127) / 2, which gguf-py
// (and ggml's ggml_e8m0_to_fp32_half) build as the bits of a float: e < 2 a subnormal.
void dequantMXFP4(const uint8_t *b, float *out) {
  static constexpr int8_t kValues[16] = {0, 1, 2, 3, 4, 6, 8, 12, 0, -1, -2, -3, -4, -6, -8, -12};
  uint32_t bits = b[0] < 2 ? uint32_t(0x00200000) << b[0] : uint32_t(b[0] - 1) << 23;
  float d;
  std::memcpy(&d, &bits, sizeof d);
  for (int j = 0; j < 16; ++j) {
    out[j] = d * float(kValues[b[1 + j] & 0xf]);
    out[j + 16] = d * float(kValues[b[1 + j] >> 4]);
  }
}

// The K-quants' eight 6-bit scales and mins in 12 bytes: bytes 0..3 hold scales
// 0..3 in their low 6 bits (and the top 2 bits of scales 4..7), bytes 4..7 the
// mins 0..3 likewise, bytes 8..11 the low 4 bits of scales 4..7 (low nibble)
// and mins 4..7 (high nibble).
void kScaleMin(const uint8_t *s, uint8_t scale[8], uint8_t min[8]) {
  for (int j = 0; j < 4; ++j) {
    scale[j] = s[j] & 0x3f;
    min[j] = s[4 + j] & 0x3f;
    scale[4 + j] = uint8_t((s[8 + j] & 0x0f) | ((s[j] >> 2) & 0x30));
    min[4 + j] = uint8_t((s[8 + j] >> 4) | ((s[4 + j] >> 2) & 0x30));
  }
}

// Q4_K: f16 d, f16 dmin, 12 bytes of scales, 128 bytes of nibbles: sub-block 2c
// takes the low nibbles of bytes 32c..32c+31, sub-block 2c+1 their high
// nibbles; (d * scale) * q - (dmin * min).
void dequantQ4_K(const uint8_t *b, float *out) {
  float d = half(b), dmin = half(b + 2);
  uint8_t scale[8], min[8];
  kScaleMin(b + 4, scale, min);
  const uint8_t *qs = b + 16;
  for (int sub = 0; sub < 8; ++sub) {
    float ds = d * float(scale[sub]), dm = dmin * float(min[sub]);
    const uint8_t *q = qs + 32 * (sub / 2);
    int shift = 4 * (sub % 2);
    for (int l = 0; l < 32; ++l)
      out[32 * sub + l] = ds * float((q[l] >> shift) & 0xf) - dm;
  }
}

// Q5_K: as Q4_K with 32 bytes of high bits before the nibbles: bit `sub` of
// byte l is the fifth bit of element l of sub-block `sub`.
void dequantQ5_K(const uint8_t *b, float *out) {
  float d = half(b), dmin = half(b + 2);
  uint8_t scale[8], min[8];
  kScaleMin(b + 4, scale, min);
  const uint8_t *qh = b + 16, *qs = b + 48;
  for (int sub = 0; sub < 8; ++sub) {
    float ds = d * float(scale[sub]), dm = dmin * float(min[sub]);
    const uint8_t *q = qs + 32 * (sub / 2);
    int shift = 4 * (sub % 2);
    for (int l = 0; l < 32; ++l) {
      int value = ((q[l] >> shift) & 0xf) | ((qh[l] >> sub) & 1) << 4;
      out[32 * sub + l] = ds * float(value) - dm;
    }
  }
}

// Q6_K: 128 bytes of low nibbles, 64 bytes of 2-bit highs, 16 signed scales,
// f16 d. In each half h of 128 elements, element 64s + i (s = 0, 1; i < 64) has
// low nibble s of byte 64h + i, and element 32t + i (t < 4; i < 32) has bits
// 2t..2t+1 of high byte 32h + i; (d * scale[e / 16]) * (q - 32).
void dequantQ6_K(const uint8_t *b, float *out) {
  const uint8_t *ql = b, *qh = b + 128, *scales = b + 192;
  float d = half(b + 208);
  for (int e = 0; e < 256; ++e) {
    int h = e / 128, r = e % 128;
    int low = (ql[64 * h + r % 64] >> (4 * (r / 64))) & 0xf;
    int high = (qh[32 * h + r % 32] >> (2 * (r / 32))) & 3;
    float ds = d * float(int8_t(scales[e / 16]));
    out[e] = ds * float((low | high << 4) - 32);
  }
}

} // namespace

bool quantize(GgmlType type, const float *in, int64_t elements, void *blocks,
              std::string &error) {
  if (type != GgmlType::Q8_0 && type != GgmlType::Q4_0) {
    error = std::string("tpc quantizes to Q8_0 and Q4_0 only, not ") +
            (ggmlTypeInfo(type) ? ggmlTypeInfo(type)->name : "an unknown type");
    return false;
  }
  if (elements % 32) {
    error = std::to_string(elements) + " values are not whole blocks of 32";
    return false;
  }
  auto *out = static_cast<uint8_t *>(blocks);
  for (int64_t b = 0; b < elements / 32; ++b) {
    const float *x = in + b * 32;
    // The scale: Q8_0 maps the largest magnitude to 127; Q4_0 maps the value of largest
    // magnitude (the first, on ties) to -8.
    float amax = 0.0f, max = 0.0f;
    for (int j = 0; j < 32; ++j)
      if (amax < std::fabs(x[j])) {
        amax = std::fabs(x[j]);
        max = x[j];
      }
    float d = type == GgmlType::Q8_0 ? amax / 127.0f : max / -8.0f;
    float id = d != 0.0f ? 1.0f / d : 0.0f;
    uint16_t half = floatToF16(d);
    std::memcpy(out, &half, 2);
    if (type == GgmlType::Q8_0) {
      for (int j = 0; j < 32; ++j)
        out[2 + j] = uint8_t(int8_t(std::round(x[j] * id)));
      out += 34;
    } else {
      for (int j = 0; j < 16; ++j) {
        // x * id lies in [-8, 8]: + 8.5 truncated rounds it to the nearest of 0..16, 16 clamped.
        int lo = std::min(15, int(int8_t(x[j] * id + 8.5f)));
        int hi = std::min(15, int(int8_t(x[j + 16] * id + 8.5f)));
        out[2 + j] = uint8_t(lo | hi << 4);
      }
      out += 18;
    }
  }
  return true;
}

bool dequantize(GgmlType type, const void *blocks, int64_t elements, float *out,
                std::string &error) {
  const GgmlTypeInfo *info = ggmlTypeInfo(type);
  if (!info) {
    error = "ggml type id " + std::to_string(uint32_t(type)) + " is unknown";
    return false;
  }
  if (!info->dequantizable) {
    error = std::string("type ") + info->name +
            " is not one tpc reads (it reads " + ggmlDequantizableTypes() + ")";
    return false;
  }
  if (elements < 0 || elements % info->blockElements) {
    error = std::to_string(elements) + " elements are not whole " + info->name +
            " blocks of " + std::to_string(info->blockElements);
    return false;
  }
  const uint8_t *b = static_cast<const uint8_t *>(blocks);
  int64_t count = elements / info->blockElements;
  void (*block)(const uint8_t *, float *) = nullptr;
  switch (type) {
  case GgmlType::F32:
    std::memcpy(out, b, size_t(elements) * 4);
    return true;
  case GgmlType::F16:
    for (int64_t i = 0; i < elements; ++i)
      out[i] = half(b + 2 * i);
    return true;
  case GgmlType::BF16:
    for (int64_t i = 0; i < elements; ++i)
      out[i] = bf16ToFloat(load16(b + 2 * i));
    return true;
  case GgmlType::Q4_0:
    block = dequantQ4_0;
    break;
  case GgmlType::Q4_1:
    block = dequantQ4_1;
    break;
  case GgmlType::Q5_0:
    block = dequantQ5_0;
    break;
  case GgmlType::Q5_1:
    block = dequantQ5_1;
    break;
  case GgmlType::Q8_0:
    block = dequantQ8_0;
    break;
  case GgmlType::Q4_K:
    block = dequantQ4_K;
    break;
  case GgmlType::Q5_K:
    block = dequantQ5_K;
    break;
  case GgmlType::Q6_K:
    block = dequantQ6_K;
    break;
  case GgmlType::MXFP4:
    block = dequantMXFP4;
    break;
  default:
    error = std::string("type ") + info->name + " has no dequantization";
    return false;
  }
  for (int64_t i = 0; i < count; ++i)
    block(b + i * info->blockBytes, out + i * info->blockElements);
  return true;
}

// The parser: a cursor over the file with a read buffer, and the checks.
class GgufParser {
public:
  GgufParser(GgufFile &file, const GgufLimits &limits, std::string &error)
      : file(file), limits(limits), error(error) {}

  bool parse();

private:
  /// Fails, prefixing the file.
  bool fail(const std::string &message) {
    error = "GGUF file " + file.path_ + ": " + message;
    return false;
  }
  uint64_t remaining() const { return file.fileSize_ - pos; }
  /// `bytes` more bytes of the file exist, or an error says `what` runs past
  /// its end.
  bool need(uint64_t bytes, const std::string &what) {
    if (bytes <= remaining())
      return true;
    return fail(what + " runs past the end of the file (" +
                std::to_string(file.fileSize_) + " bytes)");
  }
  /// The next `bytes` bytes (checked with need first) into `into`.
  bool take(void *into, uint64_t bytes);
  bool u32(uint32_t &out, const std::string &what) {
    uint8_t b[4];
    if (!need(4, what) || !take(b, 4))
      return false;
    out = load32(b);
    return true;
  }
  bool u64(uint64_t &out, const std::string &what) {
    uint8_t b[8];
    if (!need(8, what) || !take(b, 8))
      return false;
    out = load64(b);
    return true;
  }
  /// A length-prefixed string of at most `limit` bytes.
  bool string(std::string &out, uint64_t limit, const std::string &what);
  bool value(GgufValue &out, GgufValueType type, uint32_t depth,
             const std::string &what);
  bool array(GgufValue &out, uint32_t depth, const std::string &what);
  bool tensorInfo(GgufTensor &tensor, uint64_t index);

  GgufFile &file;
  const GgufLimits &limits;
  std::string &error;
  uint64_t pos = 0;
  std::vector<uint8_t> buffer;
  uint64_t bufferStart = 0;
  uint64_t arrayElements = 0;
  static constexpr size_t kBufferBytes = 1 << 16;
};

bool GgufParser::take(void *into, uint64_t bytes) {
  uint8_t *p = static_cast<uint8_t *>(into);
  while (bytes) {
    if (pos < bufferStart || pos >= bufferStart + buffer.size()) {
      if (bytes >= kBufferBytes) { // large reads bypass the buffer
        if (!preadAll(file.fd_, p, size_t(bytes), pos))
          return fail("read failed at byte " + std::to_string(pos) + ": " +
                      std::strerror(errno));
        pos += bytes;
        return true;
      }
      buffer.resize(size_t(std::min<uint64_t>(kBufferBytes, remaining())));
      bufferStart = pos;
      if (!preadAll(file.fd_, buffer.data(), buffer.size(), pos))
        return fail("read failed at byte " + std::to_string(pos) + ": " +
                    std::strerror(errno));
    }
    uint64_t offset = pos - bufferStart;
    uint64_t n = std::min<uint64_t>(bytes, buffer.size() - offset);
    std::memcpy(p, buffer.data() + offset, size_t(n));
    p += n;
    pos += n;
    bytes -= n;
  }
  return true;
}

bool GgufParser::string(std::string &out, uint64_t limit,
                        const std::string &what) {
  uint64_t length = 0;
  if (!u64(length, what + ": the string length"))
    return false;
  if (!need(length, what + ": string of " + std::to_string(length) + " bytes"))
    return false;
  if (length > limit)
    return fail(what + ": string of " + std::to_string(length) +
                " bytes exceeds the limit of " + std::to_string(limit));
  out.resize(size_t(length));
  return take(out.data(), length);
}

bool GgufParser::value(GgufValue &out, GgufValueType type, uint32_t depth,
                       const std::string &what) {
  out.type = type;
  if (type == GgufValueType::String)
    return string(out.s, limits.maxStringBytes, what);
  if (type == GgufValueType::Array)
    return array(out, depth, what);
  uint64_t bytes = scalarBytes(type);
  if (!bytes)
    return fail(what + ": unknown value type " +
                std::to_string(uint32_t(type)));
  uint8_t b[8];
  if (!need(bytes, what + ": " + ggufValueTypeName(type)) || !take(b, bytes))
    return false;
  setScalar(out, type, scalarWord(type, b));
  return true;
}

bool GgufParser::array(GgufValue &out, uint32_t depth,
                       const std::string &what) {
  if (depth >= limits.maxNesting)
    return fail(what + ": arrays nested deeper than the limit of " +
                std::to_string(limits.maxNesting));
  uint32_t element = 0;
  uint64_t count = 0;
  if (!u32(element, what + ": the array's element type") ||
      !u64(count, what + ": the array's length"))
    return false;
  GgufValueType type = GgufValueType(element);
  out.elementType = type;
  // Every element takes at least this many bytes of the file: a count it cannot
  // hold is damage, found before anything is sized by it.
  uint64_t least = type == GgufValueType::String  ? 8
                   : type == GgufValueType::Array ? 12
                                                  : scalarBytes(type);
  if (!least)
    return fail(what + ": unknown array element type " +
                std::to_string(element));
  if (count > remaining() / least)
    return fail(what + ": array of " + std::to_string(count) + " " +
                ggufValueTypeName(type) +
                " elements runs past the end of the file (" +
                std::to_string(file.fileSize_) + " bytes)");
  if (count > limits.maxArrayElements - arrayElements)
    return fail(what + ": array of " + std::to_string(count) +
                " elements takes the metadata past the limit of " +
                std::to_string(limits.maxArrayElements) + " array elements");
  arrayElements += count;
  if (type == GgufValueType::String) {
    out.strings.resize(size_t(count));
    for (uint64_t i = 0; i < count; ++i)
      if (!string(out.strings[i], limits.maxStringBytes,
                  what + " element " + std::to_string(i)))
        return false;
  } else if (type == GgufValueType::Array) {
    out.items.resize(size_t(count));
    for (uint64_t i = 0; i < count; ++i)
      if (!value(out.items[i], type, depth + 1,
                 what + " element " + std::to_string(i)))
        return false;
  } else {
    std::vector<uint8_t> raw(size_t(count * least));
    if (!take(raw.data(), raw.size()))
      return false;
    out.words.resize(size_t(count));
    for (uint64_t i = 0; i < count; ++i)
      out.words[i] = scalarWord(type, raw.data() + i * least);
  }
  return true;
}

bool GgufParser::tensorInfo(GgufTensor &t, uint64_t index) {
  std::string what = "tensor " + std::to_string(index);
  if (!string(t.name, limits.maxNameBytes, what + ": the name"))
    return false;
  what = "tensor " + t.name;
  if (file.tensorIndex_.count(t.name))
    return fail(what + ": the name is given twice (tensors " +
                std::to_string(file.tensorIndex_[t.name]) + " and " +
                std::to_string(index) + ")");
  uint32_t dims = 0;
  if (!u32(dims, what + ": n_dims"))
    return false;
  if (dims < 1 || dims > kMaxDims)
    return fail(what + ": n_dims " + std::to_string(dims) +
                " is not between 1 and " + std::to_string(kMaxDims));
  t.elements = 1;
  for (uint32_t d = 0; d < dims; ++d) {
    uint64_t size = 0;
    std::string dim = what + ": ne[" + std::to_string(d) + "]";
    if (!u64(size, dim))
      return false;
    if (size == 0)
      return fail(dim + " is 0");
    if (size > uint64_t(INT64_MAX) / uint64_t(t.elements))
      return fail(dim + " of " + std::to_string(size) +
                  " makes the element count overflow");
    t.ne.push_back(int64_t(size));
    t.elements *= int64_t(size);
  }
  t.shape.assign(t.ne.rbegin(), t.ne.rend());
  uint32_t typeId = 0;
  if (!u32(typeId, what + ": the type"))
    return false;
  const GgmlTypeInfo *info = ggmlTypeInfo(typeId);
  if (!info)
    return fail(what + ": unknown ggml type id " + std::to_string(typeId));
  t.type = info->type;
  if (t.ne[0] % info->blockElements)
    return fail(what + ": ne[0] " + std::to_string(t.ne[0]) +
                " is not a multiple of " + info->name + "'s block of " +
                std::to_string(info->blockElements));
  // A type of one-element blocks of 8 bytes can take an element count near 2^63
  // past 2^64.
  uint64_t blocks = uint64_t(t.elements) / info->blockElements;
  if (blocks > uint64_t(INT64_MAX) / info->blockBytes)
    return fail(what + ": " + std::to_string(t.elements) + " " + info->name +
                " elements overflow a byte count");
  t.bytes = blocks * info->blockBytes;
  t.rowBytes = uint64_t(t.ne[0]) / info->blockElements * info->blockBytes;
  t.rows = t.elements / t.ne[0];
  if (!u64(t.offset, what + ": the offset"))
    return false;
  if (t.offset % file.alignment_)
    return fail(what + ": offset " + std::to_string(t.offset) +
                " is not a multiple of the " + "alignment " +
                std::to_string(file.alignment_));
  file.tensorIndex_[t.name] = size_t(index);
  return true;
}

bool GgufParser::parse() {
  uint32_t magic = 0, version = 0;
  if (!u32(magic, "the magic"))
    return false;
  if (magic != kMagic)
    return fail("not a GGUF file (the magic is not \"GGUF\")");
  if (!u32(version, "the version"))
    return false;
  if ((version & 0xffff) == 0 && version)
    return fail("a big-endian GGUF file (version word " +
                std::to_string(version) + "); tpc reads little-endian ones");
  if (version != 2 && version != 3)
    return fail("version " + std::to_string(version) +
                " is not one tpc reads (2 and 3)");
  file.version_ = version;
  uint64_t tensorCount = 0, metadataCount = 0;
  if (!u64(tensorCount, "the tensor count") ||
      !u64(metadataCount, "the metadata count"))
    return false;
  if (tensorCount > limits.maxTensors)
    return fail("tensor count " + std::to_string(tensorCount) +
                " exceeds the limit of " + std::to_string(limits.maxTensors));
  if (metadataCount > limits.maxMetadata)
    return fail("metadata count " + std::to_string(metadataCount) +
                " exceeds the limit of " + std::to_string(limits.maxMetadata));

  for (uint64_t i = 0; i < metadataCount; ++i) {
    std::string key;
    if (!string(key, limits.maxNameBytes,
                "metadata " + std::to_string(i) + ": the key"))
      return false;
    std::string what = "metadata '" + key + "'";
    if (file.metadata_.count(key))
      return fail(what + " is given twice");
    uint32_t type = 0;
    if (!u32(type, what + ": the value type"))
      return false;
    GgufValue parsed;
    if (!value(parsed, GgufValueType(type), 0, what))
      return false;
    file.keys_.push_back(key);
    file.metadata_.emplace(key, std::move(parsed));
  }
  if (const GgufValue *alignment = file.find("general.alignment")) {
    if (alignment->type != GgufValueType::U32)
      return fail(std::string("metadata 'general.alignment' is a ") +
                  ggufValueTypeName(alignment->type) + ", not a u32");
    uint64_t a = alignment->u;
    if (a == 0 || (a & (a - 1)))
      return fail("metadata 'general.alignment' is " + std::to_string(a) +
                  ", not a power of two");
    file.alignment_ = a;
  }

  for (uint64_t i = 0; i < tensorCount; ++i) {
    GgufTensor tensor;
    if (!tensorInfo(tensor, i))
      return false;
    file.tensors_.push_back(std::move(tensor));
  }
  // The data section starts at the next multiple of the alignment.
  uint64_t padding =
      (file.alignment_ - pos % file.alignment_) % file.alignment_;
  file.dataOffset_ = pos + padding;
  for (GgufTensor &t : file.tensors_) {
    uint64_t begin, end;
    if (__builtin_add_overflow(file.dataOffset_, t.offset, &begin) ||
        __builtin_add_overflow(begin, t.bytes, &end) || end > file.fileSize_)
      return fail("tensor " + t.name + ": its " + std::to_string(t.bytes) +
                  " bytes at data offset " + std::to_string(t.offset) +
                  " run past the end of the file (" +
                  std::to_string(file.fileSize_) + " bytes, data from byte " +
                  std::to_string(file.dataOffset_) + ")");
    t.offset = begin;
  }
  return true;
}

std::unique_ptr<GgufFile> GgufFile::open(const std::string &path,
                                         std::string &error,
                                         const GgufLimits &limits) {
  std::unique_ptr<GgufFile> file(new GgufFile());
  file->path_ = path;
  file->fd_ = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  struct stat st;
  if (file->fd_ < 0 || fstat(file->fd_, &st) != 0) {
    error = "GGUF file " + path + ": cannot open: " + std::strerror(errno);
    return nullptr;
  }
  if (!S_ISREG(st.st_mode)) {
    error = "GGUF file " + path + ": not a regular file";
    return nullptr;
  }
  file->fileSize_ = uint64_t(st.st_size);
  GgufParser parser(*file, limits, error);
  if (!parser.parse())
    return nullptr;
  return file;
}

GgufFile::~GgufFile() {
  if (fd_ >= 0)
    close(fd_);
}

const GgufValue *GgufFile::find(const std::string &key) const {
  auto it = metadata_.find(key);
  return it == metadata_.end() ? nullptr : &it->second;
}

const GgufTensor *GgufFile::tensor(const std::string &name) const {
  auto it = tensorIndex_.find(name);
  return it == tensorIndex_.end() ? nullptr : &tensors_[it->second];
}

namespace {

/// The value of `key`, or null with an error (missing; not of the wanted kind).
const GgufValue *lookup(const GgufFile &file, const std::string &key,
                        std::string &error) {
  const GgufValue *value = file.find(key);
  if (!value)
    error = "GGUF file " + file.path() + ": no metadata '" + key + "'";
  return value;
}

bool wrongType(const GgufFile &file, const std::string &key,
               const GgufValue &value, const char *wanted, std::string &error) {
  std::string held = ggufValueTypeName(value.type);
  if (value.type == GgufValueType::Array)
    held = std::string("array of ") + ggufValueTypeName(value.elementType);
  error = "GGUF file " + file.path() + ": metadata '" + key + "' is a " + held +
          ", not " + wanted;
  return false;
}

} // namespace

bool GgufFile::getString(const std::string &key, std::string &out,
                         std::string &error) const {
  const GgufValue *value = lookup(*this, key, error);
  if (!value)
    return false;
  if (value->type != GgufValueType::String)
    return wrongType(*this, key, *value, "a string", error);
  out = value->s;
  return true;
}

bool GgufFile::getInt(const std::string &key, int64_t &out, std::string &error,
                      int64_t min, int64_t max) const {
  const GgufValue *value = lookup(*this, key, error);
  if (!value)
    return false;
  bool inRange;
  std::string text;
  if (isSigned(value->type)) {
    inRange = value->i >= min && value->i <= max;
    text = std::to_string(value->i);
  } else if (isUnsigned(value->type)) {
    inRange = max >= 0 && value->u <= uint64_t(max) &&
              (min <= 0 || value->u >= uint64_t(min));
    text = std::to_string(value->u);
  } else {
    return wrongType(*this, key, *value, "an integer", error);
  }
  if (!inRange) {
    error = "GGUF file " + path_ + ": metadata '" + key + "' is " + text +
            ", outside [" + std::to_string(min) + ", " + std::to_string(max) +
            "]";
    return false;
  }
  out = isSigned(value->type) ? value->i : int64_t(value->u);
  return true;
}

bool GgufFile::getFloat(const std::string &key, double &out,
                        std::string &error) const {
  const GgufValue *value = lookup(*this, key, error);
  if (!value)
    return false;
  if (!isFloat(value->type))
    return wrongType(*this, key, *value, "a float", error);
  out = value->f;
  return true;
}

bool GgufFile::getBool(const std::string &key, bool &out,
                       std::string &error) const {
  const GgufValue *value = lookup(*this, key, error);
  if (!value)
    return false;
  if (value->type != GgufValueType::Bool)
    return wrongType(*this, key, *value, "a bool", error);
  out = value->u != 0;
  return true;
}

bool GgufFile::getStrings(const std::string &key, std::vector<std::string> &out,
                          std::string &error) const {
  const GgufValue *value = lookup(*this, key, error);
  if (!value)
    return false;
  if (value->type != GgufValueType::Array ||
      value->elementType != GgufValueType::String)
    return wrongType(*this, key, *value, "an array of strings", error);
  out = value->strings;
  return true;
}

bool GgufFile::getInts(const std::string &key, std::vector<int64_t> &out,
                       std::string &error) const {
  const GgufValue *value = lookup(*this, key, error);
  if (!value)
    return false;
  if (value->type != GgufValueType::Array ||
      !(isSigned(value->elementType) || isUnsigned(value->elementType)))
    return wrongType(*this, key, *value, "an array of integers", error);
  out.clear();
  for (size_t i = 0; i < value->words.size(); ++i) {
    uint64_t word = value->words[i];
    if (value->elementType == GgufValueType::U64 &&
        word > uint64_t(INT64_MAX)) {
      error = "GGUF file " + path_ + ": metadata '" + key + "' element " +
              std::to_string(i) + " is " + std::to_string(word) +
              ", past the int64 range";
      return false;
    }
    out.push_back(int64_t(word));
  }
  return true;
}

bool GgufFile::getFloats(const std::string &key, std::vector<double> &out,
                         std::string &error) const {
  const GgufValue *value = lookup(*this, key, error);
  if (!value)
    return false;
  if (value->type != GgufValueType::Array || !isFloat(value->elementType))
    return wrongType(*this, key, *value, "an array of floats", error);
  out.clear();
  for (uint64_t word : value->words)
    out.push_back(wordToDouble(word));
  return true;
}

bool GgufFile::readRows(const std::string &name, int64_t firstRow,
                        int64_t rowCount, std::vector<uint8_t> &out,
                        std::string &error) const {
  const GgufTensor *t = tensor(name);
  if (!t) {
    error = "GGUF file " + path_ + ": no tensor " + name;
    return false;
  }
  if (firstRow < 0 || rowCount < 0 || firstRow > t->rows ||
      rowCount > t->rows - firstRow) {
    error = "GGUF file " + path_ + ": tensor " + name + ": rows [" +
            std::to_string(firstRow) + ", +" + std::to_string(rowCount) +
            ") are not inside its " + std::to_string(t->rows);
    return false;
  }
  // Inside the tensor, which open checked lies inside the file: no overflow.
  uint64_t bytes = uint64_t(rowCount) * t->rowBytes;
  out.resize(size_t(bytes));
  if (!preadAll(fd_, out.data(), size_t(bytes),
                t->offset + uint64_t(firstRow) * t->rowBytes)) {
    error = "GGUF file " + path_ + ": tensor " + name +
            ": read failed (truncated since open?)";
    return false;
  }
  return true;
}

bool GgufFile::readRowsF32(const std::string &name, int64_t firstRow,
                           int64_t rowCount, std::vector<float> &out,
                           std::string &error) const {
  const GgufTensor *t = tensor(name);
  if (t && !ggmlTypeInfo(t->type)->dequantizable) {
    error = "GGUF file " + path_ + ": tensor " + name + " has type " +
            ggmlTypeInfo(t->type)->name +
            ", which tpc does not read (it reads " + ggmlDequantizableTypes() +
            ")";
    return false;
  }
  std::vector<uint8_t> raw;
  if (!readRows(name, firstRow, rowCount, raw, error))
    return false;
  out.resize(size_t(rowCount * t->ne[0]));
  if (!dequantize(t->type, raw.data(), rowCount * t->ne[0], out.data(),
                  error)) {
    error = "GGUF file " + path_ + ": tensor " + name + ": " + error;
    return false;
  }
  return true;
}

GgmlType ggmlTypeOf(DType type) {
  for (auto [dtype, ggml] : kHeld)
    if (dtype == type)
      return ggml;
  return GgmlType::F32;
}

std::optional<DType> dtypeOf(GgmlType type) {
  for (auto [dtype, ggml] : kHeld)
    if (ggml == type)
      return dtype;
  return std::nullopt;
}

std::string ggufPathOf(const std::string &weights, std::string &error) {
  auto endsWith = [](const std::string &s, const char *suffix) {
    size_t n = std::strlen(suffix);
    return s.size() >= n && s.compare(s.size() - n, n, suffix) == 0;
  };
  struct stat st;
  if (::stat(weights.c_str(), &st) != 0)
    return "";
  if (!S_ISDIR(st.st_mode))
    return endsWith(weights, ".gguf") ? weights : "";
  for (const char *safetensors : {"/model.safetensors", "/model.safetensors.index.json"})
    if (::stat((weights + safetensors).c_str(), &st) == 0)
      return "";
  std::vector<std::string> found;
  if (DIR *dir = ::opendir(weights.c_str())) {
    while (const dirent *entry = ::readdir(dir))
      if (std::string name = entry->d_name; endsWith(name, ".gguf"))
        found.push_back(name);
    ::closedir(dir);
  }
  if (found.size() > 1) {
    std::sort(found.begin(), found.end());
    error = weights + " holds " + std::to_string(found.size()) + " GGUF files (";
    for (size_t i = 0; i < found.size(); ++i)
      error += (i ? ", " : "") + found[i];
    error += "): name the one to use";
    return "";
  }
  return found.empty() ? "" : weights + "/" + found[0];
}

} // namespace tpcrt
