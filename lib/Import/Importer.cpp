// tpc import: a Hugging Face config.json becomes model.mlir text, op for op what the
// architecture's transformers 5.17 forward computes (fp32, batch 1, eval). The text is
// written by hand rather than printed from built IR so that it reads like the example: named
// values, one comment per layer. The caller parses and verifies it.
#include "tpc/Import/Importer.h"

#include "tpc/Plan/Json.h"

#include "mlir/IR/Diagnostics.h"
#include "llvm/ADT/StringExtras.h"
#include "llvm/Support/FormatVariadic.h"
#include "llvm/Support/Path.h"

#include <algorithm>
#include <cmath>
#include <optional>
#include <set>
#include <sstream>

using namespace mlir;
using json = nlohmann::ordered_json;

namespace tpc::import {

double yarnGetMscale(double scale, double mscale) {
  return scale <= 1 ? 1.0 : 0.1 * mscale * std::log(scale) + 1.0;
}

namespace {

/// What distinguishes the supported architectures from Llama.
struct Architecture {
  const char *modelType, *causalLM;
  bool qkvBias = false;           // Qwen2: q/k/v always have biases
  bool qkNorm = false;            // Qwen3: per-head RMSNorm of q and k before RoPE
  bool rowQkNorm = false;         // OLMo2: RMSNorm of q and k over their whole projected width
  bool postNormsOnly = false;     // OLMo2: norms after attention and MLP, none before
  bool mla = false;               // DeepSeek-V2: multi-head latent attention, shared experts
  bool gemma = false;             // norms scale by (1 + w), embeddings by sqrt(hidden)
  bool sandwichNorms = false;     // Gemma2: norms after attention and MLP too
  bool gemma3 = false;            // Gemma 3: a RoPE per layer type (rope_local_base_freq),
                                  // layer types by sliding_window_pattern
  bool noRopeLayers = false;      // SmolLM3: no_rope_layers leaves RoPE out of some layers
  bool llama4 = false;            // Llama 4: its own MoE, chunked attention, no-RoPE layers
                                  // with temperature tuning, q/k L2 norm (readLlama4)
  bool fused = false;             // Phi3: qkv_proj, gate_up_proj
  bool moe = false;               // Mixtral, Qwen3-MoE, GPT-OSS: router + experts
  bool qwenMoe = false;           // Qwen3-MoE: num_experts, moe_intermediate_size, norm_topk_prob;
                                  // dense layers by mlp_only_layers and decoder_sparse_step
  bool gptOss = false;            // GPT-OSS: attention sinks, biased router and experts (below)
  bool slidingEveryLayer = false; // Mistral, Mixtral, Phi3: sliding_window applies to all
  bool hasLayerTypes = false;     // Qwen2/3, Gemma2: layer_types chooses per layer
  bool slidingNeedsFlag = false;  // Qwen3-MoE: sliding_window counts with use_sliding_window
  bool attentionBiasField = false, mlpBiasField = false;
  bool defaultAttentionBias = false;
  const char *activationKey = "hidden_act";
  const char *defaultActivation = "silu";
  bool tiedByDefault = false;
  double defaultEps = 1e-6;  // the config class's rms_norm_eps
  double defaultTheta = 1e4; // the config class's default_theta
};

/// The supported architectures, each spelled as its differences from Llama.
const std::vector<Architecture> &architectures() {
  static const std::vector<Architecture> table = [] {
    Architecture llama{"llama", "LlamaForCausalLM"};
    llama.attentionBiasField = llama.mlpBiasField = true;
    Architecture mistral{"mistral", "MistralForCausalLM"};
    mistral.slidingEveryLayer = true;
    Architecture qwen2{"qwen2", "Qwen2ForCausalLM"};
    qwen2.qkvBias = qwen2.hasLayerTypes = true;
    Architecture qwen3{"qwen3", "Qwen3ForCausalLM"};
    qwen3.qkNorm = qwen3.hasLayerTypes = qwen3.attentionBiasField = true;
    Architecture gemma{"gemma", "GemmaForCausalLM"};
    gemma.gemma = gemma.attentionBiasField = gemma.tiedByDefault = true;
    gemma.defaultActivation = "gelu_pytorch_tanh";
    Architecture gemma2 = gemma;
    gemma2.modelType = "gemma2";
    gemma2.causalLM = "Gemma2ForCausalLM";
    gemma2.sandwichNorms = gemma2.hasLayerTypes = true;
    gemma2.activationKey = "hidden_activation";
    Architecture gemma3 = gemma2;
    gemma3.modelType = "gemma3_text";
    gemma3.causalLM = "Gemma3ForCausalLM";
    gemma3.gemma3 = gemma3.qkNorm = true;
    Architecture smollm3 = llama;
    smollm3.modelType = "smollm3";
    smollm3.causalLM = "SmolLM3ForCausalLM";
    smollm3.noRopeLayers = smollm3.tiedByDefault = true;
    smollm3.defaultTheta = 2e6;
    Architecture llama4{"llama4_text", "Llama4ForCausalLM"};
    llama4.llama4 = llama4.attentionBiasField = true;
    llama4.defaultEps = 1e-5;
    llama4.defaultTheta = 500000.0;
    Architecture phi3{"phi3", "Phi3ForCausalLM"};
    phi3.fused = phi3.slidingEveryLayer = true;
    Architecture mixtral{"mixtral", "MixtralForCausalLM"};
    mixtral.moe = mixtral.slidingEveryLayer = true;
    mixtral.defaultTheta = 1e6;
    Architecture qwen3Moe{"qwen3_moe", "Qwen3MoeForCausalLM"};
    qwen3Moe.qkNorm = qwen3Moe.attentionBiasField = true;
    qwen3Moe.moe = qwen3Moe.qwenMoe = true;
    qwen3Moe.slidingEveryLayer = qwen3Moe.slidingNeedsFlag = true;
    Architecture olmo2{"olmo2", "Olmo2ForCausalLM"};
    olmo2.rowQkNorm = olmo2.postNormsOnly = olmo2.attentionBiasField = true;
    olmo2.defaultEps = 1e-5;
    Architecture deepseek2{"deepseek_v2", "DeepseekV2ForCausalLM"};
    deepseek2.mla = deepseek2.attentionBiasField = deepseek2.mlpBiasField = true;
    Architecture gptOss{"gpt_oss", "GptOssForCausalLM"};
    gptOss.moe = gptOss.gptOss = gptOss.hasLayerTypes = true;
    gptOss.attentionBiasField = gptOss.defaultAttentionBias = true;
    gptOss.defaultEps = 1e-5;
    gptOss.defaultTheta = 150000.0;
    return std::vector<Architecture>{llama,    mistral, qwen2,     qwen3,  gemma,
                                     gemma2,   gemma3,  smollm3,   llama4, phi3,
                                     mixtral,  qwen3Moe, olmo2,    deepseek2, gptOss};
  }();
  return table;
}

/// Fields that never change what inference computes (training, ids, bookkeeping).
const std::set<std::string> kHarmless = {
    "architectures", "model_type", "transformers_version", "torch_dtype", "dtype", "_name_or_path",
    "initializer_range", "use_cache", "bos_token_id", "pad_token_id",
    "original_max_position_embeddings", "attention_dropout", "resid_pdrop", "embd_pdrop",
    "output_router_logits", "router_aux_loss_coef", "router_jitter_noise", "return_dict",
    "output_hidden_states", "output_attentions", "id2label", "label2id", "problem_type",
    "chunk_size_feed_forward", "is_encoder_decoder", "tie_encoder_decoder", "add_cross_attention",
    "tokenizer_class", "prefix", "task_specific_params", "max_window_layers", "use_sliding_window",
    "base_model_tp_plan", "base_model_pp_plan", "pretraining_tp", "generation_config", "bos_token",
    "eos_token", "use_bidirectional_attention",
    // GPT-OSS's released config.json: copies of other fields that transformers never reads.
    "experts_per_token", "initial_context_length",
    // Gemma3TextConfig saves the pattern it made layer_types from (always saved beside them);
    // reading it back, it reads sliding_window_pattern only.
    "_sliding_window_pattern",
    // Llama 4's released config.json: a flag for a quantization tool.
    "for_llm_compressor"};

// config.json comes from anywhere: a size larger than any model's would only overflow or
// exhaust memory further down (in the text written here, in analyze's byte counts, in the
// binary's allocations), so it is refused here, at its field.
/// Any integer field: sizes of real models are far below 2^31.
constexpr int64_t kMaxConfigInt = (int64_t(1) << 31) - 1;
/// Layers and experts, each of which adds text to model.mlir: 4x the largest released model.
constexpr int64_t kMaxRepeats = 1024;
/// One parameter: 2^40 elements (4 TiB in fp32), hundreds of times today's largest tensor,
/// and far from overflowing a byte count.
constexpr uint64_t kMaxParamElements = uint64_t(1) << 40;

/// One config.json, read field by field: what was read is remembered, so the fields left
/// over can be reported; errors point at the field's line. A multimodal wrapper's language
/// model is read from its sub-object (`at`, the keys leading to it: {"text_config"}).
class Config {
public:
  Config(const plan::JsonDocument &doc, MLIRContext *context, std::vector<std::string> at = {})
      : doc(doc), context(context), at(std::move(at)) {
    object = &doc.value();
    for (const std::string &key : this->at) // the caller has checked that each is an object
      object = &*object->find(key);
  }

  /// The object read (config.json, or its text_config).
  const json &value() const { return *object; }

  /// Where the key at `path` (from this object down) was written.
  Location keyLoc(const std::vector<std::string> &path) const {
    std::vector<std::string> full = at;
    full.insert(full.end(), path.begin(), path.end());
    return doc.keyLoc(full);
  }

  const json *get(const std::string &key) {
    used.insert(key);
    auto it = object->find(key);
    return it == object->end() || it->is_null() ? nullptr : &*it;
  }

  InFlightDiagnostic error(const std::string &key) {
    failed = true;
    return emitError(keyLoc({key}));
  }

  std::optional<int64_t> integer(const std::string &key, std::optional<int64_t> fallback,
                                 int64_t minimum = 1, int64_t maximum = kMaxConfigInt) {
    const json *v = get(key);
    if (!v) {
      if (!fallback)
        error(key) << "config.json has no '" << key << "'";
      return fallback;
    }
    // An unsigned value above 2^63 would read as negative: compare it as unsigned.
    bool tooLarge = v->is_number_unsigned() && v->get<uint64_t>() > uint64_t(maximum);
    if (!v->is_number_integer() || tooLarge || v->get<int64_t>() < minimum ||
        v->get<int64_t>() > maximum) {
      error(key) << "'" << key << "' must be an integer from " << minimum << " to " << maximum
                 << ", got " << v->dump();
      return std::nullopt;
    }
    return v->get<int64_t>();
  }

  std::optional<double> number(const std::string &key, std::optional<double> fallback) {
    const json *v = get(key);
    if (!v)
      return fallback;
    if (!v->is_number() || v->get<double>() <= 0) {
      error(key) << "'" << key << "' must be a positive number, got " << v->dump();
      return std::nullopt;
    }
    return v->get<double>();
  }

