// The importer's private parts, shared by the architecture families: config.json read field
// by field (Config), the model.mlir text under construction (Writer), and the base importer
// that reads what every family has and writes a Llama-shaped decoder, with hooks a family
// overrides where its transformers forward differs. Each family file defines its importer and
// the make* entry that Importer.cpp's table names for its model_types.
#ifndef TPC_LIB_IMPORT_IMPORTERBASE_H
#define TPC_LIB_IMPORT_IMPORTERBASE_H

#include "tpc/Import/Importer.h"
#include "tpc/Plan/Json.h"

#include "mlir/IR/Diagnostics.h"

#include <array>
#include <memory>
#include <optional>
#include <set>
#include <sstream>

namespace tpc::import::detail {

using json = nlohmann::ordered_json;

// config.json comes from anywhere: a size larger than any model's would only overflow or
// exhaust memory further down (in the text written here, in analyze's byte counts, in the
// binary's allocations), so it is refused here, at its field.
/// Any integer field: sizes of real models are far below 2^31.
inline constexpr int64_t kMaxConfigInt = (int64_t(1) << 31) - 1;
/// Layers and experts, each of which adds text to model.mlir: 4x the largest released model.
inline constexpr int64_t kMaxRepeats = 1024;
/// One parameter: 2^40 elements (4 TiB in fp32), hundreds of times today's largest tensor,
/// and far from overflowing a byte count.
inline constexpr uint64_t kMaxParamElements = uint64_t(1) << 40;

/// One config.json, read field by field: what was read is remembered, so the fields left
/// over can be reported; errors point at the field's line. A multimodal wrapper's language
/// model is read from its sub-object (`at`, the keys leading to it: {"text_config"}).
class Config {
public:
  Config(const plan::JsonDocument &doc, mlir::MLIRContext *context,
         std::vector<std::string> at = {});

  /// The object read (config.json, or its text_config).
  const json &value() const { return *object; }

  /// Where the key at `path` (from this object down) was written.
  mlir::Location keyLoc(const std::vector<std::string> &path) const;

  const json *get(const std::string &key);

  mlir::InFlightDiagnostic error(const std::string &key) {
    failed = true;
    return mlir::emitError(keyLoc({key}));
  }

  std::optional<int64_t> integer(const std::string &key, std::optional<int64_t> fallback,
                                 int64_t minimum = 1, int64_t maximum = kMaxConfigInt);
  std::optional<double> number(const std::string &key, std::optional<double> fallback);
  bool boolean(const std::string &key, bool fallback);

  /// Warns about each field neither read nor known to be harmless.
  void reportUnread();

  const plan::JsonDocument &doc;
  mlir::MLIRContext *context;
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

/// The model.mlir text under construction.
class Writer {
public:
  /// How the checkpoint stores each tensor, by name, where it is not f32 ("bf16", "f16").
  const StoredTypes *stored = nullptr;

  std::string type(std::vector<int64_t> dims);
  std::string act(int64_t width) { return type({-1, width}); }

  /// A wrapper's parameters under `from` are also read under `to` (the checkpoint's own name):
  /// as a source of one piece.
  std::string renameFrom, renameTo;

  /// Declares a parameter (stacked from `sources` in checkpoints that save it in pieces)
  /// and returns a fresh value reading it.
  std::string weight(const std::string &name, std::vector<int64_t> shape,
                     std::vector<std::string> sources = {});

