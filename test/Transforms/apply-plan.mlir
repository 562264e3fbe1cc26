// tp-apply-plan alone: parameters get placements, planned modules' ops their strategies with
// the layouts those impose, the module its mesh; uncovered parameters warn where declared.
// RUN: tpc-opt %s --tp-apply-plan="plan=%S/Inputs/one-layer-plan.json tp-size=4" -verify-diagnostics | FileCheck %s

// CHECK: module @one_layer attributes {tp.mesh = #tp.mesh<tp = 4>}
module @one_layer {
  // CHECK: tp.param @model.embed_tokens.weight {placement = #tp.replicate} : tensor<256x64xf32>
  // expected-warning @+1 {{parameter model.embed_tokens.weight is covered by no plan rule; it is replicated}}
  tp.param @"model.embed_tokens.weight" : tensor<256x64xf32>
  // CHECK: tp.param @model.layers.0.self_attn.q_proj.weight {placement = #tp.shard<-2>, strategy = "colwise"}
  tp.param @"model.layers.0.self_attn.q_proj.weight" : tensor<64x64xf32>
  // CHECK: tp.param @model.layers.0.self_attn.o_proj.weight {placement = #tp.shard<-1>, strategy = "rowwise"}
  tp.param @"model.layers.0.self_attn.o_proj.weight" : tensor<64x64xf32>
  // expected-warning @+1 {{2 parameters model.layers.*.post_attention_layernorm.weight are covered by no plan rule; they are replicated}}
  tp.param @"model.layers.0.post_attention_layernorm.weight" : tensor<64xf32>
  tp.param @"model.layers.1.post_attention_layernorm.weight" : tensor<64xf32>
  // CHECK: tp.param @lm_head.weight {placement = #tp.shard<-2>, strategy = "colwise_gather_output"}
  tp.param @"lm_head.weight" : tensor<256x64xf32>

  func.func @forward(%ids: tensor<?xi64>) -> tensor<?x256xf32> {
    %e = tp.weight @"model.embed_tokens.weight" : tensor<256x64xf32>
    // CHECK: tp.embedding "model.embed_tokens"
    // CHECK-NOT: tp.strategy
    %h = tp.embedding "model.embed_tokens" %ids, %e : (tensor<?xi64>, tensor<256x64xf32>) -> tensor<?x64xf32>
    %wq = tp.weight @"model.layers.0.self_attn.q_proj.weight" : tensor<64x64xf32>
    // CHECK: tp.linear "model.layers.0.self_attn.q_proj" {{.*}} {tp.strategy = #tp.strategy<"colwise", input = #tp.replicate, output = #tp.shard<-1>>}
    %q = tp.linear "model.layers.0.self_attn.q_proj" %h, %wq : (tensor<?x64xf32>, tensor<64x64xf32>) -> tensor<?x64xf32>
    %wo = tp.weight @"model.layers.0.self_attn.o_proj.weight" : tensor<64x64xf32>
    // CHECK: tp.linear "model.layers.0.self_attn.o_proj" {{.*}} {tp.strategy = #tp.strategy<"rowwise", input = #tp.shard<-1>, output = #tp.replicate>}
    %o = tp.linear "model.layers.0.self_attn.o_proj" %q, %wo : (tensor<?x64xf32>, tensor<64x64xf32>) -> tensor<?x64xf32>
    %wl = tp.weight @"lm_head.weight" : tensor<256x64xf32>
    // CHECK: tp.linear "lm_head" {{.*}} {tp.strategy = #tp.strategy<"colwise_gather_output", input = #tp.replicate, output = #tp.replicate>}
    %logits = tp.linear "lm_head" %o, %wl : (tensor<?x64xf32>, tensor<256x64xf32>) -> tensor<?x256xf32>
    return %logits : tensor<?x256xf32>
  }
}
