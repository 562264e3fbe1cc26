// The Llama family's attention and MLP, which the other families reuse: Llama itself and the
// dense architectures that differ from it only by switches of the table (Mistral's window,
// Qwen2's q/k/v biases, Qwen3's and OLMo2's q/k norms, Phi3's fused projections), plus
// SmolLM3, whose config decides which layers go without RoPE.
#include "ImporterBase.h"

#include "llvm/ADT/STLExtras.h"

namespace tpc::import::detail {

std::string Importer::selfAttention(int64_t i, const std::string &v, const std::string &attn,
                                    const std::string &x) {
  int64_t qWidth = heads * headDim, kvWidth = kvHeads * headDim;
  std::string q, k, val;
  if (arch.fused) {
    std::string qkv = linear(v + "qkv", attn + ".qkv_proj", x, hidden, qWidth + 2 * kvWidth, false);
    q = slice(v + "q", attn, qkv, 0, qWidth);
    k = slice(v + "k", attn, qkv, qWidth, kvWidth);
    val = slice(v + "v", attn, qkv, qWidth + kvWidth, kvWidth);
  } else {
    bool bias = arch.qkvBias || qkvBias || attentionBias;
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
  const Rope &rope = ropeOf(i);
  std::string ropeAttrs =
      "head_dim = " + i64(headDim) + ", theta = " + f64(rope.theta) + frequencyAttrs(rope);
  std::string qr = q, kr = k;
  bool rotates = ropeLayers.empty() || ropeLayers[i];
  if (arch.interleavedRope)
    ropeAttrs += ", interleaved = true";
  if (rotates) {
    qr = w.op(v + "qr", "rotary", attn, {q, "%positions"}, ropeAttrs, w.act(qWidth));
    kr = w.op(v + "kr", "rotary", attn, {k, "%positions"}, ropeAttrs, w.act(kvWidth));
  } else {
    w.comment("no RoPE in this layer (no_rope_layers)");
  }
  if (rotates && qkL2Norm) { // Llama4TextL2Norm, after RoPE, no weight
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
  if (!rotates && temperature)
    attrs += ", temperature_floor = " + f64(temperature->first) +
             ", temperature_scale = " + f64(temperature->second);
  std::vector<std::string> attnOperands = {qr, kr, val};
  if (arch.attentionSinks)
    attnOperands.push_back(w.weight(attn + ".sinks", {heads}));
  std::string o = w.op(v + "attn", "attention", attn, attnOperands, attrs, w.act(qWidth));
  return linear(v + "o", attn + ".o_proj", o, qWidth, hidden, attentionBias);
}

std::string Importer::feedForward(int64_t, const std::string &v, const std::string &p,
                                  const std::string &x) {
  std::string module = p + ".mlp";
  if (!arch.fused)
    return mlp(v, module, x, inter);
  std::string gu = linear(v + "gate_up", module + ".gate_up_proj", x, hidden, 2 * inter, false);
  std::string gate = slice(v + "gate", module, gu, 0, inter);
  std::string up = slice(v + "up", module, gu, inter, inter);
  return gated(v, module, gate, up, inter);
}

std::string Importer::mlp(const std::string &v, const std::string &module, const std::string &x,
                          int64_t width) {
  std::string gate = linear(v + "gate", module + ".gate_proj", x, hidden, width, mlpBias);
  std::string up = linear(v + "up", module + ".up_proj", x, hidden, width, mlpBias);
  return gated(v, module, gate, up, width);
}

std::string Importer::gated(const std::string &v, const std::string &module,
                            const std::string &gate, const std::string &up, int64_t width) {
  std::string a = activation(v + "act", module, gate, width);
  std::string m = w.op(v + "mul", "mul", module, {a, up}, "", w.act(width));
  return linear(v + "down", module + ".down_proj", m, width, hidden, mlpBias);
}

namespace {

/// SmolLM3: which layers apply RoPE (no_rope_layers, 1 = yes; else every
/// no_rope_layer_interval-th layer goes without) and which slide (layer_types; else the layers
/// without RoPE, when use_sliding_window and a sliding_window are given), as SmolLM3Config
/// makes them. A sliding layer's window is the mask's: transformers builds it from
/// sliding_window alone, whatever use_sliding_window says.
class SmolLM3 : public Importer {
public:
  using Importer::Importer;

private:
  bool readLayerTypes() override {
    if (!readSlidingWindow())
      return false;
    layerTypes.assign(layers, "full_attention");
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
};

} // namespace

const MakeImporter makeLlama = make<Importer>, makeSmolLM3 = make<SmolLM3>;

} // namespace tpc::import::detail
