// safetensors reading by slices: only this rank's rows, columns or blocks are read, by pread
// of each contiguous run, and converted to fp32.
#include "tpcrt/weights.h"

#include "tpcrt/file.h"
#include "tpcrt/gguf_model.h"
#include "tpcrt/json.h"

#include "tpcrt/slices.h"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <fcntl.h>
#include <set>
#include <sstream>
#include <sys/stat.h>
#include <unistd.h>

namespace tpcrt {

namespace {

int64_t product(const std::vector<int64_t> &v, size_t from, size_t to) {
  int64_t p = 1;
  for (size_t i = from; i < to; ++i)
    p *= v[i];
  return p;
}

int64_t pieceSize(int64_t size, int64_t chunks) { return (size + chunks - 1) / chunks; }

// Checkpoints come from elsewhere: every number in them is checked against the file before
// anything is sized or read by it.

/// safetensors caps its JSON header at 100 MB; a larger length is damage, not a header.
constexpr uint64_t kMaxHeaderBytes = 100'000'000;
/// Deeper JSON is hostile (a real header nests 3 levels): nlohmann parses iteratively, but
/// copying or printing a value recurses once per level.
constexpr int kMaxJsonDepth = 128;

/// The bytes of one element of the dtypes tpc reads; 0 for the others.
size_t dtypeBytes(const std::string &dtype) {
  if (dtype == "F32")
    return 4;
  if (dtype == "F16" || dtype == "BF16")
    return 2;
  return 0;
}

/// The bits of one element of every dtype safetensors defines (tpc reads three of them, but
/// checks every tensor's extent); 0 for a name safetensors does not know.
unsigned dtypeBits(const std::string &dtype) {
  static const std::map<std::string, unsigned> bits = {
      {"BOOL", 8},    {"U8", 8},   {"I8", 8},   {"F8_E5M2", 8}, {"F8_E4M3", 8},
      {"F8_E8M0", 8}, {"I16", 16}, {"U16", 16}, {"F16", 16},    {"BF16", 16},
      {"I32", 32},    {"U32", 32}, {"F32", 32}, {"F64", 64},    {"I64", 64},
      {"U64", 64},    {"C64", 64}, {"F4", 4},   {"F6_E2M3", 6}, {"F6_E3M2", 6}};
  auto it = bits.find(dtype);
  return it == bits.end() ? 0 : it->second;
}

/// A non-negative JSON integer that fits in 63 bits.
bool readCount(const nlohmann::json &value, uint64_t &out) {
  if (!value.is_number_unsigned() || value.get<uint64_t>() > uint64_t(INT64_MAX))
    return false;
  out = value.get<uint64_t>();
  return true;
}

std::string offsetsString(uint64_t begin, uint64_t end) {
  return "[" + std::to_string(begin) + ", " + std::to_string(end) + "]";
}

/// pread until `bytes` are in or the file ends: one call moves at most about 2 GiB.
bool preadAll(int fd, char *into, size_t bytes, off_t at) {
  while (bytes) {
    ssize_t got = pread(fd, into, bytes, at);
    if (got < 0 && errno == EINTR)
      continue;
    if (got <= 0)
      return false;
    into += got;
    bytes -= size_t(got);
    at += got;
  }
  return true;
}

float halfToFloat(uint16_t h) {
  uint32_t sign = uint32_t(h & 0x8000) << 16, exp = (h >> 10) & 0x1f, mant = h & 0x3ff;
  uint32_t bits;
  if (exp == 0) {
    if (mant == 0) {
      bits = sign;
    } else { // subnormal: renormalize
      exp = 127 - 15 + 1;
      while (!(mant & 0x400)) {
        mant <<= 1;
        --exp;
      }
      bits = sign | (exp << 23) | ((mant & 0x3ff) << 13);
    }
  } else if (exp == 31) {
    bits = sign | 0x7f800000 | (mant << 13);
  } else {
    bits = sign | ((exp + 127 - 15) << 23) | (mant << 13);
  }
  float f;
  std::memcpy(&f, &bits, 4);
  return f;
}

std::string shapeString(const std::vector<int64_t> &shape) {
  std::string s = "[";
  for (size_t i = 0; i < shape.size(); ++i)
    s += (i ? ", " : "") + std::to_string(shape[i]);
  return s + "]";
}

bool isDirectory(const std::string &path) {
  struct stat st;
  return stat(path.c_str(), &st) == 0 && S_ISDIR(st.st_mode);
}

bool exists(const std::string &path) {
  struct stat st;
  return stat(path.c_str(), &st) == 0;
}

/// The size of the file open as `fd`, which must be a regular file.
bool regularFileSize(int fd, const std::string &path, uint64_t &size, std::string &error) {
  struct stat st;
  if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    error = path + " is not a regular file";
    return false;
  }
  size = uint64_t(st.st_size);
  return true;
}

/// The header's length, from the file's first 8 bytes: it must fit in the file and under
/// safetensors' limit.
bool readHeaderLength(int fd, const std::string &path, uint64_t fileSize, uint64_t &headerSize,
                      std::string &error) {
  unsigned char length[8];
  if (fileSize < 8 || pread(fd, length, 8, 0) != 8) {
    error = path +
            ": truncated safetensors file (no complete header): " + std::to_string(fileSize) +
            " bytes";
    return false;
  }
  headerSize = 0; // little-endian, whatever this machine is
  for (int i = 7; i >= 0; --i)
    headerSize = headerSize << 8 | length[i];
  if (headerSize > fileSize - 8) {
    error = path + ": the header length " + std::to_string(headerSize) + " is larger than the " +
            std::to_string(fileSize - 8) + " bytes after it (a truncated or damaged file)";
    return false;
  }
  if (headerSize > kMaxHeaderBytes) {
    error = path + ": the header length " + std::to_string(headerSize) +
            " is over safetensors' limit of " + std::to_string(kMaxHeaderBytes) + " bytes";
    return false;
  }
  return true;
}

/// The JSON header of `headerSize` bytes after the length: an object of tensors.
bool readHeaderJson(int fd, const std::string &path, uint64_t headerSize, nlohmann::json &json,
                    std::string &error) {
  std::string header(headerSize, '\0');
  if (pread(fd, header.data(), headerSize, 8) != ssize_t(headerSize)) {
    error = path + ": truncated safetensors header";
    return false;
  }
  try {
    json = parseUntrustedJson(header, kMaxJsonDepth);
  } catch (const std::exception &e) {
    error = path + ": malformed safetensors header: " + e.what();
    return false;
  }
  if (!json.is_object()) {
    error =
        path + ": malformed safetensors header: " + json.type_name() + ", not an object of tensors";
    return false;
  }
  return true;
}

/// Reads a tensor's sizes into `shape` and multiplies them into `totalBits` (on entry the
/// bits of one element): the element count, in bits, must not overflow before it is compared
/// with the offsets. `what` names the tensor in errors.
bool readShape(const nlohmann::json &sizes, const std::string &what, std::vector<int64_t> &shape,
               uint64_t &totalBits, std::string &error) {
  for (const nlohmann::json &d : sizes) {
    uint64_t size = 0;
    if (!readCount(d, size)) {
      error = what + " has a malformed shape: its sizes must be non-negative integers";
      return false;
    }
    shape.push_back(int64_t(size));
    if (totalBits && size && __builtin_mul_overflow(totalBits, size, &totalBits)) {
      error = what + " has shape " + shapeString(shape) + ", too large for any file";
      return false;
    }
    if (!size)
      totalBits = 0;
  }
  return true;
}

/// Reads tensor `name`'s data_offsets [begin, end], which count from the header's end and
/// must lie in the `dataSize` bytes of data that follow it in `path`.
bool readDataOffsets(const nlohmann::json &offsets, const std::string &path,
                     const std::string &name, uint64_t dataSize, uint64_t &begin, uint64_t &end,
                     std::string &error) {
  if (offsets.size() != 2 || !readCount(offsets[0], begin) || !readCount(offsets[1], end)) {
    error = path + ": tensor " + name +
            " has malformed data_offsets: they must be two non-negative integers " +
            "[begin, end]";
    return false;
  }
  if (end < begin) {
    error = path + ": tensor " + name + " has data_offsets " + offsetsString(begin, end) +
            " that end before they begin";
    return false;
  }
  if (end > dataSize) {
    error = "tensor " + name + " is truncated: its data runs past the end of " + path +
            " (data_offsets " + offsetsString(begin, end) + ", but the data holds " +
            std::to_string(dataSize) + " bytes)";
    return false;
  }
  return true;
}

/// Checks that [begin, end) holds exactly the `totalBits` of tensor `info` (of `bits` an
/// element), and begins on a whole element.
bool checkDataExtent(const std::string &what, const TensorInfo &info, unsigned bits,
                     uint64_t totalBits, uint64_t begin, uint64_t end, std::string &error) {
  if (totalBits % 8 || (end - begin) != totalBits / 8) {
    error = what + " of shape " + shapeString(info.shape) + " and dtype " + info.dtype +
            " needs " +
            (totalBits % 8 ? std::to_string(totalBits) + " bits"
                           : std::to_string(totalBits / 8) + " bytes") +
            ", but its data_offsets " + offsetsString(begin, end) + " hold " +
            std::to_string(end - begin);
    return false;
  }
  if (bits >= 8 && begin % (bits / 8)) {
    error = what + " is misaligned: its data begins at offset " + std::to_string(begin) +
            ", not a multiple of its dtype " + info.dtype + "'s " + std::to_string(bits / 8) +
            " bytes";
    return false;
  }
  return true;
}

/// Reads the header entry of tensor `name` in `path` into `info`, checking it against the
/// `dataSize` bytes of data, which begin at `dataStart` in the file.
bool readTensorEntry(const std::string &path, const std::string &name,
                     const nlohmann::json &entry, uint64_t dataStart, uint64_t dataSize,
                     TensorInfo &info, std::string &error) {
  std::string what = path + ": tensor " + name;
  const nlohmann::json *dtype =
      entry.is_object() && entry.contains("dtype") ? &entry["dtype"] : nullptr;
  const nlohmann::json *shape =
      entry.is_object() && entry.contains("shape") ? &entry["shape"] : nullptr;
  const nlohmann::json *offsets =
      entry.is_object() && entry.contains("data_offsets") ? &entry["data_offsets"] : nullptr;
  if (!dtype || !dtype->is_string() || !shape || !shape->is_array() || !offsets ||
      !offsets->is_array()) {
    error = what + " has a malformed header entry: it needs a dtype string and shape and "
                   "data_offsets arrays";
    return false;
  }
  info.dtype = dtype->get<std::string>();
  unsigned bits = dtypeBits(info.dtype);
  if (!bits) {
    error = what + " has dtype '" + info.dtype + "', which is not a safetensors dtype";
    return false;
  }
  uint64_t totalBits = bits, begin = 0, end = 0;
  if (!readShape(*shape, what, info.shape, totalBits, error) ||
      !readDataOffsets(*offsets, path, name, dataSize, begin, end, error) ||
      !checkDataExtent(what, info, bits, totalBits, begin, end, error))
    return false;
  info.begin = dataStart + begin;
  info.end = dataStart + end;
  info.file = path;
  return true;
}

/// A tensor by name and where its data is.
using Extent = std::pair<std::string, const TensorInfo *>;

/// Two tensors may not share bytes: writing one would change the other. Sorts `extents` (the
/// tensors of `path`, whose data begins at `dataStart`) by where they begin.
bool checkNoOverlap(const std::string &path, uint64_t dataStart, std::vector<Extent> &extents,
                    std::string &error) {
  std::sort(extents.begin(), extents.end(),
            [](const auto &a, const auto &b) { return a.second->begin < b.second->begin; });
  const Extent *last = nullptr;
  for (const auto &extent : extents) {
    if (extent.second->begin == extent.second->end)
      continue; // an empty tensor holds no bytes
    if (last && extent.second->begin < last->second->end) {
      error = path + ": tensors " + last->first + " " +
              offsetsString(last->second->begin - dataStart, last->second->end - dataStart) +
              " and " + extent.first + " " +
              offsetsString(extent.second->begin - dataStart, extent.second->end - dataStart) +
              " overlap";
      return false;
    }
    last = &extent;
  }
  return true;
}

} // namespace

