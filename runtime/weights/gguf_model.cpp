// GGUF files as Hugging Face checkpoints (tpcrt/gguf_model.h). What is mapped follows
// transformers 5.17's GGUF loader (integrations/ggml.py's GGUF_CONFIG_MAPPING and
// modeling_gguf_pytorch_utils.py), the oracle the conformance tests compare with, for the
// architectures that tpc imports and that loader knows; where the loader leaves out what
// makes the file's model (llama's rope_freqs, Gemma 3's RoPE scaling and query scale), tpc
// computes what llama.cpp computes from the file. gemma, olmo2, smollm3 and llama files
// with experts (Mixtral's), which that loader does not know, are read as llama.cpp reads
// them (SmolLM3's layers without RoPE, which no key says: every fourth, as llama.cpp and
// SmolLM3Config take them). An MoE's 3D experts are transformers' stacked parameters, its
// gate and up halves read as one gate_up_proj.
#include "tpcrt/gguf_model.h"

#include "tpcrt/slices.h"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstring>
#include <functional>

namespace tpcrt {

namespace {

/// What differs between the architectures: the model_type, and what llama.cpp's converter
/// did that reading must undo.
struct GgufArchitecture {
  const char *gguf;      // general.architecture
  const char *modelType; // transformers' model_type
  bool permuteQK = false;   // llama's RoPE row permutation of attn_q and attn_k
  bool normMinusOne = false; // Gemma's norms stored as 1 + w
  bool ropeDimIsHeadDim = false; // rope.dimension_count is head_dim (llama, mistral)
  bool keyLengthIsHeadDim = false; // attention.key_length is head_dim (qwen3, gemma, gemma2)
  bool slidingWindow = false;      // attention.sliding_window is sliding_window
  bool softcapping = false;        // attn_logit_softcapping, final_logit_softcapping (gemma2)
  bool gemma3 = false; // Gemma 3's sliding layers' RoPE, global RoPE scaling, query scale
  bool moe = false;    // expert_count, expert_used_count, expert_feed_forward_length
  /// GPT-OSS: a router and experts with biases, the experts transposed and gate and up
  /// interleaved in transformers' layout, attention sinks, YaRN from rope.scaling.*.
  bool gptOss = false;
  /// DeepSeek-V2: latent attention written as llama.cpp's MQA (readDeepseek2), kv_b_proj
  /// split in two, shared experts.
  bool deepseek2 = false;
  /// Llama 4: feed_forward's experts transposed ([E, in, out] to transformers, gate and up
  /// halves), MoE every interleave_moe_layer_step-th layer, a shared expert (readLlama4).
  bool llama4 = false;
};

const GgufArchitecture kArchitectures[] = {
    {"llama", "llama", true, false, true, false, false},
    // A llama file with experts (llama.expert_count): Mixtral's, which the converter writes
    // as LlamaModel does (q/k permuted) with its experts as 3D ffn_*_exps.
    {"llama", "mixtral", true, false, true, false, false, false, false, true},
    {"qwen2", "qwen2"},
    {"qwen3", "qwen3", false, false, false, true},
    {"qwen3moe", "qwen3_moe", false, false, false, true, false, false, false, true},
    {"qwen2moe", "qwen2_moe", false, false, false, false, false, false, false, true},
    {"phi3", "phi3"},
    {"gemma", "gemma", false, true, false, true},
    {"gemma2", "gemma2", false, true, false, true, true, true},
    {"gemma3", "gemma3_text", false, true, false, true, true, true, true},
    {"olmo2", "olmo2"},
    {"smollm3", "smollm3", true, false, true},
    {"gpt-oss", "gpt_oss", false, false, false, true, true, false, false, true, true},
    {"deepseek2", "deepseek_v2", false, false, false, false, false, false, false, true, false,
     true},
    {"llama4", "llama4_text", false, false, true, false, false, false, false, true, false, false,
     true},
};

/// Values transformers' config classes give a field the GGUF loader leaves out, where tpc's
/// importer (which takes config.json alone, with defaults of its own) would take another:
/// Qwen3Config's head_dim is 128 and Gemma2Config's and Gemma3TextConfig's 256, not hidden /
/// heads; Gemma2Config softcaps attention at 50 and logits at 30, where an absent key means
/// none to the importer. For smollm3, which the loader does not know: what llama.cpp takes.
struct ClassDefault {
  const char *modelType, *field;
  double value;
  bool isFloat;
  bool isBool = false;
};
const ClassDefault kClassDefaults[] = {
    {"qwen3", "head_dim", 128, false},
    {"gemma", "head_dim", 256, false},
    {"gemma2", "head_dim", 256, false},
    {"gemma2", "attn_logit_softcapping", 50.0, true},
    {"gemma2", "final_logit_softcapping", 30.0, true},
    {"gemma3_text", "head_dim", 256, false},
    // The loader's GGUF default (GGUF_CONFIG_DEFAULTS_MAPPING): llama.cpp's qwen3moe always
    // renormalizes the top k weights, where Qwen3MoeConfig would not. The experts' width,
    // where the file has no expert_feed_forward_length (which the loader never reads):
    // Qwen3MoeConfig's.
    {"qwen3_moe", "norm_topk_prob", 1, false, true},
    {"qwen3_moe", "moe_intermediate_size", 768, false},
    // Qwen2MoeConfig's widths where the file has no expert_feed_forward_length or
    // expert_shared_feed_forward_length (the loader reads neither; llama.cpp's qwen2moe, like
    // Qwen2MoeConfig, keeps the top k weights as they are: no norm_topk_prob).
    {"qwen2_moe", "moe_intermediate_size", 1408, false},
    {"qwen2_moe", "shared_expert_intermediate_size", 5632, false},
    // MistralConfig's window: transformers applies it to a mistral file, whose metadata
    // (llama.*) cannot say otherwise.
    {"mistral", "sliding_window", 4096, false},
    // SmolLM3's layers without RoPE, every fourth: no key holds it (llama.cpp's
    // n_no_rope_layer_step is 4 for every smollm3 file, SmolLM3Config's interval too), so the
    // config says it; and llama.cpp's theta where the file has no rope.freq_base, where
    // SmolLM3Config's (and the importer's) would be 2e6.
    {"smollm3", "no_rope_layer_interval", 4, false},
    {"smollm3", "rope_theta", 10000.0, true},
    // llama.cpp's theta for a llama file without rope.freq_base, where MixtralConfig's (and
    // the importer's) would be 1e6.
    {"mixtral", "rope_theta", 10000.0, true},
    // llama.cpp's theta for a gpt-oss file without rope.freq_base, where GptOssConfig's would
    // be 150000.
    {"gpt_oss", "rope_theta", 10000.0, true},
};

std::string supportedArchitectures() {
  std::string names;
  for (const GgufArchitecture &a : kArchitectures)
    if (&a == kArchitectures || std::string(a.gguf) != (&a)[-1].gguf) // llama's rows once
      names += (names.empty() ? "" : ", ") + std::string(a.gguf);
  return names;
}

/// A GGUF module name ("attn_q") and its Hugging Face one ("self_attn.q_proj").
using ModuleName = std::pair<const char *, const char *>;

template <size_t N> const char *lookup(const ModuleName (&table)[N], const std::string &part) {
  for (const auto &[gguf, hf] : table)
    if (part == gguf)
      return hf;
  return nullptr;
}

// GPT-OSS's norm before the MLP, its attention sinks (a parameter of the attention, not a
// module's weight: hfName) and its router with a bias.
const ModuleName kGptOssModules[] = {
    {"post_attention_norm", "post_attention_layernorm"},
    {"attn_sinks", "self_attn.sinks"},
    {"ffn_gate_inp", "mlp.router"},
};
// DeepSeek-V2's latent attention (attn_k_b and attn_v_b are kv_b_proj's two parts: mapTensor
// pairs them) and its shared experts.
const ModuleName kDeepseek2Modules[] = {
    {"attn_q_a", "self_attn.q_a_proj"},
    {"attn_q_a_norm", "self_attn.q_a_layernorm"},
    {"attn_q_b", "self_attn.q_b_proj"},
    {"attn_kv_a_mqa", "self_attn.kv_a_proj_with_mqa"},
    {"attn_kv_a_norm", "self_attn.kv_a_layernorm"},
    {"attn_kv_b", "self_attn.kv_b_proj"},
    {"attn_k_b", "self_attn.kv_b_proj"},
    {"attn_v_b", "self_attn.kv_b_proj"},
    {"ffn_gate_shexp", "mlp.shared_experts.gate_proj"},
    {"ffn_up_shexp", "mlp.shared_experts.up_proj"},
    {"ffn_down_shexp", "mlp.shared_experts.down_proj"},
};
// Llama 4's feed_forward: a router, stacked experts and a shared expert on its MoE layers, a
// dense MLP on the others.
const ModuleName kLlama4Modules[] = {
    {"ffn_gate_inp", "feed_forward.router"},
    {"ffn_gate_exps", "feed_forward.experts.gate_up_proj"},
    {"ffn_up_exps", "feed_forward.experts.gate_up_proj"},
    {"ffn_gate_up_exps", "feed_forward.experts.gate_up_proj"},
    {"ffn_down_exps", "feed_forward.experts.down_proj"},
    {"ffn_gate_shexp", "feed_forward.shared_expert.gate_proj"},
    {"ffn_up_shexp", "feed_forward.shared_expert.up_proj"},
    {"ffn_down_shexp", "feed_forward.shared_expert.down_proj"},
    {"ffn_gate", "feed_forward.gate_proj"},
    {"ffn_up", "feed_forward.up_proj"},
    {"ffn_down", "feed_forward.down_proj"},
};
// An MoE's router and its experts, stacked [E, ...] as transformers holds them; gate and up
// both go to gate_up_proj (mapTensor pairs them). Only where the architecture is read as MoE:
// a llama file with experts (Mixtral's) would otherwise import as a dense model whose MLP
// weights are missing.
const ModuleName kExpertModules[] = {
    {"ffn_gate_inp", "mlp.gate"},
    {"ffn_gate_exps", "mlp.experts.gate_up_proj"},
    {"ffn_up_exps", "mlp.experts.gate_up_proj"},
    // The converter's --fuse-gate-up-exps: [E, 2I, H], each expert's gate rows, then up's.
    {"ffn_gate_up_exps", "mlp.experts.gate_up_proj"},
    {"ffn_down_exps", "mlp.experts.down_proj"},
    // Qwen2-MoE's shared expert and its gate ([1, hidden]: ggufModelShape).
    {"ffn_gate_inp_shexp", "mlp.shared_expert_gate"},
    {"ffn_gate_shexp", "mlp.shared_expert.gate_proj"},
    {"ffn_up_shexp", "mlp.shared_expert.up_proj"},
    {"ffn_down_shexp", "mlp.shared_expert.down_proj"},
};
const ModuleName kCommonModules[] = {
    {"attn_norm", "input_layernorm"},
    {"attn_q", "self_attn.q_proj"},
    {"attn_k", "self_attn.k_proj"},
    {"attn_v", "self_attn.v_proj"},
    {"attn_output", "self_attn.o_proj"},
    {"attn_q_norm", "self_attn.q_norm"},
    {"attn_k_norm", "self_attn.k_norm"},
    {"ffn_norm", "post_attention_layernorm"},
    {"ffn_gate", "mlp.gate_proj"},
    {"ffn_up", "mlp.up_proj"},
    {"ffn_down", "mlp.down_proj"},
};

/// The Hugging Face name of a layer tensor's module ("attn_q" -> "self_attn.q_proj").
const char *layerModule(const std::string &part, const GgufArchitecture &arch) {
  std::string type = arch.modelType;
  if (type == "phi3") {
    if (part == "attn_qkv")
      return "self_attn.qkv_proj";
    if (part == "ffn_up")
      return "mlp.gate_up_proj";
  }
  bool gemma = type == "gemma2" || type == "gemma3_text";
  if (gemma && part == "ffn_norm")
    return "pre_feedforward_layernorm";
  // Gemma's sandwich norms; OLMo 2's only norms in a layer, after attention and the MLP.
  if (gemma || type == "olmo2") {
    if (part == "post_attention_norm")
      return "post_attention_layernorm";
    if (part == "post_ffw_norm")
      return "post_feedforward_layernorm";
  }
  const char *hf = nullptr;
  if ((arch.gptOss && (hf = lookup(kGptOssModules, part))) ||
      (arch.deepseek2 && (hf = lookup(kDeepseek2Modules, part))) ||
      (arch.llama4 && (hf = lookup(kLlama4Modules, part))) ||
      (arch.moe && (hf = lookup(kExpertModules, part))))
    return hf;
  return lookup(kCommonModules, part);
}

/// "blk.3.attn_q.weight" -> "model.layers.3.self_attn.q_proj.weight"; "" for a name with no
/// counterpart. `module` gets the GGUF module ("attn_q").
std::string hfName(const std::string &name, const GgufArchitecture &arch, std::string &module) {
  size_t dot = name.rfind('.');
  if (dot == std::string::npos)
    return "";
  std::string stem = name.substr(0, dot), suffix = name.substr(dot);
  if (suffix != ".weight" && suffix != ".bias")
    return "";
  module = stem;
  if (stem == "token_embd")
    return "model.embed_tokens" + suffix;
  if (stem == "output_norm")
    return "model.norm" + suffix;
  if (stem == "output")
    return "lm_head" + suffix;
  if (stem.compare(0, 4, "blk.") != 0)
    return "";
  size_t end = stem.find('.', 4);
  if (end == std::string::npos || end == 4 || end - 4 > 6)
    return "";
  std::string layer = stem.substr(4, end - 4);
  if (!std::all_of(layer.begin(), layer.end(), [](char c) { return c >= '0' && c <= '9'; }) ||
      (layer.size() > 1 && layer[0] == '0'))
    return "";
  module = stem.substr(end + 1);
  const char *hf = layerModule(module, arch);
  if (!hf)
    return "";
  // The stacked experts are parameters of their module, not a Linear's weight; GPT-OSS's
  // have biases beside them (gate_up_proj_bias). So are the sinks.
  if (std::strstr(hf, "experts.") && !std::strstr(hf, "shared")) {
    if (suffix == ".bias" && arch.gptOss)
      return "model.layers." + layer + "." + hf + "_bias";
    return suffix == ".weight" ? "model.layers." + layer + "." + hf : "";
  }
  if (module == "attn_sinks")
    return suffix == ".weight" ? "model.layers." + layer + "." + hf : "";
  return "model.layers." + layer + "." + hf + suffix;
}

std::string shapeText(const std::vector<int64_t> &shape) {
  std::string s = "[";
  for (size_t i = 0; i < shape.size(); ++i)
    s += (i ? ", " : "") + std::to_string(shape[i]);
  return s + "]";
}

} // namespace

/// The Hugging Face shape of a mapped tensor: its file tensor's; a fused gate_up's (the
/// gate's [E, I, H] with 2I rows an expert); GPT-OSS's and Llama 4's, each expert transposed
/// ([E, R, C] as [E, C, R], or [E, C, 2R] with the up half interleaved or after) or GPT-OSS's
/// biases interleaved ([E, I] as [E, 2I]); DeepSeek-V2's kv_b_proj from attn_k_b [H, L, N]
/// and attn_v_b [H, V, L] as [H * (N + V), L].
std::vector<int64_t> ggufModelShape(const GgufModelTensor &mapped) {
  std::vector<int64_t> shape = mapped.tensor->shape;
  if (mapped.rowVector)
    return {1, shape[0]};
  int64_t parts = mapped.up ? 2 : 1;
  if (mapped.mlaKvB && mapped.up && shape.size() == 3 && mapped.up->shape.size() == 3)
    return {shape[0] * (shape[2] + mapped.up->shape[1]), shape[1]};
  if (mapped.transposed && shape.size() == 3)
    return {shape[0], shape[2], shape[1] * parts};
  if (mapped.interleaved)
    shape.back() *= parts;
  else if (mapped.up)
    shape[1] *= 2;
  return shape;
}

namespace {

/// Where row `hfRow` of the Hugging Face tensor is: in which file tensor (0: `tensor`, 1:
/// `up`) and at which of its rows.
struct FileRow {
  int part;
  int64_t row;
};

FileRow fileRowOf(const GgufModelTensor &mapped, int64_t hfRow) {
  if (mapped.up) {
    int64_t width = mapped.tensor->shape[1];
    int64_t expert = hfRow / (2 * width), r = hfRow % (2 * width);
    return {r < width ? 0 : 1, expert * width + r % width};
  }
  if (!mapped.permutedHeads)
    return {0, hfRow};
  int64_t headRows = mapped.tensor->rows / mapped.permutedHeads, half = headRows / 2;
  int64_t h = hfRow / headRows, r = hfRow % headRows;
  return {0, h * headRows + 2 * (r % half) + r / half};
}

/// One past the last row of each file tensor a rank's slice of `shape` needs (a permuted
/// tensor's: to the end of the head that holds it).
std::array<int64_t, 2> rowsNeeded(const GgufModelTensor &mapped,
                                  const std::vector<int64_t> &shape, const SliceSpec &spec) {
  const GgufTensor &t = *mapped.tensor;
  int64_t rowElements = t.ne.empty() ? 1 : t.ne[0];
  std::array<int64_t, 2> last = {-1, -1};
  forEachRun(shape, spec, [&](uint64_t first, int64_t count, int64_t) {
    if (count <= 0)
      return;
    int64_t from = int64_t(first / uint64_t(rowElements)),
            to = int64_t((first + uint64_t(count) - 1) / uint64_t(rowElements));
    if (!mapped.up) {
      last[0] = std::max(last[0], to);
      return;
    }
    for (int64_t r = from; r <= to; ++r) { // a fused tensor's halves interleave
      FileRow at = fileRowOf(mapped, r);
      last[size_t(at.part)] = std::max(last[size_t(at.part)], at.row);
    }
  });
  if (mapped.permutedHeads) {
    int64_t headRows = t.rows / mapped.permutedHeads;
    return {std::min(t.rows, (last[0] / headRows + 1) * headRows), 0};
  }
  return {last[0] + 1, last[1] + 1};
}

/// The rows of a tensor read last: a window of whole rows, about 4 MiB, from the first row a
/// read asks for (from its head's first row where rows are permuted, so that a head's
/// permutation never leaves the window), to the end of the rows the slice needs. A rank's
/// slice visits rows in order, so each of its rows is read from the file once.
struct RowWindow {
  const GgufFile &file;
  const GgufTensor &t;
  int64_t permutedHeads;
  int64_t end; // one past the last file row the slice needs
  int64_t first = 0, count = 0;
  std::vector<uint8_t> bytes;

