// tpc-gguf: what tpcrt reads of a GGUF file, for people and for the tests that
// compare its dequantization with gguf-py's.
//
//   tpc-gguf info FILE                    the metadata (long strings cut, arrays summarized)
//                                         and the tensor table
//   tpc-gguf dequant FILE TENSOR OUT.bin [TENSOR OUT.bin]...
//                                         each tensor as fp32 (little-endian, row-major):
//                                         several from one opening of the file
//   tpc-gguf blocks TYPE IN.bin OUT.bin   raw blocks of ggml type TYPE (a name: Q4_K) as fp32
//   tpc-gguf quantize TYPE IN.f32 OUT.bin fp32 values into Q8_0 or Q4_0 blocks
#include "tpcrt/gguf.h"

#include "tpcrt/file.h"

#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

using namespace tpcrt;

namespace {

int usage() {
  std::fprintf(stderr, "usage: tpc-gguf info FILE\n"
                       "       tpc-gguf dequant FILE TENSOR OUT.bin [TENSOR OUT.bin]...\n"
                       "       tpc-gguf blocks TYPE IN.bin OUT.bin\n"
                       "       tpc-gguf quantize TYPE IN.f32 OUT.bin\n");
  return 2;
}

std::string quoted(const std::string &s, size_t limit = 60) {
  std::string out = "\"";
  for (size_t i = 0; i < s.size() && i < limit; ++i) {
    unsigned char c = static_cast<unsigned char>(s[i]);
    if (c == '\n')
      out += "\\n";
    else if (c == '"' || c == '\\')
      out += std::string("\\") + char(c);
    else if (c < 0x20) {
      char hex[8];
      std::snprintf(hex, sizeof hex, "\\x%02x", c);
      out += hex;
    } else
      out += char(c);
  }
  out += "\"";
  if (s.size() > limit)
    out += "... (" + std::to_string(s.size()) + " bytes)";
  return out;
}

std::string scalar(const GgufValue &v) {
  switch (v.type) {
  case GgufValueType::I8:
  case GgufValueType::I16:
  case GgufValueType::I32:
  case GgufValueType::I64:
    return std::to_string(v.i);
  case GgufValueType::F32:
  case GgufValueType::F64: {
    char text[32];
    std::snprintf(text, sizeof text, "%.9g", v.f);
    return text;
  }
  case GgufValueType::Bool:
    return v.u ? "true" : "false";
  case GgufValueType::String:
    return quoted(v.s);
  default:
    return std::to_string(v.u);
  }
}

std::string describe(const GgufValue &v) {
  if (v.type != GgufValueType::Array)
    return std::string(ggufValueTypeName(v.type)) + " " + scalar(v);
  std::string out = std::string("array of ") + std::to_string(v.size()) + " " +
                    ggufValueTypeName(v.elementType) + " [";
  size_t shown = std::min<size_t>(v.size(), 4);
  for (size_t i = 0; i < shown; ++i) {
    out += i ? ", " : "";
    if (!v.strings.empty())
      out += quoted(v.strings[i], 20);
    else if (!v.items.empty())
      out += "array of " + std::to_string(v.items[i].size());
    else {
      GgufValue element;
      element.type = v.elementType;
      uint64_t word = v.words[i];
      element.u = word;
      element.i = int64_t(word);
      std::memcpy(&element.f, &word, 8);
      out += scalar(element);
    }
  }
  return out + (v.size() > shown ? ", ...]" : "]");
}

std::string dims(const std::vector<int64_t> &d) {
  std::string s = "[";
  for (size_t i = 0; i < d.size(); ++i)
    s += (i ? ", " : "") + std::to_string(d[i]);
  return s + "]";
}

bool writeFloats(const std::string &path, const std::vector<float> &values) {
  FILE *f = std::fopen(path.c_str(), "wb");
  if (!f)
    return false;
  bool ok = std::fwrite(values.data(), sizeof(float), values.size(), f) ==
            values.size();
  return std::fclose(f) == 0 && ok;
}

} // namespace

