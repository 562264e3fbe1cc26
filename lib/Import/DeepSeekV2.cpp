// DeepSeek-V2: multi-head latent attention (queries and keys/values through low-rank
// latents, a rotary part all heads share, YaRN's mscale on the softmax) and its MoE (dense
// layers first, routed experts with optional group-limited routing, shared experts).
#include "ImporterBase.h"

#include <cmath>

using namespace mlir;

namespace tpc::import::detail {

namespace {

class DeepseekV2 : public Importer {
public:
  using Importer::Importer;

private:
  bool readHeadDim() override { return readMla(); }
  bool readMla();
  int64_t rotaryDim() const override { return ropeDim; }
  bool readRopes(const json *parameters, const std::string &where, bool perType) override;
  std::string attention(int64_t i, const std::string &v, const std::string &attn,
                        const std::string &x) override;
  std::string feedForward(int64_t i, const std::string &v, const std::string &p,
                          const std::string &x) override;
  void describe(std::ostream &text) override {
    text << ", latent attention (q rank " << qLora << ", kv rank " << kvLora << ", heads of "
         << nopeDim << " + " << ropeDim << " and values of " << valueDim << "), " << experts
         << " routed experts (top " << topK << ") and " << sharedExperts << " shared from layer "
         << denseLayers;
  }

  // The latent ranks (qLora 0: q_proj instead of q_a/q_b), the query/key head's nope and rope
  // parts, the value head; dense layers first, shared experts, routing.
  int64_t qLora = 0, kvLora = 0, nopeDim = 0, ropeDim = 0, valueDim = 0;
  int64_t moeInter = 0, sharedExperts = 0, denseLayers = 0, groups = 0, topGroups = 0;
  double routedScale = 1.0;
  std::optional<double> mlaScale; // the softmax scale, YaRN's mscale included
};

/// DeepSeek-V2's attention and MoE fields, with DeepseekV2Config's defaults.
bool DeepseekV2::readMla() {
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
  if (!checkTopK("routed experts"))
    return false;
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

/// DeepSeek-V2's multi-head latent attention, as transformers 5.17 computes it: the query
/// (q_proj, or q_a_proj -> q_a_layernorm -> q_b_proj) has heads of nope + rope dims; the
/// keys and values come from one latent (kv_a_proj_with_mqa -> kv_a_layernorm -> kv_b_proj,
/// heads of nope + value dims) plus one rotary key all heads share. The rope parts rotate in
/// the complex (interleaved) form. Keys and values are cached per head (tp.attention), not
/// as the latent: a decode step then projects only its own token's latent.
std::string DeepseekV2::attention(int64_t i, const std::string &v, const std::string &attn,
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
  std::string latent = slice(v + "latent", attn, kva, 0, kvLora);
  std::string kpe = slice(v + "kpe", attn, kva, kvLora, ropeDim);
  latent = norm(v + "latent_norm", attn + ".kv_a_layernorm", latent, kvLora, std::nullopt, 1e-6);
  int64_t kvHead = nopeDim + valueDim;
  std::string kv = linear(v + "kv", attn + ".kv_b_proj", latent, kvLora, heads * kvHead, false);
  auto headSlice = [&](const std::string &n, int64_t offset, int64_t size) {
    return w.op(v + n, "head_slice", attn, {kv},
                "head_dim = " + i64(kvHead) + ", offset = " + i64(offset) + ", size = " + i64(size),
                w.act(heads * size));
  };
  std::string knope = headSlice("knope", 0, nopeDim), val = headSlice("v", nopeDim, valueDim);
  const Rope &rope = ropeOf(i);
  auto ropeAttrs = [&](int64_t width, int64_t unrotated) {
    std::string attrs =
        "head_dim = " + i64(width) + ", interleaved = true, theta = " + f64(rope.theta);
    if (unrotated)
      attrs += ", unrotated = " + i64(unrotated);
    return attrs + frequencyAttrs(rope);
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

bool DeepseekV2::readRopes(const json *parameters, const std::string &where, bool perType) {
  if (!Importer::readRopes(parameters, where, perType))
    return false;
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
  return true;
}

std::string DeepseekV2::feedForward(int64_t i, const std::string &v, const std::string &p,
                                    const std::string &x) {
  std::string mlp = p + ".mlp";
  if (i < denseLayers)
    return this->mlp(v, mlp, x, inter);
  // Routed experts (the Mixtral layout; save_pretrained writes them per expert) plus the
  // shared experts, one MLP of n_shared_experts x moe_intermediate_size, on every token.
  std::string routerAttrs = "normalize = false, top_k = " + i64(topK);
  if (routedScale != 1.0)
    routerAttrs += ", scale = " + f64(routedScale);
  if (groups)
    routerAttrs += ", groups = " + i64(groups) + ", top_groups = " + i64(topGroups);
  std::string routing =
      w.op(v + "routing", "router", mlp + ".gate",
           {x, w.weight(mlp + ".gate.weight", {experts, hidden})}, routerAttrs, w.act(experts));
  std::string out = stackedExperts(v, mlp, x, routing, mlp, kGateUpDown, moeInter);
  if (!sharedExperts)
    return out;
  std::string shared =
      this->mlp(v + "shared_", mlp + ".shared_experts", x, sharedExperts * moeInter);
  return w.op(v + "moe_sum", "add", mlp, {out, shared}, "", w.act(hidden));
}

} // namespace

const MakeImporter makeDeepseekV2 = make<DeepseekV2>;

} // namespace tpc::import::detail
