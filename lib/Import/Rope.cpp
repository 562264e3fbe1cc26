// RoPE as config.json describes it (rope_parameters, or the older rope_scaling): theta and,
// where a scaling changes them, the inverse frequencies, computed here in float32 as
// transformers' modeling_rope_utils does, so the model rotates by exactly its numbers.
#include "ImporterBase.h"

#include "llvm/Support/FormatVariadic.h"

#include <algorithm>
#include <cmath>

using namespace mlir;

namespace tpc::import {

double yarnGetMscale(double scale, double mscale) {
  return scale <= 1 ? 1.0 : 0.1 * mscale * std::log(scale) + 1.0;
}

namespace detail {

namespace {

/// llama3's frequency scaling, in float32 as transformers computes it.
std::vector<double> llama3InvFreq(double theta, int64_t headDim, double factor, double low,
                                  double high, double original) {
  std::vector<double> out;
  const float pi = 3.14159265358979323846f;
  for (int64_t i = 0; i < headDim; i += 2) {
    float exponent = float(i) / float(headDim);
    float inv = 1.0f / std::pow(float(theta), exponent);
    float wavelen = 2 * pi / inv;
    float lowWavelen = float(original / low), highWavelen = float(original / high);
    float scaled = wavelen > lowWavelen ? inv / float(factor) : inv;
    if (!(wavelen < highWavelen) && !(wavelen > lowWavelen)) {
      float smooth = (float(original) / wavelen - float(low)) / float(high - low);
      scaled = (1 - smooth) * scaled / float(factor) + smooth * scaled;
    }
    out.push_back(scaled);
  }
  return out;
}

/// YaRN's inverse frequencies, in float32 where transformers' _compute_yarn_parameters
/// computes in float32 (the correction range in double, as Python computes it).
std::vector<double> yarnInvFreq(double theta, int64_t dim, double factor, double betaFast,
                                double betaSlow, double original, bool truncate) {
  const double pi = 3.14159265358979323846;
  auto correctionDim = [&](double rotations) {
    return (double(dim) * std::log(original / (rotations * 2 * pi))) / (2 * std::log(theta));
  };
  double low = correctionDim(betaFast), high = correctionDim(betaSlow);
  if (truncate) {
    low = std::floor(low);
    high = std::ceil(high);
  }
  low = std::max(low, 0.0);
  high = std::min(high, double(dim - 1));
  if (low == high)
    high += 0.001; // transformers: prevents a division by zero
  std::vector<double> out;
  for (int64_t i = 0; i < dim / 2; ++i) {
    float pos = std::pow(float(theta), float(2 * i) / float(dim));
    float extrapolation = 1.0f / pos, interpolation = 1.0f / (float(factor) * pos);
    float ramp = (float(i) - float(low)) / float(high - low);
    ramp = std::min(std::max(ramp, 0.0f), 1.0f);
    float extrapolationFactor = 1.0f - ramp;
    float a = interpolation * (1.0f - extrapolationFactor);
    float b = extrapolation * extrapolationFactor;
    out.push_back(a + b);
  }
  return out;
}

} // namespace

std::optional<Rope> Importer::readRope(const json *parameters, const std::string &where,
                                       const std::string &layerType, std::optional<double> theta) {
  Rope rope;
  rope.theta = arch.defaultTheta;
  if (theta)
    rope.theta = *theta;
  else if (const json *top = c.get("rope_theta"); top && top->is_number())
    rope.theta = top->get<double>();
  std::string type = "default";
  if (parameters) {
    if (!parameters->is_object()) {
      c.error(where) << "'" << where << "' must be an object, got " << parameters->dump();
      return std::nullopt;
    }
    auto field = [&](const char *key) -> const json * {
      auto it = parameters->find(key);
      return it == parameters->end() || it->is_null() ? nullptr : &*it;
    };
    if (const json *t = field("rope_type") ? field("rope_type") : field("type"))
      type = t->is_string() ? t->get<std::string>() : "?";
    if (const json *theta = field("rope_theta")) {
      if (!theta->is_number()) {
        c.error(where) << "rope_theta must be a number, got " << theta->dump();
        return std::nullopt;
      }
      rope.theta = theta->get<double>();
    }
    if (const json *partial = field("partial_rotary_factor");
        partial && (!partial->is_number() || partial->get<double>() != 1.0)) {
      c.error(where) << "partial_rotary_factor " << partial->dump()
                     << " is not supported (tpc rotates whole heads)";
      return std::nullopt;
    }
    if (type == "llama3") {
      double values[4];
      const char *keys[] = {"factor", "low_freq_factor", "high_freq_factor",
                            "original_max_position_embeddings"};
      for (int i = 0; i < 4; ++i) {
        const json *v = field(keys[i]);
        if (i == 3 && !v)
          v = c.get("original_max_position_embeddings") ? c.get("original_max_position_embeddings")
                                                        : c.get("max_position_embeddings");
        if (!v || !v->is_number()) {
          c.error(where) << "llama3 RoPE scaling needs '" << keys[i] << "'";
          return std::nullopt;
        }
        values[i] = v->get<double>();
      }
      // What makes the formula divide by zero or go negative (found by scripts/fuzz.sh: a
      // factor of 0 gave infinite frequencies, which no model.mlir can hold).
      const char *problem = nullptr;
      if (!(rope.theta > 0))
        problem = "rope_theta must be positive";
      else if (!(values[0] > 0))
        problem = "llama3 RoPE scaling needs a positive 'factor'";
      // Equal factors leave no band to smooth (Llama 4 Scout's 1 and 1); transformers only
      // warns about inverted ones, which describe no band either, and are refused here.
      else if (!(values[1] > 0) || !(values[2] >= values[1]))
        problem = "llama3 RoPE scaling needs 0 < 'low_freq_factor' <= 'high_freq_factor'";
      else if (!(values[3] > 0))
        problem = "llama3 RoPE scaling needs a positive 'original_max_position_embeddings'";
      if (problem) {
        c.error(where) << problem;
        return std::nullopt;
      }
      rope.invFreq =
          llama3InvFreq(rope.theta, rotaryDim(), values[0], values[1], values[2], values[3]);
      for (double f : rope.invFreq)
        if (!std::isfinite(f) || f <= 0) {
          c.error(where) << "llama3 RoPE scaling gives a frequency of " << f;
          return std::nullopt;
        }
      return rope;
    }
    if (type == "freq_factors") { // a GGUF file's rope_freqs (runtime/weights/gguf_model.cpp)
      const json *factors = field("freq_factors");
      int64_t pairs = rotaryDim() / 2;
      if (!factors || !factors->is_array() || int64_t(factors->size()) != pairs) {
        c.error(where) << "freq_factors RoPE needs 'freq_factors', one for each of the "
                       << pairs << " pairs of a head's rotated dimensions";
        return std::nullopt;
      }
      if (!(rope.theta > 0)) {
        c.error(where) << "rope_theta must be positive";
        return std::nullopt;
      }
      // As llama.cpp's rope: the default frequency of each pair (in float32) divided by its
      // factor.
      for (int64_t i = 0; i < pairs; ++i) {
        const json &f = (*factors)[size_t(i)];
        if (!f.is_number() || !(f.get<double>() > 0) || !std::isfinite(f.get<double>())) {
          c.error(where) << "freq_factors RoPE needs positive factors, got " << f.dump();
          return std::nullopt;
        }
        rope.invFreq.push_back(1.0f / std::pow(float(rope.theta), float(2 * i) /
                                                                      float(rotaryDim())) /
                               float(f.get<double>()));
      }
      return rope;
    }
    if (type == "yarn")
      return readYarn(rope, *parameters, where, layerType);
    if (type == "linear") { // positions divided by factor: the default frequencies / factor
      const json *factor = field("factor");
      if (!factor || !factor->is_number() || !(factor->get<double>() > 0)) {
        c.error(where) << "linear RoPE scaling needs a positive 'factor'"
                       << (factor ? ", got " + factor->dump() : std::string());
        return std::nullopt;
      }
      if (!(rope.theta > 0)) {
        c.error(where) << "rope_theta must be positive";
        return std::nullopt;
      }
      // In float32, as _compute_linear_scaling_rope_parameters computes them.
      for (int64_t i = 0; i < headDim; i += 2)
        rope.invFreq.push_back(1.0f / std::pow(float(rope.theta), float(i) / float(headDim)) /
                               float(factor->get<double>()));
      return rope;
    }
  }
  if (type != "default") {
    c.error(where) << "RoPE type '" << type
                   << "' is not supported (default, linear, llama3, yarn and GGUF's freq_factors "
                      "are); it changes the "
                      "frequencies";
    return std::nullopt;
  }
  if (rope.theta <= 0) {
    c.error(where) << "rope_theta must be positive";
    return std::nullopt;
  }
  return rope;
}

std::optional<Rope> Importer::readYarn(Rope rope, const json &parameters, const std::string &where,
                                       const std::string &layerType) {
  // As transformers' _compute_yarn_parameters; an error points at the field's own line.
  std::vector<std::string> at = {where};
  if (!layerType.empty())
    at.push_back(layerType);
  auto fail = [&](const std::string &key) {
    c.failed = true;
    std::vector<std::string> path = at;
    path.push_back(key);
    return emitError(c.keyLoc(path)) << "yarn RoPE scaling: ";
  };
  auto number = [&](const std::string &key) -> std::optional<double> {
    auto it = parameters.find(key);
    if (it == parameters.end() || it->is_null())
      return std::nullopt;
    if (!it->is_number()) {
      fail(key) << "'" << key << "' must be a number, got " << it->dump();
      return std::nullopt;
    }
    return it->get<double>();
  };
  // standardize_rope_params: a top-level original_max_position_embeddings wins (one RoPE for
  // every layer), else the rope's own, else max_position_embeddings.
  std::optional<double> original;
  if (layerType.empty() && c.get("original_max_position_embeddings")) {
    const json *v = c.get("original_max_position_embeddings");
    if (!v->is_number() || !(v->get<double>() > 0)) {
      c.error("original_max_position_embeddings")
          << "'original_max_position_embeddings' must be a positive number, got " << v->dump();
      return std::nullopt;
    }
    original = v->get<double>();
  } else {
    original = number("original_max_position_embeddings");
    if (c.failed)
      return std::nullopt;
    if (!original) {
      const json *v = c.get("max_position_embeddings");
      if (!v || !v->is_number()) {
        c.error(where) << "yarn RoPE scaling needs 'original_max_position_embeddings' (or the "
                          "config's max_position_embeddings)";
        return std::nullopt;
      }
      original = v->get<double>();
    }
    if (!(*original > 0)) {
      fail("original_max_position_embeddings")
          << "'original_max_position_embeddings' must be positive, got " << *original;
      return std::nullopt;
    }
  }
  std::optional<double> factor = number("factor"), attentionFactor = number("attention_factor"),
                        mscale = number("mscale"), mscaleAllDim = number("mscale_all_dim"),
                        betaFast = number("beta_fast"), betaSlow = number("beta_slow");
  if (c.failed)
    return std::nullopt;
  if (!factor) { // DeepSeek-V3's convention: the ratio of the two context lengths
    const json *v = c.get("max_position_embeddings");
    if (!v || !v->is_number()) {
      c.error(where) << "yarn RoPE scaling needs 'factor' (or the config's "
                        "max_position_embeddings)";
      return std::nullopt;
    }
    factor = v->get<double>() / *original;
  }
  if (!(*factor > 0)) {
    fail("factor") << "'factor' must be positive, got " << *factor;
    return std::nullopt;
  }
  if (attentionFactor && !(*attentionFactor > 0)) {
    fail("attention_factor") << "'attention_factor' must be positive, got " << *attentionFactor;
    return std::nullopt;
  }
  // Python's `x or default`: 0 counts as absent.
  double fast = betaFast && *betaFast != 0 ? *betaFast : 32;
  double slow = betaSlow && *betaSlow != 0 ? *betaSlow : 1;
  for (auto [key, value] : {std::pair("beta_fast", fast), std::pair("beta_slow", slow)})
    if (!(value > 0)) {
      fail(key) << "'" << key << "' must be positive, got " << value;
      return std::nullopt;
    }
  if (!(rope.theta > 0) || rope.theta == 1) {
    c.error(where) << "yarn RoPE scaling needs a rope_theta that is positive and not 1";
    return std::nullopt;
  }
  // transformers reads truncate from config.rope_parameters itself: with a rope per layer
  // type that is the outer object, which has no 'truncate', so it is true.
  bool truncate = true;
  if (layerType.empty())
    if (auto it = parameters.find("truncate"); it != parameters.end() && !it->is_null()) {
      if (!it->is_boolean()) {
        fail("truncate") << "'truncate' must be true or false, got " << it->dump();
        return std::nullopt;
      }
      truncate = it->get<bool>();
    }
  if (attentionFactor)
    rope.scaling = *attentionFactor;
  else if (mscale && *mscale != 0 && mscaleAllDim && *mscaleAllDim != 0)
    rope.scaling = yarnGetMscale(*factor, *mscale) / yarnGetMscale(*factor, *mscaleAllDim);
  else
    rope.scaling = yarnGetMscale(*factor);
  rope.invFreq = yarnInvFreq(rope.theta, rotaryDim(), *factor, fast, slow, *original, truncate);
  for (double f : rope.invFreq)
    if (!std::isfinite(f) || f <= 0) {
      c.error(where) << "yarn RoPE scaling gives a frequency of " << f;
      return std::nullopt;
    }
  if (!std::isfinite(rope.scaling) || rope.scaling <= 0) {
    c.error(where) << "yarn RoPE scaling gives an attention factor of " << rope.scaling;
    return std::nullopt;
  }
  return rope;
}

bool Importer::readRopes(const json *parameters, const std::string &where, bool perType) {
  if (!perType) {
    std::optional<Rope> rope = readRope(parameters, where);
    if (!rope)
      return false;
    ropes[""] = *rope;
    return true;
  }
  for (const std::string &type : layerTypes) {
    if (ropes.count(type))
      continue;
    auto it = parameters->find(type);
    std::optional<Rope> rope =
        readRope(it == parameters->end() || it->is_null() ? nullptr : &*it, where, type);
    if (!rope)
      return false;
    ropes[type] = *rope;
  }
  return true;
}

std::string frequencyAttrs(const Rope &rope) {
  std::string attrs;
  if (!rope.invFreq.empty()) {
    attrs += ", inv_freq = array<f64: ";
    for (size_t j = 0; j < rope.invFreq.size(); ++j)
      attrs += (j ? ", " : "") + llvm::formatv("{0:e17}", rope.invFreq[j]).str();
    attrs += ">";
  }
  if (rope.scaling != 1.0)
    attrs += ", scaling = " + f64(rope.scaling);
  return attrs;
}

const Rope &Importer::ropeOf(int64_t i) const {
  const std::string &type = layerTypes[i];
  return ropes.count(type) ? ropes.at(type) : ropes.at("");
}

} // namespace detail
} // namespace tpc::import
