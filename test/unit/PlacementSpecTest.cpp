// The placement-spec parser that both built-in and custom strategies go through.
#include "tpc/Plan/Strategy.h"

#include <gtest/gtest.h>

using namespace tpc::plan;
using Kind = PlacementSpec::Kind;

namespace {
std::optional<PlacementSpec> parse(llvm::StringRef text) {
  std::string error;
  return PlacementSpec::parse(text, error);
}
} // namespace

TEST(PlacementSpec, DTensorSpellings) {
  EXPECT_EQ(parse("Replicate()")->kind, Kind::Replicate);
  EXPECT_EQ(parse("replicate")->kind, Kind::Replicate);
  EXPECT_EQ(parse("Partial()")->kind, Kind::Partial);
  EXPECT_EQ(parse("Partial(sum)")->kind, Kind::Partial);
  auto shard = parse("Shard(-2)");
  ASSERT_TRUE(shard);
  EXPECT_EQ(shard->kind, Kind::Shard);
  EXPECT_EQ(shard->dim, -2);
  auto strided = parse("_StridedShard(-1, 2)");
  ASSERT_TRUE(strided);
  EXPECT_EQ(strided->kind, Kind::StridedShard);
  EXPECT_EQ(strided->equalBlocks, 2);
  auto qkv = parse("StridedShard(-2, [64, 16, 16])");
  ASSERT_TRUE(qkv);
  EXPECT_EQ(qkv->blockSizes, (std::vector<int64_t>{64, 16, 16}));
}

TEST(PlacementSpec, RoundTripsThroughStr) {
  for (const char *text : {"Replicate()", "Partial(sum)", "Shard(1)", "StridedShard(-2, 2)",
                           "StridedShard(0, [8, 4, 4])"})
    EXPECT_EQ(parse(text)->str(), text);
}

TEST(PlacementSpec, RejectsMalformed) {
  for (const char *text : {"", "Shard", "Shard()", "Shard(x)", "Shard(1", "Shard(1) x",
                           "StridedShard(0)", "StridedShard(0, 1)", "StridedShard(0, [4])",
                           "StridedShard(0, [4, 0])", "Partial(max)", "Colwise()"}) {
    std::string error;
    EXPECT_FALSE(PlacementSpec::parse(text, error)) << text;
    EXPECT_NE(error.find("is not a placement"), std::string::npos) << error;
  }
}

TEST(Registry, ExactlyTheDesignList) {
  std::vector<std::string> expected = {
      "colwise", "colwise_gather_output", "colwise_rep", "rowwise", "rowwise_split_input",
      "rowwise_rep", "embedding_rowwise", "embedding_colwise", "packed_colwise",
      "packed_rowwise", "sequence_parallel", "replicated_with_grad_allreduce", "mla_kv_a_proj",
      "all_reduce", "moe_tp_experts", "moe_identity_expert", "local_params", "grouped_gemm",
      "ep_router"};
  std::vector<std::string> names = StrategyRegistry::builtin().names();
  std::sort(expected.begin(), expected.end());
  std::sort(names.begin(), names.end());
  EXPECT_EQ(names, expected);
}

TEST(Registry, SuggestsClosest) {
  StrategyRegistry registry = StrategyRegistry::builtin();
  EXPECT_EQ(registry.closest("colwize"), "colwise");
  EXPECT_EQ(registry.closest("row_wise"), "rowwise");
  EXPECT_EQ(registry.closest("embedding_row"), "embedding_rowwise");
  // Names from other transformers versions point at what they became.
  EXPECT_EQ(registry.closest("local_colwise"), "colwise");
  EXPECT_EQ(registry.closest("gather"), "colwise_gather_output");
  EXPECT_EQ(registry.closest("replicate"), "replicated_with_grad_allreduce");
}

TEST(Registry, UnsupportedNames) {
  EXPECT_FALSE(StrategyRegistry::unsupportedReason("ep_dispatch_experts").empty());
  EXPECT_FALSE(StrategyRegistry::unsupportedReason("RouterParallelMegaMoe").empty());
  EXPECT_FALSE(StrategyRegistry::unsupportedReason("MoeTensorParalellMegaMoeExperts").empty());
  EXPECT_TRUE(StrategyRegistry::unsupportedReason("colwise").empty());
  EXPECT_TRUE(StrategyRegistry::unsupportedReason("local_colwise").empty());
}
