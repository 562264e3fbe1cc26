// tpc import: a Hugging Face config.json becomes model.mlir text, op for op what the
// architecture's transformers 5.17 forward computes (fp32, batch 1, eval). This file holds
// the public entry points and the table that sends each model_type to its family's importer
// (ImporterBase.h); multimodal wrappers are unwrapped here to their language model. The
// caller parses and verifies the text.
#include "ImporterBase.h"

#include "llvm/ADT/StringExtras.h"

using namespace mlir;

namespace tpc::import {

using namespace detail;

namespace {

/// The supported architectures, each spelled as its family and its differences from Llama.
const std::vector<Architecture> &architectures() {
  static const std::vector<Architecture> table = [] {
    Architecture llama{"llama", "LlamaForCausalLM", makeLlama};
    llama.attentionBiasField = llama.mlpBiasField = true;
    Architecture mistral{"mistral", "MistralForCausalLM", makeLlama};
    mistral.slidingEveryLayer = true;
    Architecture qwen2{"qwen2", "Qwen2ForCausalLM", makeLlama};
    qwen2.qkvBias = qwen2.hasLayerTypes = true;
    Architecture qwen3{"qwen3", "Qwen3ForCausalLM", makeLlama};
    qwen3.qkNorm = qwen3.hasLayerTypes = qwen3.attentionBiasField = true;
    Architecture gemma{"gemma", "GemmaForCausalLM", makeGemma};
    gemma.normOffset = gemma.attentionBiasField = gemma.tiedByDefault = true;
    gemma.defaultActivation = "gelu_pytorch_tanh";
    Architecture gemma2 = gemma;
    gemma2.modelType = "gemma2";
    gemma2.causalLM = "Gemma2ForCausalLM";
    gemma2.make = makeGemma2;
    gemma2.sandwichNorms = gemma2.hasLayerTypes = gemma2.slidingAlways = true;
    gemma2.activationKey = "hidden_activation";
    Architecture gemma3 = gemma2;
    gemma3.modelType = "gemma3_text";
    gemma3.causalLM = "Gemma3ForCausalLM";
    gemma3.make = makeGemma3;
    gemma3.qkNorm = true;
    gemma3.defaultSlidingWindow = 4096;
    Architecture smollm3 = llama;
    smollm3.modelType = "smollm3";
    smollm3.causalLM = "SmolLM3ForCausalLM";
    smollm3.make = makeSmolLM3;
    smollm3.tiedByDefault = true;
    smollm3.defaultTheta = 2e6;
    Architecture llama4{"llama4_text", "Llama4ForCausalLM", makeLlama4};
    llama4.interleavedRope = llama4.attentionBiasField = true;
    llama4.defaultEps = 1e-5;
    llama4.defaultTheta = 500000.0;
    Architecture phi3{"phi3", "Phi3ForCausalLM", makeLlama};
    phi3.fused = phi3.slidingEveryLayer = true;
    Architecture mixtral{"mixtral", "MixtralForCausalLM", makeMixtral};
    mixtral.slidingEveryLayer = true;
    mixtral.defaultTheta = 1e6;
    Architecture qwen3Moe{"qwen3_moe", "Qwen3MoeForCausalLM", makeQwen3Moe};
    qwen3Moe.qkNorm = qwen3Moe.attentionBiasField = true;
    qwen3Moe.slidingEveryLayer = qwen3Moe.slidingNeedsFlag = true;
    Architecture qwen2Moe{"qwen2_moe", "Qwen2MoeForCausalLM", makeQwen2Moe};
    qwen2Moe.defaultSlidingWindow = 4096;
    Architecture olmo2{"olmo2", "Olmo2ForCausalLM", makeLlama};
    olmo2.rowQkNorm = olmo2.postNormsOnly = olmo2.attentionBiasField = true;
    olmo2.defaultEps = 1e-5;
    Architecture deepseek2{"deepseek_v2", "DeepseekV2ForCausalLM", makeDeepseekV2};
    deepseek2.attentionBiasField = deepseek2.mlpBiasField = true;
    Architecture gptOss{"gpt_oss", "GptOssForCausalLM", makeGptOss};
    gptOss.attentionSinks = gptOss.hasLayerTypes = gptOss.slidingAlways = true;
    gptOss.attentionBiasField = gptOss.defaultAttentionBias = true;
    gptOss.defaultSlidingWindow = 128;
    gptOss.defaultEps = 1e-5;
    gptOss.defaultTheta = 150000.0;
    return std::vector<Architecture>{llama,   mistral,  qwen2,   qwen3,     gemma,
                                     gemma2,  gemma3,   smollm3, llama4,    phi3,
                                     mixtral, qwen3Moe, qwen2Moe, olmo2,  deepseek2,
                                     gptOss};
  }();
  return table;
}

/// The architecture of `modelType`, or null.
const Architecture *findArchitecture(const std::string &modelType) {
  for (const Architecture &a : architectures())
    if (modelType == a.modelType)
      return &a;
  return nullptr;
}

/// The causal LM of `arch`, imported from `config`.
FailureOr<std::string> importArchitecture(Config &config, const Architecture &arch,
                                          const StoredTypes *stored,
                                          std::optional<Importer::Wrapper> wrapper = {}) {
  std::unique_ptr<Importer> importer = arch.make(config, arch, stored);
  importer->wrapper = wrapper;
  std::optional<std::string> text = importer->run();
  if (!text)
    return failure();
  return *text;
}

/// Refuses an `architectures` naming a class other than `className`, which tpc imports for
/// `modelType`.
LogicalResult checkArchitectures(Config &config, const char *className, const char *modelType) {
  const json *names = config.get("architectures");
  if (!names)
    return success();
  for (const json &name : names->is_array() ? *names : json::array({*names}))
    if (name != className) {
      config.error("architectures")
          << "architecture " << name.dump() << " is not supported: tpc imports " << className
          << " for model_type '" << modelType << "'";
      return failure();
    }
  return success();
}

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
  if (failed(checkArchitectures(outer, m.className, m.modelType)))
    return failure();
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
  return importArchitecture(config, *findArchitecture(m.textModelType), stored,
                            Importer::Wrapper{&outer, m.modelType, m.className, m.base, m.head,
                                              m.checkpointBase, m.tiedByDefault});
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
  for (const MultimodalWrapper &m : wrappers())
    if (*type == m.modelType)
      return importWrapper(config, m, stored);
  const Architecture *arch = findArchitecture(type->get<std::string>());
  if (!arch) {
    config.error("model_type") << "model_type '" << type->get<std::string>()
                               << "' is not supported; tpc imports "
                               << llvm::join(supportedModelTypes(), ", ");
    return failure();
  }
  if (failed(checkArchitectures(config, arch->causalLM, arch->modelType)))
    return failure();
  return importArchitecture(config, *arch, stored);
}

} // namespace

FailureOr<std::string> importConfig(StringRef configPath, MLIRContext *context,
                                    const StoredTypes *stored) {
  return importDocument(plan::JsonDocument::read(configPath, context), context, stored);
}

FailureOr<std::string> importConfigText(StringRef name, std::string text, MLIRContext *context,
                                        const StoredTypes *stored) {
  return importDocument(plan::JsonDocument::parse(name, std::move(text), context), context, stored);
}

} // namespace tpc::import
