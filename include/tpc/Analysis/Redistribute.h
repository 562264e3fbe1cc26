// The redistribution planner: the cheapest sequence of collectives and local reshards that
// turns one placement into another (DTensor's rules, multi-step where one is not enough).
#ifndef TPC_ANALYSIS_REDISTRIBUTE_H
#define TPC_ANALYSIS_REDISTRIBUTE_H

#include "tpc/Analysis/CostModel.h"
#include "tpc/Dialect/TP/TPDialect.h"

namespace tpc {

struct RedistributeStep {
  CollectiveKind kind;
  tp::PlacementAttr from, to;
};

/// The placement with its dim counted from the front (Shard(-1) of a matrix is Shard(1)).
tp::PlacementAttr normalizePlacement(tp::PlacementAttr placement, int64_t rank);

/// The plan for a tensor of rank `rank` over `tp` ranks; empty when src and dst are the same
/// placement. Every step's `from` is the previous step's `to`. Fails only for placements
/// that do not fit the rank.
mlir::FailureOr<llvm::SmallVector<RedistributeStep>>
planRedistribute(tp::PlacementAttr src, tp::PlacementAttr dst, int64_t rank, int64_t tp);

/// What a plan costs per byte of the tensor's global size (cost model units), plus a small
/// charge per step so that ties go to the shorter plan.
double planCost(llvm::ArrayRef<RedistributeStep> plan, int64_t tp);

} // namespace tpc

#endif // TPC_ANALYSIS_REDISTRIBUTE_H
