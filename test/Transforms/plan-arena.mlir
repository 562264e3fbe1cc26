// tp-plan-arena on hand-written partitioned IR: offsets by lifetime (first fit, in elements
// per token), a linears unit's results side by side, and each function's size.
// RUN: tpc-opt %s -split-input-file --tp-plan-arena | FileCheck %s
// The KV cache's block size: on a module with attention only, 16 tokens unless asked.
// RUN: tpc-opt %s -split-input-file --tp-plan-arena | FileCheck %s --check-prefix=BLOCKS
// RUN: tpc-opt %s -split-input-file --tp-plan-arena=kv-block-size=64 | FileCheck %s --check-prefix=BLOCKS64
// RUN: not tpc-opt %s -split-input-file --tp-plan-arena=kv-block-size=0 2>&1 | FileCheck %s --check-prefix=BLOCKS0
// The CUDA target's slots start at multiples of 8 elements (16 bytes of bf16); the CPU's
// anywhere, as without a target.
// RUN: tpc-opt %s -split-input-file --tp-set-target=target=cuda --tp-plan-arena | FileCheck %s --check-prefix=CUDA
// RUN: tpc-opt %s -split-input-file --tp-set-target=target=cpu --tp-plan-arena | FileCheck %s --check-prefix=CPU
// BLOCKS:      module {
// BLOCKS:      module {
// BLOCKS:      module attributes {tp.kv_block_size = 16 : i64} {
// BLOCKS-NEXT:   tp.param @norm
// BLOCKS64:    module attributes {tp.kv_block_size = 64 : i64} {
// BLOCKS0:     error: tp-plan-arena: kv-block-size must be at least 1, not 0

// A value's slot is free once its last reader has run, not before: %b cannot take %a's slot
// (it reads %a), %c can. Weights live elsewhere and get none. The size is the highest end.
// CHECK-LABEL: func.func @lifetimes
// CHECK-SAME:    attributes {tp.arena_size = 128 : i64}
// CHECK-NEXT:    tp.silu "m" %arg0 {tp.arena = array<i64: 0>}
// CHECK-NEXT:    tp.gelu "m" %{{.*}} {tp.arena = array<i64: 64>}
// CHECK-NEXT:    tp.silu "m" %{{.*}} {tp.arena = array<i64: 0>}
// CHECK-NEXT:    tp.weight @p : tensor<16x64xf32>
// CHECK-NEXT:    tp.linear "p" %{{.*}} {tp.arena = array<i64: 64>}
// The first hole that fits: [0, 16) is the silu's, [16, 32) is free.
// CHECK-NEXT:    tp.silu "m" %{{.*}} {tp.arena = array<i64: 0>}
// CHECK-NEXT:    tp.mul "m" %{{.*}} {tp.arena = array<i64: 16>}
// CHECK-NEXT:    return
module {
  tp.param @p : tensor<16x64xf32>
  func.func @lifetimes(%x: tensor<?x64xf32>) -> tensor<?x16xf32> {
    %a = tp.silu "m" %x : (tensor<?x64xf32>) -> tensor<?x64xf32>
    %b = tp.gelu "m" %a : (tensor<?x64xf32>) -> tensor<?x64xf32>
    %c = tp.silu "m" %b : (tensor<?x64xf32>) -> tensor<?x64xf32>
    %w = tp.weight @p : tensor<16x64xf32>
    %d = tp.linear "p" %c, %w : (tensor<?x64xf32>, tensor<16x64xf32>) -> tensor<?x16xf32>
    %e = tp.silu "m" %d : (tensor<?x16xf32>) -> tensor<?x16xf32>
    %f = tp.mul "m" %e, %d : (tensor<?x16xf32>, tensor<?x16xf32>) -> tensor<?x16xf32>
    return %f : tensor<?x16xf32>
  }
}

// -----

// A value nobody reads is free as soon as it is made; a returned one lives to the end.
// CHECK-LABEL: func.func @unread_and_returned
// CHECK-SAME:    attributes {tp.arena_size = 96 : i64}
// CHECK-NEXT:    tp.silu "m" %arg0 {tp.arena = array<i64: 0>}
// CHECK-NEXT:    tp.gelu "m" %arg0 {tp.arena = array<i64: 0>}
// CHECK-NEXT:    tp.scale "m" %arg0 {factor = 2.000000e+00 : f64, tp.arena = array<i64: 32>}
// CHECK-NEXT:    tp.last_token "m" %{{.*}} {tp.arena = array<i64: 64>} : (tensor<?x32xf32>) -> tensor<1x32xf32>
module {
  func.func @unread_and_returned(%x: tensor<?x32xf32>) -> (tensor<?x32xf32>, tensor<1x32xf32>) {
    %unread = tp.silu "m" %x : (tensor<?x32xf32>) -> tensor<?x32xf32>
    %kept = tp.gelu "m" %x : (tensor<?x32xf32>) -> tensor<?x32xf32>
    %s = tp.scale "m" %x {factor = 2.0 : f64} : (tensor<?x32xf32>) -> tensor<?x32xf32>
    // A one-row value takes a whole slot of its columns all the same.
    %l = tp.last_token "m" %s : (tensor<?x32xf32>) -> tensor<1x32xf32>
    return %kept, %l : tensor<?x32xf32>, tensor<1x32xf32>
  }
}