SliceSpec SliceSpec::forRank(int rank, int tp) const {
  SliceSpec mine = *this;
  if (dim < 0)
    return mine;
  if (ranks.empty()) {
    mine.piece = rank * chunks / tp;
    return mine;
  }
  mine.offsets = {ranks[2 * size_t(rank)]};
  mine.sizes = {ranks[2 * size_t(rank) + 1]};
  mine.chunks = 1;
  mine.piece = 0;
  return mine;
}

int64_t SliceSpec::heldElements(const std::vector<int64_t> &shape) const {
  int64_t held = 0;
  forEachRun(shape, *this, [&](uint64_t, int64_t count, int64_t) { held += count; });
  return held;
}

std::vector<int64_t> SliceSpec::localShape(const std::vector<int64_t> &shape) const {
  std::vector<int64_t> local = shape;
  if (dim < 0)
    return local;
  if (extent > 0) {
    local[dim] = extent;
    return local;
  }
  local[dim] = 0;
  for (int64_t size : sizes)
    local[dim] += pieceSize(size, chunks);
  return local;
}

std::unique_ptr<Checkpoint> Checkpoint::open(const std::string &path, std::string &error) {
  std::unique_ptr<Checkpoint> ckpt(new Checkpoint());
  std::string ggufError;
  if (std::string gguf = ggufPathOf(path, ggufError); !gguf.empty()) {
    ckpt->gguf_ = GgufModel::open(gguf, error);
    if (!ckpt->gguf_)
      return nullptr;
    for (const auto &[name, mapped] : ckpt->gguf_->tensors()) {
      TensorInfo &info = ckpt->tensors[name];
      // A tensor rebuilt in another layout is read in f32 only (GgufModel::readBlocks).
      info.dtype = ggmlTypeInfo(mapped.rearranged() ? GgmlType::F32 : mapped.tensor->type)->name;
      info.shape = ggufModelShape(mapped);
      info.begin = mapped.tensor->offset;
      info.end = mapped.tensor->offset + mapped.tensor->bytes;
      info.file = gguf;
    }
    return ckpt;
  }
  if (!ggufError.empty()) {
    error = ggufError;
    return nullptr;
  }
  std::string target = path;
  if (isDirectory(path)) {
    if (exists(path + "/model.safetensors.index.json"))
      target = path + "/model.safetensors.index.json";
    else if (exists(path + "/model.safetensors"))
      target = path + "/model.safetensors";
    else {
      error = path + ": no model.safetensors, model.safetensors.index.json or .gguf file in "
                     "this directory";
      return nullptr;
    }
  }
  if (target.size() >= 5 && target.compare(target.size() - 5, 5, ".json") == 0) {
    std::string text;
    if (!readFile(target, text)) {
      error = "cannot read " + target;
      return nullptr;
    }
    nlohmann::json index;
    try {
      index = parseUntrustedJson(text, kMaxJsonDepth);
    } catch (const std::exception &e) {
      error = target + ": not a safetensors index: " + e.what();
      return nullptr;
    }
    if (!index.is_object() || !index.contains("weight_map") || !index["weight_map"].is_object()) {
      error = target + ": a safetensors index needs a weight_map object";
      return nullptr;
    }
    std::string dir = target.substr(0, target.find_last_of('/') + 1);
    // Shard names are file names in the index's directory: the index may not reach outside
    // it. (Symbolic links are followed: a Hugging Face cache links every file into blobs/.)
    std::map<std::string, std::string> shards; // file -> the first tensor the index puts there
    for (auto &[name, file] : index["weight_map"].items()) {
      if (!file.is_string()) {
        error = target + ": weight_map gives tensor " + name + " a value of type " +
                file.type_name() + ", not a shard file name";
        return nullptr;
      }
      std::string shard = file.get<std::string>();
      bool escapes = shard.empty() || shard[0] == '/';
      std::stringstream parts(shard);
      for (std::string part; std::getline(parts, part, '/');)
        escapes |= part == "..";
      if (escapes) {
        error = target + ": tensor " + name + " is in shard '" + shard +
                "', which is not a file of the checkpoint's directory";
        return nullptr;
      }
      shards.emplace(dir + shard, name);
    }
    for (auto &[file, tensor] : shards)
      if (!ckpt->addFile(file, error)) {
        error = target + " names shard " + file + " (holding " + tensor + "): " + error;
        return nullptr;
      }
    for (auto &[name, file] : index["weight_map"].items())
      if (const TensorInfo *info = ckpt->find(name);
          !info || info->file != dir + file.get<std::string>()) {
        error = target + " puts tensor " + name + " in " + file.get<std::string>() +
                (info ? ", but it is in " + info->file : ", which does not hold it");
        return nullptr;
      }
    return ckpt;
  }
  if (!ckpt->addFile(target, error))
    return nullptr;
  return ckpt;
}

