// The sharding pipeline as tpc runs it in-process (design.md, "Pipeline").
#ifndef TPC_TRANSFORMS_PIPELINE_H
#define TPC_TRANSFORMS_PIPELINE_H

#include "mlir/Pass/PassManager.h"

#include <string>

namespace tpc {

struct ShardingOptions {
  std::string planPath;
  std::string strategiesPath;
  int64_t tpSize = 1;
  std::string sequenceParallel = "auto"; // auto, on or off
};

/// tp-last-token, tp-propagate-layouts, tp-insert-redistribute, tp-fold-redistribute and
/// tp-lower-redistribute, on a module the plan has been applied to: the graph with every
/// collective explicit, shapes still global.
/// `fold` false leaves out tp-fold-redistribute (to see or run what folding removes).
void buildCollectivesPipeline(mlir::OpPassManager &pm, llvm::StringRef sequenceParallel,
                              bool fold = true);

/// tp-apply-plan, the collectives pipeline and tp-partition: what each rank runs.
void buildShardingPipeline(mlir::OpPassManager &pm, const ShardingOptions &options);

} // namespace tpc

#endif // TPC_TRANSFORMS_PIPELINE_H
