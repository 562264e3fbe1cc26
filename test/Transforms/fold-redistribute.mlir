// Each fold of tp-fold-redistribute, on hand-written IR: the input is the IR before, the
// CHECK lines the IR after.
// RUN: tpc-opt %s -split-input-file --tp-fold-redistribute | FileCheck %s

// (P->R)(R->S(0)) = P->S(0): one reduce_scatter instead of all_reduce and slice.
// CHECK-LABEL: func.func @reduce_then_slice
// CHECK-NEXT:    %[[RS:.*]] = tp.redistribute %arg0 {module = "model.layers.0.mlp.down_proj"} : tensor<?x64xf32, #tp.partial<sum>> -> tensor<?x64xf32, #tp.shard<0>>
// CHECK-NEXT:    return %[[RS]]
module attributes {tp.mesh = #tp.mesh<tp = 4>} {
  func.func @reduce_then_slice(%p: tensor<?x64xf32, #tp.partial<sum>>) -> tensor<?x64xf32, #tp.shard<0>> {
    %r = tp.redistribute %p {module = "model.layers.0.mlp.down_proj"} : tensor<?x64xf32, #tp.partial<sum>> -> tensor<?x64xf32, #tp.replicate>
    %s = tp.redistribute %r {module = "model.layers.1.input_layernorm"} : tensor<?x64xf32, #tp.replicate> -> tensor<?x64xf32, #tp.shard<0>>
    return %s : tensor<?x64xf32, #tp.shard<0>>
  }
}

// -----

// (S(1)->R)(R->S(1)): gathering and taking back this rank's own chunk cancels.
// CHECK-LABEL: func.func @gather_then_own_chunk
// CHECK-NEXT:    return %arg0 : tensor<?x64xf32, #tp.shard<1>>
module attributes {tp.mesh = #tp.mesh<tp = 4>} {
  func.func @gather_then_own_chunk(%x: tensor<?x64xf32, #tp.shard<1>>) -> tensor<?x64xf32, #tp.shard<1>> {
    %r = tp.redistribute %x : tensor<?x64xf32, #tp.shard<1>> -> tensor<?x64xf32, #tp.replicate>
    %s = tp.redistribute %r : tensor<?x64xf32, #tp.replicate> -> tensor<?x64xf32, #tp.shard<1>>
    return %s : tensor<?x64xf32, #tp.shard<1>>
  }
}

// -----

// (S(1)->R)(R->S(0)) is cheaper as one all_to_all than as a gather and a slice.
// CHECK-LABEL: func.func @gather_then_other_dim
// CHECK-NEXT:    %[[T:.*]] = tp.redistribute %arg0 : tensor<?x64xf32, #tp.shard<1>> -> tensor<?x64xf32, #tp.shard<0>>
// CHECK-NEXT:    return %[[T]]
module attributes {tp.mesh = #tp.mesh<tp = 4>} {
  func.func @gather_then_other_dim(%x: tensor<?x64xf32, #tp.shard<1>>) -> tensor<?x64xf32, #tp.shard<0>> {
    %r = tp.redistribute %x : tensor<?x64xf32, #tp.shard<1>> -> tensor<?x64xf32, #tp.replicate>
    %s = tp.redistribute %r : tensor<?x64xf32, #tp.replicate> -> tensor<?x64xf32, #tp.shard<0>>
    return %s : tensor<?x64xf32, #tp.shard<0>>
  }
}

// -----

// (R->S(1))(S(1)->R) with the replicated value still used elsewhere: nothing to fold.
// CHECK-LABEL: func.func @shared_intermediate
// CHECK:         tp.redistribute %arg0 : tensor<?x64xf32, #tp.partial<sum>> -> tensor<?x64xf32, #tp.replicate>
// CHECK:         tp.redistribute %{{.*}} : tensor<?x64xf32, #tp.replicate> -> tensor<?x64xf32, #tp.shard<0>>
module attributes {tp.mesh = #tp.mesh<tp = 4>} {
  func.func @shared_intermediate(%p: tensor<?x64xf32, #tp.partial<sum>>) -> (tensor<?x64xf32, #tp.replicate>, tensor<?x64xf32, #tp.shard<0>>) {
    %r = tp.redistribute %p : tensor<?x64xf32, #tp.partial<sum>> -> tensor<?x64xf32, #tp.replicate>
    %s = tp.redistribute %r : tensor<?x64xf32, #tp.replicate> -> tensor<?x64xf32, #tp.shard<0>>
    return %r, %s : tensor<?x64xf32, #tp.replicate>, tensor<?x64xf32, #tp.shard<0>>
  }
}

