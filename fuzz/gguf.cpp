// Fuzzes the GGUF reader: the input is a GGUF file. When it opens, every
// metadata getter runs on every key, and the first and last row of each tensor
// (of at most 64 KiB) is read, as fp32 where tpc dequantizes its type; then the
// file as a model (GgufModel: its config, names, and each small tensor read
// whole and as rank 1 of 2's half of its rows) and its tokenizer
// (Tokenizer::fromGguf, encoding and decoding a short text). Errors are the
// expected outcome, crashes and sanitizer reports are not.
#include "tpcrt/gguf.h"
#include "tpcrt/gguf_model.h"
#include "tpcrt/tokenizer.h"

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
  if (std::unique_ptr<tpcrt::GgufModel> model = tpcrt::GgufModel::open(path(), error)) {
    for (const auto &[name, mapped] : model->tensors()) {
      const tpcrt::GgufTensor &t = *mapped.tensor;
      if (t.bytes > (256u << 10) || t.elements > (64 << 10))
        continue;
      std::vector<float> values(size_t(t.elements));
      uint64_t bytes = 0;
      tpcrt::SliceSpec whole;
      if (!model->read(name, t.shape, whole, values.data(), bytes, error))
        __builtin_trap(); // every tensor the model maps is readable
      tpcrt::SliceSpec half;
      half.dim = 0;
      half.offsets = {0};
      half.sizes = {t.shape.empty() ? 1 : t.shape[0]};
      half.chunks = 2;
      half.piece = 1;
      int64_t held = 1;
      for (int64_t d : half.localShape(t.shape))
        held *= d;
      std::vector<float> piece(static_cast<size_t>(held));
      model->read(name, t.shape, half, piece.data(), bytes, error);
    }
  } else if (error.empty()) {
    __builtin_trap();
  }
  if (std::unique_ptr<tpcrt::Tokenizer> tokenizer = tpcrt::Tokenizer::fromGguf(*file, error)) {
    if (std::optional<std::vector<int64_t>> ids = tokenizer->encode("Hello wörld 12 ", true, error))
      tokenizer->decode(*ids, false);
  } else if (error.empty()) {
    __builtin_trap();
  }
  return 0;
}