  /// Emits `%name = tp.<op> "module" operands {attrs} : (types) -> result` and returns %name.
  std::string op(const std::string &name, const std::string &opName, const std::string &module,
                 std::vector<std::string> operands, const std::string &attrs,
                 const std::string &result);

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

/// Attribute values as model.mlir spells them.
std::string f64(double v);
inline std::string i64(int64_t v) { return std::to_string(v) + " : i64"; }
/// A rotary op's attributes from the frequencies on: the inverse frequencies a scaling
/// changed, and YaRN's attention factor on cos and sin.
std::string frequencyAttrs(const Rope &rope);

/// The names of one expert's gate, up and down tensors in Qwen3-MoE's and DeepSeek's
/// checkpoints (Mixtral's are w1, w3 and w2).
inline constexpr std::array<const char *, 3> kGateUpDown = {".gate_proj.weight", ".up_proj.weight",
                                                            ".down_proj.weight"};

class Importer;
struct Architecture;
using MakeImporter = std::unique_ptr<Importer> (*)(Config &, const Architecture &,
                                                   const StoredTypes *);

/// What distinguishes a supported architecture from Llama: the family that imports it (its
/// importer holds what the family reads and builds alone) and the switches of the shared
/// decoder that several families flip.
struct Architecture {
  const char *modelType, *causalLM;
  MakeImporter make;
  bool qkvBias = false;             // Qwen2: q/k/v always have biases
  bool qkNorm = false;              // Qwen3: per-head RMSNorm of q and k before RoPE
  bool rowQkNorm = false;           // OLMo2: RMSNorm of q and k over their whole projected width
  bool postNormsOnly = false;       // OLMo2: norms after attention and MLP, none before
  bool sandwichNorms = false;       // Gemma2: norms after attention and MLP too
  bool normOffset = false;          // Gemma: norms scale by (1 + w)
  bool interleavedRope = false;     // Llama 4: RoPE in the complex form (pairs of adjacent columns)
  bool attentionSinks = false;      // GPT-OSS: a learned logit per head joins each row's softmax
  bool fused = false;               // Phi3: qkv_proj, gate_up_proj
  bool slidingEveryLayer = false;   // Mistral, Mixtral, Phi3: sliding_window applies to all
  bool hasLayerTypes = false;       // Qwen2/3, Gemma2: layer_types chooses per layer
  bool slidingAlways = false;       // Gemma2/3, GPT-OSS: layer_types slide without being told
  bool slidingNeedsFlag = false;    // Qwen3-MoE: sliding_window counts with use_sliding_window
  int64_t defaultSlidingWindow = 0; // the config class's sliding_window when absent (0: none)
  bool attentionBiasField = false, mlpBiasField = false;
  bool defaultAttentionBias = false;
  const char *activationKey = "hidden_act";
  const char *defaultActivation = "silu";
  bool tiedByDefault = false;
  double defaultEps = 1e-6;  // the config class's rms_norm_eps
  double defaultTheta = 1e4; // the config class's default_theta
};

/// The importer of the Llama family, which every other family builds on: reads the fields
/// they share, then writes embedding, decoder layers and head. The virtual hooks are where
/// some family's config or forward differs; each is called at the point where that family's
/// fields are read, so a config's diagnostics come out in one fixed order.
class Importer {
public:
  Importer(Config &config, const Architecture &arch, const StoredTypes *stored)
      : c(config), arch(arch) {
    w.stored = stored;
  }
  virtual ~Importer() = default;

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

protected:
  // Reading, in run()'s order.
  bool readShape();
  /// head_dim, from its field or hidden_size / num_attention_heads. False after an error.
  virtual bool readHeadDim();
  void readCommon();
  virtual void readActivation();
  /// The family's own fields, after the shared ones. False after an error that stops reading.
  virtual bool readFamily();
  /// Refuses the softcaps and query_pre_attn_scalar, which only Gemma 2 and 3 apply.
  void refuseSoftcaps();
  virtual bool readLayerTypes();
  bool readSlidingWindow();
  bool readLayerTypeList(const char *other, const std::string &family);
  bool readRopeLayers(bool emptyIsAbsent);
  /// The layers sliding_window_pattern makes global, where layer_types is absent.
  virtual int64_t slidingPattern() { return 2; }
  /// The config class's rope when config.json has none.
  virtual const json *defaultRopeParameters() { return nullptr; }
  /// `ropes`: one for all layers, or one per layer type (`perType`).
  virtual bool readRopes(const json *parameters, const std::string &where, bool perType);
  std::optional<Rope> readRope(const json *parameters, const std::string &where,
                               const std::string &layerType = "",
                               std::optional<double> theta = std::nullopt);
  std::optional<Rope> readYarn(Rope rope, const json &parameters, const std::string &where,
                               const std::string &layerType);
  /// The width RoPE rotates in each head.
  virtual int64_t rotaryDim() const { return headDim; }
  /// What is read last: eos_token_id, max_position_embeddings, base_model_tp_plan; then
  /// the fields nothing read are reported. False after any error.
  bool readEnd();

  // Writing.
  virtual std::string embed();
  std::string layer(int64_t i, const std::string &h);
  virtual std::string attention(int64_t i, const std::string &v, const std::string &attn,
                                const std::string &x) {
    return selfAttention(i, v, attn, x);
  }
  /// The MLP after the attention of layer i (its modules under `p`, the layer's).
  virtual std::string feedForward(int64_t i, const std::string &v, const std::string &p,
                                  const std::string &x);
  /// What the header comment adds about the family's own parts (experts, latents).
  virtual void describe(std::ostream &) {}
  /// model.mlir: its header comment, the module with its attributes and parameters, and
  /// forward (written into `w`) returning `logits`.
  std::string moduleText(const std::string &logits);

