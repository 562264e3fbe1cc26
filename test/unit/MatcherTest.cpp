// Plan-key matching against transformers' rules: `*` is one numeric index, all else exact.
#include "tpc/Plan/Matcher.h"

#include <gtest/gtest.h>

using namespace tpc::plan;

TEST(Matcher, WildcardTakesOneLayerIndex) {
  EXPECT_TRUE(matchesPattern("model.layers.*.self_attn.q_proj", "model.layers.0.self_attn.q_proj"));
  EXPECT_TRUE(
      matchesPattern("model.layers.*.self_attn.q_proj", "model.layers.31.self_attn.q_proj"));
  EXPECT_TRUE(matchesPattern("model.layers.*.mlp.experts.*.w1", "model.layers.3.mlp.experts.17.w1"));
}

TEST(Matcher, WildcardIsNumericOnly) {
  EXPECT_FALSE(matchesPattern("model.layers.*.self_attn.q_proj", "model.layers.x.self_attn.q_proj"));
  EXPECT_FALSE(matchesPattern("model.layers.*.self_attn.q_proj", "model.layers..self_attn.q_proj"));
  // One `*` is one index, never a path of several components.
  EXPECT_FALSE(matchesPattern("model.*.q_proj", "model.layers.0.q_proj"));
  EXPECT_FALSE(matchesPattern("model.layers.*", "model.layers.0.mlp"));
}

TEST(Matcher, WildcardTakesTheWholeDigitRun) {
  // "12" is one index: `*` cannot take "1" and leave "2" for a literal.
  EXPECT_FALSE(matchesPattern("model.layers.*2.q_proj", "model.layers.12.q_proj"));
  EXPECT_TRUE(matchesPattern("model.layers.*.q_proj", "model.layers.12.q_proj"));
}

TEST(Matcher, EverythingElseIsExact) {
  EXPECT_TRUE(matchesPattern("lm_head", "lm_head"));
  EXPECT_FALSE(matchesPattern("lm_head", "lm_head.weight"));
  EXPECT_FALSE(matchesPattern("lm_head.weight", "lm_head"));
  EXPECT_FALSE(matchesPattern("layers.*.self_attn.q_proj", "model.layers.0.self_attn.q_proj"));
  EXPECT_FALSE(matchesPattern("model.layers.*.self_attn.q_proj", "model.layers.0.self_attn.q_proj2"));
  EXPECT_FALSE(matchesPattern("Model.layers.*.self_attn.q_proj", "model.layers.0.self_attn.q_proj"));
}

TEST(Matcher, SpelledIndexMatchesExactly) {
  EXPECT_TRUE(matchesPattern("model.layers.0.self_attn.q_proj", "model.layers.0.self_attn.q_proj"));
  EXPECT_FALSE(matchesPattern("model.layers.0.self_attn.q_proj", "model.layers.1.self_attn.q_proj"));
}

TEST(Matcher, GenericName) {
  EXPECT_EQ(genericName("model.layers.12.mlp.experts.3.gate"), "model.layers.*.mlp.experts.*.gate");
  EXPECT_EQ(genericName("lm_head.weight"), "lm_head.weight");
  // transformers' re.sub(r"\d+", "*") also rewrites digits inside a component.
  EXPECT_EQ(genericName("model.h2o.weight"), "model.h*o.weight");
  EXPECT_EQ(genericName("model.layers.0.mlp.experts.3.w1"), "model.layers.*.mlp.experts.*.w*");
}

TEST(Matcher, ParentModule) {
  EXPECT_EQ(parentModule("model.layers.0.self_attn.q_proj.weight").str(),
            "model.layers.0.self_attn.q_proj");
  EXPECT_EQ(parentModule("model.layers.0.mlp.experts.gate_up_proj").str(),
            "model.layers.0.mlp.experts");
  EXPECT_EQ(parentModule("bias").str(), "");
}

TEST(Matcher, WildcardCount) {
  EXPECT_EQ(wildcardCount("model.layers.*.mlp.experts.*.w1"), 2u);
  EXPECT_EQ(wildcardCount("lm_head"), 0u);
}
