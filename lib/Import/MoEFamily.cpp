// The mixtures of experts over the Llama layer: Mixtral (a softmax router's top k of
// num_local_experts on every layer), Qwen3-MoE (its own expert width, optional renormalized
// weights, dense layers by mlp_only_layers and decoder_sparse_step), Qwen2-MoE (Qwen3-MoE's
// experts beside a shared expert under a sigmoid gate, Qwen2's attention) and GPT-OSS (a biased
// router, biased experts with a clamped SwiGLU, attention sinks). Their checkpoints save the
// experts one by one; transformers and tpc hold them stacked.
#include "ImporterBase.h"

#include <algorithm>

namespace tpc::import::detail {

namespace {

class Mixtral : public Importer {
public:
  using Importer::Importer;

protected:
  bool readFamily() override {
    experts = c.integer("num_local_experts", std::nullopt, 1, kMaxRepeats).value_or(0);
    topK = c.integer("num_experts_per_tok", std::nullopt).value_or(0);
    checkTopK("experts");
    expertInter = inter;
    sparseLayers.assign(layers, true);
    return Importer::readFamily();
  }

  // transformers fuses the experts on load; save_pretrained (and the Hub) keep the original
  // per-expert tensors: Mixtral's w1 = gate, w3 = up, w2 = down.
  std::string feedForward(int64_t i, const std::string &v, const std::string &p,
                          const std::string &x) override {
    if (!sparseLayers[i])
      return Importer::feedForward(i, v, p, x);
    std::string mlp = p + ".mlp", legacy = p + ".block_sparse_moe";
    std::string routing =
        w.op(v + "routing", "router", mlp + ".gate",
             {x, w.weight(mlp + ".gate.weight", {experts, hidden}, {legacy + ".gate.weight"})},
             "top_k = " + i64(topK), w.act(experts));
    return stackedExperts(v, mlp, x, routing, legacy, {".w1.weight", ".w3.weight", ".w2.weight"},
                          expertInter);
  }

  void describe(std::ostream &text) override {
    text << ", " << experts << " experts (top " << topK << ")";
  }
};

class Qwen3Moe : public Mixtral {
public:
  using Mixtral::Mixtral;

protected:
  bool readFamily() override {
    readQwenMoe();
    return Importer::readFamily();
  }
  void readQwenMoe();

  std::string feedForward(int64_t i, const std::string &v, const std::string &p,
                          const std::string &x) override {
    if (!sparseLayers[i])
      return Importer::feedForward(i, v, p, x);
    std::string mlp = p + ".mlp";
    // norm_topk_prob, written either way
    std::string routerAttrs =
        "top_k = " + i64(topK) + ", normalize = " + (normalizeTopK ? "true" : "false");
    std::string routing =
        w.op(v + "routing", "router", mlp + ".gate",
             {x, w.weight(mlp + ".gate.weight", {experts, hidden})}, routerAttrs, w.act(experts));
    return stackedExperts(v, mlp, x, routing, mlp, kGateUpDown, expertInter);
  }

  void describe(std::ostream &text) override {
    Mixtral::describe(text);
    text << " of intermediate " << expertInter << " in "
         << std::count(sparseLayers.begin(), sparseLayers.end(), true) << " of the layers";
  }

  bool normalizeTopK = true; // the router divides the kept weights by their sum
};

/// Qwen2-MoE (Qwen2MoeSparseMoeBlock): Qwen3-MoE's routed experts plus a shared expert, an MLP
/// of shared_expert_intermediate_size on every token, scaled by sigmoid(shared_expert_gate(x))
/// (a [1, hidden] linear). The gate and its MLP are written as a router of one expert with a
/// sigmoid (Llama 4's) and that expert: the same arithmetic, in ops tpc has, and both run
/// replicated under transformers' plans, which name neither. Attention is Qwen2's, with
/// q/k/v biases by qkv_bias and Qwen2MoeConfig's layer_types.
class Qwen2Moe : public Qwen3Moe {
public:
  using Qwen3Moe::Qwen3Moe;

private:
  bool readFamily() override {
    qkvBias = c.boolean("qkv_bias", true);
    sharedInter = c.integer("shared_expert_intermediate_size", 5632).value_or(0);
    return Qwen3Moe::readFamily();
  }

  // Qwen2MoeConfig: sliding_window only with use_sliding_window (it saves 0 without), and
  // without layer_types every other one of the first max_window_layers layers slides.
  bool readLayerTypes() override {
    const json *window = c.get("sliding_window");
    if (window && *window == 0)
      slidingWindow.reset();
    else if (!readSlidingWindow())
      return false;
    layerTypes.assign(layers, "full_attention");
    if (!c.boolean("use_sliding_window", false))
      slidingWindow.reset();
    if (c.get("layer_types")) {
      if (!readLayerTypeList("sliding_attention", ""))
        return false;
    } else if (slidingWindow) {
      int64_t upTo = c.integer("max_window_layers", 28, 0).value_or(28);
      for (int64_t i = 0; i < layers && i < upTo; ++i)
        if ((i + 1) % 2)
          layerTypes[i] = "sliding_attention";
    }
    if (!slidingWindow)
      for (std::string &t : layerTypes)
        t = "full_attention"; // transformers: no window, plain causal
    return true;
  }

