// tp-apply-plan refuses a tp size below 1.
// RUN: tpc-opt %s --tp-apply-plan="plan=%S/Inputs/lm-head-plan.json tp-size=-1" -verify-diagnostics

// expected-error @+1 {{the tp size must be at least 1, got -1}}
module {
  tp.param @"lm_head.weight" : tensor<256x64xf32>
}
