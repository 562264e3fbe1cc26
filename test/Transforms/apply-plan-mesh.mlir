// Without tp-size, tp-apply-plan keeps the module's own mesh, and needs one.
// RUN: tpc-opt %s --split-input-file --tp-apply-plan="plan=%S/Inputs/lm-head-plan.json" -verify-diagnostics | FileCheck %s

// CHECK: module attributes {tp.mesh = #tp.mesh<tp = 3>}
// CHECK: tp.param @lm_head.weight {placement = #tp.shard<-2>, strategy = "colwise_gather_output"}
module attributes {tp.mesh = #tp.mesh<tp = 3>} {
  tp.param @"lm_head.weight" : tensor<256x64xf32>
}

// -----

// expected-error @+1 {{no tp size: give one (tpc --tp N, tp-apply-plan tp-size=N) or a tp.mesh on the module}}
module {
  tp.param @"lm_head.weight" : tensor<256x64xf32>
}
