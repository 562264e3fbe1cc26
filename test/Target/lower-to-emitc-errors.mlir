// What tp-lower-to-emitc refuses, each with the reason at the op: a program whose decisions
// are missing, grouped linears on a target that keeps weights apart, experts on the GPU, an
// unknown target.
// RUN: tpc-opt %s -split-input-file --tp-set-target=target=cpu --tp-lower-to-emitc -verify-diagnostics
// RUN: tpc-opt %S/Inputs/moe-decided.mlir --tp-set-target=target=cuda --tp-lower-to-emitc -verify-diagnostics
// RUN: not tpc-opt %s -split-input-file --tp-set-target=target=tpu 2>&1 | FileCheck %s --check-prefix=TARGET
// TARGET: error: unknown target 'tpu'; the targets are cpu, cuda

module @noarena attributes {tp.mesh = #tp.mesh<tp = 1>} {
  tp.param @"embed.weight" : tensor<32x8xf32>
  // expected-error @+1 {{has no arena: run tp-plan-arena before lowering}}
  func.func @forward(%ids: tensor<?xi64>, %positions: tensor<?xi64>) -> tensor<?x8xf32> {
    %we = tp.weight @"embed.weight" : tensor<32x8xf32>
    %h = tp.embedding "embed" %ids, %we : (tensor<?xi64>, tensor<32x8xf32>) -> tensor<?x8xf32>
    return %h : tensor<?x8xf32>
  }
}

// -----

module @nooffset attributes {tp.mesh = #tp.mesh<tp = 1>} {
  tp.param @"embed.weight" : tensor<32x8xf32>
  func.func @forward(%ids: tensor<?xi64>, %positions: tensor<?xi64>) -> tensor<?x8xf32> attributes {tp.arena_size = 8 : i64} {
    %we = tp.weight @"embed.weight" : tensor<32x8xf32>
    // expected-error @+1 {{has no arena offset: run tp-plan-arena before lowering}}
    %h = tp.embedding "embed" %ids, %we : (tensor<?xi64>, tensor<32x8xf32>) -> tensor<?x8xf32>
    return %h : tensor<?x8xf32>
  }
}

// -----

module @grouped attributes {tp.mesh = #tp.mesh<tp = 1>} {
  tp.param @"embed.weight" : tensor<32x8xf32>
  tp.param @"a.weight" : tensor<8x8xf32>
  tp.param @"b.weight" : tensor<8x8xf32>
  func.func @forward(%ids: tensor<?xi64>, %positions: tensor<?xi64>) -> tensor<?x8xf32> attributes {tp.arena_size = 24 : i64} {
    %we = tp.weight @"embed.weight" : tensor<32x8xf32>
    %h = tp.embedding "embed" %ids, %we {tp.arena = array<i64: 0>} : (tensor<?xi64>, tensor<32x8xf32>) -> tensor<?x8xf32>
    %wa = tp.weight @"a.weight" : tensor<8x8xf32>
    %wb = tp.weight @"b.weight" : tensor<8x8xf32>
    // expected-error @+1 {{the CPU target keeps each weight in its own buffer: it runs no grouped linears (leave out tp-group-linears)}}
    %r:2 = tp.fused linears -> tensor<?x8xf32>, tensor<?x8xf32> attributes {tp.arena = array<i64: 8, 16>} {
      %a = tp.linear "a" %h, %wa : (tensor<?x8xf32>, tensor<8x8xf32>) -> tensor<?x8xf32>
      %b = tp.linear "b" %h, %wb : (tensor<?x8xf32>, tensor<8x8xf32>) -> tensor<?x8xf32>
      tp.yield %a, %b : tensor<?x8xf32>, tensor<?x8xf32>
    }
    %s = tp.add "sum" %r#0, %r#1 {tp.arena = array<i64: 0>} : (tensor<?x8xf32>, tensor<?x8xf32>) -> tensor<?x8xf32>
    return %s : tensor<?x8xf32>
  }
}
