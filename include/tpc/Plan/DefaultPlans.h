// The table of transformers 5.17's default tensor-parallel plans that `--plan auto` uses.
#ifndef TPC_PLAN_DEFAULTPLANS_H
#define TPC_PLAN_DEFAULTPLANS_H

#include "llvm/ADT/StringRef.h"

#include <nlohmann/json.hpp>

namespace tpc::plan {

/// transformers 5.17's plan for `modelType`: its config class's base_model_tp_plan (keys
/// prefixed with "model.") plus its ForCausalLM head's _tp_plan; with `expertParallel` the
/// base_model_ep_plan instead (null when the architecture has none). Null for an unknown
/// model_type.
const nlohmann::ordered_json *defaultPlan(llvm::StringRef modelType, bool expertParallel);

/// The whole table, {model_type: {"tp": plan, "ep": plan}}, for tests against transformers.
nlohmann::ordered_json defaultPlanTable();

} // namespace tpc::plan

#endif // TPC_PLAN_DEFAULTPLANS_H
