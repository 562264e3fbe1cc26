// The base importer: reads the fields every family shares (sizes, norms, biases, the
// activation, RoPE, generation's ids), then writes the model as transformers 5.17's forward
// computes it (fp32, batch 1, eval): embedding, the decoder layers, the final norm and head.
// Where a family differs it overrides one of the hooks called here.
#include "ImporterBase.h"

#include "llvm/Support/Path.h"

using namespace mlir;

namespace tpc::import::detail {

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
  if (!readHeadDim())
    return false;
  if (!c.failed && heads % kvHeads != 0)
    c.error("num_key_value_heads") << "num_attention_heads " << heads
                                   << " is not a multiple of num_key_value_heads " << kvHeads;
  readCommon();
  readActivation();
  if (!readFamily())
    return false;
  return !c.failed;
}

bool Importer::readHeadDim() {
  if (hidden % heads != 0 && !c.get("head_dim")) {
    c.error("num_attention_heads")
        << "hidden_size " << hidden << " is not a multiple of num_attention_heads " << heads
        << " and no head_dim is given";
    return false;
  }
  headDim = c.integer("head_dim", hidden / heads).value_or(0);
  // RoPE rotates the two halves of each head (found by scripts/fuzz.sh: an odd head_dim
  // imported into a model that did not verify).
  if (!c.failed && headDim % 2 != 0) {
    bool given = c.get("head_dim");
    c.error(given ? "head_dim" : "num_attention_heads")
        << "head_dim " << headDim << (given ? "" : " (hidden_size / num_attention_heads)")
        << " is odd; rotary embeddings need an even one";
    return false;
  }
  return true;
}

/// Norms, tying, biases, and what tpc refuses whatever the family.
void Importer::readCommon() {
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
}

void Importer::readActivation() {
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

bool Importer::readFamily() {
  refuseSoftcaps();
  return true;
}

void Importer::refuseSoftcaps() {
  for (const char *key :
       {"attn_logit_softcapping", "final_logit_softcapping", "query_pre_attn_scalar"})
    if (c.get(key))
      c.error(key) << "'" << key << "' is not part of " << arch.causalLM
                   << "'s forward; tpc will not guess what it means here";
}

bool Importer::readEnd() {
  // A wrapper's own eos_token_id comes first (Gemma 3's [1, 106]: end of turn too).
  c.get("eos_token_id"); // read either way: a wrapper's own wins
  Config &eosConfig = wrapper && wrapper->outer->get("eos_token_id") ? *wrapper->outer : c;
  if (const json *e = eosConfig.get("eos_token_id")) {
    for (const json &id : e->is_array() ? *e : json::array({*e})) {
      if (!id.is_number_integer() || id.get<int64_t>() < 0 || id.get<int64_t>() >= vocab) {
        eosConfig.error("eos_token_id")
            << "eos_token_id " << id.dump() << " is not a token id of the vocabulary of " << vocab;
        return false;
      }
      eos.push_back(id.get<int64_t>());
    }
  }
  if (c.get("max_position_embeddings"))
    maxPositions = c.integer("max_position_embeddings", std::nullopt);
  ownPlan = c.get("base_model_tp_plan");
  c.reportUnread();
  if (wrapper)
    wrapper->outer->reportUnread();
  return !c.failed && !(wrapper && wrapper->outer->failed);
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
  if (!parameters)
    parameters = defaultRopeParameters();
  bool perType =
      parameters && parameters->is_object() &&
      (parameters->contains("sliding_attention") || parameters->contains("full_attention"));
  if (!readRopes(parameters, where, perType) || !readEnd())
    return std::nullopt;

  w.arg("%ids", "tensor<?xi64>");
  w.arg("%positions", "tensor<?xi64>");
  std::string h = embed();
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
  return moduleText(logits);
}

std::string Importer::embed() {
  std::string table = w.weight(base + "embed_tokens.weight", {vocab, hidden});
  return w.op("h0", "embedding", base + "embed_tokens", {"%ids", table}, "", w.act(hidden));
}

std::string Importer::layer(int64_t i, const std::string &h) {
  std::string p = base + "layers." + std::to_string(i), v = "l" + std::to_string(i) + "_";
  w.comment(p);
  std::string x = arch.postNormsOnly ? h : norm(v + "norm1", p + ".input_layernorm", h, hidden);
  std::string o = attention(i, v, p + ".self_attn", x);
  if (arch.sandwichNorms || arch.postNormsOnly)
    o = norm(v + "o_norm", p + ".post_attention_layernorm", o, hidden);
  std::string h1 = w.op(v + "h1", "add", p, {h, o}, "", w.act(hidden));
  if (arch.postNormsOnly)
    x = h1;
  else
    x = norm(v + "norm2",
             p + (arch.sandwichNorms ? ".pre_feedforward_layernorm" : ".post_attention_layernorm"),
             h1, hidden);
  std::string out = feedForward(i, v, p, x);
  if (arch.sandwichNorms || arch.postNormsOnly)
    out = norm(v + "mlp_norm", p + ".post_feedforward_layernorm", out, hidden);
  return w.op(v + "h2", "add", p, {h1, out}, "", w.act(hidden));
}

std::string Importer::moduleText(const std::string &logits) {
  std::ostringstream text;
  text << "// Imported by `tpc import` from " << llvm::sys::path::filename(c.doc.path()).str()
       << " (" << (wrapper ? wrapper->className : arch.causalLM);
  if (wrapper)
    text << ": its language model, under " << base << "; the vision tower is left out";
  text << "): " << layers << " layers, hidden " << hidden << ", " << heads << " heads of "
       << headDim << ", " << kvHeads << " KV heads, intermediate " << inter << ", vocab " << vocab;
  describe(text);
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

std::string Importer::linear(const std::string &name, const std::string &module,
                             const std::string &x, int64_t in, int64_t out, bool bias) {
  std::vector<std::string> operands = {x, w.weight(module + ".weight", {out, in})};
  if (bias)
    operands.push_back(w.weight(module + ".bias", {out}));
  return w.op(name, "linear", module, operands, "", w.act(out));
}

std::string Importer::slice(const std::string &name, const std::string &module,
                            const std::string &x, int64_t offset, int64_t size) {
  return w.op(name, "slice", module, {x},
              "dim = " + i64(1) + ", offset = " + i64(offset) + ", size = " + i64(size),
              w.act(size));
}

std::string Importer::norm(const std::string &name, const std::string &module, const std::string &x,
                           int64_t width, std::optional<int64_t> perHead,
                           std::optional<double> epsilon) {
  std::string attrs = "epsilon = " + f64(epsilon.value_or(eps));
  if (perHead)
    attrs += ", head_dim = " + i64(*perHead);
  if (arch.normOffset)
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

} // namespace tpc::import::detail