// -----

// A linears unit's results lie side by side (one row of them is one row of the concatenated
// weights' GEMM), after its input, which it reads. They keep the slot together until the
// last of them is read: the attention may not take q's columns, read last by the rotary,
// while k and v live.
// CHECK-LABEL: func.func @linears
// CHECK-SAME:    attributes {tp.arena_size = 192 : i64}
// CHECK:         tp.rms_norm {{.*}}tp.arena = array<i64: 0>
// CHECK:         tp.fused linears -> {{.*}} attributes {tp.arena = array<i64: 64, 96, 112>}
// CHECK-NOT:       tp.arena
// CHECK:         }
// CHECK-NEXT:    tp.rotary {{.*}}tp.arena = array<i64: 128>
// CHECK-NEXT:    tp.attention {{.*}}tp.arena = array<i64: 160>
module {
  tp.param @norm : tensor<64xf32>
  tp.param @q : tensor<32x64xf32>
  tp.param @k : tensor<16x64xf32>
  tp.param @v : tensor<16x64xf32>
  func.func @linears(%x: tensor<?x64xf32>, %pos: tensor<?xi64>) -> (tensor<?x32xf32>, tensor<?x64xf32>) {
    %wn = tp.weight @norm : tensor<64xf32>
    %h = tp.rms_norm "ln" %x, %wn {epsilon = 1.0e-05 : f64} : (tensor<?x64xf32>, tensor<64xf32>) -> tensor<?x64xf32>
    %wq = tp.weight @q : tensor<32x64xf32>
    %wk = tp.weight @k : tensor<16x64xf32>
    %wv = tp.weight @v : tensor<16x64xf32>
    %u:3 = tp.fused linears -> tensor<?x32xf32>, tensor<?x16xf32>, tensor<?x16xf32> {
      %q = tp.linear "q_proj" %h, %wq : (tensor<?x64xf32>, tensor<32x64xf32>) -> tensor<?x32xf32>
      %k = tp.linear "k_proj" %h, %wk : (tensor<?x64xf32>, tensor<16x64xf32>) -> tensor<?x16xf32>
      %v = tp.linear "v_proj" %h, %wv : (tensor<?x64xf32>, tensor<16x64xf32>) -> tensor<?x16xf32>
      tp.yield %q, %k, %v : tensor<?x32xf32>, tensor<?x16xf32>, tensor<?x16xf32>
    }
    %rq = tp.rotary "attn" %u#0, %pos {head_dim = 16 : i64, theta = 1.0e+04 : f64} : (tensor<?x32xf32>, tensor<?xi64>) -> tensor<?x32xf32>
    %o = tp.attention "attn" %rq, %u#1, %u#2 {head_dim = 16 : i64, num_heads = 2 : i64, num_kv_heads = 1 : i64} : (tensor<?x32xf32>, tensor<?x16xf32>, tensor<?x16xf32>) -> tensor<?x32xf32>
    return %o, %h : tensor<?x32xf32>, tensor<?x64xf32>
  }
}

// -----

// A unit is one step: what its members read lives until the unit runs, and each result the
// unit yields gets a slot (a norm unit stores the residual stream and the norm).
// CHECK-LABEL: func.func @units
// CHECK-SAME:    attributes {tp.arena_size = 192 : i64}
// CHECK-NEXT:    tp.silu "m" %arg0 {tp.arena = array<i64: 0>}
// CHECK-NEXT:    tp.weight
// CHECK-NEXT:    tp.fused norm -> {{.*}} attributes {tp.arena = array<i64: 64, 128>}
module {
  tp.param @norm : tensor<64xf32>
  func.func @units(%x: tensor<?x64xf32>, %y: tensor<?x64xf32>) -> (tensor<?x64xf32>, tensor<?x64xf32>) {
    %a = tp.silu "m" %x : (tensor<?x64xf32>) -> tensor<?x64xf32>
    %w = tp.weight @norm : tensor<64xf32>
    %r:2 = tp.fused norm -> tensor<?x64xf32>, tensor<?x64xf32> {
      %s = tp.add "layer" %y, %a : (tensor<?x64xf32>, tensor<?x64xf32>) -> tensor<?x64xf32>
      %n = tp.rms_norm "ln" %s, %w {epsilon = 1.0e-05 : f64} : (tensor<?x64xf32>, tensor<64xf32>) -> tensor<?x64xf32>
      tp.yield %s, %n : tensor<?x64xf32>, tensor<?x64xf32>
    }
    return %r#0, %r#1 : tensor<?x64xf32>, tensor<?x64xf32>
  }
}