  /// The bytes of file row `row`, or null with `error` set.
  const uint8_t *row(int64_t row, uint64_t &bytesRead, std::string &error) {
    if (row < first || row >= first + count) {
      int64_t headRows = permutedHeads ? t.rows / permutedHeads : 1;
      int64_t rows = std::max<int64_t>(1, (int64_t(4) << 20) /
                                              int64_t(std::max<uint64_t>(t.rowBytes, 1)));
      rows = std::max<int64_t>(headRows, rows / headRows * headRows);
      first = row / headRows * headRows;
      count = std::max<int64_t>(1, std::min(rows, end - first));
      if (!file.readRows(t.name, first, count, bytes, error)) {
        count = 0;
        return nullptr;
      }
      bytesRead += uint64_t(count) * t.rowBytes;
    }
    return bytes.data() + size_t(row - first) * t.rowBytes;
  }
};

/// Copies this rank's slice of a tensor of `shape` into `out`, each run padded with zeros, its
/// elements from `source(at, available)`: a pointer to the tensor's element at flat index `at`,
/// with `available` set to how many follow it there, or null for an error, which ends the copy.
template <class Source>
bool copySlice(const std::vector<int64_t> &shape, const SliceSpec &spec, float *out,
               Source source) {
  bool ok = true;
  forEachRun(shape, spec, [&](uint64_t first, int64_t count, int64_t padded) {
    for (int64_t done = 0; ok && done < count;) {
      int64_t available = 0;
      const float *from = source(first + uint64_t(done), available);
      if (!from) {
        ok = false;
        return;
      }
      int64_t take = std::min(count - done, available);
      std::memcpy(out + done, from, size_t(take) * sizeof(float));
      done += take;
    }
    if (!ok)
      return;
    std::fill(out + count, out + padded, 0.0f);
    out += padded;
  });
  return ok;
}

/// Reads this rank's slice of a tensor whose experts the converter transposed, or whose
/// halves it took apart (GPT-OSS's, `transposed` / `interleaved`; DeepSeek-V2's kv_b_proj,
/// `mlaKvB`, by heads): expert by expert (head by head), each built whole in transformers'
/// layout from its rows in the file. A rank's slice visits them in order, so each is read and
/// built once.
bool readRearranged(const GgufFile &file, const GgufModelTensor &mapped,
                    const std::vector<int64_t> &shape, const SliceSpec &spec, float *out,
                    uint64_t &bytesRead, std::string &error) {
  const GgufTensor *parts[2] = {mapped.tensor, mapped.up};
  const int nParts = mapped.up ? 2 : 1;
  const GgufTensor &t = *mapped.tensor;
  // An expert's R rows of C values in the file; transformers' [C, R * parts] (each row's
  // values alternating between the parts). A bias: one row of C values, [C * parts].
  const bool matrix = t.shape.size() == 3;
  const int64_t rows = matrix ? t.shape[1] : 1, row = t.shape.back();
  // kv_b_proj's head: its nope key rows (attn_k_b's [kv_lora, nope], transposed), then its
  // value rows (attn_v_b's [v, kv_lora]).
  const int64_t kvLora = rows, nope = row, valueRows = mapped.mlaKvB ? mapped.up->shape[1] : 0;
  const int64_t expertSize = mapped.mlaKvB ? (nope + valueRows) * kvLora : rows * row * nParts;
  std::vector<float> expert(static_cast<size_t>(expertSize)),
      values(static_cast<size_t>(std::max(row, kvLora)));
  std::vector<uint8_t> bytes;
  int64_t built = -1;
  auto readPart = [&](const GgufTensor &part, int64_t first, int64_t count, int64_t width,
                      const std::function<void(int64_t, const float *)> &take) {
    if (!file.readRows(part.name, first, count, bytes, error))
      return false;
    bytesRead += uint64_t(count) * part.rowBytes;
    for (int64_t r = 0; r < count; ++r) {
      if (!dequantize(part.type, bytes.data() + size_t(r) * part.rowBytes, width, values.data(),
                      error))
        return false;
      take(r, values.data());
    }
    return true;
  };
  auto buildHead = [&](int64_t h) {
    bool ok = readPart(t, h * kvLora, kvLora, nope,
                       [&](int64_t c, const float *v) {
                         for (int64_t j = 0; j < nope; ++j)
                           expert[size_t(j * kvLora + c)] = v[j];
                       }) &&
              readPart(*mapped.up, h * valueRows, valueRows, kvLora,
                       [&](int64_t r, const float *v) {
                         std::memcpy(&expert[size_t((nope + r) * kvLora)], v,
                                     size_t(kvLora) * sizeof(float));
                       });
    built = ok ? h : -1;
    return ok;
  };
  auto build = [&](int64_t e) {
    if (mapped.mlaKvB)
      return buildHead(e);
    for (int p = 0; p < nParts; ++p)
      if (!readPart(*parts[p], e * rows, rows, row, [&](int64_t r, const float *v) {
            for (int64_t c = 0; c < row; ++c) // GPT-OSS's parts interleave, Llama 4's follow
              expert[size_t(c * rows * nParts +
                            (mapped.interleaved ? r * nParts + p : p * rows + r))] = v[c];
          }))
        return false;
    built = e;
    return true;
  };
  return copySlice(shape, spec, out, [&](uint64_t at, int64_t &available) -> const float * {
    int64_t e = int64_t(at / uint64_t(expertSize)), offset = int64_t(at % uint64_t(expertSize));
    if (e != built && !build(e))
      return nullptr;
    available = expertSize - offset;
    return expert.data() + offset;
  });
}

/// What every step of mapping one file reads: the file, the name its errors give it, and its
/// architecture, whose name begins the hyperparameters' keys.
struct GgufSource {
  const GgufFile &file;
  const std::string &where; // "GGUF file PATH"
  const std::string &architecture; // general.architecture
  const GgufArchitecture &arch;