  bool boolean(const std::string &key, bool fallback) {
    const json *v = get(key);
    if (!v)
      return fallback;
    if (!v->is_boolean()) {
      error(key) << "'" << key << "' must be true or false, got " << v->dump();
      return fallback;
    }
    return v->get<bool>();
  }

  /// Warns about each field neither read nor known to be harmless.
  void reportUnread() {
    for (auto it = object->begin(); it != object->end(); ++it)
      if (!used.count(it.key()) && !kHarmless.count(it.key()))
        emitWarning(keyLoc({it.key()}))
            << "'" << it.key() << "' is not a field tpc knows; ignored (tpc models "
            << "transformers 5.17's forward, which it assumes this field does not change)";
  }

  const plan::JsonDocument &doc;
  MLIRContext *context;
  std::vector<std::string> at;
  const json *object;
  std::set<std::string> used;
  bool failed = false;
};

/// RoPE of one layer type: theta, the inverse frequencies when a scaling changed them, and
/// the factor on cos and sin (YaRN's attention_factor).
struct Rope {
  double theta = 10000.0;
  std::vector<double> invFreq;
  double scaling = 1.0;
};

/// llama3's frequency scaling, in float32 as transformers computes it.
std::vector<double> llama3InvFreq(double theta, int64_t headDim, double factor, double low,
                                  double high, double original) {
  std::vector<double> out;
  const float pi = 3.14159265358979323846f;
  for (int64_t i = 0; i < headDim; i += 2) {
    float exponent = float(i) / float(headDim);
    float inv = 1.0f / std::pow(float(theta), exponent);
    float wavelen = 2 * pi / inv;
    float lowWavelen = float(original / low), highWavelen = float(original / high);
    float scaled = wavelen > lowWavelen ? inv / float(factor) : inv;
    if (!(wavelen < highWavelen) && !(wavelen > lowWavelen)) {
      float smooth = (float(original) / wavelen - float(low)) / float(high - low);
      scaled = (1 - smooth) * scaled / float(factor) + smooth * scaled;
    }
    out.push_back(scaled);
  }
  return out;
}

/// YaRN's inverse frequencies, in float32 where transformers' _compute_yarn_parameters
/// computes in float32 (the correction range in double, as Python computes it).
std::vector<double> yarnInvFreq(double theta, int64_t dim, double factor, double betaFast,
                                double betaSlow, double original, bool truncate) {
  const double pi = 3.14159265358979323846;
  auto correctionDim = [&](double rotations) {
    return (double(dim) * std::log(original / (rotations * 2 * pi))) / (2 * std::log(theta));
  };
  double low = correctionDim(betaFast), high = correctionDim(betaSlow);
  if (truncate) {
    low = std::floor(low);
    high = std::ceil(high);
  }
  low = std::max(low, 0.0);
  high = std::min(high, double(dim - 1));
  if (low == high)
    high += 0.001; // transformers: prevents a division by zero
  std::vector<double> out;
  for (int64_t i = 0; i < dim / 2; ++i) {
    float pos = std::pow(float(theta), float(2 * i) / float(dim));
    float extrapolation = 1.0f / pos, interpolation = 1.0f / (float(factor) * pos);
    float ramp = (float(i) - float(low)) / float(high - low);
    ramp = std::min(std::max(ramp, 0.0f), 1.0f);
    float extrapolationFactor = 1.0f - ramp;
    float a = interpolation * (1.0f - extrapolationFactor);
    float b = extrapolation * extrapolationFactor;
    out.push_back(a + b);
  }
  return out;
}

/// The model.mlir text under construction.
class Writer {
public:
  /// How the checkpoint stores each tensor, by name, where it is not f32 ("bf16", "f16").
  const StoredTypes *stored = nullptr;

  std::string type(std::vector<int64_t> dims) {
    std::string s = "tensor<";
    for (int64_t d : dims)
      s += (d < 0 ? std::string("?") : std::to_string(d)) + "x";
    return s + "f32>";
  }
  std::string act(int64_t width) { return type({-1, width}); }

  /// Declares a parameter (stacked from `sources` in checkpoints that save it in pieces)
  /// and returns a fresh value reading it.
  /// A wrapper's parameters under `from` are also read under `to` (the checkpoint's own name):
  /// as a source of one piece.
  std::string renameFrom, renameTo;

  std::string weight(const std::string &name, std::vector<int64_t> shape,
                     std::vector<std::string> sources = {}) {
    if (sources.empty() && !renameFrom.empty() && llvm::StringRef(name).starts_with(renameFrom))
      sources.push_back(renameTo + name.substr(renameFrom.size()));
    if (!declared.count(name)) {
      declared.insert(name);
      uint64_t elements = 1;
      bool overflow = false;
      for (int64_t d : shape)
        overflow |= __builtin_mul_overflow(elements, uint64_t(d), &elements);
      if ((overflow || elements > kMaxParamElements) && oversized.empty())
        oversized = name + " " + type(shape);
      params << "  tp.param @\"" << name << "\"";
      // The checkpoint's type, by the tensor's name or (stacked) its first piece's.
      std::string storage;
      if (stored) {
        auto it = stored->find(sources.empty() ? name : sources.front());
        if (it != stored->end())
          storage = it->second;
      }
      std::vector<std::string> attrs;
      if (!sources.empty()) {
        std::string list = "sources = [";
        for (size_t i = 0; i < sources.size(); ++i)
          list += (i ? ", \"" : "\"") + sources[i] + "\"";
        attrs.push_back(list + "]");
      }
      if (!storage.empty())
        attrs.push_back("storage = #tp.storage<" + storage + ">");
      for (size_t i = 0; i < attrs.size(); ++i)
        params << (i ? ", " : " {") << attrs[i];
      if (!attrs.empty())
        params << "}";
      params << " : " << type(shape) << "\n";
    }
    std::string value = "%w" + std::to_string(++weights);
    body << "    " << value << " = tp.weight @\"" << name << "\" : " << type(shape) << "\n";
    shapes[value] = type(shape);
    return value;
  }

  /// Emits `%name = tp.<op> "module" operands {attrs} : (types) -> result` and returns %name.
  std::string op(const std::string &name, const std::string &opName, const std::string &module,
                 std::vector<std::string> operands, const std::string &attrs,
                 const std::string &result) {
    std::string value = "%" + name;
    body << "    " << value << " = tp." << opName << " \"" << module << "\" "
         << llvm::join(operands, ", ");
    if (!attrs.empty())
      body << " {" << attrs << "}";
    body << " : (";
    std::vector<std::string> types;
    for (const std::string &v : operands)
      types.push_back(shapes.at(v));
    body << llvm::join(types, ", ") << ") -> " << result << "\n";
    shapes[value] = result;
    return value;
  }

  void comment(const std::string &text) { body << "    // " << text << "\n"; }
  void arg(const std::string &value, const std::string &t) { shapes[value] = t; }

  std::ostringstream params, body;
  /// The first parameter of more than kMaxParamElements elements, with its type.
  std::string oversized;

private:
  std::set<std::string> declared;
  std::map<std::string, std::string> shapes;
  int weights = 0;
};

std::string f64(double v) { return llvm::formatv("{0:e17} : f64", v).str(); }
std::string i64(int64_t v) { return std::to_string(v) + " : i64"; }

class Importer {
public:
  Importer(Config &config, const Architecture &arch, const StoredTypes *stored)
      : c(config), arch(arch) {
    w.stored = stored;
  }

  /// A multimodal wrapper's language model: `config` is its text_config; `outer`, the
  /// wrapper's config.json, which holds the fields transformers reads there (the ids
  /// generation stops at, whether the head is tied).
  struct Wrapper {
    Config *outer;
    const char *modelType, *className, *base, *head, *checkpointBase;
    bool tiedByDefault;
  };
  std::optional<Wrapper> wrapper;

  std::optional<std::string> run();

private:
  bool readShape();
  void readQwenMoe();
  std::optional<Rope> readRope(const json *parameters, const std::string &where,
                               const std::string &layerType = "",
                               std::optional<double> theta = std::nullopt);
  std::optional<Rope> readYarn(Rope rope, const json &parameters, const std::string &where,
                               const std::string &layerType);
  bool readLayerTypes();
  bool readNoRopeLayers();
  bool readLayerTypeList(const char *other, const std::string &family);
  bool readRopeLayers(bool emptyIsAbsent);
  bool readLlama4();
  std::string llama4FeedForward(int64_t i, const std::string &v, const std::string &ff,
                                const std::string &x);
  std::string linear(const std::string &name, const std::string &module, const std::string &x,
                     int64_t in, int64_t out, bool bias);
  std::string norm(const std::string &name, const std::string &module, const std::string &x,
                   int64_t width, std::optional<int64_t> headDim = std::nullopt,
                   std::optional<double> epsilon = std::nullopt);
  bool readMla();
  std::string selfAttention(int64_t i, const std::string &v, const std::string &attn,
                            const std::string &x);
  std::string mlaAttention(int64_t i, const std::string &v, const std::string &attn,
                           const std::string &x);
  std::string mlp(const std::string &v, const std::string &module, const std::string &x,
                  int64_t width);
  std::string activation(const std::string &name, const std::string &module, const std::string &x,
                         int64_t width = 0);
  std::string layer(int64_t i, const std::string &h);