// -----

// Each function has its own arena.
// CHECK-LABEL: func.func @wide
// CHECK-SAME:    attributes {tp.arena_size = 256 : i64}
// CHECK-LABEL: func.func @narrow
// CHECK-SAME:    attributes {tp.arena_size = 8 : i64}
module {
  func.func @wide(%x: tensor<?x256xf32>) -> tensor<?x256xf32> {
    %a = tp.silu "m" %x : (tensor<?x256xf32>) -> tensor<?x256xf32>
    return %a : tensor<?x256xf32>
  }
  func.func @narrow(%x: tensor<?x8xf32>) -> tensor<?x8xf32> {
    %a = tp.silu "m" %x : (tensor<?x8xf32>) -> tensor<?x8xf32>
    return %a : tensor<?x8xf32>
  }
}

// -----

// A width that is not a multiple of 8 (a gate of 100 columns): after a slot of 100 the next
// starts at 104 on the CUDA target, at 100 elsewhere; the slice takes the freed slot at 0.
// CHECK-LABEL: func.func @odd_widths
// CHECK-SAME:    attributes {tp.arena_size = 200 : i64}
// CHECK-NEXT:    tp.silu "m" %arg0 {tp.arena = array<i64: 0>}
// CHECK-NEXT:    tp.gelu "m" %{{.*}} {tp.arena = array<i64: 100>}
// CHECK-NEXT:    tp.slice "m" %{{.*}} {dim = -1 : i64, offset = 0 : i64, size = 60 : i64, tp.arena = array<i64: 0>}
// CUDA-LABEL:  func.func @odd_widths
// CUDA-SAME:     attributes {tp.arena_size = 204 : i64}
// CUDA-NEXT:     tp.silu "m" %arg0 {tp.arena = array<i64: 0>}
// CUDA-NEXT:     tp.gelu "m" %{{.*}} {tp.arena = array<i64: 104>}
// CPU-LABEL:   func.func @odd_widths
// CPU-SAME:      attributes {tp.arena_size = 200 : i64}
module attributes {tp.mesh = #tp.mesh<tp = 1>} {
  func.func @odd_widths(%x: tensor<?x100xf32>) -> tensor<?x60xf32> {
    %a = tp.silu "m" %x : (tensor<?x100xf32>) -> tensor<?x100xf32>
    %b = tp.gelu "m" %a : (tensor<?x100xf32>) -> tensor<?x100xf32>
    %c = tp.slice "m" %b {dim = -1 : i64, offset = 0 : i64, size = 60 : i64} : (tensor<?x100xf32>) -> tensor<?x60xf32>
    return %c : tensor<?x60xf32>
  }
}

// -----

// A norm's sums of squares and their all_reduce are fp32 on every target (Sums.h): on the
// CUDA target's bf16 arena each takes two elements a token (a 1-column value of bf16 takes
// one), so the all_reduce's slot at 8 ends at 10; on the CPU's fp32 arena one each.
// CHECK-LABEL: func.func @sums
// CHECK-SAME:    attributes {tp.arena_size = 2 : i64}
// CUDA-LABEL:  func.func @sums
// CUDA-SAME:     attributes {tp.arena_size = 10 : i64}
// CUDA-NEXT:     tp.sum_squares "n" %arg0 {tp.arena = array<i64: 0>}
// CUDA-NEXT:     tp.all_reduce %{{.*}} sum {module = "n", tp.arena = array<i64: 8>}
// CPU-LABEL:   func.func @sums
// CPU-SAME:      attributes {tp.arena_size = 2 : i64}
// CUDA-LABEL:  func.func @activation
// CUDA-SAME:     attributes {tp.arena_size = 9 : i64}
module attributes {tp.mesh = #tp.mesh<tp = 2>} {
  func.func @sums(%x: tensor<?x64xf32>) -> tensor<?x1xf32, #tp.replicate> {
    %s = tp.sum_squares "n" %x : (tensor<?x64xf32>) -> tensor<?x1xf32, #tp.partial<sum>>
    %t = tp.all_reduce %s sum {module = "n"} : tensor<?x1xf32, #tp.partial<sum>> -> tensor<?x1xf32, #tp.replicate>
    return %t : tensor<?x1xf32, #tp.replicate>
  }
  func.func @activation(%x: tensor<?x64xf32, #tp.partial<sum>>) -> tensor<?x1xf32, #tp.replicate> {
    %s = tp.slice "n" %x {dim = -1 : i64, offset = 0 : i64, size = 1 : i64} : (tensor<?x64xf32, #tp.partial<sum>>) -> tensor<?x1xf32, #tp.partial<sum>>
    %t = tp.all_reduce %s sum {module = "n"} : tensor<?x1xf32, #tp.partial<sum>> -> tensor<?x1xf32, #tp.replicate>
    return %t : tensor<?x1xf32, #tp.replicate>
  }
}
