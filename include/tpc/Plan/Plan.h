// Reading a tp_plan and applying it to a tp module: which rule places each parameter, which
// strategy each module gets, and the diagnostics transformers would give (and more).
#ifndef TPC_PLAN_PLAN_H
#define TPC_PLAN_PLAN_H

#include "tpc/Dialect/TP/TPDialect.h"

#include "llvm/Support/raw_ostream.h"

#include <string>
#include <vector>

namespace tpc::plan {

/// One `pattern: strategy` entry of a plan.
struct PlanRule {
  std::string pattern;
  std::string strategy;
  mlir::Location loc; // where the key was written
  /// A rule of transformers' plan for a whole architecture (--plan auto): it may name
  /// modules this model does not have (Qwen3-MoE's dense MLP when every layer has experts).
  bool fromTable = false;
};

/// Reads a flat plan (`{pattern: strategy}`, byte-compatible with transformers) or a HF
/// config.json carrying `base_model_tp_plan` (whose keys get `model.`). Malformed files and
/// non-string strategies are errors; duplicate keys warn (the later one wins, as in Python).
mlir::FailureOr<std::vector<PlanRule>> readPlan(llvm::StringRef path, mlir::MLIRContext *context);

/// The plan transformers 5.17 would use for a model `tpc import` wrote (`--plan auto`, or
/// `auto-ep` for its expert-parallel plan): config.json's base_model_tp_plan when it had one,
/// else the table's; `model.embed_tokens: embedding_rowwise` added for tied embeddings.
/// `description` (when given) says which plan that was.
mlir::FailureOr<std::vector<PlanRule>> autoPlan(mlir::ModuleOp module, bool expertParallel,
                                                std::string *description = nullptr);

struct PlanOptions {
  std::string planPath;
  std::string strategiesPath;
  /// Ranks on the tp axis; 0 keeps the module's tp.mesh.
  int64_t tpSize = 0;
  /// Pipeline stages (the pp axis); 0 keeps the module's tp.mesh, or 1 where it has none.
  int64_t ppSize = 0;
};

/// What applying a plan decided, for `tpc check --print-plan`.
struct PlanReport {
  struct Rule {
    std::string pattern, strategy;
    std::vector<std::string> modules, params; // what it matched
  };
  struct Param {
    std::string name;
    mlir::RankedTensorType type;
    tp::PlacementAttr placement;
    std::string strategy; // "" when no rule covers it
    std::string rule;     // the pattern that decided
    std::string via;      // "parameter key", "module key", "used by <module>"
    /// What each rank holds, padding left out, once the program is built (its shard
    /// descriptors: whole heads per rank where tp does not divide them); empty before, and
    /// the table shows the placement's torch.chunk pieces.
    std::vector<llvm::SmallVector<int64_t>> held;
  };
  std::string planPath;
  int64_t tpSize = 1;
  std::vector<Rule> rules;
  std::vector<Param> params;

  void print(llvm::raw_ostream &os) const;
};

/// Applies a plan to `module`: places every tp.param, attaches `tp.strategy` to the layer ops
/// of planned modules and sets the module's tp.mesh. Emits its diagnostics when done, a fault
/// repeated in every layer once (RepeatedDiagnosticHandler); fails when any was an error.
mlir::FailureOr<PlanReport> applyPlan(mlir::ModuleOp module, const PlanOptions &options);

/// Whether the applied plan names sequence_parallel for some module.
bool namesSequenceParallel(mlir::ModuleOp planned);

/// The per-rank size of a dim of `size` split torch.chunk-style over `tp` ranks.
int64_t chunkSize(int64_t size, int64_t tp, int64_t rank);

} // namespace tpc::plan

#endif // TPC_PLAN_PLAN_H
