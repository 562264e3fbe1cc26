// Fuzzes the checkpoint reader: the input is a .safetensors file, or, when it starts with
// '{', a model.safetensors.index.json beside a valid shard `a.safetensors` (tensors "w" and
// "b"). Every tensor the reader then lists is read whole and as the second of two row
// pieces, as a tp 2 rank would; errors are the expected outcome, crashes and sanitizer
// reports are not.
#include "tpcrt/weights.h"

#include <cstdint>
#include <cstdlib>
#include <cstdio>
#include <string>
#include <sys/stat.h>
#include <unistd.h>
#include <vector>

namespace {

/// The files the fuzzer writes into its directory, which goes when the process exits.
const char *const kFiles[] = {"/a.safetensors", "/x.safetensors", "/model.safetensors.index.json"};

std::string &made() {
  static std::string dir;
  return dir;
}

void removeDirectory() {
  for (const char *file : kFiles)
    unlink((made() + file).c_str());
  rmdir(made().c_str());
}

std::string directory() {
  static const std::string dir = [] {
    std::string d = (access("/dev/shm", W_OK) == 0 ? "/dev/shm" : "/tmp") +
                    std::string("/tpc-fuzz-ckpt-") + std::to_string(getpid());
    mkdir(d.c_str(), 0700);
    made() = d;
    std::atexit(removeDirectory);
    std::string error;
    if (!tpcrt::writeRandomCheckpoint(d + "/a.safetensors", 1, {{"w", {4, 6}}, {"b", {6}}},
                                      /*bf16=*/true, error))
      __builtin_trap();
    return d;
  }();
  return dir;
}

void write(const std::string &path, const uint8_t *data, size_t size) {
  FILE *f = std::fopen(path.c_str(), "wb");
  if (!f)
    __builtin_trap();
  if (size)
    std::fwrite(data, 1, size, f);
  std::fclose(f);
}

} // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  std::string dir = directory();
  bool index = size > 0 && data[0] == '{';
  std::string path = dir + (index ? "/model.safetensors.index.json" : "/x.safetensors");
  write(path, data, size);
  std::string error;
  std::unique_ptr<tpcrt::Checkpoint> checkpoint = tpcrt::Checkpoint::open(path, error);
  if (!checkpoint)
    return 0;
  for (const std::string &name : checkpoint->names()) {
    const tpcrt::TensorInfo *info = checkpoint->find(name);
    if (!info)
      __builtin_trap(); // listed but not found
    // What a rank would allocate: the model's shape, which a caller knows independently of
    // the file. Here it is the header's, so it is bounded first (no tensor holds more values
    // than its file has bytes).
    uint64_t elements = 1;
    bool small = true;
    for (int64_t d : info->shape) {
      if (d < 0 || (d > 0 && elements > (uint64_t(1) << 24) / uint64_t(d))) {
        small = false;
        break;
      }
      elements *= uint64_t(d);
    }
    if (!small)
      continue;
    std::vector<float> out(elements + 1);
    uint64_t bytes = 0;
    (void)checkpoint->read(name, info->shape, tpcrt::SliceSpec{}, out.data(), bytes, error);
    if (!info->shape.empty()) {
      tpcrt::SliceSpec half{0, {0}, {info->shape[0]}, 2, 1};
      std::vector<int64_t> local = half.localShape(info->shape);
      uint64_t count = 1;
      for (int64_t d : local)
        count *= uint64_t(d);
      if (count <= elements + 1) {
        std::vector<float> piece(count + 1);
        (void)checkpoint->read(name, info->shape, half, piece.data(), bytes, error);
      }
    }
  }
  return 0;
}
