// The model description an emitted program's main() builds, call by call (tpcrt/model.h,
// declared from tpcrt/calls.def), whatever its target.
#include "tpcrt/model.h"

namespace tpcrt {

ModelSpec *newSpec(const char *name, int64_t tp, int64_t vocab, int64_t arenaPerToken,
                   bool lastTokenOnly) {
  // One model per program; static, so it outlives main's return and leaks nothing.
  static ModelSpec spec{};
  spec.name = name;
  spec.tp = tp;
  spec.vocab = vocab;
  spec.floatsPerToken = arenaPerToken;
  spec.lastTokenOnly = lastTokenOnly;
  return &spec;
}

void addParam(ModelSpec *spec, const char *name, std::vector<int64_t> hfShape, SliceSpec slice,
              std::vector<std::string> sources, DType dtype) {
  spec->params.push_back({name, std::move(hfShape), std::move(slice), std::move(sources), dtype});
}

void addKvCache(ModelSpec *spec, int64_t width, int64_t valueWidth, int64_t stage, int64_t window,
                int64_t chunk) {
  spec->kvWidths.push_back(width);
  spec->kvValueWidths.push_back(valueWidth ? valueWidth : width);
  spec->kvStages.push_back(stage);
  spec->kvReaches.push_back({window, chunk});
}

void setPipeline(ModelSpec *spec, int64_t stages) { spec->stages = stages; }
void setLogitsFrom(ModelSpec *spec, int64_t stage, const char *module) {
  spec->logitsStage = stage;
  spec->logitsModule = module ? module : "";
}
void setParamStages(ModelSpec *spec, int64_t param, std::vector<int64_t> stages) {
  if (spec->paramStages.size() <= size_t(param))
    spec->paramStages.resize(size_t(param) + 1);
  spec->paramStages[size_t(param)] = std::move(stages);
}

void addEosId(ModelSpec *spec, int64_t id) { spec->eosIds.push_back(id); }

void setMaxPositions(ModelSpec *spec, int64_t positions) { spec->maxPositions = positions; }
void setSequenceParallelTokens(ModelSpec *spec, int64_t tokens) {
  spec->sequenceParallelTokens = tokens;
}
void setVariableGathers(ModelSpec *spec, bool variable) { spec->variableGathers = variable; }
void setKvBlockSize(ModelSpec *spec, int64_t tokens) { spec->kvBlockSize = tokens; }
void setArgmaxOnRanks(ModelSpec *spec, bool onRanks) { spec->argmaxOnRanks = onRanks; }

} // namespace tpcrt
