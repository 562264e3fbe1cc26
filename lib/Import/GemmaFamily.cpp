// Gemma 1, 2 and 3: norms that scale by (1 + w), embeddings scaled by sqrt(hidden); from
// Gemma 2 on, norms around attention and MLP, a query scale and logit softcaps; Gemma 3's
// own RoPE for its sliding (local) layers and its layer pattern.
#include "ImporterBase.h"

#include <cmath>

namespace tpc::import::detail {

namespace {

class Gemma : public Importer {
public:
  using Importer::Importer;

private:
  std::string embed() override {
    std::string h = Importer::embed();
    // transformers multiplies by sqrt(hidden) rounded to the activations' dtype
    return w.op("h0_scaled", "scale", base.substr(0, base.size() - 1), {h},
                "factor = " + f64(float(std::sqrt(double(hidden)))), w.act(hidden));
  }
};

class Gemma2 : public Gemma {
public:
  using Gemma::Gemma;

private:
  bool readFamily() override {
    attnScale = std::pow(c.number("query_pre_attn_scalar", 256).value_or(256), -0.5);
    attnSoftcap = c.number("attn_logit_softcapping", std::nullopt);
    finalSoftcap = c.number("final_logit_softcapping", std::nullopt);
    if (wrapper && finalSoftcap) { // only Gemma3ForCausalLM's forward caps
      emitWarning(c.keyLoc({"final_logit_softcapping"}))
          << "final_logit_softcapping is not applied by " << wrapper->className
          << " (transformers 5.17 caps only in " << arch.causalLM << "); ignored, as there";
      finalSoftcap.reset();
    }
    return true;
  }
};

class Gemma3 : public Gemma2 {
public:
  using Gemma2::Gemma2;

private:
  // Gemma 3 without layer_types: every sliding_window_pattern-th layer global, as
  // Gemma3TextConfig makes them (the field is only read then, and is no field of the class).
  int64_t slidingPattern() override { return c.integer("sliding_window_pattern", 6).value_or(6); }

  // Gemma3TextConfig: global layers take rope_theta (default 1e6) and a legacy rope_scaling,
  // local ones rope_local_base_freq (default 1e4); a rope_parameters is keyed by type.
  bool readRopes(const json *parameters, const std::string &where, bool perType) override {
    if (where == "rope_parameters" && !perType) {
      c.error(where) << "Gemma 3's rope_parameters must be keyed by layer type "
                        "(full_attention, sliding_attention)";
      return false;
    }
    std::optional<double> global = c.number("rope_theta", 1e6),
                          local = c.number("rope_local_base_freq", 1e4);
    if (c.failed)
      return false;
    for (const std::string &type : layerTypes) {
      if (ropes.count(type))
        continue;
      const json *own = nullptr;
      if (perType)
        if (auto it = parameters->find(type); it != parameters->end() && !it->is_null())
          own = &*it;
      if (!perType && type == "full_attention")
        own = parameters; // rope_scaling
      std::optional<Rope> rope =
          readRope(own, where, perType ? type : "", type == "full_attention" ? global : local);
      if (!rope)
        return false;
      ropes[type] = *rope;
    }
    return true;
  }
};

} // namespace

const MakeImporter makeGemma = make<Gemma>, makeGemma2 = make<Gemma2>, makeGemma3 = make<Gemma3>;

} // namespace tpc::import::detail