  std::string selfAttention(int64_t i, const std::string &v, const std::string &attn,
                            const std::string &x);
  std::string linear(const std::string &name, const std::string &module, const std::string &x,
                     int64_t in, int64_t out, bool bias);
  std::string slice(const std::string &name, const std::string &module, const std::string &x,
                    int64_t offset, int64_t size);
  std::string norm(const std::string &name, const std::string &module, const std::string &x,
                   int64_t width, std::optional<int64_t> headDim = std::nullopt,
                   std::optional<double> epsilon = std::nullopt);
  /// A gated MLP (gate_proj, up_proj, down_proj) of `width` intermediate features.
  std::string mlp(const std::string &v, const std::string &module, const std::string &x,
                  int64_t width);
  /// The MLP after its gate and up projections: activation(gate) * up, down_proj.
  std::string gated(const std::string &v, const std::string &module, const std::string &gate,
                    const std::string &up, int64_t width);
  std::string activation(const std::string &name, const std::string &module, const std::string &x,
                         int64_t width = 0);
  /// The RoPE of layer i's type.
  const Rope &ropeOf(int64_t i) const;
  /// Refuses a num_experts_per_tok above the number of experts (`kind`: what the message
  /// calls them). False after an error, this one or an earlier one.
  bool checkTopK(const char *kind);
  /// Routed experts saved one by one (save_pretrained's layout: `legacy`.experts.<e> with
  /// `names` for gate, up and down), stacked into the fused experts transformers holds.
  std::string stackedExperts(const std::string &v, const std::string &mlp, const std::string &x,
                             const std::string &routing, const std::string &legacy,
                             const std::array<const char *, 3> &names, int64_t width);

  Config &c;
  const Architecture &arch;
  Writer w;
  int64_t vocab = 0, hidden = 0, inter = 0, layers = 0, heads = 0, kvHeads = 0, headDim = 0;
  // The experts of the families that have them, and which layers route to them (the rest: a
  // dense MLP).
  int64_t experts = 0, topK = 0, expertInter = 0;
  std::vector<bool> sparseLayers;
  double eps = 1e-6;
  std::optional<double> attnScale, attnSoftcap, finalSoftcap;
  std::string act;
  bool attentionBias = false, mlpBias = false, tied = false;
  bool qkvBias = false; // Qwen2-MoE: q/k/v biases by its qkv_bias field (o_proj has none)
  std::vector<std::string> layerTypes; // "sliding_attention" or "full_attention"
  std::optional<int64_t> slidingWindow;
  std::map<std::string, Rope> ropes; // by layer type ("" for all)
  std::vector<bool> ropeLayers;      // SmolLM3, Llama 4: the layers that apply RoPE (empty: all)
  // Llama 4's attention, as its reader finds it: q/k L2 norm after RoPE, the chunk of
  // chunked_attention layers, the temperature tuning of layers without RoPE.
  bool qkL2Norm = false;
  std::optional<int64_t> chunkSize;
  std::optional<std::pair<double, double>> temperature; // floor_scale, attn_scale
  // Where the language model's modules are: "model." (a *ForCausalLM), or
  // "model.language_model." (a multimodal wrapper's text model).
  std::string base = "model.";
  std::string head = "lm_head"; // the head's module (a wrapper's may be deeper)
  // What generation reads: the ids that end it, the context the model was trained for (what
  // analyze and the binary hold by default), and config.json's own plan.
  std::vector<int64_t> eos;
  std::optional<int64_t> maxPositions;
  const json *ownPlan = nullptr;
};

/// The entry of a family whose importer is `T`.
template <class T>
std::unique_ptr<Importer> make(Config &config, const Architecture &arch,
                               const StoredTypes *stored) {
  return std::make_unique<T>(config, arch, stored);
}

/// Each family's entry, for Importer.cpp's table; its importer stays private to its file.
extern const MakeImporter makeLlama, makeSmolLM3;                // LlamaFamily.cpp
extern const MakeImporter makeGemma, makeGemma2, makeGemma3;     // GemmaFamily.cpp
extern const MakeImporter makeLlama4;                            // Llama4.cpp
extern const MakeImporter makeMixtral, makeQwen3Moe, makeQwen2Moe, makeGptOss; // MoEFamily.cpp
extern const MakeImporter makeDeepseekV2;                        // DeepSeekV2.cpp

} // namespace tpc::import::detail

#endif // TPC_LIB_IMPORT_IMPORTERBASE_H
