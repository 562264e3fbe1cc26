// transformers 5.17's default tensor-parallel plans per model_type. They live in its Python
// classes (the config's base_model_tp_plan / base_model_ep_plan, the head's _tp_plan), not in
// config.json, so tpc keeps this copy; test/conformance checks it against the installed
// transformers.
#include "tpc/Plan/DefaultPlans.h"

using json = nlohmann::ordered_json;

namespace tpc::plan {
namespace {

json llamaLike(bool qkNorms) {
  json plan = json::object();
  for (const char *p : {"q_proj", "k_proj", "v_proj"})
    plan[std::string("model.layers.*.self_attn.") + p] = "colwise";
  if (qkNorms) {
    plan["model.layers.*.self_attn.q_norm"] = "replicated_with_grad_allreduce";
    plan["model.layers.*.self_attn.k_norm"] = "replicated_with_grad_allreduce";
  }
  plan["model.layers.*.self_attn.o_proj"] = "rowwise";
  plan["model.layers.*.mlp.gate_proj"] = "colwise";
  plan["model.layers.*.mlp.up_proj"] = "colwise";
  plan["model.layers.*.mlp.down_proj"] = "rowwise";
  plan["lm_head"] = "colwise_gather_output";
  return plan;
}

const json &table() {
  static const json t = [] {
    json t = json::object();
    for (const char *type : {"llama", "mistral", "qwen2", "gemma", "gemma2"})
      t[type] = {{"tp", llamaLike(false)}};
    t["qwen3"] = t["gemma3_text"] = {{"tp", llamaLike(true)}};
    t["smollm3"] = {{"tp", llamaLike(false)}};
    // Gemma3ForConditionalGeneration: the text model's plan under model.language_model, and no
    // plan for lm_head (the wrapper's class has none: it runs replicated).
    json wrapped = json::object(), text = llamaLike(true);
    for (const auto &[key, strategy] : text.items())
      if (key != "lm_head")
        wrapped["model.language_model." + key.substr(std::string("model.").size())] = strategy;
    t["gemma3"] = {{"tp", wrapped}};
    t["phi3"] = {{"tp",
                  {{"model.layers.*.self_attn.qkv_proj", "colwise_gather_output"},
                   {"model.layers.*.self_attn.o_proj", "rowwise_split_input"},
                   {"model.layers.*.mlp.gate_up_proj", "colwise_gather_output"},
                   {"model.layers.*.mlp.down_proj", "rowwise_split_input"},
                   {"lm_head", "colwise_gather_output"}}}};
    t["mixtral"] = {{"tp",
                     {{"model.layers.*.self_attn.q_proj", "colwise"},
                      {"model.layers.*.self_attn.k_proj", "colwise"},
                      {"model.layers.*.self_attn.v_proj", "colwise"},
                      {"model.layers.*.self_attn.o_proj", "rowwise"},
                      {"model.layers.*.mlp.experts.gate_up_proj", "packed_colwise"},
                      {"model.layers.*.mlp.experts.down_proj", "rowwise"},
                      {"model.layers.*.mlp.experts", "moe_tp_experts"},
                      {"lm_head", "colwise_gather_output"}}},
                    // transformers uses this plan alone under expert parallelism: attention
                    // and lm_head stay replicated.
                    {"ep",
                     {{"model.layers.*.mlp.gate", "ep_router"},
                      {"model.layers.*.mlp.experts.gate_up_proj", "grouped_gemm"},
                      {"model.layers.*.mlp.experts.down_proj", "grouped_gemm"},
                      {"model.layers.*.mlp.experts", "moe_tp_experts"}}}};
    // Qwen3-MoE: Mixtral's plans, plus q_norm / k_norm and the MLP of its dense layers.
    // Qwen2-MoE: attention and the dense layers' MLP, as Qwen2MoeConfig's plan has them; the
    // routed and shared experts stay replicated under it (its experts under "ep" as Mixtral's).
    t["qwen2_moe"] = {{"tp", llamaLike(false)}, {"ep", t["mixtral"]["ep"]}};
    t["qwen3_moe"] = {{"tp",
                       {{"model.layers.*.self_attn.q_proj", "colwise"},
                        {"model.layers.*.self_attn.k_proj", "colwise"},
                        {"model.layers.*.self_attn.v_proj", "colwise"},
                        {"model.layers.*.self_attn.q_norm", "replicated_with_grad_allreduce"},
                        {"model.layers.*.self_attn.k_norm", "replicated_with_grad_allreduce"},
                        {"model.layers.*.self_attn.o_proj", "rowwise"},
                        {"model.layers.*.mlp.experts.gate_up_proj", "packed_colwise"},
                        {"model.layers.*.mlp.experts.down_proj", "rowwise"},
                        {"model.layers.*.mlp.experts", "moe_tp_experts"},
                        {"model.layers.*.mlp.gate_proj", "colwise"},
                        {"model.layers.*.mlp.up_proj", "colwise"},
                        {"model.layers.*.mlp.down_proj", "rowwise"},
                        {"lm_head", "colwise_gather_output"}}},
                      {"ep", t["mixtral"]["ep"]}};
    // q_norm and k_norm normalize over the whole projected width, so transformers gathers
    // q, k and v; tpc's tp-fold-redistribute keeps them sharded under this same plan.
    t["olmo2"] = {{"tp",
                   {{"model.layers.*.self_attn.q_proj", "colwise_gather_output"},
                    {"model.layers.*.self_attn.k_proj", "colwise_gather_output"},
                    {"model.layers.*.self_attn.v_proj", "colwise_gather_output"},
                    {"model.layers.*.self_attn.o_proj", "rowwise_split_input"},
                    {"model.layers.*.mlp.gate_proj", "colwise"},
                    {"model.layers.*.mlp.up_proj", "colwise"},
                    {"model.layers.*.mlp.down_proj", "rowwise"},
                    {"lm_head", "colwise_gather_output"}}}};
    // DeepSeek-V2: the latent projection replicated (mla_kv_a_proj), the per-head ones split.
    t["deepseek_v2"] = {{"tp",
                         {{"model.layers.*.self_attn.q_proj", "colwise"},
                          {"model.layers.*.self_attn.q_b_proj", "colwise"},
                          {"model.layers.*.self_attn.kv_a_proj_with_mqa", "mla_kv_a_proj"},
                          {"model.layers.*.self_attn.kv_b_proj", "colwise"},
                          {"model.layers.*.self_attn.o_proj", "rowwise"},
                          {"model.layers.*.mlp.experts.gate_up_proj", "packed_colwise"},
                          {"model.layers.*.mlp.experts.down_proj", "rowwise"},
                          {"model.layers.*.mlp.experts", "moe_tp_experts"},
                          {"model.layers.*.mlp.shared_experts.gate_proj", "colwise"},
                          {"model.layers.*.mlp.shared_experts.up_proj", "colwise"},
                          {"model.layers.*.mlp.shared_experts.down_proj", "rowwise"},
                          {"model.layers.*.mlp.gate_proj", "colwise"},
                          {"model.layers.*.mlp.up_proj", "colwise"},
                          {"model.layers.*.mlp.down_proj", "rowwise"},
                          {"lm_head", "colwise_gather_output"}}},
                        {"ep", t["mixtral"]["ep"]}};
    // Llama 4: its experts are [E, in, out] (x @ W), so transformers splits gate_up's packed
    // columns (packed_rowwise) and down's rows (colwise), the transposes of Mixtral's. Its
    // model's plan also has the keys without "model." (Llama4ForCausalLM applies its text
    // config's plan to itself), which name no module: left out.
    t["llama4_text"] = {{"tp",
                         {{"model.layers.*.self_attn.q_proj", "colwise"},
                          {"model.layers.*.self_attn.k_proj", "colwise"},
                          {"model.layers.*.self_attn.v_proj", "colwise"},
                          {"model.layers.*.self_attn.o_proj", "rowwise"},
                          {"model.layers.*.feed_forward.shared_expert.gate_proj", "colwise"},
                          {"model.layers.*.feed_forward.shared_expert.up_proj", "colwise"},
                          {"model.layers.*.feed_forward.shared_expert.down_proj", "rowwise"},
                          {"model.layers.*.feed_forward.experts.gate_up_proj", "packed_rowwise"},
                          {"model.layers.*.feed_forward.experts.down_proj", "colwise"},
                          {"model.layers.*.feed_forward.experts", "moe_tp_experts"},
                          {"model.layers.*.feed_forward.gate_proj", "colwise"},
                          {"model.layers.*.feed_forward.up_proj", "colwise"},
                          {"model.layers.*.feed_forward.down_proj", "rowwise"},
                          {"lm_head", "colwise_gather_output"}}},
                        {"ep",
                         {{"model.layers.*.self_attn.q_proj", "colwise"},
                          {"model.layers.*.self_attn.k_proj", "colwise"},
                          {"model.layers.*.self_attn.v_proj", "colwise"},
                          {"model.layers.*.self_attn.o_proj", "rowwise"},
                          {"model.layers.*.feed_forward.experts.gate_up_proj", "grouped_gemm"},
                          {"model.layers.*.feed_forward.experts.down_proj", "grouped_gemm"},
                          {"model.layers.*.feed_forward.gate_proj", "colwise"},
                          {"model.layers.*.feed_forward.up_proj", "colwise"},
                          {"model.layers.*.feed_forward.down_proj", "rowwise"},
                          {"model.layers.*.feed_forward.router", "ep_router"}}}};
    // Llama4ForConditionalGeneration: its Llama4ForCausalLM under language_model (its keys
    // without the model's own "model." again name nothing, as in llama4_text's).
    json llama4 = json::object();
    for (const char *kind : {"tp", "ep"}) {
      json wrappedLlama4 = json::object();
      for (const auto &[key, strategy] : t["llama4_text"][kind].items())
        wrappedLlama4["language_model." + key] = strategy;
      llama4[kind] = wrappedLlama4;
    }
    t["llama4"] = llama4;
    // GptOssConfig has no base_model_tp_plan: its tensor-parallel plan is the head's alone
    // (autoPlan refuses it as a plan for the model); its expert-parallel plan, as written.
    t["gpt_oss"] = {{"tp", {{"lm_head", "colwise_gather_output"}}},
                    {"ep",
                     {{"model.layers.*.mlp.router", "ep_router"},
                      {"model.layers.*.mlp.experts.gate_up_proj", "grouped_gemm"},
                      {"model.layers.*.mlp.experts.gate_up_proj_bias", "grouped_gemm"},
                      {"model.layers.*.mlp.experts.down_proj", "grouped_gemm"},
                      {"model.layers.*.mlp.experts.down_proj_bias", "grouped_gemm"},
                      {"model.layers.*.mlp.experts", "moe_tp_experts"}}}};
    return t;
  }();
  return t;
}

} // namespace

const json *defaultPlan(llvm::StringRef modelType, bool expertParallel) {
  auto it = table().find(modelType.str());
  if (it == table().end())
    return nullptr;
  auto plan = it->find(expertParallel ? "ep" : "tp");
  return plan == it->end() ? nullptr : &*plan;
}

json defaultPlanTable() { return table(); }

} // namespace tpc::plan
