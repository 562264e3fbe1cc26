// GGUF files (llama.cpp's format, versions 2 and 3, little-endian) read as
// untrusted input: the header, the metadata and the tensor table read with
// bounded preads and checked before use, tensor data read by rows, and ggml's
// block types dequantized to fp32 bit for bit as gguf-py's quants.py does.
// Plain C++17.
#ifndef TPCRT_GGUF_H
#define TPCRT_GGUF_H

#include "tpcrt/dtype.h"

#include <cstdint>
#include <map>
#include <optional>
#include <memory>
#include <string>
#include <vector>

namespace tpcrt {

/// A ggml tensor type: a line of tpcrt/types.def, its value the id a GGUF file holds (gguf-py's
/// GGMLQuantizationType).
enum class GgmlType : uint32_t {
#define TPC_TYPE(NAME, ID, ELEMENTS, BYTES, READS) NAME = ID,
#define TPC_HELD_TYPE TPC_TYPE
#include "tpcrt/types.def"
#undef TPC_TYPE
#undef TPC_HELD_TYPE
};

/// What types.def says of a ggml type: its name, elements per block, bytes per
/// block, and whether tpc dequantizes it.
struct GgmlTypeInfo {
  GgmlType type;
  const char *name;
  uint32_t blockElements, blockBytes;
  bool dequantizable;
};

/// The entry for type id `id`; null for an id ggml does not (or no longer)
/// define.
const GgmlTypeInfo *ggmlTypeInfo(uint32_t id);
inline const GgmlTypeInfo *ggmlTypeInfo(GgmlType type) {
  return ggmlTypeInfo(uint32_t(type));
}
/// The ggml type of a weight type tpc holds (dtype.h), and back (none for a type tpc does
/// not hold as it is stored).
GgmlType ggmlTypeOf(DType type);
std::optional<DType> dtypeOf(GgmlType type);

/// "F32, F16, BF16, Q8_0, ...": the types dequantize accepts, for error
/// messages.
std::string ggmlDequantizableTypes();

/// `elements` values (a multiple of the type's block size) of `type` from
/// `blocks` into `out` as fp32, bit for bit as gguf-py's quants.dequantize.
/// False, saying why in `error`, for a type tpc does not dequantize or a count
/// that is not whole blocks.
bool dequantize(GgmlType type, const void *blocks, int64_t elements, float *out,
                std::string &error);

/// `elements` fp32 values (whole blocks) into blocks of `type`, bit for bit as llama.cpp's
/// reference quantizers (quantize_row_q8_0_ref, quantize_row_q4_0_ref) make a GGUF file,
/// which llama-quantize and gguf-py's quants.quantize agree with. Q8_0 and Q4_0 only: false,
/// saying why in `error`, for another type.
bool quantize(GgmlType type, const float *in, int64_t elements, void *blocks,
              std::string &error);

/// GGUF metadata value types.
enum class GgufValueType : uint32_t {
  U8 = 0,
  I8 = 1,
  U16 = 2,
  I16 = 3,
  U32 = 4,
  I32 = 5,
  F32 = 6,
  Bool = 7,
  String = 8,
  Array = 9,
  U64 = 10,
  I64 = 11,
  F64 = 12
};
/// "u8", "string", "array", ...; "unknown" for other ids.
const char *ggufValueTypeName(GgufValueType type);

/// One metadata value. Scalars are held widened: an unsigned or bool in `u`, a
/// signed in `i`, a float in `f`. An array holds its element type and its
/// elements: numbers and bools as 64-bit words in `words` (unsigned
/// zero-extended, signed as int64_t's bits, floats as double's bits: compact,
/// since a vocabulary's arrays hold hundreds of thousands), strings in
/// `strings`, nested arrays in `items`.
struct GgufValue {
  GgufValueType type = GgufValueType::U8;
  uint64_t u = 0;
  int64_t i = 0;
  double f = 0;
  std::string s;
  GgufValueType elementType = GgufValueType::U8;
  std::vector<uint64_t> words;
  std::vector<std::string> strings;
  std::vector<GgufValue> items;

