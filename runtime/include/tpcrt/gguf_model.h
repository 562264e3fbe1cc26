// A GGUF file as a Hugging Face checkpoint: the config.json transformers 5.17 builds from its
// metadata (load_gguf_checkpoint), and its tensors under the Hugging Face names the plans use,
// with what llama.cpp's converter did to them undone (the q/k row permutation for RoPE of
// the llama architecture, the +1 of Gemma 2's norms, an MoE's gate and up experts stored
// apart). Plain C++17, shared by the compiler
// (tpc import and tpc run read the config) and the loader (which reads the tensors).
#ifndef TPCRT_GGUF_MODEL_H
#define TPCRT_GGUF_MODEL_H

#include "tpcrt/gguf.h"
#include "tpcrt/weights.h"

#include <map>
#include <memory>
#include <string>
#include <vector>

namespace tpcrt {

/// One tensor of the model: where it is in the file and how it becomes the Hugging Face one.
struct GgufModelTensor {
  const GgufTensor *tensor = nullptr;
  /// The heads of the converter's RoPE permutation of rows (0: none): row h*D + i*D/2 + j of
  /// the Hugging Face tensor is row h*D + 2j + i of the file (D: rows / heads).
  int64_t permutedHeads = 0;
  /// Gemma's norms are stored as 1 + w; transformers subtracts the 1.
  bool minusOne = false;
  /// The second half of a fused tensor (mlp.experts.gate_up_proj [E, 2I, H]: `tensor` is
  /// ffn_gate_exps [E, I, H], this ffn_up_exps): each expert's I gate rows, then its I up
  /// rows, as transformers' loader concatenates them. Null for a tensor of one file tensor.
  const GgufTensor *up = nullptr;
  /// GPT-OSS's experts, which transformers holds as [E, in, out] with gate and up
  /// interleaved and the converter writes as llama.cpp's [E, out, in] (gate and up apart):
  /// each expert's matrix is the transpose of the file's (`transposed`), and where there is
  /// an `up`, its values alternate with `tensor`'s along the last dimension, gate first
  /// (`interleaved`; also the biases, [E, I] each in the file, [E, 2I] in transformers).
  bool transposed = false;
  bool interleaved = false;
  /// DeepSeek-V2's kv_b_proj [H * (nope + v), kv_lora], which the converter splits for
  /// llama.cpp's absorbed attention: `tensor` is attn_k_b [H, kv_lora, nope] (each head's key
  /// rows transposed), `up` attn_v_b [H, v, kv_lora] (its value rows).
  bool mlaKvB = false;
  /// A vector in the file that the model holds as one row, [1, n] (Qwen2-MoE's
  /// shared_expert_gate): the same values.
  bool rowVector = false;

  /// Whether reading builds the Hugging Face tensor from the file's in another layout (read
  /// widened only, never as the file's blocks).
  bool rearranged() const { return transposed || interleaved || mlaKvB; }
};

/// The Hugging Face shape of a mapped tensor.
std::vector<int64_t> ggufModelShape(const GgufModelTensor &mapped);

class GgufModel {
public:
  /// Opens PATH and maps it. Null, with `error` naming the file and the key or tensor at
  /// fault, for an architecture tpc does not import, a missing or malformed hyperparameter, a
  /// tensor with no Hugging Face counterpart, or a type tpc does not read.
  static std::unique_ptr<GgufModel> open(const std::string &path, std::string &error);

  const GgufFile &file() const { return *file_; }
  /// model_type as transformers names it ("llama", "mistral", "qwen2", ...).
  const std::string &modelType() const { return modelType_; }
  /// The config.json transformers 5.17 builds from the metadata, as JSON text.
  const std::string &configJson() const { return config_; }
  /// The tensors by Hugging Face name.
  const std::map<std::string, GgufModelTensor> &tensors() const { return tensors_; }
  const GgufModelTensor *find(const std::string &name) const;

  /// Reads this rank's slice of `name` (Hugging Face shape `shape`) as fp32, dequantized
  /// (bit for bit as gguf-py) and with the converter's changes undone, as
  /// Checkpoint::read does for safetensors; `bytesRead` counts the file bytes read.
  bool read(const std::string &name, const std::vector<int64_t> &shape, const SliceSpec &spec,
            float *out, uint64_t &bytesRead, std::string &error) const;

  /// Reads this rank's slice of `name` as the file's blocks, into `out` (zero bytes for
  /// padding, which a block reads as zeros): every run of the slice must be whole blocks
  /// (tp-weight-storage holds a weight quantized only where its split keeps them whole), and
  /// the tensor's type must be `type`.
  bool readBlocks(const std::string &name, const std::vector<int64_t> &shape,
                  const SliceSpec &spec, DType type, void *out, uint64_t &bytesRead,
                  std::string &error) const;

private:
  GgufModel() = default;
  /// find(), or null with an error naming the tensor and the file.
  const GgufModelTensor *require(const std::string &name, std::string &error) const;
  std::unique_ptr<GgufFile> file_;
  std::string modelType_, config_;
  std::map<std::string, GgufModelTensor> tensors_;
};

} // namespace tpcrt

#endif // TPCRT_GGUF_MODEL_H
