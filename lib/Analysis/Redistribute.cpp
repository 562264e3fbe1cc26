// A shortest-path planner over placements. Its edges are DTensor's single steps: P->R
// all_reduce, P->S(d) reduce_scatter, S(d)->R all_gather, S(i)->S(j) all_to_all, and the
// communication-free reshards out of Replicate and into Partial. Strided shards are states
// too, so StridedShard <-> Shard goes through Replicate, as the gather it implies.
#include "tpc/Analysis/Redistribute.h"

#include <limits>

using namespace mlir;
using namespace tpc;
using namespace tpc::tp;

PlacementAttr tpc::normalizePlacement(PlacementAttr placement, int64_t rank) {
  MLIRContext *ctx = placement.getContext();
  if (auto shard = dyn_cast<ShardAttr>(placement))
    return ShardAttr::get(ctx, normalizeDim(shard.getDim(), rank));
  if (auto strided = dyn_cast<StridedShardAttr>(placement))
    return StridedShardAttr::get(ctx, normalizeDim(strided.getDim(), rank), strided.getBlocks());
  return placement;
}

namespace {
constexpr double kStepCharge = 1e-6;

/// The single-step edges out of `from` among `states`.
SmallVector<RedistributeStep> stepsFrom(PlacementAttr from, ArrayRef<PlacementAttr> states) {
  SmallVector<RedistributeStep> steps;
  for (PlacementAttr to : states) {
    if (to == from)
      continue;
    std::optional<CollectiveKind> kind;
    if (isa<PartialAttr>(from)) {
      if (isa<ReplicateAttr>(to))
        kind = CollectiveKind::AllReduce;
      else if (isa<ShardAttr, StridedShardAttr>(to))
        kind = CollectiveKind::ReduceScatter;
    } else if (isa<ReplicateAttr>(from)) {
      kind = CollectiveKind::Local; // keep this rank's chunk, or rank 0's copy for Partial
    } else { // Shard or StridedShard
      if (isa<ReplicateAttr>(to))
        kind = CollectiveKind::AllGather;
      else if (isa<PartialAttr>(to))
        kind = CollectiveKind::Local; // this rank's chunk in place, zeros elsewhere
      else if (isa<ShardAttr>(from) && isa<ShardAttr>(to))
        kind = CollectiveKind::AllToAll;
    }
    if (kind)
      steps.push_back({*kind, from, to});
  }
  return steps;
}
} // namespace

double tpc::planCost(ArrayRef<RedistributeStep> plan, int64_t tp) {
  double cost = 0;
  for (const RedistributeStep &step : plan)
    cost += sentBytes(step.kind, wireBytes(step.kind, 1.0, tp), tp) + kStepCharge;
  return cost;
}

FailureOr<SmallVector<RedistributeStep>>
tpc::planRedistribute(PlacementAttr src, PlacementAttr dst, int64_t rank, int64_t tp) {
  MLIRContext *ctx = src.getContext();
  src = normalizePlacement(src, rank);
  dst = normalizePlacement(dst, rank);
  for (PlacementAttr p : {src, dst}) {
    if (auto shard = dyn_cast<ShardAttr>(p); shard && shard.getDim() < 0)
      return failure();
    if (auto strided = dyn_cast<StridedShardAttr>(p); strided && strided.getDim() < 0)
      return failure();
  }
  if (src == dst)
    return SmallVector<RedistributeStep>();

  // The states: Replicate, Partial, Shard of every dim, and the strided shards in play.
  SmallVector<PlacementAttr> states = {ReplicateAttr::get(ctx),
                                       PartialAttr::get(ctx, ReduceKind::sum)};
  for (int64_t d = 0; d < rank; ++d)
    states.push_back(ShardAttr::get(ctx, d));
  for (PlacementAttr p : {src, dst})
    if (isa<StridedShardAttr>(p) && !llvm::is_contained(states, p))
      states.push_back(p);

  // Dijkstra on a handful of states: a linear scan for the next one is plenty.
  size_t n = states.size();
  std::vector<double> dist(n, std::numeric_limits<double>::infinity());
  std::vector<std::optional<RedistributeStep>> via(n);
  std::vector<bool> done(n, false);
  auto indexOf = [&](PlacementAttr p) { return llvm::find(states, p) - states.begin(); };
  dist[indexOf(src)] = 0;
  for (size_t iter = 0; iter < n; ++iter) {
    size_t best = n;
    for (size_t i = 0; i < n; ++i)
      if (!done[i] && (best == n || dist[i] < dist[best]))
        best = i;
    if (best == n || std::isinf(dist[best]))
      break;
    done[best] = true;
    for (const RedistributeStep &step : stepsFrom(states[best], states)) {
      size_t to = indexOf(step.to);
      double d = dist[best] + planCost(step, tp);
      if (d < dist[to]) {
        dist[to] = d;
        via[to] = step;
      }
    }
  }
  size_t target = indexOf(dst);
  if (!via[target])
    return failure();
  SmallVector<RedistributeStep> plan;
  for (size_t at = target; via[at]; at = indexOf(via[at]->from))
    plan.push_back(*via[at]);
  std::reverse(plan.begin(), plan.end());
  return plan;
}
