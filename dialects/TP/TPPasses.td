// Passes of the tpc pipeline (design.md, "Pipeline"), each runnable alone in tpc-opt.
#ifndef TPC_TP_PASSES_TD
#define TPC_TP_PASSES_TD

include "mlir/Pass/PassBase.td"

def TPApplyPlan : Pass<"tp-apply-plan", "::mlir::ModuleOp"> {
  let summary = "Match a tp_plan's rules, place parameters and attach module strategies";
  let description = [{
    Reads a transformers-style plan (`{pattern: strategy}`, or a config.json carrying
    `base_model_tp_plan`), matches its rules against the module's parameters and HF modules
    with transformers' rules, and records the outcome in the IR: each `tp.param` gets its
    `placement` and `strategy`, each layer op of a planned module a `tp.strategy` attribute
    with the layouts the strategy imposes, and the module its `tp.mesh`. Unknown strategies,
    impossible placements and a tp size below 1 are errors; rules that match nothing and
    parameters no rule covers are warnings.
  }];
  let dependentDialects = ["::tpc::tp::TPDialect"];
  let options = [
    Option<"planPath", "plan", "std::string", /*default=*/"\"\"",
           "plan.json, or a config.json with base_model_tp_plan">,
    Option<"strategiesPath", "strategies", "std::string", /*default=*/"\"\"",
           "a JSON file of custom strategies">,
    Option<"tpSize", "tp-size", "int64_t", /*default=*/"0",
           "ranks on the tp axis (0: keep the module's tp.mesh)">,
  ];
}

#endif // TPC_TP_PASSES_TD
