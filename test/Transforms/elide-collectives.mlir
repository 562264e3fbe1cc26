// tp-elide-collectives on hand-written partitioned IR: on a mesh of one rank every collective
// and local reshard is replaced by its input and no value keeps a placement (nor does the
// function type); on a larger mesh the pass changes nothing.
// RUN: tpc-opt %s -split-input-file --tp-elide-collectives | FileCheck %s

// A rowwise o_proj at tp 1: the slice of its input and the sum of its output move nothing.
// CHECK-LABEL: func.func @rowwise
// CHECK-SAME:    (%arg0: tensor<?x64xf32>) -> tensor<?x64xf32>
// CHECK-NEXT:    %[[W:.*]] = tp.weight @w : tensor<64x64xf32>
// CHECK-NEXT:    %[[P:.*]] = tp.linear "o_proj" %arg0, %[[W]] : (tensor<?x64xf32>, tensor<64x64xf32>) -> tensor<?x64xf32>
// CHECK-NEXT:    %[[H:.*]] = tp.add "model.layers.0" %arg0, %[[P]] : (tensor<?x64xf32>, tensor<?x64xf32>) -> tensor<?x64xf32>
// CHECK-NEXT:    return %[[H]] : tensor<?x64xf32>
module attributes {tp.mesh = #tp.mesh<tp = 1>} {
  tp.param @w {placement = #tp.shard<-1>} : tensor<64x64xf32>
  func.func @rowwise(%x: tensor<?x64xf32, #tp.replicate>) -> tensor<?x64xf32, #tp.replicate> {
    %s = tp.local_reshard %x {module = "o_proj"} : tensor<?x64xf32, #tp.replicate> -> tensor<?x64xf32, #tp.shard<1>>
    %w = tp.weight @w : tensor<64x64xf32, #tp.shard<1>>
    %p = tp.linear "o_proj" %s, %w : (tensor<?x64xf32, #tp.shard<1>>, tensor<64x64xf32, #tp.shard<1>>) -> tensor<?x64xf32, #tp.partial<sum>>
    %r = tp.all_reduce %p sum {module = "o_proj"} : tensor<?x64xf32, #tp.partial<sum>> -> tensor<?x64xf32, #tp.replicate>
    %h = tp.add "model.layers.0" %x, %r : (tensor<?x64xf32, #tp.replicate>, tensor<?x64xf32, #tp.replicate>) -> tensor<?x64xf32, #tp.replicate>
    return %h : tensor<?x64xf32, #tp.replicate>
  }
}

// -----

// Every kind, chained: each is replaced by its input, so the chain collapses to the argument.
// CHECK-LABEL: func.func @every_kind
// CHECK-SAME:    (%arg0: tensor<?x64xf32>, %arg1: tensor<?x64xf32>) -> (tensor<?x64xf32>, tensor<?x64xf32>)
// CHECK-NEXT:    return %arg0, %arg1 : tensor<?x64xf32>, tensor<?x64xf32>
module attributes {tp.mesh = #tp.mesh<tp = 1>} {
  func.func @every_kind(%x: tensor<?x64xf32, #tp.shard<0>>, %p: tensor<?x64xf32, #tp.partial<sum>>)
      -> (tensor<?x64xf32, #tp.replicate>, tensor<?x64xf32, #tp.shard<0>>) {
    %a = tp.all_to_all %x split_dim = 1 concat_dim = 0 : tensor<?x64xf32, #tp.shard<0>> -> tensor<?x64xf32, #tp.shard<1>>
    %g = tp.all_gather %a dim = 1 : tensor<?x64xf32, #tp.shard<1>> -> tensor<?x64xf32, #tp.replicate>
    %r = tp.redistribute %g : tensor<?x64xf32, #tp.replicate> -> tensor<?x64xf32, #tp.shard<0>>
    %b = tp.redistribute %r : tensor<?x64xf32, #tp.shard<0>> -> tensor<?x64xf32, #tp.replicate>
    %s = tp.reduce_scatter %p sum dim = 0 : tensor<?x64xf32, #tp.partial<sum>> -> tensor<?x64xf32, #tp.shard<0>>
    return %b, %s : tensor<?x64xf32, #tp.replicate>, tensor<?x64xf32, #tp.shard<0>>
  }
}

// -----

// Values inside a tp.fused unit lose their placements too, and so do the unit's results.
// CHECK-LABEL: func.func @nested
// CHECK-NEXT:    %[[F:.*]] = tp.fused elementwise -> tensor<?x64xf32> {
// CHECK-NEXT:      %[[S:.*]] = tp.silu "mlp" %arg0 : (tensor<?x64xf32>) -> tensor<?x64xf32>
// CHECK-NEXT:      %[[M:.*]] = tp.mul "mlp" %[[S]], %arg0 : (tensor<?x64xf32>, tensor<?x64xf32>) -> tensor<?x64xf32>
// CHECK-NEXT:      tp.yield %[[M]] : tensor<?x64xf32>
// CHECK-NEXT:    }
// CHECK-NEXT:    return %[[F]] : tensor<?x64xf32>
module attributes {tp.mesh = #tp.mesh<tp = 1>} {
  func.func @nested(%x: tensor<?x64xf32, #tp.shard<1>>) -> tensor<?x64xf32, #tp.replicate> {
    %f = tp.fused elementwise -> tensor<?x64xf32, #tp.shard<1>> {
      %s = tp.silu "mlp" %x : (tensor<?x64xf32, #tp.shard<1>>) -> tensor<?x64xf32, #tp.shard<1>>
      %m = tp.mul "mlp" %s, %x : (tensor<?x64xf32, #tp.shard<1>>, tensor<?x64xf32, #tp.shard<1>>) -> tensor<?x64xf32, #tp.shard<1>>
      tp.yield %m : tensor<?x64xf32, #tp.shard<1>>
    }
    %g = tp.all_gather %f dim = 1 : tensor<?x64xf32, #tp.shard<1>> -> tensor<?x64xf32, #tp.replicate>
    return %g : tensor<?x64xf32, #tp.replicate>
  }
}

// -----

// At tp 2 the collectives are real: nothing changes.
// CHECK-LABEL: func.func @two_ranks
// CHECK-SAME:    (%arg0: tensor<?x32xf32, #tp.shard<1>>) -> tensor<?x64xf32, #tp.replicate>
// CHECK-NEXT:    %[[W:.*]] = tp.weight @w : tensor<64x32xf32, #tp.shard<1>>
// CHECK-NEXT:    %[[P:.*]] = tp.linear "o_proj" %arg0, %[[W]] : (tensor<?x32xf32, #tp.shard<1>>, tensor<64x32xf32, #tp.shard<1>>) -> tensor<?x64xf32, #tp.partial<sum>>
// CHECK-NEXT:    %[[R:.*]] = tp.all_reduce %[[P]] sum {module = "o_proj"} : tensor<?x64xf32, #tp.partial<sum>> -> tensor<?x64xf32, #tp.replicate>
// CHECK-NEXT:    return %[[R]] : tensor<?x64xf32, #tp.replicate>
module attributes {tp.mesh = #tp.mesh<tp = 2>} {
  tp.param @w {placement = #tp.shard<-1>, shard = #tp.shard_desc<dim = 1, hf_shape = [64, 64], offsets = [0], sizes = [64], chunks = 2>} : tensor<64x32xf32>
  func.func @two_ranks(%x: tensor<?x32xf32, #tp.shard<1>>) -> tensor<?x64xf32, #tp.replicate> {
    %w = tp.weight @w : tensor<64x32xf32, #tp.shard<1>>
    %p = tp.linear "o_proj" %x, %w : (tensor<?x32xf32, #tp.shard<1>>, tensor<64x32xf32, #tp.shard<1>>) -> tensor<?x64xf32, #tp.partial<sum>>
    %r = tp.all_reduce %p sum {module = "o_proj"} : tensor<?x64xf32, #tp.partial<sum>> -> tensor<?x64xf32, #tp.replicate>
    return %r : tensor<?x64xf32, #tp.replicate>
  }
}
