// tp-set-target puts the target's description on the module as #tp.target, and the decision
// passes read it there: the CUDA target fuses and groups, the CPU target does neither, and a
// pass option can only leave out what the target fuses. A module without a target keeps the
// options' choice (the rest of test/Transforms).
// RUN: tpc-opt %s -split-input-file --tp-set-target=target=cuda | FileCheck %s --check-prefix=CUDA
// RUN: tpc-opt %s -split-input-file --tp-set-target=target=cpu | FileCheck %s --check-prefix=CPU
// RUN: tpc-opt %s -split-input-file --tp-set-target=target=cuda --tp-fuse --tp-group-linears | FileCheck %s --check-prefix=CUDA-DECIDED
// RUN: tpc-opt %s -split-input-file --tp-set-target=target=cpu --tp-fuse --tp-group-linears | FileCheck %s --check-prefix=CPU-DECIDED
// RUN: tpc-opt %s -split-input-file --tp-set-target=target=cuda --tp-fuse=elementwise=false | FileCheck %s --check-prefix=NARROWED
// RUN: not tpc-opt %s -split-input-file --tp-lower-to-emitc 2>&1 | FileCheck %s --check-prefix=NONE

// CUDA: module attributes {tp.mesh = #tp.mesh<tp = 2>, tp.target = #tp.target<name = "cuda", activation = bf16, fuse_elementwise = true, fuse_norm = true, fuse_rotary = true, group_linears = true, gather = padded, greedy_argmax = false, arena_align = 8>}
// CPU: module attributes {tp.mesh = #tp.mesh<tp = 2>, tp.target = #tp.target<name = "cpu", activation = f32, fuse_elementwise = false, fuse_norm = false, fuse_rotary = false, group_linears = false, gather = variable, greedy_argmax = true, arena_align = 1>}

// CUDA-DECIDED-LABEL: func.func @swiglu
// CUDA-DECIDED-NEXT:    tp.fused elementwise
// CPU-DECIDED-LABEL:  func.func @swiglu
// CPU-DECIDED-NOT:      tp.fused
// CPU-DECIDED:          return
// NARROWED-LABEL:     func.func @swiglu
// NARROWED-NOT:         tp.fused
// NARROWED:             return
// NONE: error: tp-lower-to-emitc needs the module's target (tp.target = #tp.target<...>): build the program with tpc, or run tp-set-target first
module attributes {tp.mesh = #tp.mesh<tp = 2>} {
  func.func @swiglu(%gate: tensor<?x64xf32, #tp.shard<1>>, %up: tensor<?x64xf32, #tp.shard<1>>) -> tensor<?x64xf32, #tp.shard<1>> {
    %s = tp.silu "mlp" %gate : (tensor<?x64xf32, #tp.shard<1>>) -> tensor<?x64xf32, #tp.shard<1>>
    %m = tp.mul "mlp" %s, %up : (tensor<?x64xf32, #tp.shard<1>>, tensor<?x64xf32, #tp.shard<1>>) -> tensor<?x64xf32, #tp.shard<1>>
    return %m : tensor<?x64xf32, #tp.shard<1>>
  }
}

// -----

// CUDA-DECIDED-LABEL: func.func @gate_up
// CUDA-DECIDED:         tp.fused linears
// CPU-DECIDED-LABEL:  func.func @gate_up
// CPU-DECIDED-NOT:      tp.fused
// CPU-DECIDED:          return
module attributes {tp.mesh = #tp.mesh<tp = 2>} {
  tp.param @gate {placement = #tp.shard<-2>} : tensor<32x64xf32>
  tp.param @up {placement = #tp.shard<-2>} : tensor<32x64xf32>
  func.func @gate_up(%x: tensor<?x64xf32, #tp.replicate>) -> tensor<?x32xf32, #tp.shard<1>> {
    %wg = tp.weight @gate : tensor<32x64xf32, #tp.shard<0>>
    %g = tp.linear "gate_proj" %x, %wg : (tensor<?x64xf32, #tp.replicate>, tensor<32x64xf32, #tp.shard<0>>) -> tensor<?x32xf32, #tp.shard<1>>
    %wu = tp.weight @up : tensor<32x64xf32, #tp.shard<0>>
    %u = tp.linear "up_proj" %x, %wu : (tensor<?x64xf32, #tp.replicate>, tensor<32x64xf32, #tp.shard<0>>) -> tensor<?x32xf32, #tp.shard<1>>
    %m = tp.mul "mlp" %g, %u : (tensor<?x32xf32, #tp.shard<1>>, tensor<?x32xf32, #tp.shard<1>>) -> tensor<?x32xf32, #tp.shard<1>>
    return %m : tensor<?x32xf32, #tp.shard<1>>
  }
}
