// tp-apply-plan needs a plan.
// RUN: tpc-opt %s --tp-apply-plan="tp-size=2" -verify-diagnostics

// expected-error @+1 {{no plan given}}
module {
  tp.param @"lm_head.weight" : tensor<256x64xf32>
}
