// Which kind of attention each layer has (layer_types: full, sliding, chunked) and which
// layers apply RoPE, as each config class derives them from the fields config.json gives
// (layer_types itself, sliding_window with its flags and patterns, no_rope_layers).
#include "ImporterBase.h"

namespace tpc::import::detail {

/// sliding_window, or the config class's default when config.json has no such key (a null
/// one says there is none). False after an error.
bool Importer::readSlidingWindow() {
  const json *window = c.get("sliding_window");
  if (window && (!window->is_number_integer() || window->get<int64_t>() < 1)) {
    c.error("sliding_window") << "'sliding_window' must be a positive integer or null, got "
                              << window->dump();
    return false;
  }
  if (window)
    slidingWindow = window->get<int64_t>();
  else if (arch.defaultSlidingWindow && !c.value().contains("sliding_window"))
    slidingWindow = arch.defaultSlidingWindow;
  return true;
}

bool Importer::readLayerTypes() {
  if (!readSlidingWindow())
    return false;
  layerTypes.assign(layers, "full_attention");
  if (arch.slidingNeedsFlag && !c.boolean("use_sliding_window", false))
    slidingWindow.reset();
  if (arch.slidingEveryLayer && slidingWindow)
    layerTypes.assign(layers, "sliding_attention");
  if (!arch.hasLayerTypes)
    return true;
  // Gemma2 and GPT-OSS always use their window; Qwen2 and Qwen3 only when told to.
  int64_t pattern = slidingPattern();
  bool useSliding = arch.slidingAlways || c.boolean("use_sliding_window", false);
  if (!useSliding)
    slidingWindow.reset();
  if (c.get("layer_types")) {
    if (!readLayerTypeList("sliding_attention", ""))
      return false;
  } else if (arch.slidingAlways) {
    for (int64_t i = 0; i < layers; ++i)
      layerTypes[i] = (i + 1) % pattern ? "sliding_attention" : "full_attention";
  } else if (slidingWindow) {
    int64_t from = c.integer("max_window_layers", 28, 0).value_or(28);
    for (int64_t i = from; i < layers; ++i)
      layerTypes[i] = "sliding_attention";
  }
  if (!slidingWindow)
    for (std::string &t : layerTypes)
      if (t == "sliding_attention") {
        if (arch.slidingAlways) {
          c.error("sliding_window")
              << arch.modelType << " needs a sliding_window for its sliding layers";
          return false;
        }
        t = "full_attention"; // transformers: no window, plain causal
      }
  return true;
}

/// layer_types, where config.json gives it, into layerTypes: one per layer, each `other` or
/// full_attention (what `family`'s forward knows). False after an error.
bool Importer::readLayerTypeList(const char *other, const std::string &family) {
  const json *types = c.get("layer_types");
  if (!types)
    return true;
  if (!types->is_array() || int64_t(types->size()) != layers) {
    c.error("layer_types") << "'layer_types' must list one type per layer (" << layers << ")";
    return false;
  }
  for (int64_t i = 0; i < layers; ++i) {
    const json &t = (*types)[i];
    if (t != other && t != "full_attention") {
      c.error("layer_types") << "layer type " << t.dump() << " is not supported" << family << " ("
                             << other << ", full_attention)";
      return false;
    }
    layerTypes[i] = t.get<std::string>();
  }
  return true;
}

/// no_rope_layers (1 where a layer applies RoPE) into ropeLayers; absent (or, for Llama 4,
/// empty: `emptyIsAbsent`), every no_rope_layer_interval-th layer goes without. False after
/// an error.
bool Importer::readRopeLayers(bool emptyIsAbsent) {
  ropeLayers.assign(layers, true);
  const json *list = c.get("no_rope_layers");
  c.get("no_rope_layer_interval"); // read only without a list
  if (list && !(emptyIsAbsent && list->is_array() && list->empty())) {
    if (!list->is_array() || int64_t(list->size()) != layers) {
      c.error("no_rope_layers") << "'no_rope_layers' must list 1 (RoPE) or 0 (none) for each of "
                                   "the "
                                << layers << " layers, got " << list->dump();
      return false;
    }
    for (int64_t i = 0; i < layers; ++i) {
      const json &flag = (*list)[i];
      if (flag != 0 && flag != 1 && flag != true && flag != false) {
        c.error("no_rope_layers") << "'no_rope_layers' must hold 1 (RoPE) or 0 (none), got "
                                  << flag.dump() << " for layer " << i;
        return false;
      }
      ropeLayers[i] = flag == 1 || flag == true;
    }
    return true;
  }
  int64_t interval = c.integer("no_rope_layer_interval", 4, 1, kMaxRepeats).value_or(4);
  for (int64_t i = 0; i < layers; ++i)
    ropeLayers[i] = (i + 1) % interval != 0;
  return !c.failed;
}

} // namespace tpc::import::detail