// -----

// Partials joined by a sum share one reduce: attention and MLP of a parallel block.
// CHECK-LABEL: func.func @partial_sum
// CHECK-NEXT:    %[[SUM:.*]] = tp.add "model.layers.0" %arg0, %arg1 : (tensor<?x64xf32, #tp.partial<sum>>, tensor<?x64xf32, #tp.partial<sum>>) -> tensor<?x64xf32, #tp.partial<sum>>
// CHECK-NEXT:    %[[R:.*]] = tp.redistribute %[[SUM]] {module = "model.layers.0"} : tensor<?x64xf32, #tp.partial<sum>> -> tensor<?x64xf32, #tp.replicate>
// CHECK-NEXT:    return %[[R]]
module attributes {tp.mesh = #tp.mesh<tp = 4>} {
  func.func @partial_sum(%attn: tensor<?x64xf32, #tp.partial<sum>>, %mlp: tensor<?x64xf32, #tp.partial<sum>>) -> tensor<?x64xf32, #tp.replicate> {
    %a = tp.redistribute %attn {module = "model.layers.0.self_attn.o_proj"} : tensor<?x64xf32, #tp.partial<sum>> -> tensor<?x64xf32, #tp.replicate>
    %m = tp.redistribute %mlp {module = "model.layers.0.mlp.down_proj"} : tensor<?x64xf32, #tp.partial<sum>> -> tensor<?x64xf32, #tp.replicate>
    %s = tp.add "model.layers.0" %a, %m : (tensor<?x64xf32, #tp.replicate>, tensor<?x64xf32, #tp.replicate>) -> tensor<?x64xf32, #tp.replicate>
    return %s : tensor<?x64xf32, #tp.replicate>
  }
}

// -----

// A redistribution whose consumer takes the source placement as well, computing the same,
// disappears: a linear with a replicated weight and no bias maps a Partial to a Partial.
// CHECK-LABEL: func.func @consumer_takes_source
// CHECK-NOT:     tp.redistribute
// CHECK:         tp.linear "proj" %arg0, %{{.*}} : (tensor<?x64xf32, #tp.partial<sum>>, tensor<32x64xf32, #tp.replicate>) -> tensor<?x32xf32, #tp.partial<sum>>
module attributes {tp.mesh = #tp.mesh<tp = 2>} {
  tp.param @w : tensor<32x64xf32>
  func.func @consumer_takes_source(%p: tensor<?x64xf32, #tp.partial<sum>>) -> tensor<?x32xf32, #tp.partial<sum>> {
    %w = tp.weight @w : tensor<32x64xf32, #tp.replicate>
    %slice = tp.redistribute %p : tensor<?x64xf32, #tp.partial<sum>> -> tensor<?x64xf32, #tp.partial<sum>>
    %y = tp.linear "proj" %slice, %w : (tensor<?x64xf32, #tp.partial<sum>>, tensor<32x64xf32, #tp.replicate>) -> tensor<?x32xf32, #tp.partial<sum>>
    return %y : tensor<?x32xf32, #tp.partial<sum>>
  }
}

// -----

// A redistribution a consumer really needs stays: silu is not linear.
// CHECK-LABEL: func.func @consumer_needs_it
// CHECK:         tp.redistribute %arg0 : tensor<?x64xf32, #tp.partial<sum>> -> tensor<?x64xf32, #tp.replicate>
module attributes {tp.mesh = #tp.mesh<tp = 2>} {
  func.func @consumer_needs_it(%p: tensor<?x64xf32, #tp.partial<sum>>) -> tensor<?x64xf32, #tp.replicate> {
    %r = tp.redistribute %p : tensor<?x64xf32, #tp.partial<sum>> -> tensor<?x64xf32, #tp.replicate>
    %y = tp.silu "act" %r : (tensor<?x64xf32, #tp.replicate>) -> tensor<?x64xf32, #tp.replicate>
    return %y : tensor<?x64xf32, #tp.replicate>
  }
}
