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
  bool qkvBias = false;       // Qwen2: q/k/v always have biases
  bool qkNorm = false;        // Qwen3: per-head RMSNorm of q and k before RoPE
  bool rowQkNorm = false;     // OLMo2: RMSNorm of q and k over their whole projected width
  bool postNormsOnly = false; // OLMo2: norms after attention and MLP, none before
  bool gemma = false;         // norms scale by (1 + w), embeddings by sqrt(hidden)
  bool sandwichNorms = false; // Gemma2: norms after attention and MLP too
  bool fused = false;         // Phi3: qkv_proj, gate_up_proj
  bool moe = false;           // Mixtral: router + experts
  bool gptOss = false;        // GPT-OSS: attention sinks, biased router and experts (below)
  bool slidingEveryLayer = false; // Mistral, Mixtral, Phi3: sliding_window applies to all
  bool hasLayerTypes = false;     // Qwen2/3, Gemma2: layer_types chooses per layer
  bool attentionBiasField = false, mlpBiasField = false;
  bool defaultAttentionBias = false;
  const char *activationKey = "hidden_act";
  const char *defaultActivation = "silu";
  bool tiedByDefault = false;
  double defaultEps = 1e-6; // the config class's rms_norm_eps
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
    Architecture phi3{"phi3", "Phi3ForCausalLM"};
    phi3.fused = phi3.slidingEveryLayer = true;
    Architecture mixtral{"mixtral", "MixtralForCausalLM"};
    mixtral.moe = mixtral.slidingEveryLayer = true;
    Architecture olmo2{"olmo2", "Olmo2ForCausalLM"};
    olmo2.rowQkNorm = olmo2.postNormsOnly = olmo2.attentionBiasField = true;
    olmo2.defaultEps = 1e-5;
    Architecture gptOss{"gpt_oss", "GptOssForCausalLM"};
    gptOss.moe = gptOss.gptOss = gptOss.hasLayerTypes = true;
    gptOss.attentionBiasField = gptOss.defaultAttentionBias = true;
    gptOss.defaultEps = 1e-5;
    return std::vector<Architecture>{llama, mistral, qwen2, qwen3, gemma, gemma2, phi3, mixtral,
                                     olmo2, gptOss};
  }();
  return table;
}

/// Fields that never change what inference computes (training, ids, bookkeeping).
const std::set<std::string> kHarmless = {
    "architectures", "model_type", "transformers_version", "torch_dtype", "dtype",
    "_name_or_path", "initializer_range", "use_cache", "bos_token_id", "pad_token_id",
    "original_max_position_embeddings", "attention_dropout",
    "resid_pdrop", "embd_pdrop", "output_router_logits", "router_aux_loss_coef",
    "router_jitter_noise", "return_dict", "output_hidden_states", "output_attentions",
    "id2label", "label2id", "problem_type", "chunk_size_feed_forward", "is_encoder_decoder",
    "tie_encoder_decoder", "add_cross_attention", "tokenizer_class", "prefix", "task_specific_params",
    "max_window_layers", "use_sliding_window", "base_model_tp_plan", "base_model_pp_plan",
    "pretraining_tp", "generation_config", "bos_token", "eos_token", "use_bidirectional_attention",
    // GPT-OSS's released config.json: copies of other fields that transformers never reads.
    "experts_per_token", "initial_context_length"};

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
/// over can be reported; errors point at the field's line.
class Config {
public:
  Config(const plan::JsonDocument &doc, MLIRContext *context) : doc(doc), context(context) {}

  const json *get(const std::string &key) {
    used.insert(key);
    auto it = doc.value().find(key);
    return it == doc.value().end() || it->is_null() ? nullptr : &*it;
  }

  InFlightDiagnostic error(const std::string &key) {
    failed = true;
    return emitError(doc.keyLoc({key}));
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
    for (auto it = doc.value().begin(); it != doc.value().end(); ++it)
      if (!used.count(it.key()) && !kHarmless.count(it.key()))
        emitWarning(doc.keyLoc({it.key()}))
            << "'" << it.key() << "' is not a field tpc knows; ignored (tpc models "
            << "transformers 5.17's forward, which it assumes this field does not change)";
  }

