// The redistribution planner: a correct plan for every (source, target) pair, and the
// single-collective plans DTensor uses where one suffices.
#include "tpc/Analysis/Redistribute.h"

#include "mlir/IR/MLIRContext.h"

#include <gtest/gtest.h>

using namespace tpc;
using namespace tpc::tp;
using llvm::isa;

namespace {

class Planner : public ::testing::Test {
protected:
  Planner() { context.loadDialect<TPDialect>(); }

  PlacementAttr R() { return ReplicateAttr::get(&context); }
  PlacementAttr P() { return PartialAttr::get(&context, ReduceKind::sum); }
  PlacementAttr S(int64_t d) { return ShardAttr::get(&context, d); }
  PlacementAttr SS(int64_t d) { return StridedShardAttr::get(&context, d, {64, 32, 32}); }

  /// Whether one step may go from `from` to `to` by `kind` (DTensor's single steps).
  static bool legal(const RedistributeStep &s) {
    switch (s.kind) {
    case CollectiveKind::AllReduce: return isa<PartialAttr>(s.from) && isa<ReplicateAttr>(s.to);
    case CollectiveKind::ReduceScatter:
      return isa<PartialAttr>(s.from) && isa<ShardAttr, StridedShardAttr>(s.to);
    case CollectiveKind::AllGather:
      return isa<ShardAttr, StridedShardAttr>(s.from) && isa<ReplicateAttr>(s.to);
    case CollectiveKind::AllToAll: return isa<ShardAttr>(s.from) && isa<ShardAttr>(s.to);
    case CollectiveKind::Local:
      return isa<ReplicateAttr>(s.from) ||
             (isa<ShardAttr, StridedShardAttr>(s.from) && isa<PartialAttr>(s.to));
    case CollectiveKind::Send:
    case CollectiveKind::Recv: return false; // between stages, never a redistribution's step
    }
    return false;
  }

  mlir::MLIRContext context;
};

TEST_F(Planner, EveryPairHasAConnectedLegalPlan) {
  std::vector<PlacementAttr> all = {R(), P(), S(0), S(1), S(-1), SS(1), SS(0)};
  for (int64_t tp : {2, 3, 4, 8})
    for (PlacementAttr src : all)
      for (PlacementAttr dst : all) {
        auto plan = planRedistribute(src, dst, /*rank=*/2, tp);
        ASSERT_TRUE(succeeded(plan)) << src.str() << " -> " << dst.str();
        if (samePlacement(src, dst, 2)) {
          EXPECT_TRUE(plan->empty()) << src.str();
          continue;
        }
        ASSERT_FALSE(plan->empty()) << src.str() << " -> " << dst.str();
        EXPECT_EQ(plan->front().from, normalizePlacement(src, 2));
        EXPECT_EQ(plan->back().to, normalizePlacement(dst, 2));
        for (size_t i = 0; i < plan->size(); ++i) {
          EXPECT_TRUE(legal((*plan)[i])) << src.str() << " -> " << dst.str() << " step " << i;
          if (i) {
            EXPECT_EQ((*plan)[i].from, (*plan)[i - 1].to);
          }
        }
        EXPECT_LE(plan->size(), 3u);
      }
}

TEST_F(Planner, OneCollectiveWhereOneSuffices) {
  auto single = [&](PlacementAttr src, PlacementAttr dst, CollectiveKind kind) {
    auto plan = planRedistribute(src, dst, 2, 4);
    ASSERT_TRUE(succeeded(plan));
    ASSERT_EQ(plan->size(), 1u) << src.str() << " -> " << dst.str();
    EXPECT_EQ(plan->front().kind, kind);
  };
  single(P(), R(), CollectiveKind::AllReduce);
  single(P(), S(0), CollectiveKind::ReduceScatter);        // not all_reduce + slice
  single(P(), SS(1), CollectiveKind::ReduceScatter);
  single(S(1), R(), CollectiveKind::AllGather);
  single(SS(1), R(), CollectiveKind::AllGather);
  single(S(0), S(1), CollectiveKind::AllToAll);            // not all_gather + slice
  single(R(), S(1), CollectiveKind::Local);
  single(R(), P(), CollectiveKind::Local);
  single(S(1), P(), CollectiveKind::Local);
}

TEST_F(Planner, StridedToShardTakesTwoStepsAtTheCostOfOneGather) {
  // Gather then slice, or the chunks in place then reduce_scatter: the same traffic.
  auto plan = planRedistribute(SS(1), S(1), 2, 4);
  ASSERT_TRUE(succeeded(plan));
  ASSERT_EQ(plan->size(), 2u);
  RedistributeStep gather{CollectiveKind::AllGather, SS(1), R()};
  RedistributeStep slice{CollectiveKind::Local, R(), S(1)};
  EXPECT_DOUBLE_EQ(planCost(*plan, 4), planCost({gather, slice}, 4));
}

TEST_F(Planner, RefusesDimsOutsideTheTensor) {
  EXPECT_TRUE(failed(planRedistribute(S(2), R(), 2, 4)));
  EXPECT_TRUE(failed(planRedistribute(R(), S(-3), 2, 4)));
}

TEST(CostModel, RingTraffic) {
  EXPECT_DOUBLE_EQ(sentBytes(CollectiveKind::AllReduce, 1024, 4), 1536);
  EXPECT_DOUBLE_EQ(sentBytes(CollectiveKind::AllGather, 1024, 4), 768);
  EXPECT_DOUBLE_EQ(sentBytes(CollectiveKind::ReduceScatter, 1024, 4), 768);
  EXPECT_DOUBLE_EQ(sentBytes(CollectiveKind::AllToAll, 1024, 4), 768);
  // An all_to_all hands its communicator one rank's shard: (n-1)/n^2 of the whole tensor.
  EXPECT_DOUBLE_EQ(wireBytes(CollectiveKind::AllToAll, 1024, 4), 256);
  EXPECT_DOUBLE_EQ(sentBytes(CollectiveKind::AllToAll, wireBytes(CollectiveKind::AllToAll, 1024, 4), 4), 192);
  EXPECT_DOUBLE_EQ(wireBytes(CollectiveKind::AllGather, 1024, 4), 1024);
  EXPECT_DOUBLE_EQ(sentBytes(CollectiveKind::Local, 1024, 4), 0);
  EXPECT_DOUBLE_EQ(sentBytes(CollectiveKind::AllReduce, 1024, 1), 0);
}

} // namespace
