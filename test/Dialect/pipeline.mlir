// The pipeline's part of the dialect: a mesh with a pp axis (left out at 1), a parameter's
// stages, tp.stage on ops, tp.stage_layers, and tp.transfer; in the custom and generic forms.
// RUN: tpc-opt %s --split-input-file | tpc-opt --split-input-file | FileCheck %s
// RUN: tpc-opt %s --split-input-file --mlir-print-op-generic | tpc-opt --split-input-file | FileCheck %s

// CHECK: module @stages attributes {tp.mesh = #tp.mesh<pp = 2, tp = 4>, tp.stage_layers = array<i64: 1, 1>}
module @stages attributes {tp.mesh = #tp.mesh<pp = 2, tp = 4>, tp.stage_layers = array<i64: 1, 1>} {
  // CHECK: tp.param @model.embed_tokens.weight {placement = #tp.replicate, stages = array<i64: 0, 1>} : tensor<256x64xf32>
  tp.param @"model.embed_tokens.weight" {placement = #tp.replicate, stages = array<i64: 0, 1>} : tensor<256x64xf32>
  func.func @forward(%ids: tensor<?xi64>) -> tensor<?x64xf32> {
    // CHECK: tp.weight @model.embed_tokens.weight {tp.stage = 0 : i64}
    %t = tp.weight @"model.embed_tokens.weight" {tp.stage = 0 : i64} : tensor<256x64xf32>
    %h = tp.embedding "model.embed_tokens" %ids, %t {tp.stage = 0 : i64} : (tensor<?xi64>, tensor<256x64xf32>) -> tensor<?x64xf32>
    // CHECK: %[[SENT:.*]] = tp.transfer %{{.*}} from 0 to 1 {module = "model.layers.0", tp.stage = 1 : i64} : tensor<?x64xf32>
    %s = tp.transfer %h from 0 to 1 {module = "model.layers.0", tp.stage = 1 : i64} : tensor<?x64xf32>
    // CHECK: tp.transfer %[[SENT]] from 1 to 0 : tensor<?x64xf32>
    %b = tp.transfer %s from 1 to 0 : tensor<?x64xf32>
    return {tp.stage = 0 : i64} %b : tensor<?x64xf32>
  }
}

// -----

// pp 1 is the default, and is not printed.
// CHECK: module @one attributes {tp.mesh = #tp.mesh<tp = 4>}
module @one attributes {tp.mesh = #tp.mesh<pp = 1, tp = 4>} {
}
