// Weights for libtpcrt: a safetensors checkpoint (one file, or an index and its shards) read
// slice by slice with pread, or weights generated in place from a seed. Plain C++17.
#ifndef TPCRT_WEIGHTS_H
#define TPCRT_WEIGHTS_H

#include "tpcrt/dtype.h"

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

namespace tpcrt {

/// Which part of the HF tensor this rank holds (tp-partition's #tp.shard_desc): along `dim`,
/// each block [offset, offset + size) is cut into `chunks` pieces of ceil(size / chunks);
/// this rank takes piece `piece` of every block, concatenated, each padded with zeros.
/// dim < 0: the whole tensor. Where the descriptor states each rank's extent (`ranks`: an
/// offset and a size per rank, whole heads where tp does not divide them), the driver reads
/// this rank's into `offsets` and `sizes` (one block, chunks 1), and `extent` is the local
/// size of `dim` that every rank's piece is padded to.
struct SliceSpec {
  int64_t dim = -1;
  std::vector<int64_t> offsets, sizes;
  int64_t chunks = 1, piece = 0;
  std::vector<int64_t> ranks;
  int64_t extent = 0;

  /// This rank's piece: `piece` of `chunks` torch.chunk pieces, or its own extent.
  SliceSpec forRank(int rank, int tp) const;

  /// The elements of a tensor of `shape` this rank holds, its padding left out.
  int64_t heldElements(const std::vector<int64_t> &shape) const;
  /// The shape this rank holds of a tensor of `shape`.
  std::vector<int64_t> localShape(const std::vector<int64_t> &shape) const;
};

struct TensorInfo {
  std::string dtype; // F32, F16 or BF16; for a GGUF file its ggml type (Q4_1, ...)
  std::vector<int64_t> shape;
  uint64_t begin = 0, end = 0; // byte offsets in `file`, from its start
  std::string file;
};

class GgufModel;

class Checkpoint {
public:
  /// Opens PATH: a .safetensors file, a model.safetensors.index.json, a .gguf file, or a
  /// directory holding one of them (ggufPathOf). A GGUF file's tensors go by their Hugging
  /// Face names (GgufModel). On failure returns null and says why in `error`.
  static std::unique_ptr<Checkpoint> open(const std::string &path, std::string &error);
  ~Checkpoint();

  const TensorInfo *find(const std::string &name) const;
  /// Every tensor name, sorted.
  std::vector<std::string> names() const {
    std::vector<std::string> all;
    for (const auto &entry : tensors)
      all.push_back(entry.first);
    return all;
  }

  /// Reads this rank's slice of `name` (HF shape `shape`) as fp32 into `out` (sized by
  /// spec.localShape). Errors name the tensor: missing, wrong shape or dtype, truncated.
  /// When `name` is absent and `sources` are given, the tensor is their concatenation along
  /// dim 0 (equal pieces, in order), as transformers saves Mixtral's experts (and a GGUF file
  /// Qwen2-MoE's shared expert, which tpc holds as one expert).
  bool read(const std::string &name, const std::vector<int64_t> &shape, const SliceSpec &spec,
            float *out, uint64_t &bytesRead, std::string &error,
            const std::vector<std::string> &sources = {});

  /// Reads this rank's slice of `name` as the blocks of `type` a GGUF file stores it in
  /// (GgufModel::readBlocks); an error for a safetensors checkpoint.
  bool readBlocks(const std::string &name, const std::vector<int64_t> &shape,
                  const SliceSpec &spec, DType type, void *out, uint64_t &bytesRead,
                  std::string &error);

  /// The GGUF file this checkpoint is, or null for safetensors.
  const GgufModel *gguf() const { return gguf_.get(); }

private:
  Checkpoint() = default;
  bool addFile(const std::string &path, std::string &error);
  /// Checks that `info` (tensor `name`) holds `elements` readable values of a known dtype.
  bool checkData(const std::string &name, const TensorInfo &info, uint64_t elements,
                 std::string &error);
  int fd(const std::string &file);

  std::map<std::string, TensorInfo> tensors;
  std::map<std::string, int> fds;
  std::map<std::string, uint64_t> sizes;
  std::shared_ptr<GgufModel> gguf_;
};

/// The value of element `index` (row-major, in the HF tensor) of parameter `name` for `seed`:
/// the same on every rank and in every tp, so generated weights shard consistently. Norm
/// weights are near 1, everything else small.
float randomWeight(uint64_t seed, const std::string &name, uint64_t index);

/// Fills this rank's slice of `name` with randomWeight values.
void generateSlice(uint64_t seed, const std::string &name, const std::vector<int64_t> &shape,
                   const SliceSpec &spec, float *out);

/// Writes a safetensors file of the given tensors (HF names, fp32 or bf16), generated from
/// `seed`.
bool writeRandomCheckpoint(const std::string &path, uint64_t seed,
                           const std::vector<std::pair<std::string, std::vector<int64_t>>> &tensors,
                           bool bf16, std::string &error);

} // namespace tpcrt

#endif // TPCRT_WEIGHTS_H