  std::string key(const char *suffix) const { return architecture + "." + suffix; }
};

/// The entry of kArchitectures for the file's general.architecture (which goes to
/// `architecture`), or null with `error` set.
const GgufArchitecture *findArchitecture(const GgufFile &file, const std::string &where,
                                         std::string &architecture, std::string &error) {
  if (!file.getString("general.architecture", architecture, error))
    return nullptr;
  // An architecture with a dense and an MoE entry (llama) is the MoE one where the file
  // counts experts (more than none, as llama.cpp takes a file for MoE).
  const GgufArchitecture *arch = nullptr;
  int64_t expertCount = 0;
  std::string key = architecture + ".expert_count";
  if (file.find(key) && !file.getInt(key, expertCount, error, 0, int64_t(1) << 20))
    return nullptr;
  bool experts = expertCount > 0;
  for (const GgufArchitecture &a : kArchitectures)
    if (architecture == a.gguf && (!arch || a.moe == experts))
      arch = &a;
  if (!arch)
    error = where + ": general.architecture '" + architecture +
            "' is not one tpc imports from GGUF (it imports " + supportedArchitectures() + ")";
  return arch;
}

/// transformers calls a llama file mistral when general.name is exactly "mistral" (it tests
/// membership in the list of the field's values); its keys stay llama.*.
std::string modelTypeOf(const GgufSource &source) {
  if (source.architecture == "llama" && !source.arch.moe) {
    std::string name, ignored;
    if (source.file.find("general.name") &&
        source.file.getString("general.name", name, ignored) && name == "mistral")
      return "mistral";
  }
  return source.arch.modelType;
}

/// A hyperparameter's key (less the architecture) and its config.json field.
struct Hyperparameter {
  const char *gguf, *hf;
  bool isFloat;
};

/// The hyperparameters transformers reads from a file of `arch`.
std::vector<Hyperparameter> hyperparametersOf(const GgufArchitecture &arch) {
  std::vector<Hyperparameter> fields = {
      {"context_length", "max_position_embeddings", false},
      {"block_count", "num_hidden_layers", false},
      {"feed_forward_length", "intermediate_size", false},
      {"embedding_length", "hidden_size", false},
      {"rope.freq_base", "rope_theta", true},
      {"attention.head_count", "num_attention_heads", false},
      {"attention.head_count_kv", "num_key_value_heads", false},
      {"attention.layer_norm_rms_epsilon", "rms_norm_eps", true},
      {"vocab_size", "vocab_size", false},
  };
  if (arch.ropeDimIsHeadDim)
    fields.push_back({"rope.dimension_count", "head_dim", false});
  if (arch.keyLengthIsHeadDim)
    fields.push_back({"attention.key_length", "head_dim", false});
  if (arch.slidingWindow)
    fields.push_back({"attention.sliding_window", "sliding_window", false});
  // transformers 5.17's loader does not read expert_feed_forward_length (Qwen3MoeConfig's
  // 768 applies, kClassDefaults); the converter writes moe_intermediate_size there, and the
  // expert tensors have that width, so tpc reads it.
  // Mixtral's experts are intermediate_size wide and its count is num_local_experts;
  // GPT-OSS's too, and the converter writes both lengths from its intermediate_size (the
  // experts' one is what llama.cpp takes for them, so it is read last).
  if (arch.moe && !arch.deepseek2) {
    bool mixtral = std::string(arch.modelType) == "mixtral";
    bool local = mixtral || arch.gptOss || arch.llama4;
    fields.push_back({"expert_count", local ? "num_local_experts" : "num_experts", false});
    fields.push_back({"expert_used_count", "num_experts_per_tok", false});
    if (!mixtral)
      fields.push_back({"expert_feed_forward_length",
                        arch.gptOss || arch.llama4 ? "intermediate_size" : "moe_intermediate_size",
                        false});
    // Qwen2-MoE's shared expert, which the loader does not read either.
    if (std::string(arch.modelType) == "qwen2_moe")
      fields.push_back(
          {"expert_shared_feed_forward_length", "shared_expert_intermediate_size", false});
  }
  // Llama 4's dense layers are intermediate_size_mlp wide (the converter's feed_forward_length;
  // its experts' width is expert_feed_forward_length, which comes later and wins).
  if (arch.llama4) {
    for (Hyperparameter &field : fields)
      if (std::string(field.gguf) == "feed_forward_length")
        field.hf = "intermediate_size_mlp";
    fields.push_back({"interleave_moe_layer_step", "interleave_moe_layer_step", false});
  }
  // transformers 5.17's loader reads neither of these (qwen3's head_dim, gemma2's softcaps),
  // so its config class's default applies (kClassDefaults). The converter writes them from
  // the Hugging Face config, where every released Qwen3 and Gemma 2 model has those very
  // values; tpc reads what the file says, which is the model even where it is not.
  if (arch.softcapping) {
    fields.push_back({"attn_logit_softcapping", "attn_logit_softcapping", true});
    fields.push_back({"final_logit_softcapping", "final_logit_softcapping", true});
  }
  // The converter's local theta (rope_parameters' sliding_attention); llama.cpp takes 10000,
  // what every released Gemma 3 has, and so does Gemma3TextConfig where the file says none.
  if (arch.gemma3)
    fields.push_back({"rope.freq_base_swa", "rope_local_base_freq", true});
  return fields;
}

/// Copies the hyperparameters the file holds into `config`. transformers leaves out what the
/// file does not hold (the config class's default applies), and so does this.
bool readHyperparameters(const GgufSource &source, nlohmann::ordered_json &config,
                         std::string &error) {
  for (const Hyperparameter &field : hyperparametersOf(source.arch)) {
    std::string k = source.key(field.gguf);
    if (!source.file.find(k))
      continue;
    if (field.isFloat) {
      double value = 0;
      if (!source.file.getFloat(k, value, error))
        return false;
      config[field.hf] = value;
    } else {
      int64_t value = 0;
      if (!source.file.getInt(k, value, error, 0, int64_t(1) << 40))
        return false;
      config[field.hf] = value;
    }
  }
  return true;
}

void applyClassDefaults(const std::string &modelType, nlohmann::ordered_json &config) {
  for (const ClassDefault &d : kClassDefaults)
    if (modelType == d.modelType && !config.contains(d.field)) {
      if (d.isBool)
        config[d.field] = d.value != 0;
      else if (d.isFloat)
        config[d.field] = d.value;
      else
        config[d.field] = int64_t(d.value);
    }
}

bool checkRequiredHyperparameters(const GgufSource &source, std::string &error) {
  for (const char *required : {"block_count", "embedding_length", "attention.head_count"})
    if (!source.file.find(source.key(required))) {
      error = source.where + ": no metadata '" + source.key(required) + "', which a " +
              source.architecture + " model needs";
      return false;
    }
  return true;
}

bool readSpecialTokens(const GgufFile &file, nlohmann::ordered_json &config, std::string &error) {
  for (auto [gguf, hf] : {std::pair{"tokenizer.ggml.bos_token_id", "bos_token_id"},
                          {"tokenizer.ggml.eos_token_id", "eos_token_id"},
                          {"tokenizer.ggml.padding_token_id", "pad_token_id"}}) {
    int64_t id = 0;
    if (file.find(gguf)) {
      if (!file.getInt(gguf, id, error, 0, UINT32_MAX))
        return false;
      config[hf] = id;
    }
  }
  return true;
}

/// transformers takes the vocabulary's size from the tokens when the file does not say it.
bool fillVocabSize(const GgufSource &source, nlohmann::ordered_json &config, std::string &error) {
  if (config.contains("vocab_size"))
    return true;
  const GgufValue *tokens = source.file.find("tokenizer.ggml.tokens");
  if (!tokens || tokens->type != GgufValueType::Array) {
    error = source.where + ": no " + source.key("vocab_size") +
            " and no tokenizer.ggml.tokens to count";
    return false;
  }
  config["vocab_size"] = tokens->size();
  return true;
}

/// Gemma 3's settings that transformers' loader leaves out (or no key holds), as llama.cpp
/// computes them from the file (llama-model.cpp's gemma3 hyperparameters, llm_build_gemma3):
/// - rope.scaling.type "linear" with rope.scaling.factor (the 4B and larger: 8), the global
///   layers' scaling, which the converter takes from rope_parameters' full_attention: as the
///   legacy rope_scaling, which the importer gives the global layers alone;
/// - no attention.sliding_window (or 0), which the converter writes for a
///   sliding_window_pattern of 1: no sliding layer; with one, every sixth layer is global
///   (llama.cpp's pattern, Gemma3TextConfig's default, the importer's);
/// - query_pre_attn_scalar, which no key holds: llama.cpp scales the query by head_dim's,
///   the 27B's (62 layers) by hidden / heads (168), which is each released model's value,
///   where Gemma3TextConfig's 256 would be the 27B's wrong scale.
bool readGemma3(const GgufSource &source, nlohmann::ordered_json &config, std::string &error) {
  std::string scaling = "none";
  if (source.file.find(source.key("rope.scaling.type")) &&
      !source.file.getString(source.key("rope.scaling.type"), scaling, error))
    return false;
  if (scaling == "linear") {
    double factor = 0;
    if (!source.file.find(source.key("rope.scaling.factor"))) {
      error = source.where + ": " + source.key("rope.scaling.type") +
              " is linear, but there is no " + source.key("rope.scaling.factor");
      return false;
    }
    if (!source.file.getFloat(source.key("rope.scaling.factor"), factor, error))
      return false;
    if (!std::isfinite(factor) || !(factor > 0)) {
      error = source.where + ": " + source.key("rope.scaling.factor") + " is " +
              std::to_string(factor) + "; a RoPE scaling factor must be positive";
      return false;
    }
    config["rope_scaling"] = {{"rope_type", "linear"}, {"factor", factor}};
  } else if (scaling != "none") {
    error = source.where + ": " + source.key("rope.scaling.type") + " is '" + scaling +
            "'; tpc reads a gemma3 file's linear scaling only";
    return false;
  }
  if (config.value("sliding_window", int64_t(0)) == 0) {
    config.erase("sliding_window");
    config["sliding_window_pattern"] = 1;
  }
  int64_t layers = config.value("num_hidden_layers", int64_t(0)),
          heads = config.value("num_attention_heads", int64_t(0));
  int64_t scalar = layers == 62 && heads > 0 ? config.value("hidden_size", int64_t(0)) / heads
                                             : config["head_dim"].get<int64_t>();
  if (scalar <= 0) {
    error = source.where + ": the query scale (head_dim, or for 62 layers hidden / heads) is " +
            std::to_string(scalar) + "; it must be positive";
    return false;
  }
  config["query_pre_attn_scalar"] = scalar;
  return true;
}

/// A file's RoPE scaling as llama.cpp reads it, into `rope` (rope_parameters), for the
/// architectures whose checkpoints use YaRN: no rope.scaling.type, or "none", is no scaling,
/// as llama.cpp takes it; "yarn" reads rope.scaling.factor and .original_context_length (both
/// needed), .yarn_beta_fast and .yarn_beta_slow where present, and where `logMultiplier`
/// .yarn_log_multiplier (needed), which the converter writes as 0.1 x mscale_all_dim. Another
/// type, or a YaRN key tpc does not read (an attention or extrapolation factor, and the log
/// multiplier where it is not read), is an error naming the key rather than a model without it.
bool readRopeScaling(const GgufSource &source, const nlohmann::ordered_json &config,
                     bool logMultiplier, nlohmann::ordered_json &rope, std::string &error) {
  const GgufFile &file = source.file;
  auto has = [&](const char *key) { return file.find(source.key(key)) != nullptr; };
  std::string scaling = "none";
  if (has("rope.scaling.type") && !file.getString(source.key("rope.scaling.type"), scaling, error))
    return false;
  double theta = config.value("rope_theta", 10000.0);
  if (scaling == "none") {
    rope = {{"rope_type", "default"}, {"rope_theta", theta}};
    return true;
  }
  if (scaling != "yarn") {
    error = source.where + ": " + source.key("rope.scaling.type") + " is '" + scaling +
            "'; tpc reads a " + source.architecture + " file's yarn scaling only";
    return false;
  }
  for (const char *unread : {"rope.scaling.attn_factor", "rope.scaling.yarn_attn_factor",
                             "rope.scaling.yarn_ext_factor", "rope.scaling.yarn_log_multiplier"})
    if (has(unread) &&
        !(logMultiplier && std::string(unread) == "rope.scaling.yarn_log_multiplier")) {
      error = source.where + ": " + source.key(unread) + " is a YaRN setting tpc does not read " +
              "from a " + source.architecture + " file yet";
      return false;
    }
  rope = {{"rope_type", "yarn"}, {"rope_theta", theta}};
  struct Field {
    const char *gguf, *hf;
    bool isFloat, required;
  };
  for (const Field &f : {Field{"rope.scaling.factor", "factor", true, true},
                         Field{"rope.scaling.original_context_length",
                               "original_max_position_embeddings", false, true},
                         Field{"rope.scaling.yarn_beta_fast", "beta_fast", true, false},
                         Field{"rope.scaling.yarn_beta_slow", "beta_slow", true, false},
                         Field{"rope.scaling.yarn_log_multiplier", "mscale_all_dim", true,
                               logMultiplier}}) {
    std::string k = source.key(f.gguf);
    if (!file.find(k)) {
      if (f.required) {
        error = source.where + ": " + source.key("rope.scaling.type") +
                " is yarn, but there is no " + k;
        return false;
      }
      continue;
    }
    if (f.isFloat) {
      double value = 0;
      if (!file.getFloat(k, value, error))
        return false;
      bool logMul = std::string(f.hf) == "mscale_all_dim";
      if (!std::isfinite(value) || (logMul ? value < 0 : !(value > 0))) {
        error = source.where + ": " + k + " is " + std::to_string(value) + "; it must be " +
                (logMul ? "at least 0" : "positive");
        return false;
      }
      rope[f.hf] = logMul ? value / 0.1 : value;
    } else {
      int64_t value = 0;
      if (!file.getInt(k, value, error, 1, int64_t(1) << 40))
        return false;
      rope[f.hf] = value;
    }
  }
  return true;
}

/// GPT-OSS's RoPE (readRopeScaling, no log multiplier: no released GPT-OSS has one), with
/// GptOssConfig's beta_fast 32 and beta_slow 1 where the file has none. No key says
/// transformers' `truncate`: GptOssConfig's false (the released checkpoints' value) is kept.
bool readGptOss(const GgufSource &source, nlohmann::ordered_json &config, std::string &error) {
  nlohmann::ordered_json rope;
  if (!readRopeScaling(source, config, false, rope, error))
    return false;
  if (rope["rope_type"] == "yarn") {
    if (!rope.contains("beta_fast"))
      rope["beta_fast"] = 32.0;
    if (!rope.contains("beta_slow"))
      rope["beta_slow"] = 1.0;
    rope["truncate"] = false;
  }
  config["rope_parameters"] = std::move(rope);
  return true;
}

/// DeepSeek-V2 as llama.cpp reads a deepseek2 file (transformers 5.17's loader does not know
/// the architecture). The converter writes the latent attention as llama.cpp's MQA
/// (head_count_kv 1, key_length kv_lora_rank + rope, value_length kv_lora_rank) and the
/// heads' own sizes as key_length_mla and value_length_mla (files from before those keys: in
/// key_length and value_length); transformers' attention expands the latent into every
/// head, so num_key_value_heads is the heads. What llama.cpp computes otherwise than
/// transformers' DeepSeek-V2 is refused by its key: a sigmoid gate or renormalized weights
/// (DeepSeek-V3's, expert_gating_func 2 and expert_weights_norm), and groups of experts
/// (llama.cpp ranks a group by its two best experts' sum, DeepSeek-V3's rule, where
/// DeepSeek-V2's group_limited_greedy takes the best one). YaRN: readRopeScaling with
/// yarn_log_multiplier, which the converter writes as 0.1 x mscale_all_dim (llama.cpp then
/// takes mscale equal to it, as every released DeepSeek-V2 has).
bool readDeepseek2(const GgufSource &source, nlohmann::ordered_json &config,
                   std::string &error) {
  const GgufFile &file = source.file;
  auto integer = [&](const char *key, int64_t &value, int64_t minimum = 0) {
    return file.getInt(source.key(key), value, error, minimum, int64_t(1) << 32);
  };
  auto has = [&](const char *key) { return file.find(source.key(key)) != nullptr; };
  auto require = [&](const char *key) {
    if (has(key))
      return true;
    error = source.where + ": no metadata '" + source.key(key) + "', which a deepseek2 model needs";
    return false;
  };
  config["num_key_value_heads"] = config.value("num_attention_heads", int64_t(0));
  int64_t qLora = 0, kvLora = 0, rope = 0, key = 0, value = 0;
  if (has("attention.q_lora_rank")) {
    if (!integer("attention.q_lora_rank", qLora, 1))
      return false;
    config["q_lora_rank"] = qLora;
  } else {
    config["q_lora_rank"] = nullptr; // q_proj
  }
  bool mla = has("attention.key_length_mla");
  const char *keyKey = mla ? "attention.key_length_mla" : "attention.key_length";
  const char *valueKey = mla ? "attention.value_length_mla" : "attention.value_length";
  if (!require("attention.kv_lora_rank") || !require("rope.dimension_count") ||
      !require(keyKey) || !require(valueKey) || !integer("attention.kv_lora_rank", kvLora, 1) ||
      !integer("rope.dimension_count", rope, 1) || !integer(keyKey, key, 1) ||
      !integer(valueKey, value, 1))
    return false;
  if (key <= rope) {
    error = source.where + ": " + source.key(keyKey) + " " + std::to_string(key) +
            " leaves no dimensions without RoPE beside rope.dimension_count " +
            std::to_string(rope);
    return false;
  }
  config["kv_lora_rank"] = kvLora;
  config["qk_rope_head_dim"] = rope;
  config["qk_nope_head_dim"] = key - rope;
  config["v_head_dim"] = value;
  int64_t dense = 0, experts = 0, used = 0, shared = 0, width = 0;
  if ((has("leading_dense_block_count") && !integer("leading_dense_block_count", dense)) ||
      !require("expert_count") || !require("expert_used_count") ||
      !require("expert_feed_forward_length") || !integer("expert_count", experts, 1) ||
      !integer("expert_used_count", used, 1) ||
      !integer("expert_feed_forward_length", width, 1) ||
      (has("expert_shared_count") && !integer("expert_shared_count", shared)))
    return false;
  config["first_k_dense_replace"] = dense;
  config["n_routed_experts"] = experts;
  config["num_experts_per_tok"] = used;
  config["moe_intermediate_size"] = width;
  config["n_shared_experts"] = shared;
  config["topk_method"] = "greedy";
  if (has("expert_weights_scale")) {
    double scale = 0;
    if (!file.getFloat(source.key("expert_weights_scale"), scale, error))
      return false;
    config["routed_scaling_factor"] = scale;
  }
  int64_t gating = 1, groups = 1;
  bool norm = false;
  if ((has("expert_gating_func") && !integer("expert_gating_func", gating)) ||
      (has("expert_group_count") && !integer("expert_group_count", groups)))
    return false;
  if (has("expert_weights_norm") && !file.getBool(source.key("expert_weights_norm"), norm, error))
    return false;
  if (gating != 1 || norm || groups > 1) {
    const char *k = gating != 1 ? "expert_gating_func" : norm ? "expert_weights_norm"
                                                            : "expert_group_count";
    error = source.where + ": " + source.key(k) +
            " says a router tpc's DeepSeek-V2 does not compute (" +
            (groups > 1 && gating == 1 && !norm
                 ? "llama.cpp ranks groups of experts by their two best experts, DeepSeek-V3's "
                   "rule; DeepSeek-V2's takes the best one"
                 : "DeepSeek-V3's sigmoid gate or renormalized weights") +
            ")";
    return false;
  }
  // YaRN with the log multiplier as mscale_all_dim; llama.cpp takes mscale equal to it.
  nlohmann::ordered_json scaling;
  if (!readRopeScaling(source, config, true, scaling, error))
    return false;
  if (scaling.contains("mscale_all_dim"))
    scaling["mscale"] = scaling["mscale_all_dim"];
  config["rope_parameters"] = std::move(scaling);
  return true;
}

/// Llama 4 as llama.cpp reads a llama4 file (transformers 5.17's loader does not know the
/// architecture). llama.cpp takes from no key what Llama4TextConfig's defaults also are:
/// chunks of 8192 on three layers of four, the fourth without RoPE, its queries' temperature
/// from floor 8192 and scale 0.1 (so the config leaves them out); an
/// attention.sliding_window of 0 (MobileLLM's) is no chunking and RoPE on every layer.
/// llama.cpp normalizes q and k except in a file of 128 experts (Llama 4 Maverick, whose
/// use_qk_norm is false), which no key says either.
bool readLlama4(const GgufSource &source, nlohmann::ordered_json &config, std::string &error) {
  int64_t experts = config.value("num_local_experts", int64_t(0));
  config["use_qk_norm"] = experts != 128;
  std::string key = source.key("attention.sliding_window");
  int64_t window = -1;
  if (source.file.find(key) && !source.file.getInt(key, window, error, 0, int64_t(1) << 40))
    return false;
  if (window == 0) {
    int64_t layers = config.value("num_hidden_layers", int64_t(0));
    config["no_rope_layers"] = std::vector<int64_t>(size_t(layers), 1);
    config["layer_types"] = std::vector<std::string>(size_t(layers), "full_attention");
  }
  return true;
}

/// What a gemma, olmo2, smollm3 or Mixtral-style llama file may say that llama.cpp computes
/// and tpc does not read from GGUF, refused by its key rather than computed without: RoPE
/// scaling (the converter writes a yarn config as rope.scaling.*), and an olmo2 file's
/// attention.sliding_window, which the converter writes for OLMo 3 (Olmo3ForCausalLM is
/// converted to olmo2, its sliding layers in attention.sliding_window_pattern), a model tpc
/// does not import.
bool checkNothingUnread(const GgufSource &source, std::string &error) {
  std::string type = source.arch.modelType;
  if (type != "gemma" && type != "olmo2" && type != "smollm3" && type != "mixtral" &&
      type != "llama4_text")
    return true;
  std::string scaling = "none", key = source.key("rope.scaling.type");
  if (source.file.find(key) && !source.file.getString(key, scaling, error))
    return false;
  if (scaling != "none") {
    error = source.where + ": " + key + " is '" + scaling +
            "'; tpc does not read RoPE scaling from a " + source.architecture + " file yet";
    return false;
  }
  key = source.key("attention.sliding_window");
  if (type == "olmo2" && source.file.find(key)) {
    error = source.where + ": " + key +
            " says OLMo 3 (which llama.cpp's converter writes as olmo2), whose sliding layers "
            "tpc does not import";
    return false;
  }
  return true;
}

/// The config.json transformers 5.17 builds from the file's metadata (and Gemma 3's
/// readGemma3; what llama.cpp takes from a gemma, olmo2, smollm3 or Mixtral-style llama file,
/// checkNothingUnread).
bool buildConfig(const GgufSource &source, const std::string &modelType,
                 nlohmann::ordered_json &config, std::string &error) {
  config["model_type"] = modelType;
  if (!readHyperparameters(source, config, error))
    return false;
  applyClassDefaults(modelType, config);
  if (!checkRequiredHyperparameters(source, error) || !checkNothingUnread(source, error) ||
      (source.arch.gemma3 && !readGemma3(source, config, error)) ||
      (source.arch.gptOss && !readGptOss(source, config, error)) ||
      (source.arch.deepseek2 && !readDeepseek2(source, config, error)) ||
      (source.arch.llama4 && !readLlama4(source, config, error)) ||
      !readSpecialTokens(source.file, config, error) || !fillVocabSize(source, config, error))
    return false;
  bool hasOutput = source.file.tensor("output.weight") != nullptr;
  config["tie_word_embeddings"] = !hasOutput;
  return true;
}

/// llama.cpp's converter keeps a model's RoPE scaling as a tensor of per-pair divisors of
/// the frequencies: rope_freqs (Llama 3.1's and 3.2's llama3 scaling, which the metadata does
/// not otherwise say), read by readRopeFreqs. LongRoPE's two tables (Phi-3's long and short
/// factors, one chosen by the sequence's length) are not read: refused.
bool checkNotRopeFactors(const GgufTensor &t, const std::string &where, std::string &error) {
  if (t.name == "rope_factors_long.weight" || t.name == "rope_factors_short.weight") {
    error = where + ": tensor " + t.name +
            " holds LongRoPE scaling factors, which tpc does not read from GGUF yet";
    return false;
  }
  return true;
}

/// The file's rope_freqs, where it has one, into `config` as tpc's RoPE type "freq_factors"
/// (lib/Import/Rope.cpp): each pair's frequency divided by its factor, as llama.cpp's rope
/// divides it. transformers 5.17's GGUF loader ignores the tensor, and so computes another
/// model than the checkpoint the file came from; tpc computes that checkpoint's (llama3
/// scaling is exactly these divisors). One positive finite factor for each pair of the
/// rotated dimensions, else an error naming the tensor.
bool readRopeFreqs(const GgufSource &source, nlohmann::ordered_json &config, std::string &error) {
  const GgufTensor *t = source.file.tensor("rope_freqs.weight");
  if (!t)
    return true;
  int64_t heads = config.value("num_attention_heads", int64_t(0));
  int64_t headDim = config.contains("head_dim")
                        ? config["head_dim"].get<int64_t>()
                        : heads > 0 ? config.value("hidden_size", int64_t(0)) / heads : 0;
  if (t->shape.size() != 1 || headDim <= 0 || t->shape[0] * 2 != headDim) {
    error = source.where + ": tensor rope_freqs.weight has shape " + shapeText(t->shape) +
            "; RoPE scaling factors are one for each pair of a head's " +
            std::to_string(headDim) + " dimensions";
    return false;
  }
  std::vector<float> factors;
  if (!source.file.readRowsF32(t->name, 0, 1, factors, error))
    return false;
  nlohmann::ordered_json list = nlohmann::ordered_json::array();
  for (size_t i = 0; i < factors.size(); ++i) {
    if (!std::isfinite(factors[i]) || !(factors[i] > 0)) {
      error = source.where + ": tensor rope_freqs.weight holds " + std::to_string(factors[i]) +
              " at " + std::to_string(i) + ": a RoPE scaling factor must be positive";
      return false;
    }
    list.push_back(double(factors[i]));
  }
  config["rope_parameters"] = {{"rope_type", "freq_factors"}, {"freq_factors", std::move(list)}};
  if (config.contains("rope_theta"))
    config["rope_parameters"]["rope_theta"] = config["rope_theta"];
  return true;
}

bool checkDequantizable(const GgufTensor &t, const std::string &where, std::string &error) {
  const GgmlTypeInfo *info = ggmlTypeInfo(t.type);
  if (!info || !info->dequantizable) {
    error = where + ": tensor " + t.name + " has type " + (info ? info->name : "unknown") +
            ", which tpc does not read (it reads " + ggmlDequantizableTypes() + ")";
    return false;
  }
  return true;
}

/// Checks that `t` is a matrix whose rows the converter's RoPE permutation could have
/// shuffled in `heads` heads of pairs, which reading undoes.
bool checkPermutable(const GgufTensor &t, int64_t heads, const std::string &where,
                     std::string &error) {
  int64_t rows = t.shape.size() == 2 ? t.shape[0] : 0;
  if (t.shape.size() != 2) {
    error = where + ": tensor " + t.name + " has shape " + shapeText(t.shape) +
            "; tpc undoes the converter's RoPE permutation of matrices only";
    return false;
  }
  if (heads <= 0 || rows % (2 * heads) != 0) {
    error = where + ": tensor " + t.name + " has " + std::to_string(rows) +
            " rows, which do not split into " + std::to_string(heads) +
            " heads of pairs (the converter's RoPE permutation)";
    return false;
  }
  return true;
}

/// Adds tensor `t` to `tensors` under its Hugging Face name, with what reading must undo;
/// `heads` and `kvHeads` are the query's and the key's heads.
bool mapTensor(const GgufSource &source, const std::string &modelType, const GgufTensor &t,
               int64_t heads, int64_t kvHeads, std::map<std::string, GgufModelTensor> &tensors,
               std::string &error) {
  if (!checkNotRopeFactors(t, source.where, error))
    return false;
  std::string module;
  std::string name = hfName(t.name, source.arch, module);
  if (name.empty()) {
    error = source.where + ": tensor " + t.name + " has no counterpart in a Hugging Face " +
            modelType + " model that tpc knows";
    return false;
  }
  if (!checkDequantizable(t, source.where, error))
    return false;
  GgufModelTensor mapped;
  mapped.tensor = &t;
  if (source.arch.permuteQK && (module == "attn_q" || module == "attn_k")) {
    mapped.permutedHeads = module == "attn_q" ? heads : kvHeads;
    if (!checkPermutable(t, mapped.permutedHeads, source.where, error))
      return false;
  }
  mapped.minusOne = source.arch.normMinusOne && t.name.find("norm.weight") != std::string::npos;
  // Qwen2-MoE's shared expert gate, [1, hidden] to transformers; a file may hold it as a
  // vector (the loader's Qwen2MoeTensorProcessor adds the dimension).
  mapped.rowVector = module == "ffn_gate_inp_shexp" && t.shape.size() == 1;
  // GPT-OSS's experts are [E, in, out] to transformers, [E, out, in] in the file.
  bool expertWeight = t.name.size() > 7 && t.name.compare(t.name.size() - 7, 7, ".weight") == 0;
  bool transposedExperts = source.arch.gptOss || source.arch.llama4;
  if (transposedExperts && (module == "ffn_down_exps" || module == "ffn_gate_up_exps") &&
      expertWeight)
    mapped.transposed = true; // Llama 4's fused gate_up: its halves are transformers' too
  if (module == "ffn_gate_up_exps" && source.arch.gptOss) {
    error = source.where + ": tensor " + t.name +
            " fuses gate and up (the converter's --fuse-gate-up-exps); tpc reads GPT-OSS's "
            "experts as the converter writes them by default, ffn_gate_exps and ffn_up_exps";
    return false;
  }
  // gate_up_proj's halves, met in either order (checkFusedExperts: both, alike); GPT-OSS's
  // biases too (gate_up_proj_bias).
  if (module == "ffn_gate_exps" || module == "ffn_up_exps") {
    GgufModelTensor &fused = tensors[name];
    fused.transposed = transposedExperts && expertWeight;
    fused.interleaved = source.arch.gptOss;
    const GgufTensor *&half = module == "ffn_gate_exps" ? fused.tensor : fused.up;
    if (half) {
      error = source.where + ": two tensors map to " + name;
      return false;
    }
    half = &t;
    return true;
  }
  // kv_b_proj's key and value parts (checkFusedExperts: both, alike).
  if (module == "attn_k_b" || module == "attn_v_b") {
    GgufModelTensor &fused = tensors[name];
    const GgufTensor *&part = module == "attn_k_b" ? fused.tensor : fused.up;
    if (part) {
      error = source.where + ": two tensors map to " + name;
      return false;
    }
    part = &t;
    fused.mlaKvB = true;
    return true;
  }
  if (!tensors.emplace(name, mapped).second) {
    error = source.where + ": two tensors map to " + name;
    return false;
  }
  return true;
}

/// Checks that each expert gate_up_proj has its two halves, 3D and of one shape (GPT-OSS's
/// gate_up_proj_bias: 2D), and that a transposed tensor is 3D.
bool checkFusedExperts(const GgufSource &source,
                       const std::map<std::string, GgufModelTensor> &tensors,
                       std::string &error) {
  auto endsWith = [](const std::string &name, const std::string &suffix) {
    return name.size() > suffix.size() &&
           name.compare(name.size() - suffix.size(), suffix.size(), suffix) == 0;
  };
  for (const auto &[name, mapped] : tensors) {
    if (mapped.mlaKvB) { // attn_k_b [H, kv_lora, nope] and attn_v_b [H, v, kv_lora]
      const GgufTensor *k = mapped.tensor, *v = mapped.up;
      if (!k || !v || k->shape.size() != 3 || v->shape.size() != 3 || k->shape[0] != v->shape[0] ||
          k->shape[1] != v->shape[2]) {
        error = source.where + ": " + name + " is attn_k_b [heads, kv_lora_rank, nope] and " +
                "attn_v_b [heads, v_head_dim, kv_lora_rank] in a layer, but the file has " +
                (k ? k->name + " " + shapeText(k->shape) : std::string("no attn_k_b")) + " and " +
                (v ? v->name + " " + shapeText(v->shape) : std::string("no attn_v_b"));
        return false;
      }
      continue;
    }
    bool bias = endsWith(name, "_bias");
    size_t dims = bias ? 2 : 3;
    if (!mapped.tensor || (mapped.up && mapped.tensor->shape != mapped.up->shape) ||
        ((mapped.up || mapped.transposed) && mapped.tensor->shape.size() != dims)) {
      error = source.where + ": " + name + " is " +
              (mapped.up || !mapped.tensor ? "ffn_gate_exps and ffn_up_exps of one shape "
                                           : "ffn_down_exps of shape ") +
              (bias ? "[experts, intermediate]" : "[experts, rows, row]") +
              " in a layer, but the file has " +
              (mapped.tensor ? mapped.tensor->name + " " + shapeText(mapped.tensor->shape)
                             : std::string("no ffn_gate_exps")) +
              (mapped.up ? " and " + mapped.up->name + " " + shapeText(mapped.up->shape) : "");
      return false;
    }
    bool fusedInFile = mapped.tensor->name.find(".ffn_gate_up_exps.") != std::string::npos;
    if (!mapped.up && !fusedInFile &&
        (endsWith(name, ".experts.gate_up_proj") ||
         endsWith(name, ".experts.gate_up_proj_bias"))) {
      error = source.where + ": " + mapped.tensor->name + " has no ffn_up_exps beside it, " +
              "the other half of " + name;
      return false;
    }
  }
  return true;
}

/// Maps every tensor of the file (mapTensor), the heads taken from `config`.
bool mapTensors(const GgufSource &source, const std::string &modelType,
                const nlohmann::ordered_json &config,
                std::map<std::string, GgufModelTensor> &tensors, std::string &error) {
  int64_t heads = config.value("num_attention_heads", int64_t(0));
  int64_t kvHeads = config.value("num_key_value_heads", heads);
  for (const GgufTensor &t : source.file.tensors())
    if (t.name != "rope_freqs.weight" && // (readRopeFreqs': no parameter of the model)
        !mapTensor(source, modelType, t, heads, kvHeads, tensors, error))
      return false;
  return checkFusedExperts(source, tensors, error);
}

} // namespace

std::unique_ptr<GgufModel> GgufModel::open(const std::string &path, std::string &error) {
  std::unique_ptr<GgufModel> model(new GgufModel());
  model->file_ = GgufFile::open(path, error);
  if (!model->file_)
    return nullptr;
  const GgufFile &file = *model->file_;
  const std::string where = "GGUF file " + path;
  std::string architecture;
  const GgufArchitecture *arch = findArchitecture(file, where, architecture, error);
  if (!arch)
    return nullptr;
  const GgufSource source{file, where, architecture, *arch};
  model->modelType_ = modelTypeOf(source);
  nlohmann::ordered_json config;
  if (!buildConfig(source, model->modelType_, config, error) ||
      !readRopeFreqs(source, config, error) ||
      !mapTensors(source, model->modelType_, config, model->tensors_, error))
    return nullptr;
  model->config_ = config.dump(2) + "\n";
  return model;
}

const GgufModelTensor *GgufModel::find(const std::string &name) const {
  auto it = tensors_.find(name);
  return it == tensors_.end() ? nullptr : &it->second;
}

const GgufModelTensor *GgufModel::require(const std::string &name, std::string &error) const {
  const GgufModelTensor *mapped = find(name);
  if (!mapped)
    error = "tensor " + name + " is missing from " + file_->path();
  return mapped;
}

bool GgufModel::read(const std::string &name, const std::vector<int64_t> &shape,
                     const SliceSpec &spec, float *out, uint64_t &bytesRead,
                     std::string &error) const {
  const GgufModelTensor *mapped = require(name, error);
  if (!mapped)
    return false;
  const GgufTensor &t = *mapped->tensor;
  if (ggufModelShape(*mapped) != shape) {
    error = "tensor " + name + " (" + t.name + " in " + file_->path() + ") has shape " +
            shapeText(ggufModelShape(*mapped)) + ", the model expects " + shapeText(shape);
    return false;
  }
  if (mapped->rearranged())
    return readRearranged(*file_, *mapped, shape, spec, out, bytesRead, error);
  const int64_t rowElements = t.ne.empty() ? 1 : t.ne[0];
  std::array<int64_t, 2> ends = rowsNeeded(*mapped, shape, spec);
  RowWindow windows[2] = {{*file_, t, mapped->permutedHeads, ends[0], 0, 0, {}},
                          {*file_, mapped->up ? *mapped->up : t, 0, ends[1], 0, 0, {}}};
  // The row last dequantized (and, for Gemma's norms, less its 1).
  FileRow decoded = {0, -1};
  std::vector<float> values(static_cast<size_t>(rowElements));
  auto row = [&](int64_t hfRow) -> const float * {
    FileRow at = fileRowOf(*mapped, hfRow);
    if (at.part != decoded.part || at.row != decoded.row) {
      RowWindow &window = windows[at.part];
      const uint8_t *raw = window.row(at.row, bytesRead, error);
      if (!raw || !dequantize(window.t.type, raw, rowElements, values.data(), error))
        return nullptr;
      if (mapped->minusOne)
        for (float &v : values)
          v = v - 1.0f;
      decoded = at;
    }
    return values.data();
  };
  return copySlice(shape, spec, out, [&](uint64_t at, int64_t &available) -> const float * {
    int64_t r = int64_t(at / uint64_t(rowElements)), col = int64_t(at % uint64_t(rowElements));
    const float *from = row(r);
    available = rowElements - col;
    return from ? from + col : nullptr;
  });
}

bool GgufModel::readBlocks(const std::string &name, const std::vector<int64_t> &shape,
                           const SliceSpec &spec, DType type, void *out, uint64_t &bytesRead,
                           std::string &error) const {
  const GgufModelTensor *mapped = require(name, error);
  if (!mapped)
    return false;
  const GgufTensor &t = *mapped->tensor;
  if (mapped->rearranged()) {
    error = "tensor " + name + " (" + t.name + " in " + file_->path() +
            ") is stored transposed or in parts that transformers holds together; tpc reads "
            "it widened to f32, not in its " + ggmlTypeInfo(t.type)->name + " blocks";
    return false;
  }
  if (ggufModelShape(*mapped) != shape || t.type != ggmlTypeOf(type) ||
      (mapped->up && mapped->up->type != t.type) || mapped->minusOne) {
    error = "tensor " + name + " (" + t.name + " in " + file_->path() + ") is " +
            ggmlTypeInfo(t.type)->name + " " + shapeText(ggufModelShape(*mapped)) +
            (mapped->up ? " with " + mapped->up->name + " " + ggmlTypeInfo(mapped->up->type)->name
                        : std::string()) +
            ", but the program holds " +
            dtypeName(type) + " " + shapeText(shape) +
            " as the file stores it (compiled for another file?)";
    return false;
  }
  const int64_t rowElements = t.ne[0], block = dtypeBlockElements(type);
  const size_t blockBytes = dtypeBlockBytes(type);
  std::array<int64_t, 2> ends = rowsNeeded(*mapped, shape, spec);
  RowWindow windows[2] = {{*file_, t, mapped->permutedHeads, ends[0], 0, 0, {}},
                          {*file_, mapped->up ? *mapped->up : t, 0, ends[1], 0, 0, {}}};
  auto* to = static_cast<uint8_t *>(out);
  bool ok = true;
  forEachRun(shape, spec, [&](uint64_t first, int64_t count, int64_t padded) {
    if (!ok)
      return;
    if (first % uint64_t(block) || count % block || padded % block) {
      error = "tensor " + name + ": this rank's piece cuts its " + dtypeName(type) +
              " blocks of " + std::to_string(block) +
              " elements (elements " + std::to_string(first) + " to " +
              std::to_string(first + uint64_t(count)) + ")";
      ok = false;
      return;
    }
    for (int64_t done = 0; done < count;) {
      uint64_t at = first + uint64_t(done);
      int64_t r = int64_t(at / uint64_t(rowElements)), col = int64_t(at % uint64_t(rowElements));
      int64_t take = std::min(count - done, rowElements - col);
      FileRow fileRow = fileRowOf(*mapped, r);
      const uint8_t *row = windows[fileRow.part].row(fileRow.row, bytesRead, error);
      if (!row) {
        ok = false;
        return;
      }
      const uint8_t *from = row + size_t(col / block) * blockBytes;
      std::memcpy(to, from, size_t(take / block) * blockBytes);
      to += size_t(take / block) * blockBytes;
      done += take;
    }
    size_t pad = size_t((padded - count) / block) * blockBytes;
    std::memset(to, 0, pad);
    to += pad;
  });
  return ok;
}

} // namespace tpcrt
