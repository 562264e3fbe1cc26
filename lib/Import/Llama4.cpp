// Llama 4's text model: its own MoE (a sigmoid router's top k experts plus a shared expert,
// on some layers only), chunked attention with RoPE in the complex form and q/k L2 norms on
// most layers, and layers without RoPE whose queries are scaled by the position.
#include "ImporterBase.h"

#include "llvm/ADT/STLExtras.h"

#include <algorithm>

namespace tpc::import::detail {

namespace {

class Llama4 : public Importer {
public:
  using Importer::Importer;

private:
  bool readFamily() override {
    if (!readLlama4())
      return false;
    return Importer::readFamily();
  }
  bool readLlama4();
  // readLlama4 reads the layer types (from no_rope_layers) and has no sliding window.
  bool readLayerTypes() override { return readSlidingWindow(); }
  std::string feedForward(int64_t i, const std::string &v, const std::string &p,
                          const std::string &x) override;
  void describe(std::ostream &text) override {
    text << ", " << experts << " experts (top " << topK << ") and a shared one in "
         << std::count(sparseLayers.begin(), sparseLayers.end(), true)
         << " of the layers, dense MLPs of " << denseInter << " in the rest";
  }

  int64_t denseInter = 0; // the dense layers' MLP width
};

/// Llama 4's fields, with Llama4TextConfig's defaults: experts on the layers moe_layers lists
/// (else every interleave_moe_layer_step-th), each a sigmoid router's top k plus a shared
/// expert; the other layers a dense MLP of intermediate_size_mlp. RoPE on the layers
/// no_rope_layers marks 1 (else all but every no_rope_layer_interval-th), which attend by
/// chunks of attention_chunk_size (layer_types chunked_attention) and normalize q and k
/// (use_qk_norm); the others attend to the whole context with their queries scaled by the
/// position (attn_temperature_tuning, floor_scale, attn_scale).
bool Llama4::readLlama4() {
  if (c.get("sliding_window") || c.get("use_sliding_window"))
    c.error(c.get("sliding_window") ? "sliding_window" : "use_sliding_window")
        << "Llama 4 has no sliding window (its local layers attend by chunks: "
           "attention_chunk_size)";
  experts = c.integer("num_local_experts", 16, 1, kMaxRepeats).value_or(0);
  topK = c.integer("num_experts_per_tok", 1).value_or(0);
  expertInter = inter;
  denseInter = c.integer("intermediate_size_mlp", 16384).value_or(0);
  if (!checkTopK("experts"))
    return false;
  sparseLayers.assign(layers, false);
  if (const json *list = c.get("moe_layers")) {
    if (!list->is_array()) {
      c.error("moe_layers") << "'moe_layers' must be a list of layer indices, got " << list->dump();
      return false;
    }
    for (const json &index : *list) {
      if (!index.is_number_integer() || index.get<int64_t>() < 0 ||
          index.get<int64_t>() >= layers) {
        c.error("moe_layers") << "'moe_layers' must list layers of the " << layers << ", got "
                              << index.dump();
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
std::string Llama4::feedForward(int64_t i, const std::string &v, const std::string &p,
                                const std::string &x) {
  std::string ff = p + ".feed_forward";
  if (!sparseLayers[i])
    return mlp(v, ff, x, denseInter);
  std::string routing =
      w.op(v + "routing", "router", ff + ".router",
           {x, w.weight(ff + ".router.weight", {experts, hidden})},
           "normalize = false, sigmoid = true, top_k = " + i64(topK), w.act(experts));
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

} // namespace

const MakeImporter makeLlama4 = make<Llama4>;

} // namespace tpc::import::detail