Checkpoint::~Checkpoint() {
  for (auto &[_, fd] : fds)
    ::close(fd);
}

int Checkpoint::fd(const std::string &file) { return fds.at(file); }

bool Checkpoint::addFile(const std::string &path, std::string &error) {
  int fd = ::open(path.c_str(), O_RDONLY);
  if (fd < 0) {
    error = "cannot open " + path + ": " + std::strerror(errno);
    return false;
  }
  fds[path] = fd;
  uint64_t fileSize = 0, headerSize = 0;
  if (!regularFileSize(fd, path, fileSize, error))
    return false;
  sizes[path] = fileSize;
  nlohmann::json json;
  if (!readHeaderLength(fd, path, fileSize, headerSize, error) ||
      !readHeaderJson(fd, path, headerSize, json, error))
    return false;
  uint64_t dataStart = 8 + headerSize; // offsets count from the header's end
  uint64_t dataSize = fileSize - 8 - headerSize;
  std::vector<Extent> extents;
  for (auto &[name, entry] : json.items()) {
    if (name == "__metadata__")
      continue;
    TensorInfo info;
    if (!readTensorEntry(path, name, entry, dataStart, dataSize, info, error))
      return false;
    if (const TensorInfo *other = find(name)) {
      error = "tensor " + name + " is in both " + other->file + " and " + path;
      return false;
    }
    extents.push_back({name, &(tensors[name] = info)});
  }
  return checkNoOverlap(path, dataStart, extents, error);
}

