// config.json read field by field for the importer: typed readers whose errors point at the
// field's line, and the report of fields nothing read (a field tpc does not model may still
// change what transformers computes, so it is named rather than dropped silently).
#include "ImporterBase.h"

using namespace mlir;

namespace tpc::import::detail {

namespace {

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

} // namespace

Config::Config(const plan::JsonDocument &doc, MLIRContext *context, std::vector<std::string> at)
    : doc(doc), context(context), at(std::move(at)) {
  object = &doc.value();
  for (const std::string &key : this->at) // the caller has checked that each is an object
    object = &*object->find(key);
}

Location Config::keyLoc(const std::vector<std::string> &path) const {
  std::vector<std::string> full = at;
  full.insert(full.end(), path.begin(), path.end());
  return doc.keyLoc(full);
}

const json *Config::get(const std::string &key) {
  used.insert(key);
  auto it = object->find(key);
  return it == object->end() || it->is_null() ? nullptr : &*it;
}

std::optional<int64_t> Config::integer(const std::string &key, std::optional<int64_t> fallback,
                                       int64_t minimum, int64_t maximum) {
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

std::optional<double> Config::number(const std::string &key, std::optional<double> fallback) {
  const json *v = get(key);
  if (!v)
    return fallback;
  if (!v->is_number() || v->get<double>() <= 0) {
    error(key) << "'" << key << "' must be a positive number, got " << v->dump();
    return std::nullopt;
  }
  return v->get<double>();
}

bool Config::boolean(const std::string &key, bool fallback) {
  const json *v = get(key);
  if (!v)
    return fallback;
  if (!v->is_boolean()) {
    error(key) << "'" << key << "' must be true or false, got " << v->dump();
    return fallback;
  }
  return v->get<bool>();
}

void Config::reportUnread() {
  for (auto it = object->begin(); it != object->end(); ++it)
    if (!used.count(it.key()) && !kHarmless.count(it.key()))
      emitWarning(keyLoc({it.key()}))
          << "'" << it.key() << "' is not a field tpc knows; ignored (tpc models "
          << "transformers 5.17's forward, which it assumes this field does not change)";
}

} // namespace tpc::import::detail