  const plan::JsonDocument &doc;
  MLIRContext *context;
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
  std::string type(std::vector<int64_t> dims) {
    std::string s = "tensor<";
    for (int64_t d : dims)
      s += (d < 0 ? std::string("?") : std::to_string(d)) + "x";
    return s + "f32>";
  }
  std::string act(int64_t width) { return type({-1, width}); }

  /// Declares a parameter (stacked from `sources` in checkpoints that save it in pieces)
  /// and returns a fresh value reading it.
  std::string weight(const std::string &name, std::vector<int64_t> shape,
                     const std::vector<std::string> &sources = {}) {
    if (!declared.count(name)) {
      declared.insert(name);
      uint64_t elements = 1;
      bool overflow = false;
      for (int64_t d : shape)
        overflow |= __builtin_mul_overflow(elements, uint64_t(d), &elements);
      if ((overflow || elements > kMaxParamElements) && oversized.empty())
        oversized = name + " " + type(shape);
      params << "  tp.param @\"" << name << "\"";
      if (!sources.empty()) {
        params << " {sources = [";
        for (size_t i = 0; i < sources.size(); ++i)
          params << (i ? ", " : "") << "\"" << sources[i] << "\"";
        params << "]}";
      }
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
  Importer(Config &config, const Architecture &arch) : c(config), arch(arch) {}

  std::optional<std::string> run();

private:
  bool readShape();
  std::optional<Rope> readRope(const json *parameters, const std::string &where,
                               const std::string &layerType = "");
  std::optional<Rope> readYarn(Rope rope, const json &parameters, const std::string &where,
                               const std::string &layerType);
  bool readLayerTypes();
  std::string linear(const std::string &name, const std::string &module, const std::string &x,
                     int64_t in, int64_t out, bool bias);
  std::string norm(const std::string &name, const std::string &module, const std::string &x,
                   int64_t width, std::optional<int64_t> headDim = std::nullopt);
  std::string activation(const std::string &name, const std::string &module,
                         const std::string &x);
  std::string layer(int64_t i, const std::string &h);

  Config &c;
  const Architecture &arch;
  Writer w;
  int64_t vocab = 0, hidden = 0, inter = 0, layers = 0, heads = 0, kvHeads = 0, headDim = 0;
  int64_t experts = 0, topK = 0;
  double eps = 1e-6;
  std::optional<double> attnScale, attnSoftcap, finalSoftcap;
  std::string act;
  bool attentionBias = false, mlpBias = false, tied = false;
  std::vector<std::string> layerTypes; // "sliding_attention" or "full_attention"
  std::optional<int64_t> slidingWindow;
  std::map<std::string, Rope> ropes;   // by layer type ("" for all)
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
  if (hidden % heads != 0 && !c.get("head_dim")) {
    c.error("num_attention_heads") << "hidden_size " << hidden
                                   << " is not a multiple of num_attention_heads " << heads
                                   << " and no head_dim is given";
    return false;
  }
  headDim = get("head_dim", hidden / heads);
  // RoPE rotates the two halves of each head (found by scripts/fuzz.sh: an odd head_dim
  // imported into a model that did not verify).
  if (!c.failed && headDim % 2 != 0) {
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
      emitWarning(c.doc.keyLoc({"hidden_act"}))
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
  if (arch.moe) {
    experts = c.integer("num_local_experts", std::nullopt, 1, kMaxRepeats).value_or(0);
    topK = get("num_experts_per_tok");
    if (!c.failed && topK > experts)
      c.error("num_experts_per_tok") << "num_experts_per_tok " << topK << " exceeds the "
                                     << experts << " experts";
  }
  if (arch.sandwichNorms) {
    attnScale = std::pow(c.number("query_pre_attn_scalar", 256).value_or(256), -0.5);
    attnSoftcap = c.number("attn_logit_softcapping", std::nullopt);
    finalSoftcap = c.number("final_logit_softcapping", std::nullopt);
  } else {
    for (const char *key : {"attn_logit_softcapping", "final_logit_softcapping",
                            "query_pre_attn_scalar"})
      if (c.get(key))
        c.error(key) << "'" << key << "' is not part of " << arch.causalLM
                     << "'s forward; tpc will not guess what it means here";
  }
  return !c.failed;
}

std::optional<Rope> Importer::readRope(const json *parameters, const std::string &where,
                                       const std::string &layerType) {
  Rope rope;
  // The config classes' default_theta.
  rope.theta = arch.gptOss ? 150000.0 : arch.moe ? 1e6 : 1e4;
  if (const json *theta = c.get("rope_theta"); theta && theta->is_number())
    rope.theta = theta->get<double>();
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
      else if (!(values[1] > 0) || !(values[2] > values[1]))
        problem = "llama3 RoPE scaling needs 0 < 'low_freq_factor' < 'high_freq_factor'";
      else if (!(values[3] > 0))
        problem = "llama3 RoPE scaling needs a positive 'original_max_position_embeddings'";
      if (problem) {
        c.error(where) << problem;
        return std::nullopt;
      }
      rope.invFreq = llama3InvFreq(rope.theta, headDim, values[0], values[1], values[2], values[3]);
      for (double f : rope.invFreq)
        if (!std::isfinite(f) || f <= 0) {
          c.error(where) << "llama3 RoPE scaling gives a frequency of " << f;
          return std::nullopt;
        }
      return rope;
    }
    if (type == "yarn")
      return readYarn(rope, *parameters, where, layerType);
  }
  if (type != "default") {
    c.error(where) << "RoPE type '" << type
                   << "' is not supported (default, llama3 and yarn are); it changes the "
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
    return emitError(c.doc.keyLoc(path)) << "yarn RoPE scaling: ";
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
  rope.invFreq = yarnInvFreq(rope.theta, headDim, *factor, fast, slow, *original, truncate);
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
  else if (arch.gptOss && !c.doc.value().contains("sliding_window"))
    slidingWindow = 128; // GptOssConfig's default
  layerTypes.assign(layers, "full_attention");
  if (arch.slidingEveryLayer && slidingWindow)
    layerTypes.assign(layers, "sliding_attention");
  if (arch.hasLayerTypes) {
    // Gemma2 and GPT-OSS always use their window; Qwen2 and Qwen3 only when told to.
    bool alwaysSliding = std::string(arch.modelType) == "gemma2" || arch.gptOss;
    bool useSliding = alwaysSliding || c.boolean("use_sliding_window", false);
    if (!useSliding)
      slidingWindow.reset();
    if (const json *types = c.get("layer_types")) {
      if (!types->is_array() || int64_t(types->size()) != layers) {
        c.error("layer_types") << "'layer_types' must list one type per layer (" << layers
                               << ")";
        return false;
      }
      for (int64_t i = 0; i < layers; ++i) {
        const json &t = (*types)[i];
        if (t != "sliding_attention" && t != "full_attention") {
          c.error("layer_types") << "layer type " << t.dump()
                                 << " is not supported (sliding_attention, full_attention)";
          return false;
        }
        layerTypes[i] = t.get<std::string>();
      }
    } else if (alwaysSliding) {
      for (int64_t i = 0; i < layers; ++i)
        layerTypes[i] = (i + 1) % 2 ? "sliding_attention" : "full_attention";
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

std::string Importer::linear(const std::string &name, const std::string &module,
                             const std::string &x, int64_t in, int64_t out, bool bias) {
  std::vector<std::string> operands = {x, w.weight(module + ".weight", {out, in})};
  if (bias)
    operands.push_back(w.weight(module + ".bias", {out}));
  return w.op(name, "linear", module, operands, "", w.act(out));
}

std::string Importer::norm(const std::string &name, const std::string &module,
                           const std::string &x, int64_t width, std::optional<int64_t> perHead) {
  std::string attrs = "epsilon = " + f64(eps);
  if (perHead)
    attrs += ", head_dim = " + i64(*perHead);
  if (arch.gemma)
    attrs += ", weight_offset = " + f64(1.0);
  return w.op(name, "rms_norm", module, {x, w.weight(module + ".weight", {perHead ? *perHead : width})},
              attrs, w.act(width));
}

std::string Importer::activation(const std::string &name, const std::string &module,
                                 const std::string &x) {
  if (act == "silu")
    return w.op(name, "silu", module, {x}, "", w.act(inter));
  bool tanh = act != "gelu";
  return w.op(name, "gelu", module, {x}, tanh ? "approximate = \"tanh\"" : "", w.act(inter));
}

std::string Importer::layer(int64_t i, const std::string &h) {
  std::string p = "model.layers." + std::to_string(i), v = "l" + std::to_string(i) + "_";
  std::string attn = p + ".self_attn", mlp = p + ".mlp";
  w.comment(p);
  std::string x = arch.postNormsOnly ? h : norm(v + "norm1", p + ".input_layernorm", h, hidden);
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
  std::string qr = w.op(v + "qr", "rotary", attn, {q, "%positions"}, ropeAttrs, w.act(qWidth));
  std::string kr = w.op(v + "kr", "rotary", attn, {k, "%positions"}, ropeAttrs, w.act(kvWidth));
  std::string attrs = "head_dim = " + i64(headDim) + ", num_heads = " + i64(heads) +
                      ", num_kv_heads = " + i64(kvHeads);
  if (attnScale)
    attrs += ", scale = " + f64(*attnScale);
  if (type == "sliding_attention" && slidingWindow)
    attrs += ", sliding_window = " + i64(*slidingWindow);
  if (attnSoftcap)
    attrs += ", softcap = " + f64(*attnSoftcap);
  std::vector<std::string> attnOperands = {qr, kr, val};
  if (arch.gptOss) // a learned logit per head that joins each row's softmax
    attnOperands.push_back(w.weight(attn + ".sinks", {heads}));
  std::string o = w.op(v + "attn", "attention", attn, attnOperands, attrs, w.act(qWidth));
  o = linear(v + "o", attn + ".o_proj", o, qWidth, hidden, attentionBias);
  if (arch.sandwichNorms || arch.postNormsOnly)
    o = norm(v + "o_norm", p + ".post_attention_layernorm", o, hidden);
  std::string h1 = w.op(v + "h1", "add", p, {h, o}, "", w.act(hidden));
  if (arch.postNormsOnly)
    x = h1;
  else
    x = norm(v + "norm2", p + (arch.sandwichNorms ? ".pre_feedforward_layernorm"
                                                  : ".post_attention_layernorm"),
             h1, hidden);
  std::string out;
  if (arch.gptOss) {
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
  } else if (arch.moe) {
    // transformers fuses the experts on load; save_pretrained (and the Hub) keep Mixtral's
    // original per-expert tensors: w1 = gate, w3 = up, w2 = down.
    std::string legacy = p + ".block_sparse_moe";
    std::vector<std::string> gateUpSources, downSources;
    for (int64_t e = 0; e < experts; ++e) {
      std::string expert = legacy + ".experts." + std::to_string(e);
      gateUpSources.push_back(expert + ".w1.weight");
      gateUpSources.push_back(expert + ".w3.weight");
      downSources.push_back(expert + ".w2.weight");
    }
    std::string routing =
        w.op(v + "routing", "router", mlp + ".gate",
             {x, w.weight(mlp + ".gate.weight", {experts, hidden}, {legacy + ".gate.weight"})},
             "top_k = " + i64(topK), w.act(experts));
    std::string gateUp =
        w.weight(mlp + ".experts.gate_up_proj", {experts, 2 * inter, hidden}, gateUpSources);
    std::string down =
        w.weight(mlp + ".experts.down_proj", {experts, hidden, inter}, downSources);
    out = w.op(v + "moe", "experts", mlp + ".experts", {x, routing, gateUp, down},
               act == "silu" ? "" : "activation = \"gelu_tanh\"", w.act(hidden));
  } else {
    std::string gate, up;
    if (arch.fused) {
      std::string gu = linear(v + "gate_up", mlp + ".gate_up_proj", x, hidden, 2 * inter, false);
      gate = w.op(v + "gate", "slice", mlp, {gu},
                  "dim = " + i64(1) + ", offset = " + i64(0) + ", size = " + i64(inter),
                  w.act(inter));
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
  bool perType = parameters && parameters->is_object() &&
                 (parameters->contains("sliding_attention") ||
                  parameters->contains("full_attention"));
  if (perType) {
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
  std::vector<int64_t> eos;
  if (const json *e = c.get("eos_token_id")) {
    for (const json &id : e->is_array() ? *e : json::array({*e})) {
      if (!id.is_number_integer() || id.get<int64_t>() < 0 || id.get<int64_t>() >= vocab) {
        c.error("eos_token_id") << "eos_token_id " << id.dump()
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
  if (c.failed)
    return std::nullopt;

  w.arg("%ids", "tensor<?xi64>");
  w.arg("%positions", "tensor<?xi64>");
  std::string table = w.weight("model.embed_tokens.weight", {vocab, hidden});
  std::string h = w.op("h0", "embedding", "model.embed_tokens", {"%ids", table}, "", w.act(hidden));
  if (arch.gemma) // transformers multiplies by sqrt(hidden) rounded to the activations' dtype
    h = w.op("h0_scaled", "scale", "model", {h},
             "factor = " + f64(float(std::sqrt(double(hidden)))), w.act(hidden));
  for (int64_t i = 0; i < layers; ++i)
    h = layer(i, h);
  w.comment("the head");
  h = norm("final_norm", "model.norm", h, hidden);
  std::string head = tied ? w.weight("model.embed_tokens.weight", {vocab, hidden})
                          : w.weight("lm_head.weight", {vocab, hidden});
  std::string logits = w.op("logits", "linear", "lm_head", {h, head}, "", w.act(vocab));
  if (finalSoftcap)
    logits = w.op("capped", "softcap", "lm_head", {logits}, "cap = " + f64(*finalSoftcap),
                  w.act(vocab));
  if (!w.oversized.empty()) {
    emitError(c.doc.locAt(0)) << "this config.json makes parameter " << w.oversized
                              << ", more than the 2^40 elements tpc handles in one tensor";
    return std::nullopt;
  }

  std::ostringstream text;
  text << "// Imported by `tpc import` from " << llvm::sys::path::filename(c.doc.path()).str()
       << " (" << arch.causalLM << "): " << layers << " layers, hidden " << hidden << ", "
       << heads << " heads of " << headDim << ", " << kvHeads << " KV heads, intermediate "
       << inter << ", vocab " << vocab;
  if (arch.moe)
    text << ", " << experts << " experts (top " << topK << ")";
  text << (tied ? ", tied embeddings" : "") << ".\n";
  text << "module @" << arch.modelType << " attributes {tp.hf_model_type = \"" << arch.modelType
       << "\", tp.hf_tied = " << (tied ? "true" : "false");
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
  text << "  func.func @forward(%ids: tensor<?xi64>, %positions: tensor<?xi64>) -> "
       << w.act(vocab) << " {\n"
       << w.body.str() << "    return " << logits << " : " << w.act(vocab) << "\n  }\n}\n";
  return text.str();
}

} // namespace

const std::vector<std::string> &supportedModelTypes() {
  static const std::vector<std::string> types = [] {
    std::vector<std::string> out;
    for (const Architecture &a : architectures())
      out.push_back(a.modelType);
    return out;
  }();
  return types;
}

FailureOr<std::string> importConfig(StringRef configPath, MLIRContext *context) {
  FailureOr<plan::JsonDocument> doc = plan::JsonDocument::read(configPath, context);
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
            << "architecture " << name.dump() << " is not supported: tpc imports "
            << arch->causalLM << " for model_type '" << arch->modelType << "'";
        return failure();
      }
  }
  Importer importer(config, *arch);
  std::optional<std::string> text = importer.run();
  if (!text)
    return failure();
  return *text;
}

} // namespace tpc::import