const TensorInfo *Checkpoint::find(const std::string &name) const {
  auto it = tensors.find(name);
  return it == tensors.end() ? nullptr : &it->second;
}

bool Checkpoint::checkData(const std::string &name, const TensorInfo &info,
                           uint64_t elements, std::string &error) {
  size_t width = dtypeBytes(info.dtype);
  if (!width) {
    error = "tensor " + name + " has dtype " + info.dtype + "; tpc reads F32, F16 and BF16";
    return false;
  }
  if (info.end - info.begin != elements * width || info.end > sizes[info.file]) {
    error = "tensor " + name + " is truncated: its data runs past the end of " + info.file;
    return false;
  }
  return true;
}

bool Checkpoint::read(const std::string &name, const std::vector<int64_t> &shape,
                      const SliceSpec &spec, float *out, uint64_t &bytesRead,
                      std::string &error, const std::vector<std::string> &sources) {
  if (gguf_ && (sources.empty() || gguf_->find(name)))
    return gguf_->read(name, shape, spec, out, bytesRead, error);
  uint64_t elements = uint64_t(product(shape, 0, shape.size()));
  // The pieces the tensor is stored in: itself, or the sources it stacks.
  std::vector<std::pair<std::string, const TensorInfo *>> parts;
  if (const TensorInfo *info = find(name); info || sources.empty()) {
    if (!info) {
      error = "tensor " + name + " is missing from the checkpoint";
      return false;
    }
    if (info->shape != shape) {
      error = "tensor " + name + " has shape " + shapeString(info->shape) +
              ", the model expects " + shapeString(shape);
      return false;
    }
    parts.push_back({name, info});
  } else {
    for (const std::string &source : sources) {
      const TensorInfo *piece = find(source);
      if (!piece) {
        error = "tensor " + name + " is missing from the checkpoint, and so is " + source +
                ", one of the " + std::to_string(sources.size()) + " tensors it stacks";
        return false;
      }
      uint64_t count = uint64_t(product(piece->shape, 0, piece->shape.size()));
      if (count * sources.size() != elements ||
          (shape.size() > 1 && !piece->shape.empty() && piece->shape.back() != shape.back())) {
        error = "tensor " + source + " has shape " + shapeString(piece->shape) + ", but " +
                std::to_string(sources.size()) + " of them must stack into " + name + " " +
                shapeString(shape);
        return false;
      }
      parts.push_back({source, piece});
    }
  }
  uint64_t partElements = elements / parts.size();
  if (gguf_) {
    // Pieces a GGUF file holds apart (Qwen2-MoE's shared expert, stacked as one expert):
    // each read whole, in fp32, then this rank's slice cut from them.
    std::vector<float> whole(elements);
    for (size_t i = 0; i < parts.size(); ++i)
      if (!gguf_->read(parts[i].first, parts[i].second->shape, SliceSpec(),
                       whole.data() + i * partElements, bytesRead, error))
        return false;
    forEachRun(shape, spec, [&](uint64_t first, int64_t count, int64_t padded) {
      std::copy(whole.begin() + int64_t(first), whole.begin() + int64_t(first) + count, out);
      std::fill(out + count, out + padded, 0.0f);
      out += padded;
    });
    return true;
  }
  for (const auto &[partName, info] : parts)
    if (!checkData(partName, *info, partElements, error))
      return false;

  std::vector<int> partFds; // looked up once: a sharded tensor is read in many runs
  for (const auto &part : parts)
    partFds.push_back(fd(part.second->file));
  std::vector<char> buffer;
  // Reads `count` elements from element `first` of part `index`, converted to fp32.
  auto readRun = [&](size_t index, uint64_t first, int64_t count, float *to) {
    const std::string &partName = parts[index].first;
    const TensorInfo &info = *parts[index].second;
    size_t width = dtypeBytes(info.dtype);
    bool fp32 = info.dtype == "F32"; // read straight into place; the rest through `buffer`
    if (!fp32)
      buffer.resize(size_t(count) * width);
    char *into = fp32 ? reinterpret_cast<char *>(to) : buffer.data();
    size_t bytes = size_t(count) * width;
    off_t at = off_t(info.begin + first * width);
    if (count && !preadAll(partFds[index], into, bytes, at)) {
      error = "tensor " + partName + ": short read from " + info.file;
      return false;
    }
    bytesRead += bytes;
    // The dtype is decided once per run, not per element.
    const char *p = buffer.data();
    if (info.dtype == "BF16") {
      for (int64_t i = 0; i < count; ++i) {
        uint16_t h;
        std::memcpy(&h, p + 2 * i, 2);
        uint32_t bits = uint32_t(h) << 16;
        std::memcpy(to + i, &bits, 4);
      }
    } else if (!fp32) {
      for (int64_t i = 0; i < count; ++i) {
        uint16_t h;
        std::memcpy(&h, p + 2 * i, 2);
        to[i] = halfToFloat(h);
      }
    }
    return true;
  };
  bool ok = true;
  forEachRun(shape, spec, [&](uint64_t first, int64_t count, int64_t padded) {
    // A run may cross from one stacked piece into the next.
    for (int64_t done = 0; ok && done < count;) {
      uint64_t at = first + uint64_t(done);
      size_t part = size_t(at / partElements);
      uint64_t offset = at % partElements;
      int64_t take = int64_t(std::min<uint64_t>(uint64_t(count - done), partElements - offset));
      ok = readRun(part, offset, take, out + done);
      done += take;
    }
    if (!ok)
      return;
    std::fill(out + count, out + padded, 0.0f); // padding of a short last piece
    out += padded;
  });
  return ok;
}

bool Checkpoint::readBlocks(const std::string &name, const std::vector<int64_t> &shape,
                            const SliceSpec &spec, DType type, void *out, uint64_t &bytesRead,
                            std::string &error) {
  if (!gguf_) {
    error = "tensor " + name + " is held as " + dtypeName(type) +
            ", blocks only a GGUF file holds, but the checkpoint is safetensors";
    return false;
  }
  return gguf_->readBlocks(name, shape, spec, type, out, bytesRead, error);
}

} // namespace tpcrt