int main(int argc, char **argv) {
  if (argc < 3)
    return usage();
  std::string command = argv[1], error;
  if (command == "blocks" && argc == 5) {
    const GgmlTypeInfo *info = nullptr;
    for (uint32_t id = 0; id < 64 && !info; ++id)
      if (const GgmlTypeInfo *candidate = ggmlTypeInfo(id))
        if (candidate->name == std::string(argv[2]))
          info = candidate;
    if (!info) {
      std::fprintf(stderr, "tpc-gguf: no ggml type %s\n", argv[2]);
      return 1;
    }
    std::string raw;
    if (!readFile(argv[3], raw)) {
      std::fprintf(stderr, "tpc-gguf: cannot read %s\n", argv[3]);
      return 1;
    }
    if (raw.size() % info->blockBytes) {
      std::fprintf(
          stderr,
          "tpc-gguf: %s: %zu bytes are not whole %s blocks of %u bytes\n",
          argv[3], raw.size(), info->name, info->blockBytes);
      return 1;
    }
    std::vector<float> out(raw.size() / info->blockBytes * info->blockElements);
    if (!dequantize(info->type, raw.data(), int64_t(out.size()), out.data(),
                    error)) {
      std::fprintf(stderr, "tpc-gguf: %s\n", error.c_str());
      return 1;
    }
    if (!writeFloats(argv[4], out)) {
      std::fprintf(stderr, "tpc-gguf: cannot write %s\n", argv[4]);
      return 1;
    }
    return 0;
  }
  if (command == "quantize" && argc == 5) { // fp32 values into Q8_0 or Q4_0 blocks
    std::string raw;
    if (!readFile(argv[3], raw) || raw.size() % (32 * sizeof(float))) {
      std::fprintf(stderr, "tpc-gguf: %s: not whole blocks of 32 float32 values\n", argv[3]);
      return 1;
    }
    GgmlType type = std::string(argv[2]) == "Q8_0" ? GgmlType::Q8_0 : GgmlType::Q4_0;
    if (type == GgmlType::Q4_0 && std::string(argv[2]) != "Q4_0") {
      std::fprintf(stderr, "tpc-gguf: tpc quantizes to Q8_0 and Q4_0, not %s\n", argv[2]);
      return 1;
    }
    std::vector<float> values(raw.size() / sizeof(float));
    std::memcpy(values.data(), raw.data(), raw.size());
    std::string blocks(values.size() / 32 * ggmlTypeInfo(type)->blockBytes, '\0');
    if (!quantize(type, values.data(), int64_t(values.size()), blocks.data(), error)) {
      std::fprintf(stderr, "tpc-gguf: %s\n", error.c_str());
      return 1;
    }
    std::FILE *out = std::fopen(argv[4], "wb");
    bool written = out && std::fwrite(blocks.data(), 1, blocks.size(), out) == blocks.size();
    if (out)
      written &= std::fclose(out) == 0;
    if (!written) {
      std::fprintf(stderr, "tpc-gguf: cannot write %s\n", argv[4]);
      return 1;
    }
    return 0;
  }
  std::unique_ptr<GgufFile> file = GgufFile::open(argv[2], error);
  if (!file) {
    std::fprintf(stderr, "tpc-gguf: %s\n", error.c_str());
    return 1;
  }
  if (command == "info" && argc == 3) {
    std::printf(
        "GGUF version %u, alignment %llu, data from byte %llu of %llu\n",
        file->version(), (unsigned long long)file->alignment(),
        (unsigned long long)file->dataOffset(),
        (unsigned long long)file->fileSize());
    std::printf("%zu metadata:\n", file->keys().size());
    for (const std::string &key : file->keys())
      std::printf("  %s: %s\n", key.c_str(),
                  describe(*file->find(key)).c_str());
    std::printf(
        "%zu tensors (name, type, ne in ggml order, shape, offset, bytes):\n",
        file->tensors().size());
    for (const GgufTensor &t : file->tensors())
      std::printf("  %s %s ne=%s shape=%s offset=%llu bytes=%llu\n",
                  t.name.c_str(), ggmlTypeInfo(t.type)->name,
                  dims(t.ne).c_str(), dims(t.shape).c_str(),
                  (unsigned long long)t.offset, (unsigned long long)t.bytes);
    return 0;
  }
  if (command == "dequant" && argc >= 5 && (argc - 3) % 2 == 0) {
    std::vector<float> out;
    for (int i = 3; i < argc; i += 2) {
      const GgufTensor *t = file->tensor(argv[i]);
      if (!t) {
        std::fprintf(stderr, "tpc-gguf: %s: no tensor %s\n", argv[2], argv[i]);
        return 1;
      }
      if (!file->readRowsF32(t->name, 0, t->rows, out, error)) {
        std::fprintf(stderr, "tpc-gguf: %s\n", error.c_str());
        return 1;
      }
      if (!writeFloats(argv[i + 1], out)) {
        std::fprintf(stderr, "tpc-gguf: cannot write %s\n", argv[i + 1]);
        return 1;
      }
    }
    return 0;
  }
  return usage();
}
