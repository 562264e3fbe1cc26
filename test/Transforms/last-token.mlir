// tp-last-token: the per-token ops that end the forward (final norm, lm_head) run on the
// last token only; the chain stops at the residual add, which other tokens' rows feed.
// RUN: tpc-opt %s --tp-last-token | FileCheck %s

module {
  tp.param @"model.norm.weight" : tensor<8xf32>
  tp.param @"lm_head.weight" : tensor<32x8xf32>
  // CHECK-LABEL: func.func @forward
  // CHECK-SAME: -> tensor<1x32xf32>
  func.func @forward(%a: tensor<?x8xf32>, %b: tensor<?x8xf32>) -> tensor<?x32xf32> {
    // CHECK: %[[H:.*]] = tp.add "model.layers.0" {{.*}} -> tensor<?x8xf32>
    %h = tp.add "model.layers.0" %a, %b : (tensor<?x8xf32>, tensor<?x8xf32>) -> tensor<?x8xf32>
    %wn = tp.weight @"model.norm.weight" : tensor<8xf32>
    // CHECK: %[[L:.*]] = tp.last_token "model.norm" %[[H]] : (tensor<?x8xf32>) -> tensor<1x8xf32>
    // CHECK-NEXT: tp.rms_norm "model.norm" %[[L]], {{.*}} -> tensor<1x8xf32>
    %n = tp.rms_norm "model.norm" %h, %wn {epsilon = 1.0e-06 : f64} : (tensor<?x8xf32>, tensor<8xf32>) -> tensor<?x8xf32>
    %wl = tp.weight @"lm_head.weight" : tensor<32x8xf32>
    // CHECK: tp.linear "lm_head" {{.*}} -> tensor<1x32xf32>
    %logits = tp.linear "lm_head" %n, %wl : (tensor<?x8xf32>, tensor<32x8xf32>) -> tensor<?x32xf32>
    // CHECK: return {{.*}} : tensor<1x32xf32>
    return %logits : tensor<?x32xf32>
  }
}
