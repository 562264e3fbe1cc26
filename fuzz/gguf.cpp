// Fuzzes the GGUF reader: the input is a GGUF file. When it opens, every
// metadata getter runs on every key, and the first and last row of each tensor
// (of at most 64 KiB) is read, as fp32 where tpc dequantizes its type; errors
// are the expected outcome, crashes and sanitizer reports are not.
#include "tpcrt/gguf.h"

#include <cstdint>
#include <cstdio>
#include <string>
#include <unistd.h>
#include <vector>

namespace {

std::string path() {
  static const std::string p =
      (access("/dev/shm", W_OK) == 0 ? "/dev/shm" : "/tmp") +
      std::string("/tpc-fuzz-gguf-") + std::to_string(getpid());
  return p;
}

} // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  FILE *f = std::fopen(path().c_str(), "wb");
  if (!f)
    __builtin_trap();
  if (size)
    std::fwrite(data, 1, size, f);
  std::fclose(f);
  std::string error;
  std::unique_ptr<tpcrt::GgufFile> file = tpcrt::GgufFile::open(path(), error);
  if (!file) {
    if (error.empty())
      __builtin_trap(); // every refusal says why
    return 0;
  }
  for (const std::string &key : file->keys()) {
    std::string s;
    int64_t i;
    double d;
    bool b;
    std::vector<std::string> strings;
    std::vector<int64_t> ints;
    std::vector<double> floats;
    file->getString(key, s, error);
    file->getInt(key, i, error, -5, 5);
    file->getFloat(key, d, error);
    file->getBool(key, b, error);
    file->getStrings(key, strings, error);
    file->getInts(key, ints, error);
    file->getFloats(key, floats, error);
  }
  for (const tpcrt::GgufTensor &t : file->tensors()) {
    if (t.rowBytes > (64u << 10))
      continue;
    std::vector<float> values;
    for (int64_t row : {int64_t(0), t.rows - 1})
      if (tpcrt::ggmlTypeInfo(t.type)->dequantizable) {
        if (!file->readRowsF32(t.name, row, 1, values, error) ||
            values.size() != size_t(t.ne[0]))
          __builtin_trap(); // inside the file, checked at open
      }
  }
  return 0;
}
