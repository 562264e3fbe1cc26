// safetensors reading by slices: only this rank's rows, columns or blocks are read, by pread
// of each contiguous run, and converted to fp32.
#include "tpcrt/weights.h"

#include "slices.h"

#include <nlohmann/json.hpp>

#include <cstring>
#include <fcntl.h>
#include <fstream>
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

size_t dtypeBytes(const std::string &dtype) {
  if (dtype == "F32")
    return 4;
  if (dtype == "F16" || dtype == "BF16")
    return 2;
  return 0;
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

} // namespace

std::vector<int64_t> SliceSpec::localShape(const std::vector<int64_t> &shape) const {
  std::vector<int64_t> local = shape;
  if (dim < 0)
    return local;
  local[dim] = 0;
  for (int64_t size : sizes)
    local[dim] += pieceSize(size, chunks);
  return local;
}

std::unique_ptr<Checkpoint> Checkpoint::open(const std::string &path, std::string &error) {
  std::unique_ptr<Checkpoint> ckpt(new Checkpoint());
  std::string target = path;
  if (isDirectory(path)) {
    if (exists(path + "/model.safetensors.index.json"))
      target = path + "/model.safetensors.index.json";
    else if (exists(path + "/model.safetensors"))
      target = path + "/model.safetensors";
    else {
      error = path + ": no model.safetensors or model.safetensors.index.json in this directory";
      return nullptr;
    }
  }
  if (target.size() >= 5 && target.compare(target.size() - 5, 5, ".json") == 0) {
    std::ifstream in(target);
    if (!in) {
      error = "cannot read " + target;
      return nullptr;
    }
    nlohmann::json index;
    try {
      index = nlohmann::json::parse(in);
    } catch (const std::exception &e) {
      error = target + ": not a safetensors index: " + e.what();
      return nullptr;
    }
    if (!index.contains("weight_map") || !index["weight_map"].is_object()) {
      error = target + ": a safetensors index needs a weight_map object";
      return nullptr;
    }
    std::string dir = target.substr(0, target.find_last_of('/') + 1);
    std::map<std::string, bool> shards;
    for (auto &[name, file] : index["weight_map"].items())
      if (file.is_string())
        shards[dir + file.get<std::string>()] = true;
    for (auto &[file, _] : shards)
      if (!ckpt->addFile(file, error))
        return nullptr;
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
  struct stat st;
  fstat(fd, &st);
  sizes[path] = uint64_t(st.st_size);
  uint64_t headerSize = 0;
  if (st.st_size < 8 || pread(fd, &headerSize, 8, 0) != 8 || headerSize > uint64_t(st.st_size) - 8) {
    error = path + ": truncated safetensors file (no complete header)";
    return false;
  }
  std::string header(headerSize, '\0');
  if (pread(fd, header.data(), headerSize, 8) != ssize_t(headerSize)) {
    error = path + ": truncated safetensors header";
    return false;
  }
  nlohmann::json json;
  try {
    json = nlohmann::json::parse(header);
  } catch (const std::exception &e) {
    error = path + ": malformed safetensors header: " + e.what();
    return false;
  }
  for (auto &[name, entry] : json.items()) {
    if (name == "__metadata__")
      continue;
    TensorInfo info;
    try {
      info.dtype = entry.at("dtype").get<std::string>();
      info.shape = entry.at("shape").get<std::vector<int64_t>>();
      auto offsets = entry.at("data_offsets").get<std::vector<uint64_t>>();
      if (offsets.size() != 2 || offsets[1] < offsets[0])
        throw std::runtime_error("bad data_offsets");
      info.begin = 8 + headerSize + offsets[0];
      info.end = 8 + headerSize + offsets[1];
    } catch (const std::exception &e) {
      error = path + ": tensor " + name + " has a malformed header entry: " + e.what();
      return false;
    }
    info.file = path;
    tensors[name] = info;
  }
  return true;
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
    buffer.resize(size_t(count) * width);
    off_t at = off_t(info.begin + first * width);
    if (count && pread(partFds[index], buffer.data(), buffer.size(), at) != ssize_t(buffer.size())) {
      error = "tensor " + partName + ": short read from " + info.file;
      return false;
    }
    bytesRead += buffer.size();
    for (int64_t i = 0; i < count; ++i) {
      const char *p = buffer.data() + size_t(i) * width;
      if (info.dtype == "F32") {
        std::memcpy(to + i, p, 4);
      } else {
        uint16_t h;
        std::memcpy(&h, p, 2);
        if (info.dtype == "BF16") {
          uint32_t bits = uint32_t(h) << 16;
          std::memcpy(to + i, &bits, 4);
        } else {
          to[i] = halfToFloat(h);
        }
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

} // namespace tpcrt