  /// An array's length, whatever its elements.
  size_t size() const { return words.size() + strings.size() + items.size(); }
};

/// Bounds on what an untrusted file may make the reader hold. The defaults
/// admit real files (vocabularies of 256k strings, chat templates of many
/// kilobytes) and nothing unbounded; everything read must also lie inside the
/// file, so memory stays proportional to its size.
struct GgufLimits {
  uint64_t maxTensors = 1u << 20;
  uint64_t maxMetadata = 1u << 16; // key/value pairs
  uint64_t maxStringBytes =
      64u << 20; // one string (keys and names have their own bound)
  uint64_t maxArrayElements = 8u << 20; // all arrays' elements together
  uint32_t maxNesting = 8;              // arrays in arrays
  uint64_t maxNameBytes = 4096;         // a key or a tensor name
};

struct GgufTensor {
  std::string name;
  GgmlType type = GgmlType::F32;
  std::vector<int64_t>
      ne; // ggml order: ne[0] is the row (contiguous) dimension
  std::vector<int64_t> shape; // HF / numpy order: ne reversed
  int64_t elements = 0;
  uint64_t offset = 0; // in the file, from its start
  uint64_t bytes = 0;
  uint64_t rowBytes = 0; // bytes of ne[0] elements
  int64_t rows = 0;      // elements / ne[0]
};

class GgufFile {
public:
  /// Opens and checks PATH. On failure returns null and says why in `error`,
  /// naming the field ("GGUF file X: metadata 'k' element 17: ...").
  static std::unique_ptr<GgufFile>
  open(const std::string &path, std::string &error,
       const GgufLimits &limits = GgufLimits());
  ~GgufFile();
  GgufFile(const GgufFile &) = delete;
  GgufFile &operator=(const GgufFile &) = delete;

  uint32_t version() const { return version_; }
  uint64_t alignment() const { return alignment_; }
  uint64_t dataOffset() const { return dataOffset_; }
  uint64_t fileSize() const { return fileSize_; }
  const std::string &path() const { return path_; }

  /// Metadata keys in file order, and lookup (null when absent).
  const std::vector<std::string> &keys() const { return keys_; }
  const GgufValue *find(const std::string &key) const;

  /// Typed getters: false, saying why in `error`, when the key is missing or
  /// holds another type. getInt accepts every integer type and checks the value
  /// lies in [min, max]; getFloat accepts f32 and f64; the array getters want
  /// an array of that kind.
  bool getString(const std::string &key, std::string &out,
                 std::string &error) const;
  bool getInt(const std::string &key, int64_t &out, std::string &error,
              int64_t min = INT64_MIN, int64_t max = INT64_MAX) const;
  bool getFloat(const std::string &key, double &out, std::string &error) const;
  bool getBool(const std::string &key, bool &out, std::string &error) const;
  bool getStrings(const std::string &key, std::vector<std::string> &out,
                  std::string &error) const;
  bool getInts(const std::string &key, std::vector<int64_t> &out,
               std::string &error) const;
  bool getFloats(const std::string &key, std::vector<double> &out,
                 std::string &error) const;

  /// Tensors in file order, and lookup by name (null when absent).
  const std::vector<GgufTensor> &tensors() const { return tensors_; }
  const GgufTensor *tensor(const std::string &name) const;

  /// The raw bytes of rows [firstRow, firstRow + rowCount) of tensor `name` (a
  /// row: ne[0] elements) into `out` (resized).
  bool readRows(const std::string &name, int64_t firstRow, int64_t rowCount,
                std::vector<uint8_t> &out, std::string &error) const;
  /// Rows of `name` as fp32 (resized to rowCount * ne[0]); an error names the
  /// tensor and a type tpc does not dequantize.
  bool readRowsF32(const std::string &name, int64_t firstRow, int64_t rowCount,
                   std::vector<float> &out, std::string &error) const;

private:
  GgufFile() = default;
  friend class GgufParser;

  std::string path_;
  int fd_ = -1;
  uint64_t fileSize_ = 0;
  uint32_t version_ = 0;
  uint64_t alignment_ = 32;
  uint64_t dataOffset_ = 0;
  std::vector<std::string> keys_;
  std::map<std::string, GgufValue> metadata_;
  std::vector<GgufTensor> tensors_;
  std::map<std::string, size_t> tensorIndex_;
};

/// Where a checkpoint is a GGUF file: `weights` itself when it names a file
/// ending in .gguf, or the one .gguf file of a directory that holds no
/// model.safetensors (nor its index); "" otherwise (a safetensors checkpoint,
/// or no such path). A directory holding several .gguf files is an error,
/// naming them, since which one is meant cannot be guessed.
std::string ggufPathOf(const std::string &weights, std::string &error);

} // namespace tpcrt

#endif // TPCRT_GGUF_H