  Config &c;
  const Architecture &arch;
  Writer w;
  int64_t vocab = 0, hidden = 0, inter = 0, layers = 0, heads = 0, kvHeads = 0, headDim = 0;
  int64_t experts = 0, topK = 0, expertInter = 0;
  bool normalizeTopK = true;      // the router divides the kept weights by their sum
  std::vector<bool> sparseLayers; // which layers route to experts (the rest: a dense MLP)
  // DeepSeek-V2: the latent ranks (qLora 0: q_proj instead of q_a/q_b), the query/key head's
  // nope and rope parts, the value head; dense layers first, shared experts, routing.
  int64_t qLora = 0, kvLora = 0, nopeDim = 0, ropeDim = 0, valueDim = 0;
  int64_t moeInter = 0, sharedExperts = 0, denseLayers = 0, groups = 0, topGroups = 0;
  double routedScale = 1.0;
  std::optional<double> mlaScale; // the softmax scale, YaRN's mscale included
  double eps = 1e-6;
  std::optional<double> attnScale, attnSoftcap, finalSoftcap;
  std::string act;
  bool attentionBias = false, mlpBias = false, tied = false;
  std::vector<std::string> layerTypes; // "sliding_attention" or "full_attention"
  std::optional<int64_t> slidingWindow;
  std::map<std::string, Rope> ropes; // by layer type ("" for all)
  std::vector<bool> ropeLayers;      // SmolLM3, Llama 4: the layers that apply RoPE (empty: all)
  // Llama 4: the dense layers' MLP width, q/k L2 norm, the chunk of chunked_attention layers,
  // the temperature tuning of the layers without RoPE.
  int64_t denseInter = 0;
  bool qkL2Norm = false;
  std::optional<int64_t> chunkSize;
  std::optional<std::pair<double, double>> temperature; // floor_scale, attn_scale
  // Where the language model's modules are: "model." (a *ForCausalLM), or
  // "model.language_model." (a multimodal wrapper's text model).
  std::string base = "model.";
  std::string head = "lm_head"; // the head's module (a wrapper's may be deeper)
};

bool Importer::readShape() {
  auto get = [&](const char *key, std::optional<int64_t> fallback = std::nullopt) {
    return c.integer(key, fallback).value_or(0);
  };
  vocab = get("vocab_size");
  hidden = get("hidden_size");
  inter = get("intermediate_size");
  layers = c.integer("num_hidden_layers", std::nullopt, 1, kMaxRepeats).value_or(0);
  heads = get("num_attention_heads");
  if (c.failed)
    return false;
  kvHeads = get("num_key_value_heads", heads);
  if (arch.mla) {
    if (!readMla())
      return false;
  } else if (hidden % heads != 0 && !c.get("head_dim")) {
    c.error("num_attention_heads")
        << "hidden_size " << hidden << " is not a multiple of num_attention_heads " << heads
        << " and no head_dim is given";
    return false;
  }
  if (!arch.mla)
    headDim = get("head_dim", hidden / heads);
  // RoPE rotates the two halves of each head (found by scripts/fuzz.sh: an odd head_dim
  // imported into a model that did not verify).
  if (!arch.mla && !c.failed && headDim % 2 != 0) {
    bool given = c.get("head_dim");
    c.error(given ? "head_dim" : "num_attention_heads")
        << "head_dim " << headDim << (given ? "" : " (hidden_size / num_attention_heads)")
        << " is odd; rotary embeddings need an even one";
    return false;
  }
  if (!c.failed && heads % kvHeads != 0)
    c.error("num_key_value_heads") << "num_attention_heads " << heads
                                   << " is not a multiple of num_key_value_heads " << kvHeads;
  eps = c.number("rms_norm_eps", arch.defaultEps).value_or(arch.defaultEps);
  tied = c.boolean("tie_word_embeddings", arch.tiedByDefault);
  if (wrapper) { // transformers ties the wrapper's lm_head by the wrapper's config
    base = wrapper->base;
    head = wrapper->head;
    if (wrapper->checkpointBase) {
      w.renameFrom = base;
      w.renameTo = wrapper->checkpointBase;
    }
    tied = wrapper->outer->boolean("tie_word_embeddings", wrapper->tiedByDefault);
  }
  if (arch.attentionBiasField)
    attentionBias = c.boolean("attention_bias", arch.defaultAttentionBias);
  if (arch.mlpBiasField)
    mlpBias = c.boolean("mlp_bias", false);
  if (const json *bidirectional = c.get("use_bidirectional_attention");
      bidirectional && *bidirectional != false)
    c.error("use_bidirectional_attention")
        << "use_bidirectional_attention is not supported: tpc's attention is causal";
  if (const json *quantization = c.get("quantization_config")) {
    if (quantization->is_object() && quantization->value("quant_method", json()) == "mxfp4")
      c.error("quantization_config")
          << "quantization_config: MXFP4-quantized checkpoints (quant_method 'mxfp4', the "
             "experts' *_blocks and *_scales tensors) are not supported: tpc reads F32, F16 and "
             "BF16 weights. transformers dequantizes them on load with from_pretrained(..., "
             "quantization_config=Mxfp4Config(dequantize=True)); a save_pretrained of that "
             "model loads";
    else
      c.error("quantization_config") << "quantized checkpoints are not supported (tpc reads "
                                        "F32, F16 and BF16 weights)";
  }

  if (arch.gptOss) {
    // GptOssExperts hardcodes its clamped SwiGLU (alpha 1.702, limit 7) and reads neither
    // hidden_act nor swiglu_limit; the released config.json says swiglu_limit 7.0.
    c.get("hidden_act");
    if (const json *limit = c.get("swiglu_limit");
        limit && (!limit->is_number() || limit->get<double>() != 7.0))
      c.error("swiglu_limit") << "swiglu_limit " << limit->dump()
                              << " is not the 7.0 that transformers 5.17's GptOssExperts "
                                 "clamps at (it does not read this field)";
  } else {
    const json *a = c.get(arch.activationKey);
    // Gemma2 reads hidden_activation alone (default tanh GELU); a hidden_act beside it is
    // carried in the config and never read by transformers 5.17's forward.
    if (std::string(arch.activationKey) != "hidden_act" && c.get("hidden_act"))
      emitWarning(c.keyLoc({"hidden_act"}))
          << "'hidden_act' is not read by " << arch.causalLM << " (it reads '" << arch.activationKey
          << "', default " << arch.defaultActivation << "); ignored";
    if (a && !a->is_string())
      c.error(arch.activationKey) << "the activation must be a name, got " << a->dump();
    act = a && a->is_string() ? a->get<std::string>() : arch.defaultActivation;
    if (act != "silu" && act != "gelu_pytorch_tanh" && act != "gelu" && act != "gelu_new")
      c.error(arch.activationKey) << "activation '" << act
                                  << "' is not supported (silu, gelu, gelu_pytorch_tanh, "
                                     "gelu_new are)";
  }
  if (arch.moe && !arch.qwenMoe) {
    experts = c.integer("num_local_experts", std::nullopt, 1, kMaxRepeats).value_or(0);
    topK = get("num_experts_per_tok");
    if (!c.failed && topK > experts)
      c.error("num_experts_per_tok")
          << "num_experts_per_tok " << topK << " exceeds the " << experts << " experts";
    expertInter = inter;
    sparseLayers.assign(layers, true);
  }
  if (arch.qwenMoe)
    readQwenMoe();
  if (arch.llama4 && !readLlama4())
    return false;
  if (arch.sandwichNorms) {
    attnScale = std::pow(c.number("query_pre_attn_scalar", 256).value_or(256), -0.5);
    attnSoftcap = c.number("attn_logit_softcapping", std::nullopt);
    finalSoftcap = c.number("final_logit_softcapping", std::nullopt);
    if (wrapper && finalSoftcap) { // only Gemma3ForCausalLM's forward caps
      emitWarning(c.keyLoc({"final_logit_softcapping"}))
          << "final_logit_softcapping is not applied by " << wrapper->className
          << " (transformers 5.17 caps only in " << arch.causalLM << "); ignored, as there";
      finalSoftcap.reset();
    }
  } else {
    for (const char *key :
         {"attn_logit_softcapping", "final_logit_softcapping", "query_pre_attn_scalar"})
      if (c.get(key))
        c.error(key) << "'" << key << "' is not part of " << arch.causalLM
                     << "'s forward; tpc will not guess what it means here";
  }
  return !c.failed;
}

/// DeepSeek-V2's attention and MoE fields, with DeepseekV2Config's defaults.
bool Importer::readMla() {
  // DeepseekV2Config writes qk_rope_head_dim as head_dim: the attention's own fields decide.
  c.get("head_dim");
  if (kvHeads != heads) {
    c.error("num_key_value_heads")
        << "DeepSeek-V2's attention expands the latent into every query head: "
           "num_key_value_heads "
        << kvHeads << " must equal num_attention_heads " << heads
        << " (transformers 5.17 fails otherwise)";
    return false;
  }
  auto get = [&](const char *key, int64_t fallback, int64_t minimum = 1) {
    return c.integer(key, fallback, minimum).value_or(0);
  };
  // q_lora_rank null: q_proj; absent: the class's 1536.
  auto q = c.value().find("q_lora_rank");
  qLora = q != c.value().end() && q->is_null() ? 0 : get("q_lora_rank", 1536);
  kvLora = get("kv_lora_rank", 512);
  nopeDim = get("qk_nope_head_dim", 128);
  ropeDim = get("qk_rope_head_dim", 64);
  valueDim = get("v_head_dim", 128);
  if (!c.failed && ropeDim % 2 != 0) {
    c.error("qk_rope_head_dim") << "qk_rope_head_dim " << ropeDim
                                << " is odd; rotary embeddings rotate pairs";
    return false;
  }
  headDim = nopeDim + ropeDim;
  // DeepseekV2Config also writes the sum it derives.
  if (c.get("qk_head_dim") && c.integer("qk_head_dim", headDim).value_or(0) != headDim) {
    c.error("qk_head_dim") << "qk_head_dim must be qk_nope_head_dim + qk_rope_head_dim = "
                           << headDim;
    return false;
  }
  experts = c.integer("n_routed_experts", 64, 1, kMaxRepeats).value_or(0);
  topK = c.integer("num_experts_per_tok", std::nullopt).value_or(0);
  moeInter = get("moe_intermediate_size", 1407);
  sharedExperts = c.integer("n_shared_experts", 2, 0).value_or(0);
  denseLayers = c.integer("first_k_dense_replace", 0, 0, layers).value_or(0);
  routedScale = c.number("routed_scaling_factor", 1.0).value_or(1.0);
  if (c.failed)
    return false;
  if (topK > experts) {
    c.error("num_experts_per_tok")
        << "num_experts_per_tok " << topK << " exceeds the " << experts << " routed experts";
    return false;
  }
  const json *method = c.get("topk_method");
  std::string how = method && method->is_string() ? method->get<std::string>() : "greedy";
  if (how == "group_limited_greedy") {
    groups = c.integer("n_group", std::nullopt).value_or(0);
    topGroups = c.integer("topk_group", std::nullopt).value_or(0);
    if (c.failed)
      return false;
    if (experts % groups != 0 || topGroups > groups || topK > topGroups * (experts / groups)) {
      c.error("n_group") << "group_limited_greedy needs the " << experts
                         << " routed experts in n_group " << groups << " equal groups, topk_group "
                         << topGroups << " of them, holding at least num_experts_per_tok " << topK;
      return false;
    }
  } else if (how != "greedy") {
    c.error("topk_method") << "topk_method " << (method ? method->dump() : "")
                           << " is not supported (greedy, group_limited_greedy are)";
    return false;
  }
  // transformers 5.17's DeepseekV2TopkRouter never reads norm_topk_prob.
  if (const json *norm = c.get("norm_topk_prob"); norm && *norm == true)
    emitWarning(c.keyLoc({"norm_topk_prob"}))
        << "norm_topk_prob is not read by transformers 5.17's DeepSeek-V2 router (its top-k "
           "weights are never renormalized); ignored, as there";
  return true;
}

/// Qwen3-MoE's experts: their sizes, how the router weighs them and which layers have them
/// (Qwen3MoeDecoderLayer: a layer not in mlp_only_layers whose index + 1 is a multiple of
/// decoder_sparse_step, when there are experts; every other layer has Qwen3MoeMLP).
void Importer::readQwenMoe() {
  // Qwen3MoeConfig also takes num_local_experts for num_experts (its attribute_map).
  const char *expertsKey =
      c.get("num_experts") || !c.get("num_local_experts") ? "num_experts" : "num_local_experts";
  experts = c.integer(expertsKey, std::nullopt, 0, kMaxRepeats).value_or(0);
  topK = c.integer("num_experts_per_tok", std::nullopt).value_or(0);
  expertInter = c.integer("moe_intermediate_size", std::nullopt).value_or(0);
  normalizeTopK = c.boolean("norm_topk_prob", false);
  int64_t step = c.integer("decoder_sparse_step", 1, 1, kMaxRepeats).value_or(1);
  std::vector<bool> dense(layers, false);
  if (const json *only = c.get("mlp_only_layers")) {
    if (!only->is_array())
      c.error("mlp_only_layers") << "'mlp_only_layers' must be a list of layer indices, got "
                                 << only->dump();
    else {
      // transformers only asks whether a layer's index is in the list: others are no error.
      std::string outside;
      int64_t outsideCount = 0;
      for (const json &index : *only) {
        if (!index.is_number_integer()) {
          c.error("mlp_only_layers")
              << "'mlp_only_layers' must list layer indices, got " << index.dump();
          break;
        }
        bool inRange = index.is_number_unsigned()
                           ? index.get<uint64_t>() < uint64_t(layers)
                           : index.get<int64_t>() >= 0 && index.get<int64_t>() < layers;
        if (inRange)
          dense[index.get<int64_t>()] = true;
        else if (!outsideCount++)
          outside = index.dump();
      }
      if (outsideCount) // once: the list may be long
        emitWarning(c.keyLoc({"mlp_only_layers"}))
            << "'mlp_only_layers' names layer " << outside
            << (outsideCount > 1 ? " and " + std::to_string(outsideCount - 1) + " more" : "")
            << " that this model of " << layers << " layers does not have; ignored";
    }
  }
  if (!c.failed && experts > 0 && topK > experts)
    c.error("num_experts_per_tok")
        << "num_experts_per_tok " << topK << " exceeds the " << experts << " experts";
  sparseLayers.assign(layers, false);
  for (int64_t i = 0; i < layers; ++i)
    sparseLayers[i] = !dense[i] && experts > 0 && (i + 1) % step == 0;
}

std::optional<Rope> Importer::readRope(const json *parameters, const std::string &where,
                                       const std::string &layerType,
                                       std::optional<double> theta) {
  Rope rope;
  rope.theta = arch.defaultTheta;
  if (theta)
    rope.theta = *theta;
  else if (const json *top = c.get("rope_theta"); top && top->is_number())
    rope.theta = top->get<double>();
  std::string type = "default";
  if (parameters) {
    if (!parameters->is_object()) {
      c.error(where) << "'" << where << "' must be an object, got " << parameters->dump();
      return std::nullopt;
    }
    auto field = [&](const char *key) -> const json * {
      auto it = parameters->find(key);
      return it == parameters->end() || it->is_null() ? nullptr : &*it;
    };
    if (const json *t = field("rope_type") ? field("rope_type") : field("type"))
      type = t->is_string() ? t->get<std::string>() : "?";
    if (const json *theta = field("rope_theta")) {
      if (!theta->is_number()) {
        c.error(where) << "rope_theta must be a number, got " << theta->dump();
        return std::nullopt;
      }
      rope.theta = theta->get<double>();
    }
    if (const json *partial = field("partial_rotary_factor");
        partial && (!partial->is_number() || partial->get<double>() != 1.0)) {
      c.error(where) << "partial_rotary_factor " << partial->dump()
                     << " is not supported (tpc rotates whole heads)";
      return std::nullopt;
    }
    if (type == "llama3") {
      double values[4];
      const char *keys[] = {"factor", "low_freq_factor", "high_freq_factor",
                            "original_max_position_embeddings"};
      for (int i = 0; i < 4; ++i) {
        const json *v = field(keys[i]);
        if (i == 3 && !v)
          v = c.get("original_max_position_embeddings") ? c.get("original_max_position_embeddings")
                                                        : c.get("max_position_embeddings");
        if (!v || !v->is_number()) {
          c.error(where) << "llama3 RoPE scaling needs '" << keys[i] << "'";
          return std::nullopt;
        }
        values[i] = v->get<double>();
      }
      // What makes the formula divide by zero or go negative (found by scripts/fuzz.sh: a
      // factor of 0 gave infinite frequencies, which no model.mlir can hold).
      const char *problem = nullptr;
      if (!(rope.theta > 0))
        problem = "rope_theta must be positive";
      else if (!(values[0] > 0))
        problem = "llama3 RoPE scaling needs a positive 'factor'";
      // Equal factors leave no band to smooth (Llama 4 Scout's 1 and 1); transformers only
      // warns about inverted ones, which describe no band either, and are refused here.
      else if (!(values[1] > 0) || !(values[2] >= values[1]))
        problem = "llama3 RoPE scaling needs 0 < 'low_freq_factor' <= 'high_freq_factor'";
      else if (!(values[3] > 0))
        problem = "llama3 RoPE scaling needs a positive 'original_max_position_embeddings'";
      if (problem) {
        c.error(where) << problem;
        return std::nullopt;
      }
      rope.invFreq = llama3InvFreq(rope.theta, arch.mla ? ropeDim : headDim, values[0], values[1],
                                   values[2], values[3]);
      for (double f : rope.invFreq)
        if (!std::isfinite(f) || f <= 0) {
          c.error(where) << "llama3 RoPE scaling gives a frequency of " << f;
          return std::nullopt;
        }
      return rope;
    }
    if (type == "yarn")
      return readYarn(rope, *parameters, where, layerType);
    if (type == "linear") { // positions divided by factor: the default frequencies / factor
      const json *factor = field("factor");
      if (!factor || !factor->is_number() || !(factor->get<double>() > 0)) {
        c.error(where) << "linear RoPE scaling needs a positive 'factor'"
                       << (factor ? ", got " + factor->dump() : std::string());
        return std::nullopt;
      }
      if (!(rope.theta > 0)) {
        c.error(where) << "rope_theta must be positive";
        return std::nullopt;
      }
      // In float32, as _compute_linear_scaling_rope_parameters computes them.
      for (int64_t i = 0; i < headDim; i += 2)
        rope.invFreq.push_back(1.0f / std::pow(float(rope.theta), float(i) / float(headDim)) /
                               float(factor->get<double>()));
      return rope;
    }
  }
  if (type != "default") {
    c.error(where) << "RoPE type '" << type
                   << "' is not supported (default, linear, llama3 and yarn are); it changes the "
                      "frequencies";
    return std::nullopt;
  }
  if (rope.theta <= 0) {
    c.error(where) << "rope_theta must be positive";
    return std::nullopt;
  }
  return rope;
}

std::optional<Rope> Importer::readYarn(Rope rope, const json &parameters, const std::string &where,
                                       const std::string &layerType) {
  // As transformers' _compute_yarn_parameters; an error points at the field's own line.
  std::vector<std::string> at = {where};
  if (!layerType.empty())
    at.push_back(layerType);
  auto fail = [&](const std::string &key) {
    c.failed = true;
    std::vector<std::string> path = at;
    path.push_back(key);
    return emitError(c.keyLoc(path)) << "yarn RoPE scaling: ";
  };
  auto number = [&](const std::string &key) -> std::optional<double> {
    auto it = parameters.find(key);
    if (it == parameters.end() || it->is_null())
      return std::nullopt;
    if (!it->is_number()) {
      fail(key) << "'" << key << "' must be a number, got " << it->dump();
      return std::nullopt;
    }
    return it->get<double>();
  };
  // standardize_rope_params: a top-level original_max_position_embeddings wins (one RoPE for
  // every layer), else the rope's own, else max_position_embeddings.
  std::optional<double> original;
  if (layerType.empty() && c.get("original_max_position_embeddings")) {
    const json *v = c.get("original_max_position_embeddings");
    if (!v->is_number() || !(v->get<double>() > 0)) {
      c.error("original_max_position_embeddings")
          << "'original_max_position_embeddings' must be a positive number, got " << v->dump();
      return std::nullopt;
    }
    original = v->get<double>();
  } else {
    original = number("original_max_position_embeddings");
    if (c.failed)
      return std::nullopt;
    if (!original) {
      const json *v = c.get("max_position_embeddings");
      if (!v || !v->is_number()) {
        c.error(where) << "yarn RoPE scaling needs 'original_max_position_embeddings' (or the "
                          "config's max_position_embeddings)";
        return std::nullopt;
      }
      original = v->get<double>();
    }
    if (!(*original > 0)) {
      fail("original_max_position_embeddings")
          << "'original_max_position_embeddings' must be positive, got " << *original;
      return std::nullopt;
    }
  }
  std::optional<double> factor = number("factor"), attentionFactor = number("attention_factor"),
                        mscale = number("mscale"), mscaleAllDim = number("mscale_all_dim"),
                        betaFast = number("beta_fast"), betaSlow = number("beta_slow");
  if (c.failed)
    return std::nullopt;
  if (!factor) { // DeepSeek-V3's convention: the ratio of the two context lengths
    const json *v = c.get("max_position_embeddings");
    if (!v || !v->is_number()) {
      c.error(where) << "yarn RoPE scaling needs 'factor' (or the config's "
                        "max_position_embeddings)";
      return std::nullopt;
    }
    factor = v->get<double>() / *original;
  }
  if (!(*factor > 0)) {
    fail("factor") << "'factor' must be positive, got " << *factor;
    return std::nullopt;
  }
  if (attentionFactor && !(*attentionFactor > 0)) {
    fail("attention_factor") << "'attention_factor' must be positive, got " << *attentionFactor;
    return std::nullopt;
  }
  // Python's `x or default`: 0 counts as absent.
  double fast = betaFast && *betaFast != 0 ? *betaFast : 32;
  double slow = betaSlow && *betaSlow != 0 ? *betaSlow : 1;
  for (auto [key, value] : {std::pair("beta_fast", fast), std::pair("beta_slow", slow)})
    if (!(value > 0)) {
      fail(key) << "'" << key << "' must be positive, got " << value;
      return std::nullopt;
    }
  if (!(rope.theta > 0) || rope.theta == 1) {
    c.error(where) << "yarn RoPE scaling needs a rope_theta that is positive and not 1";
    return std::nullopt;
  }
  // transformers reads truncate from config.rope_parameters itself: with a rope per layer
  // type that is the outer object, which has no 'truncate', so it is true.
  bool truncate = true;
  if (layerType.empty())
    if (auto it = parameters.find("truncate"); it != parameters.end() && !it->is_null()) {
      if (!it->is_boolean()) {
        fail("truncate") << "'truncate' must be true or false, got " << it->dump();
        return std::nullopt;
      }
      truncate = it->get<bool>();
    }
  if (attentionFactor)
    rope.scaling = *attentionFactor;
  else if (mscale && *mscale != 0 && mscaleAllDim && *mscaleAllDim != 0)
    rope.scaling = yarnGetMscale(*factor, *mscale) / yarnGetMscale(*factor, *mscaleAllDim);
  else
    rope.scaling = yarnGetMscale(*factor);
  rope.invFreq = yarnInvFreq(rope.theta, arch.mla ? ropeDim : headDim, *factor, fast, slow,
                             *original, truncate);
  for (double f : rope.invFreq)
    if (!std::isfinite(f) || f <= 0) {
      c.error(where) << "yarn RoPE scaling gives a frequency of " << f;
      return std::nullopt;
    }
  if (!std::isfinite(rope.scaling) || rope.scaling <= 0) {
    c.error(where) << "yarn RoPE scaling gives an attention factor of " << rope.scaling;
    return std::nullopt;
  }
  return rope;
}

bool Importer::readLayerTypes() {
  const json *window = c.get("sliding_window");
  if (window && (!window->is_number_integer() || window->get<int64_t>() < 1)) {
    c.error("sliding_window") << "'sliding_window' must be a positive integer or null, got "
                              << window->dump();
    return false;
  }
  if (window)
    slidingWindow = window->get<int64_t>();
  else if (arch.gptOss && !c.value().contains("sliding_window"))
    slidingWindow = 128; // GptOssConfig's default
  else if (arch.gemma3 && !c.value().contains("sliding_window"))
    slidingWindow = 4096; // Gemma3TextConfig's default
  if (arch.llama4)
    return true; // readLlama4 read them
  layerTypes.assign(layers, "full_attention");
  if (arch.noRopeLayers)
    return readNoRopeLayers();
  if (arch.slidingNeedsFlag && !c.boolean("use_sliding_window", false))
    slidingWindow.reset();
  if (arch.slidingEveryLayer && slidingWindow)
    layerTypes.assign(layers, "sliding_attention");
  if (arch.hasLayerTypes) {
    // Gemma2 and GPT-OSS always use their window; Qwen2 and Qwen3 only when told to.
    bool alwaysSliding = std::string(arch.modelType) == "gemma2" || arch.gemma3 || arch.gptOss;
    // Gemma 3 without layer_types: every sliding_window_pattern-th layer global, as
    // Gemma3TextConfig makes them (the field is only read then, and is no field of the class).
    int64_t pattern = arch.gemma3 ? c.integer("sliding_window_pattern", 6).value_or(6) : 2;
    bool useSliding = alwaysSliding || c.boolean("use_sliding_window", false);
    if (!useSliding)
      slidingWindow.reset();
    if (c.get("layer_types")) {
      if (!readLayerTypeList("sliding_attention", ""))
        return false;
    } else if (alwaysSliding) {
      for (int64_t i = 0; i < layers; ++i)
        layerTypes[i] = (i + 1) % pattern ? "sliding_attention" : "full_attention";
    } else if (slidingWindow) {
      int64_t from = c.integer("max_window_layers", 28, 0).value_or(28);
      for (int64_t i = from; i < layers; ++i)
        layerTypes[i] = "sliding_attention";
    }
    if (!slidingWindow)
      for (std::string &t : layerTypes)
        if (t == "sliding_attention") {
          if (alwaysSliding) {
            c.error("sliding_window")
                << arch.modelType << " needs a sliding_window for its sliding layers";
            return false;
          }
          t = "full_attention"; // transformers: no window, plain causal
        }
  }
  return true;
}

/// layer_types, where config.json gives it, into layerTypes: one per layer, each `other` or
/// full_attention (what `family`'s forward knows). False after an error.
bool Importer::readLayerTypeList(const char *other, const std::string &family) {
  const json *types = c.get("layer_types");
  if (!types)
    return true;
  if (!types->is_array() || int64_t(types->size()) != layers) {
    c.error("layer_types") << "'layer_types' must list one type per layer (" << layers << ")";
    return false;
  }
  for (int64_t i = 0; i < layers; ++i) {
    const json &t = (*types)[i];
    if (t != other && t != "full_attention") {
      c.error("layer_types") << "layer type " << t.dump() << " is not supported" << family
                             << " (" << other << ", full_attention)";
      return false;
    }
    layerTypes[i] = t.get<std::string>();
  }
  return true;
}

/// no_rope_layers (1 where a layer applies RoPE) into ropeLayers; absent (or, for Llama 4,
/// empty: `emptyIsAbsent`), every no_rope_layer_interval-th layer goes without. False after
/// an error.
bool Importer::readRopeLayers(bool emptyIsAbsent) {
  ropeLayers.assign(layers, true);
  const json *list = c.get("no_rope_layers");
  c.get("no_rope_layer_interval"); // read only without a list
  if (list && !(emptyIsAbsent && list->is_array() && list->empty())) {
    if (!list->is_array() || int64_t(list->size()) != layers) {
      c.error("no_rope_layers") << "'no_rope_layers' must list 1 (RoPE) or 0 (none) for each of "
                                   "the "
                                << layers << " layers, got " << list->dump();
      return false;
    }
    for (int64_t i = 0; i < layers; ++i) {
      const json &flag = (*list)[i];
      if (flag != 0 && flag != 1 && flag != true && flag != false) {
        c.error("no_rope_layers") << "'no_rope_layers' must hold 1 (RoPE) or 0 (none), got "
                                  << flag.dump() << " for layer " << i;
        return false;
      }
      ropeLayers[i] = flag == 1 || flag == true;
    }
    return true;
  }
  int64_t interval = c.integer("no_rope_layer_interval", 4, 1, kMaxRepeats).value_or(4);
  for (int64_t i = 0; i < layers; ++i)
    ropeLayers[i] = (i + 1) % interval != 0;
  return !c.failed;
}

/// SmolLM3: which layers apply RoPE (no_rope_layers, 1 = yes; else every
/// no_rope_layer_interval-th layer goes without) and which slide (layer_types; else the layers
/// without RoPE, when use_sliding_window and a sliding_window are given), as SmolLM3Config
/// makes them. A sliding layer's window is the mask's: transformers builds it from
/// sliding_window alone, whatever use_sliding_window says.
bool Importer::readNoRopeLayers() {
  bool useSliding = c.boolean("use_sliding_window", false);
  if (!readRopeLayers(/*emptyIsAbsent=*/false))
    return false;
  if (c.get("layer_types")) {
    if (!readLayerTypeList("sliding_attention", ""))
      return false;
  } else if (useSliding && slidingWindow) {
    for (int64_t i = 0; i < layers; ++i)
      if (!ropeLayers[i])
        layerTypes[i] = "sliding_attention";
  }
  if (!slidingWindow && llvm::is_contained(layerTypes, "sliding_attention")) {
    c.error("layer_types") << "sliding layers need a sliding_window (transformers 5.17 fails "
                              "without one)";
    return false;
  }
  return true;
}

/// Llama 4's fields, with Llama4TextConfig's defaults: experts on the layers moe_layers lists
/// (else every interleave_moe_layer_step-th), each a sigmoid router's top k plus a shared
/// expert; the other layers a dense MLP of intermediate_size_mlp. RoPE on the layers
/// no_rope_layers marks 1 (else all but every no_rope_layer_interval-th), which attend by
/// chunks of attention_chunk_size (layer_types chunked_attention) and normalize q and k
/// (use_qk_norm); the others attend to the whole context with their queries scaled by the
/// position (attn_temperature_tuning, floor_scale, attn_scale).
bool Importer::readLlama4() {
  if (c.get("sliding_window") || c.get("use_sliding_window"))
    c.error(c.get("sliding_window") ? "sliding_window" : "use_sliding_window")
        << "Llama 4 has no sliding window (its local layers attend by chunks: "
           "attention_chunk_size)";
  experts = c.integer("num_local_experts", 16, 1, kMaxRepeats).value_or(0);
  topK = c.integer("num_experts_per_tok", 1).value_or(0);
  expertInter = inter;
  denseInter = c.integer("intermediate_size_mlp", 16384).value_or(0);
  if (c.failed)
    return false;
  if (topK > experts) {
    c.error("num_experts_per_tok") << "num_experts_per_tok " << topK << " exceeds the "
                                   << experts << " experts";
    return false;
  }
  sparseLayers.assign(layers, false);
  if (const json *list = c.get("moe_layers")) {
    if (!list->is_array()) {
      c.error("moe_layers") << "'moe_layers' must be a list of layer indices, got "
                            << list->dump();
      return false;
    }
    for (const json &index : *list) {
      if (!index.is_number_integer() || index.get<int64_t>() < 0 ||
          index.get<int64_t>() >= layers) {
        c.error("moe_layers") << "'moe_layers' must list layers of the " << layers
                              << ", got " << index.dump();
        return false;
      }
      sparseLayers[index.get<int64_t>()] = true;
    }
    c.get("interleave_moe_layer_step"); // read only without moe_layers
  } else {
    int64_t step = c.integer("interleave_moe_layer_step", 1, 1, kMaxRepeats).value_or(1);
    for (int64_t i = step - 1; i < layers; i += step)
      sparseLayers[i] = true;
  }
  if (!readRopeLayers(/*emptyIsAbsent=*/true))
    return false;
  // layer_types: given, or chunked where RoPE is.
  layerTypes.assign(layers, "full_attention");
  for (int64_t i = 0; i < layers; ++i)
    layerTypes[i] = ropeLayers[i] ? "chunked_attention" : "full_attention";
  if (!readLayerTypeList("chunked_attention", " for Llama 4"))
    return false;
  bool chunked = llvm::is_contained(layerTypes, "chunked_attention");
  if (c.get("attention_chunk_size"))
    chunkSize = c.integer("attention_chunk_size", std::nullopt).value_or(0);
  else if (!c.value().contains("attention_chunk_size"))
    chunkSize = 8192; // Llama4TextConfig's default
  if (c.failed)
    return false;
  if (chunked && !chunkSize) {
    c.error("attention_chunk_size")
        << "chunked_attention layers need an attention_chunk_size (transformers 5.17 fails "
           "without one)";
    return false;
  }
  qkL2Norm = c.boolean("use_qk_norm", true);
  if (c.boolean("attn_temperature_tuning", true)) {
    double floor = c.number("floor_scale", 8192).value_or(8192);
    const json *scale = c.get("attn_scale");
    if (scale && !scale->is_number()) {
      c.error("attn_scale") << "'attn_scale' must be a number, got " << scale->dump();
      return false;
    }
    temperature = std::pair(floor, scale ? scale->get<double>() : 0.1);
  } else {
    c.get("floor_scale");
    c.get("attn_scale");
  }
  return !c.failed;
}

/// A Llama 4 layer's feed_forward: on its MoE layers the sigmoid router's top k experts, each
/// fed its routing weight times x (Llama4TextMoe), plus the shared expert on every token; on
/// the others a dense MLP.
std::string Importer::llama4FeedForward(int64_t i, const std::string &v, const std::string &ff,
                                        const std::string &x) {
  if (!sparseLayers[i])
    return mlp(v, ff, x, denseInter);
  std::string routing = w.op(v + "routing", "router", ff + ".router",
                             {x, w.weight(ff + ".router.weight", {experts, hidden})},
                             "normalize = false, sigmoid = true, top_k = " + i64(topK),
                             w.act(experts));
  std::string moe =
      w.op(v + "moe", "experts", ff + ".experts",
           {x, routing, w.weight(ff + ".experts.gate_up_proj", {experts, hidden, 2 * inter}),
            w.weight(ff + ".experts.down_proj", {experts, inter, hidden})},
           std::string(act == "silu" ? "" : "activation = \"gelu_tanh\", ") +
               "layout = \"in_out\", scale_input = true",
           w.act(hidden));
  std::string shared = mlp(v + "shared_", ff + ".shared_expert", x, inter);
  return w.op(v + "moe_sum", "add", ff, {shared, moe}, "", w.act(hidden));
}

std::string Importer::linear(const std::string &name, const std::string &module,
                             const std::string &x, int64_t in, int64_t out, bool bias) {
  std::vector<std::string> operands = {x, w.weight(module + ".weight", {out, in})};
  if (bias)
    operands.push_back(w.weight(module + ".bias", {out}));
  return w.op(name, "linear", module, operands, "", w.act(out));
}

std::string Importer::norm(const std::string &name, const std::string &module, const std::string &x,
                           int64_t width, std::optional<int64_t> perHead,
                           std::optional<double> epsilon) {
  std::string attrs = "epsilon = " + f64(epsilon.value_or(eps));
  if (perHead)
    attrs += ", head_dim = " + i64(*perHead);
  if (arch.gemma)
    attrs += ", weight_offset = " + f64(1.0);
  return w.op(name, "rms_norm", module,
              {x, w.weight(module + ".weight", {perHead ? *perHead : width})}, attrs, w.act(width));
}

std::string Importer::activation(const std::string &name, const std::string &module,
                                 const std::string &x, int64_t width) {
  if (!width)
    width = inter;
  if (act == "silu")
    return w.op(name, "silu", module, {x}, "", w.act(width));
  bool tanh = act != "gelu";
  return w.op(name, "gelu", module, {x}, tanh ? "approximate = \"tanh\"" : "", w.act(width));
}

std::string Importer::selfAttention(int64_t i, const std::string &v, const std::string &attn,
                                    const std::string &x) {
  int64_t qWidth = heads * headDim, kvWidth = kvHeads * headDim;
  std::string q, k, val;
  if (arch.fused) {
    std::string qkv = linear(v + "qkv", attn + ".qkv_proj", x, hidden, qWidth + 2 * kvWidth, false);
    auto slice = [&](const std::string &n, int64_t offset, int64_t size) {
      return w.op(v + n, "slice", attn, {qkv},
                  "dim = " + i64(1) + ", offset = " + i64(offset) + ", size = " + i64(size),
                  w.act(size));
    };
    q = slice("q", 0, qWidth);
    k = slice("k", qWidth, kvWidth);
    val = slice("v", qWidth + kvWidth, kvWidth);
  } else {
    bool bias = arch.qkvBias || attentionBias;
    q = linear(v + "q", attn + ".q_proj", x, hidden, qWidth, bias);
    k = linear(v + "k", attn + ".k_proj", x, hidden, kvWidth, bias);
    val = linear(v + "v", attn + ".v_proj", x, hidden, kvWidth, bias);
  }
  if (arch.qkNorm) {
    q = norm(v + "qn", attn + ".q_norm", q, qWidth, headDim);
    k = norm(v + "kn", attn + ".k_norm", k, kvWidth, headDim);
  } else if (arch.rowQkNorm) {
    q = norm(v + "qn", attn + ".q_norm", q, qWidth);
    k = norm(v + "kn", attn + ".k_norm", k, kvWidth);
  }
  const std::string &type = layerTypes[i];
  const Rope &rope = ropes.count(type) ? ropes.at(type) : ropes.at("");
  std::string ropeAttrs = "head_dim = " + i64(headDim) + ", theta = " + f64(rope.theta);
  if (!rope.invFreq.empty()) {
    ropeAttrs += ", inv_freq = array<f64: ";
    for (size_t j = 0; j < rope.invFreq.size(); ++j)
      ropeAttrs += (j ? ", " : "") + llvm::formatv("{0:e17}", rope.invFreq[j]).str();
    ropeAttrs += ">";
  }
  if (rope.scaling != 1.0)
    ropeAttrs += ", scaling = " + f64(rope.scaling);
  std::string qr = q, kr = k;
  bool rotates = ropeLayers.empty() || ropeLayers[i];
  if (arch.llama4) // Llama 4 rotates in the complex form: pairs of adjacent columns
    ropeAttrs += ", interleaved = true";
  if (rotates) {
    qr = w.op(v + "qr", "rotary", attn, {q, "%positions"}, ropeAttrs, w.act(qWidth));
    kr = w.op(v + "kr", "rotary", attn, {k, "%positions"}, ropeAttrs, w.act(kvWidth));
  } else {
    w.comment("no RoPE in this layer (no_rope_layers)");
  }
  if (arch.llama4 && rotates && qkL2Norm) { // Llama4TextL2Norm, after RoPE, no weight
    std::string l2 = "epsilon = " + f64(eps) + ", head_dim = " + i64(headDim);
    qr = w.op(v + "qn", "l2_norm", attn + ".qk_norm", {qr}, l2, w.act(qWidth));
    kr = w.op(v + "kn", "l2_norm", attn + ".qk_norm", {kr}, l2, w.act(kvWidth));
  }
  std::string attrs = "head_dim = " + i64(headDim) + ", num_heads = " + i64(heads) +
                      ", num_kv_heads = " + i64(kvHeads);
  if (attnScale)
    attrs += ", scale = " + f64(*attnScale);
  if (type == "sliding_attention" && slidingWindow)
    attrs += ", sliding_window = " + i64(*slidingWindow);
  if (attnSoftcap)
    attrs += ", softcap = " + f64(*attnSoftcap);
  if (type == "chunked_attention")
    attrs += ", chunk_size = " + i64(*chunkSize);
  if (arch.llama4 && !rotates && temperature)
    attrs += ", temperature_floor = " + f64(temperature->first) +
             ", temperature_scale = " + f64(temperature->second);
  std::vector<std::string> attnOperands = {qr, kr, val};
  if (arch.gptOss) // a learned logit per head that joins each row's softmax
    attnOperands.push_back(w.weight(attn + ".sinks", {heads}));
  std::string o = w.op(v + "attn", "attention", attn, attnOperands, attrs, w.act(qWidth));
  o = linear(v + "o", attn + ".o_proj", o, qWidth, hidden, attentionBias);
  return o;
}

/// DeepSeek-V2's multi-head latent attention, as transformers 5.17 computes it: the query
/// (q_proj, or q_a_proj -> q_a_layernorm -> q_b_proj) has heads of nope + rope dims; the
/// keys and values come from one latent (kv_a_proj_with_mqa -> kv_a_layernorm -> kv_b_proj,
/// heads of nope + value dims) plus one rotary key all heads share. The rope parts rotate in
/// the complex (interleaved) form. Keys and values are cached per head (tp.attention), not
/// as the latent: a decode step then projects only its own token's latent.
std::string Importer::mlaAttention(int64_t i, const std::string &v, const std::string &attn,
                                   const std::string &x) {
  int64_t qWidth = heads * headDim;
  std::string q;
  if (qLora) {
    // q_a_layernorm and kv_a_layernorm take DeepseekV2RMSNorm's own eps, not rms_norm_eps.
    std::string qa = linear(v + "qa", attn + ".q_a_proj", x, hidden, qLora, attentionBias);
    qa = norm(v + "qa_norm", attn + ".q_a_layernorm", qa, qLora, std::nullopt, 1e-6);
    q = linear(v + "q", attn + ".q_b_proj", qa, qLora, qWidth, false);
  } else {
    q = linear(v + "q", attn + ".q_proj", x, hidden, qWidth, false);
  }
  std::string kva =
      linear(v + "kva", attn + ".kv_a_proj_with_mqa", x, hidden, kvLora + ropeDim, attentionBias);
  auto slice = [&](const std::string &n, int64_t offset, int64_t size) {
    return w.op(v + n, "slice", attn, {kva},
                "dim = " + i64(1) + ", offset = " + i64(offset) + ", size = " + i64(size),
                w.act(size));
  };
  std::string latent = slice("latent", 0, kvLora), kpe = slice("kpe", kvLora, ropeDim);
  latent = norm(v + "latent_norm", attn + ".kv_a_layernorm", latent, kvLora, std::nullopt, 1e-6);
  int64_t kvHead = nopeDim + valueDim;
  std::string kv = linear(v + "kv", attn + ".kv_b_proj", latent, kvLora, heads * kvHead, false);
  auto headSlice = [&](const std::string &n, int64_t offset, int64_t size) {
    return w.op(v + n, "head_slice", attn, {kv},
                "head_dim = " + i64(kvHead) + ", offset = " + i64(offset) + ", size = " + i64(size),
                w.act(heads * size));
  };
  std::string knope = headSlice("knope", 0, nopeDim), val = headSlice("v", nopeDim, valueDim);
  const Rope &rope = ropes.count(layerTypes[i]) ? ropes.at(layerTypes[i]) : ropes.at("");
  auto ropeAttrs = [&](int64_t width, int64_t unrotated) {
    std::string attrs =
        "head_dim = " + i64(width) + ", interleaved = true, theta = " + f64(rope.theta);
    if (unrotated)
      attrs += ", unrotated = " + i64(unrotated);
    if (!rope.invFreq.empty()) {
      attrs += ", inv_freq = array<f64: ";
      for (size_t j = 0; j < rope.invFreq.size(); ++j)
        attrs += (j ? ", " : "") + llvm::formatv("{0:e17}", rope.invFreq[j]).str();
      attrs += ">";
    }
    if (rope.scaling != 1.0) // YaRN's attention factor on cos and sin
      attrs += ", scaling = " + f64(rope.scaling);
    return attrs;
  };
  std::string qr =
      w.op(v + "qr", "rotary", attn, {q, "%positions"}, ropeAttrs(headDim, nopeDim), w.act(qWidth));
  std::string kr =
      w.op(v + "kr", "rotary", attn, {kpe, "%positions"}, ropeAttrs(ropeDim, 0), w.act(ropeDim));
  std::string k =
      w.op(v + "k", "concat_heads", attn, {knope, kr}, "head_dim = " + i64(nopeDim), w.act(qWidth));
  std::string attrs = "head_dim = " + i64(headDim) + ", num_heads = " + i64(heads) +
                      ", num_kv_heads = " + i64(heads) + ", scale = " + f64(*mlaScale) +
                      ", value_head_dim = " + i64(valueDim);
  std::string o = w.op(v + "attn", "attention", attn, {qr, k, val}, attrs, w.act(heads * valueDim));
  return linear(v + "o", attn + ".o_proj", o, heads * valueDim, hidden, attentionBias);
}

/// A gated MLP (gate_proj, up_proj, down_proj) of `width` intermediate features.
std::string Importer::mlp(const std::string &v, const std::string &module, const std::string &x,
                          int64_t width) {
  std::string gate = linear(v + "gate", module + ".gate_proj", x, hidden, width, mlpBias);
  std::string up = linear(v + "up", module + ".up_proj", x, hidden, width, mlpBias);
  std::string a = activation(v + "act", module, gate, width);
  std::string m = w.op(v + "mul", "mul", module, {a, up}, "", w.act(width));
  return linear(v + "down", module + ".down_proj", m, width, hidden, mlpBias);
}

std::string Importer::layer(int64_t i, const std::string &h) {
  std::string p = base + "layers." + std::to_string(i), v = "l" + std::to_string(i) + "_";
  std::string attn = p + ".self_attn", mlp = p + ".mlp";
  w.comment(p);
  std::string x = arch.postNormsOnly ? h : norm(v + "norm1", p + ".input_layernorm", h, hidden);
  std::string o = arch.mla ? mlaAttention(i, v, attn, x) : selfAttention(i, v, attn, x);
  if (arch.sandwichNorms || arch.postNormsOnly)
    o = norm(v + "o_norm", p + ".post_attention_layernorm", o, hidden);
  std::string h1 = w.op(v + "h1", "add", p, {h, o}, "", w.act(hidden));
  if (arch.postNormsOnly)
    x = h1;
  else
    x = norm(v + "norm2",
             p + (arch.sandwichNorms ? ".pre_feedforward_layernorm" : ".post_attention_layernorm"),
             h1, hidden);
  std::string out;
  if (arch.llama4) {
    out = llama4FeedForward(i, v, p + ".feed_forward", x);
  } else if (arch.mla && i < denseLayers) {
    out = this->mlp(v, mlp, x, inter);
  } else if (arch.mla) {
    // Routed experts (the Mixtral layout; save_pretrained writes them per expert) plus the
    // shared experts, one MLP of n_shared_experts x moe_intermediate_size, on every token.
    std::vector<std::string> gateUpSources, downSources;
    for (int64_t e = 0; e < experts; ++e) {
      std::string expert = mlp + ".experts." + std::to_string(e);
      gateUpSources.push_back(expert + ".gate_proj.weight");
      gateUpSources.push_back(expert + ".up_proj.weight");
      downSources.push_back(expert + ".down_proj.weight");
    }
    std::string routerAttrs = "normalize = false, top_k = " + i64(topK);
    if (routedScale != 1.0)
      routerAttrs += ", scale = " + f64(routedScale);
    if (groups)
      routerAttrs += ", groups = " + i64(groups) + ", top_groups = " + i64(topGroups);
    std::string routing =
        w.op(v + "routing", "router", mlp + ".gate",
             {x, w.weight(mlp + ".gate.weight", {experts, hidden})}, routerAttrs, w.act(experts));
    std::string gateUp =
        w.weight(mlp + ".experts.gate_up_proj", {experts, 2 * moeInter, hidden}, gateUpSources);
    std::string down =
        w.weight(mlp + ".experts.down_proj", {experts, hidden, moeInter}, downSources);
    out = w.op(v + "moe", "experts", mlp + ".experts", {x, routing, gateUp, down},
               act == "silu" ? "" : "activation = \"gelu_tanh\"", w.act(hidden));
    if (sharedExperts) {
      std::string shared =
          this->mlp(v + "shared_", mlp + ".shared_experts", x, sharedExperts * moeInter);
      out = w.op(v + "moe_sum", "add", mlp, {out, shared}, "", w.act(hidden));
    }
  } else if (arch.gptOss) {
    // As GptOssMLP holds and save_pretrained writes them: a router with a bias that picks the
    // top k logits before its softmax; experts as [E, in, out] with gate and up interleaved.
    std::string router = mlp + ".router", ex = mlp + ".experts";
    std::string routing = w.op(
        v + "routing", "router", router,
        {x, w.weight(router + ".weight", {experts, hidden}), w.weight(router + ".bias", {experts})},
        "top_k = " + i64(topK) + ", softmax_after_top_k = true", w.act(experts));
    out = w.op(v + "moe", "experts", ex,
               {x, routing, w.weight(ex + ".gate_up_proj", {experts, hidden, 2 * inter}),
                w.weight(ex + ".down_proj", {experts, inter, hidden}),
                w.weight(ex + ".gate_up_proj_bias", {experts, 2 * inter}),
                w.weight(ex + ".down_proj_bias", {experts, hidden})},
               "activation = \"clamped_swiglu\", layout = \"in_out_interleaved\", alpha = " +
                   f64(1.702) + ", limit = " + f64(7.0),
               w.act(hidden));
  } else if (arch.moe && sparseLayers[i]) {
    // transformers fuses the experts on load; save_pretrained (and the Hub) keep the
    // original per-expert tensors: Mixtral's w1 = gate, w3 = up, w2 = down, Qwen3-MoE's
    // gate_proj, up_proj, down_proj.
    std::string legacy = arch.qwenMoe ? mlp : p + ".block_sparse_moe";
    const char *names[3] = {".w1.weight", ".w3.weight", ".w2.weight"};
    if (arch.qwenMoe) {
      names[0] = ".gate_proj.weight";
      names[1] = ".up_proj.weight";
      names[2] = ".down_proj.weight";
    }
    std::vector<std::string> gateUpSources, downSources;
    for (int64_t e = 0; e < experts; ++e) {
      std::string expert = legacy + ".experts." + std::to_string(e);
      gateUpSources.push_back(expert + names[0]);
      gateUpSources.push_back(expert + names[1]);
      downSources.push_back(expert + names[2]);
    }
    std::vector<std::string> gateSources;
    if (!arch.qwenMoe)
      gateSources.push_back(legacy + ".gate.weight");
    std::string routerAttrs = "top_k = " + i64(topK);
    if (arch.qwenMoe) // norm_topk_prob, written either way
      routerAttrs += std::string(", normalize = ") + (normalizeTopK ? "true" : "false");
    std::string routing = w.op(v + "routing", "router", mlp + ".gate",
                               {x, w.weight(mlp + ".gate.weight", {experts, hidden}, gateSources)},
                               routerAttrs, w.act(experts));
    std::string gateUp =
        w.weight(mlp + ".experts.gate_up_proj", {experts, 2 * expertInter, hidden}, gateUpSources);
    std::string down =
        w.weight(mlp + ".experts.down_proj", {experts, hidden, expertInter}, downSources);
    out = w.op(v + "moe", "experts", mlp + ".experts", {x, routing, gateUp, down},
               act == "silu" ? "" : "activation = \"gelu_tanh\"", w.act(hidden));
  } else {
    std::string gate, up;
    if (arch.fused) {
      std::string gu = linear(v + "gate_up", mlp + ".gate_up_proj", x, hidden, 2 * inter, false);
      gate =
          w.op(v + "gate", "slice", mlp, {gu},
               "dim = " + i64(1) + ", offset = " + i64(0) + ", size = " + i64(inter), w.act(inter));
      up = w.op(v + "up", "slice", mlp, {gu},
                "dim = " + i64(1) + ", offset = " + i64(inter) + ", size = " + i64(inter),
                w.act(inter));
    } else {
      gate = linear(v + "gate", mlp + ".gate_proj", x, hidden, inter, mlpBias);
      up = linear(v + "up", mlp + ".up_proj", x, hidden, inter, mlpBias);
    }
    std::string a = activation(v + "act", mlp, gate);
    std::string m = w.op(v + "mul", "mul", mlp, {a, up}, "", w.act(inter));
    out = linear(v + "down", mlp + ".down_proj", m, inter, hidden, mlpBias);
  }
  if (arch.sandwichNorms || arch.postNormsOnly)
    out = norm(v + "mlp_norm", p + ".post_feedforward_layernorm", out, hidden);
  return w.op(v + "h2", "add", p, {h1, out}, "", w.act(hidden));
}

std::optional<std::string> Importer::run() {
  if (!readShape() || !readLayerTypes())
    return std::nullopt;
  // RoPE: one for all layers, or one per layer type (a rope_parameters keyed by type).
  const json *parameters = c.get("rope_parameters");
  std::string where = "rope_parameters";
  if (!parameters) {
    parameters = c.get("rope_scaling");
    where = "rope_scaling";
  }
  // GptOssConfig's default when config.json has none.
  static const json gptOssRope = {
      {"rope_type", "yarn"}, {"factor", 32.0},    {"beta_fast", 32.0},
      {"beta_slow", 1.0},    {"truncate", false}, {"original_max_position_embeddings", 4096}};
  if (!parameters && arch.gptOss)
    parameters = &gptOssRope;
  bool perType =
      parameters && parameters->is_object() &&
      (parameters->contains("sliding_attention") || parameters->contains("full_attention"));
  if (arch.gemma3) {
    // Gemma3TextConfig: global layers take rope_theta (default 1e6) and a legacy rope_scaling,
    // local ones rope_local_base_freq (default 1e4); a rope_parameters is keyed by type.
    if (where == "rope_parameters" && !perType) {
      c.error(where) << "Gemma 3's rope_parameters must be keyed by layer type "
                        "(full_attention, sliding_attention)";
      return std::nullopt;
    }
    std::optional<double> global = c.number("rope_theta", 1e6),
                          local = c.number("rope_local_base_freq", 1e4);
    if (c.failed)
      return std::nullopt;
    for (const std::string &type : layerTypes) {
      if (ropes.count(type))
        continue;
      const json *own = nullptr;
      if (perType)
        if (auto it = parameters->find(type); it != parameters->end() && !it->is_null())
          own = &*it;
      if (!perType && type == "full_attention")
        own = parameters; // rope_scaling
      std::optional<Rope> rope = readRope(own, where, perType ? type : "",
                                          type == "full_attention" ? global : local);
      if (!rope)
        return std::nullopt;
      ropes[type] = *rope;
    }
  } else if (perType) {
    for (const std::string &type : layerTypes) {
      if (ropes.count(type))
        continue;
      auto it = parameters->find(type);
      std::optional<Rope> rope =
          readRope(it == parameters->end() || it->is_null() ? nullptr : &*it, where, type);
      if (!rope)
        return std::nullopt;
      ropes[type] = *rope;
    }
  } else {
    std::optional<Rope> rope = readRope(parameters, where);
    if (!rope)
      return std::nullopt;
    ropes[""] = *rope;
  }
  if (arch.mla) {
    // DeepSeek's softmax scale: qk_head_dim^-0.5, times YaRN's mscale(mscale_all_dim) squared
    // for a scaled RoPE that gives mscale_all_dim (yarn_apply_mscale).
    mlaScale = std::pow(double(headDim), -0.5);
    if (parameters && parameters->is_object() && !perType) {
      auto field = [&](const char *key) -> const json * {
        auto it = parameters->find(key);
        return it == parameters->end() || it->is_null() ? nullptr : &*it;
      };
      const json *type = field("rope_type") ? field("rope_type") : field("type");
      const json *all = field("mscale_all_dim"), *factor = field("factor");
      if (type && *type != "default" && all && all->is_number() && all->get<double>() != 0 &&
          factor && factor->is_number()) {
        double f = factor->get<double>();
        double m = f <= 1 ? 1.0 : 0.1 * all->get<double>() * std::log(f) + 1.0;
        *mlaScale *= m * m;
      }
    }
  }
  std::vector<int64_t> eos;
  // A wrapper's own eos_token_id comes first (Gemma 3's [1, 106]: end of turn too).
  c.get("eos_token_id"); // read either way: a wrapper's own wins
  Config &eosConfig = wrapper && wrapper->outer->get("eos_token_id") ? *wrapper->outer : c;
  if (const json *e = eosConfig.get("eos_token_id")) {
    for (const json &id : e->is_array() ? *e : json::array({*e})) {
      if (!id.is_number_integer() || id.get<int64_t>() < 0 || id.get<int64_t>() >= vocab) {
        eosConfig.error("eos_token_id") << "eos_token_id " << id.dump()
                                << " is not a token id of the vocabulary of " << vocab;
        return std::nullopt;
      }
      eos.push_back(id.get<int64_t>());
    }
  }
  // The context the model was trained for: what analyze and the binary hold by default.
  std::optional<int64_t> maxPositions;
  if (c.get("max_position_embeddings"))
    maxPositions = c.integer("max_position_embeddings", std::nullopt);
  const json *ownPlan = c.get("base_model_tp_plan");
  c.reportUnread();
  if (wrapper)
    wrapper->outer->reportUnread();
  if (c.failed || (wrapper && wrapper->outer->failed))
    return std::nullopt;

  w.arg("%ids", "tensor<?xi64>");
  w.arg("%positions", "tensor<?xi64>");
  std::string table = w.weight(base + "embed_tokens.weight", {vocab, hidden});
  std::string h = w.op("h0", "embedding", base + "embed_tokens", {"%ids", table}, "", w.act(hidden));
  if (arch.gemma) // transformers multiplies by sqrt(hidden) rounded to the activations' dtype
    h = w.op("h0_scaled", "scale", base.substr(0, base.size() - 1), {h},
             "factor = " + f64(float(std::sqrt(double(hidden)))), w.act(hidden));
  for (int64_t i = 0; i < layers; ++i)
    h = layer(i, h);
  w.comment("the head");
  h = norm("final_norm", base + "norm", h, hidden);
  std::string headWeight = tied ? w.weight(base + "embed_tokens.weight", {vocab, hidden})
                                : w.weight(head + ".weight", {vocab, hidden});
  std::string logits = w.op("logits", "linear", head, {h, headWeight}, "", w.act(vocab));
  if (finalSoftcap)
    logits = w.op("capped", "softcap", head, {logits}, "cap = " + f64(*finalSoftcap), w.act(vocab));
  if (!w.oversized.empty()) {
    emitError(c.doc.locAt(0)) << "this config.json makes parameter " << w.oversized
                              << ", more than the 2^40 elements tpc handles in one tensor";
    return std::nullopt;
  }

  std::ostringstream text;
  text << "// Imported by `tpc import` from " << llvm::sys::path::filename(c.doc.path()).str()
       << " (" << (wrapper ? wrapper->className : arch.causalLM);
  if (wrapper)
    text << ": its language model, under " << base << "; the vision tower is left out";
  text << "): " << layers << " layers, hidden " << hidden << ", " << heads
       << " heads of " << headDim << ", " << kvHeads << " KV heads, intermediate " << inter
       << ", vocab " << vocab;
  if (arch.moe)
    text << ", " << experts << " experts (top " << topK << ")";
  if (arch.llama4)
    text << ", " << experts << " experts (top " << topK << ") and a shared one in "
         << std::count(sparseLayers.begin(), sparseLayers.end(), true)
         << " of the layers, dense MLPs of " << denseInter << " in the rest";
  if (arch.mla)
    text << ", latent attention (q rank " << qLora << ", kv rank " << kvLora << ", heads of "
         << nopeDim << " + " << ropeDim << " and values of " << valueDim << "), " << experts
         << " routed experts (top " << topK << ") and " << sharedExperts << " shared from layer "
         << denseLayers;
  if (arch.qwenMoe)
    text << " of intermediate " << expertInter << " in "
         << std::count(sparseLayers.begin(), sparseLayers.end(), true) << " of the layers";
  text << (tied ? ", tied embeddings" : "") << ".\n";
  const char *modelType = wrapper ? wrapper->modelType : arch.modelType;
  text << "module @" << modelType << " attributes {tp.hf_model_type = \"" << modelType
       << "\", tp.hf_tied = " << (tied ? "true" : "false");
  if (base != "model.")
    text << ", tp.hf_base_prefix = \"" << base << "\"";
  if (!eos.empty()) {
    text << ", tp.eos_token_ids = array<i64: ";
    for (size_t i = 0; i < eos.size(); ++i)
      text << (i ? ", " : "") << eos[i];
    text << ">";
  }
  if (maxPositions)
    text << ", tp.max_position_embeddings = " << *maxPositions << " : i64";
  if (ownPlan && ownPlan->is_object()) {
    // config.json's own plan wins over the table: kept as written, for --plan auto.
    std::string escaped;
    for (char ch : ownPlan->dump()) {
      if (ch == '"' || ch == '\\')
        escaped += '\\';
      escaped += ch;
    }
    text << ", tp.hf_tp_plan = \"" << escaped << "\"";
  }
  text << "} {\n" << w.params.str() << "\n";
  text << "  func.func @forward(%ids: tensor<?xi64>, %positions: tensor<?xi64>) -> " << w.act(vocab)
       << " {\n"
       << w.body.str() << "    return " << logits << " : " << w.act(vocab) << "\n  }\n}\n";
  return text.str();
}

} // namespace

namespace {

/// A multimodal model whose language model tpc imports alone: the wrapper's model_type and
/// class, the text model's, and where the wrapper keeps it.
struct MultimodalWrapper {
  const char *modelType, *className, *textModelType;
  /// Where the wrapper keeps the language model's modules, and its head.
  const char *base, *head;
  /// Where its checkpoints keep the language model's tensors, if elsewhere: Gemma 3's
  /// transformers 5.17 renames to `base` on load and back on save (the Hub's layout, from
  /// transformers 4). Null: under the modules' names.
  const char *checkpointBase;
  bool tiedByDefault; // the wrapper's config class's tie_word_embeddings
  /// The wrapper's fields that only its images read (the vision tower's own config aside).
  std::vector<const char *> imageFields;
};

const std::vector<MultimodalWrapper> &wrappers() {
  static const std::vector<MultimodalWrapper> table = {
      {"gemma3",
       "Gemma3ForConditionalGeneration",
       "gemma3_text",
       "model.language_model.",
       "lm_head",
       "language_model.model.",
       true,
       {"mm_tokens_per_image", "boi_token_index", "eoi_token_index", "image_token_index"}},
      {"llama4",
       "Llama4ForConditionalGeneration",
       "llama4_text",
       "language_model.model.",
       "language_model.lm_head",
       nullptr,
       false,
       {"boi_token_index", "eoi_token_index", "image_token_index"}}};
  return table;
}

/// The language model of a multimodal wrapper's config.json: its text_config, imported as
/// the text model's architecture with the wrapper's weight names; the vision tower and the
/// projector are left out, with a warning.
FailureOr<std::string> importWrapper(Config &outer, const MultimodalWrapper &m,
                                     const StoredTypes *stored) {
  if (const json *names = outer.get("architectures"))
    for (const json &name : names->is_array() ? *names : json::array({*names}))
      if (name != m.className) {
        outer.error("architectures") << "architecture " << name.dump()
                                     << " is not supported: tpc imports " << m.className
                                     << " for model_type '" << m.modelType << "'";
        return failure();
      }
  const json *text = outer.get("text_config");
  if (!text || !text->is_object()) {
    outer.error(text ? "text_config" : "model_type")
        << m.className << " needs a 'text_config' object (its language model), got "
        << (text ? text->dump() : std::string("none"));
    return failure();
  }
  if (auto t = text->find("model_type"); t != text->end() && *t != m.textModelType) {
    outer.error("text_config") << "text_config's model_type " << t->dump() << " is not '"
                               << m.textModelType << "', the language model of " << m.className;
    return failure();
  }
  if (outer.get("vision_config"))
    emitWarning(outer.keyLoc({"vision_config"}))
        << m.className << ": the vision tower is left out; tpc imports the language model "
        << "(text_config; its modules under '" << m.base << "'"
        << (m.checkpointBase ? std::string(", its tensors read under that name or, as "
                                           "checkpoints store them, '") +
                                   m.checkpointBase + "'"
                             : std::string())
        << "), which reads text only";
  for (const char *field : m.imageFields)
    outer.get(field);
  outer.get("initializer_range");
  Config config(outer.doc, outer.context, {"text_config"});
  config.get("model_type");
  // The wrapper's tie_word_embeddings decides (read by the importer); the text model's is
  // not read by transformers for the wrapper.
  config.get("tie_word_embeddings");
  const Architecture *arch = nullptr;
  for (const Architecture &a : architectures())
    if (a.modelType == std::string(m.textModelType))
      arch = &a;
  Importer importer(config, *arch, stored);
  importer.wrapper = Importer::Wrapper{&outer,  m.modelType, m.className,    m.base,
                                       m.head,  m.checkpointBase, m.tiedByDefault};
  std::optional<std::string> result = importer.run();
  if (!result)
    return failure();
  return *result;
}

} // namespace

const std::vector<std::string> &supportedModelTypes() {
  static const std::vector<std::string> types = [] {
    std::vector<std::string> out;
    for (const Architecture &a : architectures())
      out.push_back(a.modelType);
    for (const MultimodalWrapper &m : wrappers())
      out.push_back(m.modelType);
    return out;
  }();
  return types;
}

namespace {

FailureOr<std::string> importDocument(FailureOr<plan::JsonDocument> doc, MLIRContext *context,
                                      const StoredTypes *stored) {
  if (failed(doc))
    return failure();
  if (!doc->value().is_object()) {
    emitError(doc->locAt(0)) << "config.json must be a JSON object, got "
                             << plan::describeJsonType(doc->value());
    return failure();
  }
  Config config(*doc, context);
  const json *type = config.get("model_type");
  if (!type || !type->is_string()) {
    config.error("model_type") << "config.json has no 'model_type' string; tpc imports "
                               << llvm::join(supportedModelTypes(), ", ");
    return failure();
  }
  const Architecture *arch = nullptr;
  for (const Architecture &a : architectures())
    if (*type == a.modelType)
      arch = &a;
  for (const MultimodalWrapper &m : wrappers())
    if (*type == m.modelType)
      return importWrapper(config, m, stored);
  if (!arch) {
    config.error("model_type") << "model_type '" << type->get<std::string>()
                               << "' is not supported; tpc imports "
                               << llvm::join(supportedModelTypes(), ", ");
    return failure();
  }
  if (const json *names = config.get("architectures")) {
    for (const json &name : names->is_array() ? *names : json::array({*names}))
      if (name != arch->causalLM) {
        config.error("architectures")
            << "architecture " << name.dump() << " is not supported: tpc imports " << arch->causalLM
            << " for model_type '" << arch->modelType << "'";
        return failure();
      }
  }
  Importer importer(config, *arch, stored);
  std::optional<std::string> text = importer.run();
  if (!text)
    return failure();
  return *text;
}

} // namespace

FailureOr<std::string> importConfig(StringRef configPath, MLIRContext *context,
                                    const StoredTypes *stored) {
  return importDocument(plan::JsonDocument::read(configPath, context), context, stored);
}

FailureOr<std::string> importConfigText(StringRef name, std::string text, MLIRContext *context,
                                        const StoredTypes *stored) {
  return importDocument(plan::JsonDocument::parse(name, std::move(text), context), context,
                        stored);
}

} // namespace tpc::import
