// Weights from a seed: a hash of (seed, name, element index), so any rank can generate just
// its slice and every tp sees the same model.
#include "tpcrt/weights.h"

#include "tpcrt/random_weight.h"

#include "tpcrt/slices.h"

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <fstream>

namespace tpcrt {

float randomWeight(uint64_t seed, const std::string &name, uint64_t index) {
  return randomWeightAt(randomWeightKey(seed, name), index);
}

void generateSlice(uint64_t seed, const std::string &name, const std::vector<int64_t> &shape,
                   const SliceSpec &spec, float *out) {
  RandomWeightKey key = randomWeightKey(seed, name);
  forEachRun(shape, spec, [&](uint64_t first, int64_t count, int64_t padded) {
    for (int64_t i = 0; i < count; ++i)
      out[i] = randomWeightAt(key, first + uint64_t(i));
    std::fill(out + count, out + padded, 0.0f);
    out += padded;
  });
}

bool writeRandomCheckpoint(const std::string &path, uint64_t seed,
                           const std::vector<std::pair<std::string, std::vector<int64_t>>> &tensors,
                           bool bf16, std::string &error) {
  // Header: {"name": {"dtype", "shape", "data_offsets"}} padded with spaces to 8 bytes.
  std::string header = "{";
  uint64_t offset = 0;
  size_t width = bf16 ? 2 : 4;
  for (size_t i = 0; i < tensors.size(); ++i) {
    uint64_t elements = 1;
    std::string shape;
    for (size_t d = 0; d < tensors[i].second.size(); ++d) {
      elements *= uint64_t(tensors[i].second[d]);
      shape += (d ? "," : "") + std::to_string(tensors[i].second[d]);
    }
    header += (i ? "," : "") + std::string("\"") + tensors[i].first + "\":{\"dtype\":\"" +
              (bf16 ? "BF16" : "F32") + "\",\"shape\":[" + shape + "],\"data_offsets\":[" +
              std::to_string(offset) + "," + std::to_string(offset + elements * width) + "]}";
    offset += elements * width;
  }
  header += "}";
  header.append((8 - header.size() % 8) % 8, ' ');
  std::ofstream out(path, std::ios::binary);
  if (!out) {
    error = "cannot write " + path + ": " + std::strerror(errno);
    return false;
  }
  uint64_t size = header.size();
  out.write(reinterpret_cast<const char *>(&size), 8);
  out << header;
  for (const auto &[name, shape] : tensors) {
    uint64_t elements = 1;
    for (int64_t d : shape)
      elements *= uint64_t(d);
    std::vector<char> data(elements * width);
    for (uint64_t i = 0; i < elements; ++i) {
      float v = randomWeight(seed, name, i);
      if (bf16) {
        uint32_t bits;
        std::memcpy(&bits, &v, 4);
        uint16_t h = uint16_t((bits + 0x7fff + ((bits >> 16) & 1)) >> 16); // round to nearest even
        std::memcpy(data.data() + i * 2, &h, 2);
      } else {
        std::memcpy(data.data() + i * 4, &v, 4);
      }
    }
    out.write(data.data(), std::streamsize(data.size()));
  }
  out.close(); // the last buffer reaches the disk here, and may not fit
  if (!out) {
    error = "could not write all of " + path + ": " + std::strerror(errno);
    std::remove(path.c_str()); // no half checkpoint that looks whole
    return false;
  }
  return true;
}

} // namespace tpcrt