  std::string feedForward(int64_t i, const std::string &v, const std::string &p,
                          const std::string &x) override {
    std::string routed = Qwen3Moe::feedForward(i, v, p, x);
    if (!sparseLayers[i])
      return routed;
    std::string mlp = p + ".mlp", shared = mlp + ".shared_expert";
    std::string gate =
        w.op(v + "shared_gate", "router", mlp + ".shared_expert_gate",
             {x, w.weight(mlp + ".shared_expert_gate.weight", {1, hidden})},
             "normalize = false, sigmoid = true, top_k = 1", w.act(1));
    std::string gateUp = w.weight(shared + ".gate_up_proj", {1, 2 * sharedInter, hidden},
                                  {shared + ".gate_proj.weight", shared + ".up_proj.weight"});
    std::string down =
        w.weight(shared + ".down_proj", {1, hidden, sharedInter}, {shared + ".down_proj.weight"});
    std::string sharedOut = w.op(v + "shared", "experts", shared, {x, gate, gateUp, down},
                                 act == "silu" ? "" : "activation = \"gelu_tanh\"", w.act(hidden));
    return w.op(v + "moe_sum", "add", mlp, {routed, sharedOut}, "", w.act(hidden));
  }

  void describe(std::ostream &text) override {
    Qwen3Moe::describe(text);
    text << ", a gated shared expert of intermediate " << sharedInter;
  }

  int64_t sharedInter = 0;
};

/// Qwen3-MoE's experts: their sizes, how the router weighs them and which layers have them
/// (Qwen3MoeDecoderLayer: a layer not in mlp_only_layers whose index + 1 is a multiple of
/// decoder_sparse_step, when there are experts; every other layer has Qwen3MoeMLP).
void Qwen3Moe::readQwenMoe() {
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
  if (experts > 0)
    checkTopK("experts");
  sparseLayers.assign(layers, false);
  for (int64_t i = 0; i < layers; ++i)
    sparseLayers[i] = !dense[i] && experts > 0 && (i + 1) % step == 0;
}

class GptOss : public Mixtral {
public:
  using Mixtral::Mixtral;

private:
  void readActivation() override {
    // GptOssExperts hardcodes its clamped SwiGLU (alpha 1.702, limit 7) and reads neither
    // hidden_act nor swiglu_limit; the released config.json says swiglu_limit 7.0.
    c.get("hidden_act");
    if (const json *limit = c.get("swiglu_limit");
        limit && (!limit->is_number() || limit->get<double>() != 7.0))
      c.error("swiglu_limit") << "swiglu_limit " << limit->dump()
                              << " is not the 7.0 that transformers 5.17's GptOssExperts "
                                 "clamps at (it does not read this field)";
  }

  // GptOssConfig's default when config.json has none.
  const json *defaultRopeParameters() override {
    static const json rope = {{"rope_type", "yarn"}, {"factor", 32.0},
                              {"beta_fast", 32.0},   {"beta_slow", 1.0},
                              {"truncate", false},   {"original_max_position_embeddings", 4096}};
    return &rope;
  }

  // As GptOssMLP holds and save_pretrained writes them: a router with a bias that picks the
  // top k logits before its softmax; experts as [E, in, out] with gate and up interleaved.
  std::string feedForward(int64_t, const std::string &v, const std::string &p,
                          const std::string &x) override {
    std::string router = p + ".mlp.router", ex = p + ".mlp.experts";
    std::string routing = w.op(
        v + "routing", "router", router,
        {x, w.weight(router + ".weight", {experts, hidden}), w.weight(router + ".bias", {experts})},
        "top_k = " + i64(topK) + ", softmax_after_top_k = true", w.act(experts));
    return w.op(v + "moe", "experts", ex,
                {x, routing, w.weight(ex + ".gate_up_proj", {experts, hidden, 2 * inter}),
                 w.weight(ex + ".down_proj", {experts, inter, hidden}),
                 w.weight(ex + ".gate_up_proj_bias", {experts, 2 * inter}),
                 w.weight(ex + ".down_proj_bias", {experts, hidden})},
                "activation = \"clamped_swiglu\", layout = \"in_out_interleaved\", alpha = " +
                    f64(1.702) + ", limit = " + f64(7.0),
                w.act(hidden));
  }
};

} // namespace

bool Importer::checkTopK(const char *kind) {
  if (c.failed)
    return false;
  if (topK <= experts)
    return true;
  c.error("num_experts_per_tok") << "num_experts_per_tok " << topK << " exceeds the " << experts
                                 << " " << kind;
  return false;
}

std::string Importer::stackedExperts(const std::string &v, const std::string &mlp,
                                     const std::string &x, const std::string &routing,
                                     const std::string &legacy,
                                     const std::array<const char *, 3> &names, int64_t width) {
  std::vector<std::string> gateUpSources, downSources;
  for (int64_t e = 0; e < experts; ++e) {
    std::string expert = legacy + ".experts." + std::to_string(e);
    gateUpSources.push_back(expert + names[0]);
    gateUpSources.push_back(expert + names[1]);
    downSources.push_back(expert + names[2]);
  }
  std::string gateUp =
      w.weight(mlp + ".experts.gate_up_proj", {experts, 2 * width, hidden}, gateUpSources);
  std::string down = w.weight(mlp + ".experts.down_proj", {experts, hidden, width}, downSources);
  return w.op(v + "moe", "experts", mlp + ".experts", {x, routing, gateUp, down},
              act == "silu" ? "" : "activation = \"gelu_tanh\"", w.act(hidden));
}

const MakeImporter makeMixtral = make<Mixtral>, makeQwen3Moe = make<Qwen3Moe>,
                   makeQwen2Moe = make<Qwen2Moe>, makeGptOss = make<GptOss>;

} // namespace tpc::import::detail
