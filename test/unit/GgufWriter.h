// GGUF files written byte by byte for the unit tests of the reader (GgufTest), of GGUF files
// as models (GgufModelTest) and of their tokenizers (GgufTokenizerTest): little-endian
// integers, strings, a file built from metadata pairs, tensor infos and data, and a file
// written to the tests' temporary directory.
#ifndef TPC_TEST_UNIT_GGUFWRITER_H
#define TPC_TEST_UNIT_GGUFWRITER_H

#include "tpcrt/gguf.h"

#include <gtest/gtest.h>

#include <unistd.h>

#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

namespace tpc::test {

inline void put32(std::string &s, uint32_t v) {
  for (int i = 0; i < 4; ++i)
    s += char(v >> (8 * i));
}
inline void put64(std::string &s, uint64_t v) {
  for (int i = 0; i < 8; ++i)
    s += char(v >> (8 * i));
}
inline void putString(std::string &s, const std::string &v) {
  put64(s, v.size());
  s += v;
}
inline void putFloat(std::string &s, float v) {
  uint32_t bits;
  std::memcpy(&bits, &v, 4);
  put32(s, bits);
}

/// A GGUF file built piece by piece: metadata pairs, tensor infos, data.
struct GgufWriter {
  uint32_t version = 3;
  std::string kv, infos, data;
  uint64_t kvCount = 0, tensorCount = 0, alignment = 32;
  /// When set, the header's counts (for hostile files).
  bool rawCounts = false;
  uint64_t tensorCountOverride = 0, kvCountOverride = 0;

  /// A key and its value type; the caller appends the value to `kv`.
  std::string &key(const std::string &name, tpcrt::GgufValueType type) {
    putString(kv, name);
    put32(kv, uint32_t(type));
    ++kvCount;
    return kv;
  }
  void str(const std::string &name, const std::string &value) {
    putString(key(name, tpcrt::GgufValueType::String), value);
  }
  void u32(const std::string &name, uint32_t value) {
    put32(key(name, tpcrt::GgufValueType::U32), value);
  }
  /// A tensor info only: its data is the caller's, at `offset` from the data's start.
  void tensor(const std::string &name, std::vector<uint64_t> ne, tpcrt::GgmlType type,
              uint64_t offset) {
    putString(infos, name);
    put32(infos, uint32_t(ne.size()));
    for (uint64_t d : ne)
      put64(infos, d);
    put32(infos, uint32_t(type));
    put64(infos, offset);
    ++tensorCount;
  }
  /// A tensor and its data (ne: GGUF order, fastest first), at the next aligned offset.
  void tensor(const std::string &name, std::vector<uint64_t> ne, tpcrt::GgmlType type,
              const std::string &bytes) {
    while (data.size() % alignment)
      data += '\0';
    tensor(name, std::move(ne), type, uint64_t(data.size()));
    data += bytes;
  }
  std::string bytes() const {
    std::string s = "GGUF";
    put32(s, version);
    put64(s, rawCounts ? tensorCountOverride : tensorCount);
    put64(s, rawCounts ? kvCountOverride : kvCount);
    s += kv + infos;
    while (s.size() % alignment)
      s += '\0';
    return s + data;
  }
};

/// `bytes` written to the tests' temporary directory as NAME; its path.
inline std::string writeTemp(const std::string &bytes, const std::string &name) {
  // The process's id in the name: two test runs at once (the plain and the sanitizer build's,
  // or a developer's beside CI's) must not write each other's files.
  std::string path =
      testing::TempDir() + "tpc-unit-" + std::to_string(::getpid()) + "-" + name;
  FILE *f = std::fopen(path.c_str(), "wb");
  EXPECT_NE(f, nullptr);
  if (f && !bytes.empty())
    std::fwrite(bytes.data(), 1, bytes.size(), f);
  if (f)
    std::fclose(f);
  return path;
}

} // namespace tpc::test

#endif // TPC_TEST_UNIT_GGUFWRITER_H
