// tp-group-linears on hand-written partitioned IR: the linears of one input that become one
// "linears" unit, and those that must not.
// RUN: tpc-opt %s -split-input-file --tp-group-linears | FileCheck %s

// q, k and v of one input: one unit in the place of v, yielding each result in order.
// CHECK-LABEL: func.func @qkv
// CHECK-NEXT:    %[[WQ:.*]] = tp.weight @q
// CHECK-NEXT:    %[[WK:.*]] = tp.weight @k
// CHECK-NEXT:    %[[WV:.*]] = tp.weight @v
// CHECK-NEXT:    %[[U:.*]]:3 = tp.fused linears -> tensor<?x32xf32, #tp.shard<1>>, tensor<?x16xf32, #tp.shard<1>>, tensor<?x16xf32, #tp.shard<1>> {
// CHECK-NEXT:      %[[Q:.*]] = tp.linear "q_proj" %arg0, %[[WQ]]
// CHECK-NEXT:      %[[K:.*]] = tp.linear "k_proj" %arg0, %[[WK]]
// CHECK-NEXT:      %[[V:.*]] = tp.linear "v_proj" %arg0, %[[WV]]
// CHECK-NEXT:      tp.yield %[[Q]], %[[K]], %[[V]]
// CHECK-NEXT:    }
// CHECK-NEXT:    tp.attention "attn" %[[U]]#0, %[[U]]#1, %[[U]]#2
module attributes {tp.mesh = #tp.mesh<tp = 2>} {
  tp.param @q {placement = #tp.shard<-2>} : tensor<32x64xf32>
  tp.param @k {placement = #tp.shard<-2>} : tensor<16x64xf32>
  tp.param @v {placement = #tp.shard<-2>} : tensor<16x64xf32>
  func.func @qkv(%x: tensor<?x64xf32, #tp.replicate>) -> tensor<?x32xf32, #tp.shard<1>> {
    %wq = tp.weight @q : tensor<32x64xf32, #tp.shard<0>>
    %q = tp.linear "q_proj" %x, %wq : (tensor<?x64xf32, #tp.replicate>, tensor<32x64xf32, #tp.shard<0>>) -> tensor<?x32xf32, #tp.shard<1>>
    %wk = tp.weight @k : tensor<16x64xf32, #tp.shard<0>>
    %k = tp.linear "k_proj" %x, %wk : (tensor<?x64xf32, #tp.replicate>, tensor<16x64xf32, #tp.shard<0>>) -> tensor<?x16xf32, #tp.shard<1>>
    %wv = tp.weight @v : tensor<16x64xf32, #tp.shard<0>>
    %v = tp.linear "v_proj" %x, %wv : (tensor<?x64xf32, #tp.replicate>, tensor<16x64xf32, #tp.shard<0>>) -> tensor<?x16xf32, #tp.shard<1>>
    %o = tp.attention "attn" %q, %k, %v {head_dim = 16 : i64, num_heads = 2 : i64, num_kv_heads = 1 : i64} : (tensor<?x32xf32, #tp.shard<1>>, tensor<?x16xf32, #tp.shard<1>>, tensor<?x16xf32, #tp.shard<1>>) -> tensor<?x32xf32, #tp.shard<1>>
    return %o : tensor<?x32xf32, #tp.shard<1>>
  }
}

// -----

// Biases on every member (Qwen2's q, k, v): grouped, the biases with them.
// CHECK-LABEL: func.func @biased
// CHECK:         tp.fused linears
// CHECK-NEXT:      tp.linear "q_proj" %arg0, %{{.*}}, %{{.*}}
// CHECK-NEXT:      tp.linear "k_proj" %arg0, %{{.*}}, %{{.*}}
module {
  tp.param @q : tensor<32x64xf32>
  tp.param @qb : tensor<32xf32>
  tp.param @k : tensor<16x64xf32>
  tp.param @kb : tensor<16xf32>
  func.func @biased(%x: tensor<?x64xf32>) -> (tensor<?x32xf32>, tensor<?x16xf32>) {
    %wq = tp.weight @q : tensor<32x64xf32>
    %bq = tp.weight @qb : tensor<32xf32>
    %q = tp.linear "q_proj" %x, %wq, %bq : (tensor<?x64xf32>, tensor<32x64xf32>, tensor<32xf32>) -> tensor<?x32xf32>
    %wk = tp.weight @k : tensor<16x64xf32>
    %bk = tp.weight @kb : tensor<16xf32>
    %k = tp.linear "k_proj" %x, %wk, %bk : (tensor<?x64xf32>, tensor<16x64xf32>, tensor<16xf32>) -> tensor<?x16xf32>
    return %q, %k : tensor<?x32xf32>, tensor<?x16xf32>
  }
}

// -----

// A bias on some members only is no one GEMM's epilogue: left alone.
// CHECK-LABEL: func.func @bias_on_some
// CHECK-NOT:     tp.fused
// CHECK:         return
module {
  tp.param @q : tensor<32x64xf32>
  tp.param @qb : tensor<32xf32>
  tp.param @k : tensor<16x64xf32>
  func.func @bias_on_some(%x: tensor<?x64xf32>) -> (tensor<?x32xf32>, tensor<?x16xf32>) {
    %wq = tp.weight @q : tensor<32x64xf32>
    %bq = tp.weight @qb : tensor<32xf32>
    %q = tp.linear "q_proj" %x, %wq, %bq : (tensor<?x64xf32>, tensor<32x64xf32>, tensor<32xf32>) -> tensor<?x32xf32>
    %wk = tp.weight @k : tensor<16x64xf32>
    %k = tp.linear "k_proj" %x, %wk : (tensor<?x64xf32>, tensor<16x64xf32>) -> tensor<?x16xf32>
    return %q, %k : tensor<?x32xf32>, tensor<?x16xf32>
  }
}

// -----

// Partial results with biases: rank 0 alone adds them (after the reduce they count once),
// which is no one GEMM's epilogue either.
// CHECK-LABEL: func.func @partial_with_bias
// CHECK-NOT:     tp.fused
// CHECK:         return
module attributes {tp.mesh = #tp.mesh<tp = 2>} {
  tp.param @a {placement = #tp.shard<-1>} : tensor<64x32xf32>
  tp.param @ab : tensor<64xf32>
  tp.param @b {placement = #tp.shard<-1>} : tensor<64x32xf32>
  tp.param @bb : tensor<64xf32>
  func.func @partial_with_bias(%x: tensor<?x32xf32, #tp.shard<1>>) -> (tensor<?x64xf32, #tp.partial<sum>>, tensor<?x64xf32, #tp.partial<sum>>) {
    %wa = tp.weight @a : tensor<64x32xf32, #tp.shard<1>>
    %ba = tp.weight @ab : tensor<64xf32, #tp.replicate>
    %a = tp.linear "a_proj" %x, %wa, %ba : (tensor<?x32xf32, #tp.shard<1>>, tensor<64x32xf32, #tp.shard<1>>, tensor<64xf32, #tp.replicate>) -> tensor<?x64xf32, #tp.partial<sum>>
    %wb = tp.weight @b : tensor<64x32xf32, #tp.shard<1>>
    %bb = tp.weight @bb : tensor<64xf32, #tp.replicate>
    %b = tp.linear "b_proj" %x, %wb, %bb : (tensor<?x32xf32, #tp.shard<1>>, tensor<64x32xf32, #tp.shard<1>>, tensor<64xf32, #tp.replicate>) -> tensor<?x64xf32, #tp.partial<sum>>
    return %a, %b : tensor<?x64xf32, #tp.partial<sum>>, tensor<?x64xf32, #tp.partial<sum>>
  }
}

// -----

// An input split by tokens (sequence parallelism): its rows are not the arena's row stride.
// CHECK-LABEL: func.func @split_by_tokens
// CHECK-NOT:     tp.fused
// CHECK:         return
module attributes {tp.mesh = #tp.mesh<tp = 2>} {
  tp.param @gate : tensor<64x64xf32>
  tp.param @up : tensor<64x64xf32>
  func.func @split_by_tokens(%x: tensor<?x64xf32, #tp.shard<0>>) -> (tensor<?x64xf32, #tp.shard<0>>, tensor<?x64xf32, #tp.shard<0>>) {
    %wg = tp.weight @gate : tensor<64x64xf32, #tp.replicate>
    %g = tp.linear "gate_proj" %x, %wg : (tensor<?x64xf32, #tp.shard<0>>, tensor<64x64xf32, #tp.replicate>) -> tensor<?x64xf32, #tp.shard<0>>
    %wu = tp.weight @up : tensor<64x64xf32, #tp.replicate>
    %u = tp.linear "up_proj" %x, %wu : (tensor<?x64xf32, #tp.shard<0>>, tensor<64x64xf32, #tp.replicate>) -> tensor<?x64xf32, #tp.shard<0>>
    return %g, %u : tensor<?x64xf32, #tp.shard<0>>, tensor<?x64xf32, #tp.shard<0>>
  }
}

// -----

// A result read before the last member: the unit, standing in the last member's place,
// would come too late for that reader.
// CHECK-LABEL: func.func @read_early
// CHECK-NOT:     tp.fused
// CHECK:         return
module {
  tp.param @gate : tensor<64x64xf32>
  tp.param @up : tensor<64x64xf32>
  func.func @read_early(%x: tensor<?x64xf32>) -> tensor<?x64xf32> {
    %wg = tp.weight @gate : tensor<64x64xf32>
    %g = tp.linear "gate_proj" %x, %wg : (tensor<?x64xf32>, tensor<64x64xf32>) -> tensor<?x64xf32>
    %s = tp.silu "mlp" %g : (tensor<?x64xf32>) -> tensor<?x64xf32>
    %wu = tp.weight @up : tensor<64x64xf32>
    %u = tp.linear "up_proj" %x, %wu : (tensor<?x64xf32>, tensor<64x64xf32>) -> tensor<?x64xf32>
    %m = tp.mul "mlp" %s, %u : (tensor<?x64xf32>, tensor<?x64xf32>) -> tensor<?x64xf32>
    return %m : tensor<?x64xf32>
  }
}

// -----

// The same, with the early reader inside a unit tp-fuse made (it runs before tp-group-linears
// in the pipeline): still read early.
// CHECK-LABEL: func.func @read_early_in_unit
// CHECK:         tp.fused elementwise
// CHECK-NOT:     tp.fused
// CHECK:         return
module {
  tp.param @gate : tensor<64x64xf32>
  tp.param @up : tensor<64x64xf32>
  func.func @read_early_in_unit(%x: tensor<?x64xf32>) -> (tensor<?x64xf32>, tensor<?x64xf32>) {
    %wg = tp.weight @gate : tensor<64x64xf32>
    %g = tp.linear "gate_proj" %x, %wg : (tensor<?x64xf32>, tensor<64x64xf32>) -> tensor<?x64xf32>
    %f = tp.fused elementwise -> tensor<?x64xf32> {
      %s = tp.silu "mlp" %g : (tensor<?x64xf32>) -> tensor<?x64xf32>
      %c = tp.scale "mlp" %s {factor = 2.0 : f64} : (tensor<?x64xf32>) -> tensor<?x64xf32>
      tp.yield %c : tensor<?x64xf32>
    }
    %wu = tp.weight @up : tensor<64x64xf32>
    %u = tp.linear "up_proj" %x, %wu : (tensor<?x64xf32>, tensor<64x64xf32>) -> tensor<?x64xf32>
    return %f, %u : tensor<?x64xf32>, tensor<?x64xf32>
  }
}

// -----

// A parameter's weights lie in one place: once in a group, it joins no other. The second
// input's pair shares @a with the first group and stays apart; in another function the same
// group forms again.
// CHECK-LABEL: func.func @forward
// CHECK:         tp.fused linears
// CHECK-NEXT:      tp.linear "a" %arg0
// CHECK-NEXT:      tp.linear "b" %arg0
// CHECK:         tp.linear "a" %arg1
// CHECK-NEXT:    tp.weight @c
// CHECK-NEXT:    tp.linear "c" %arg1
// CHECK-NEXT:    return
// CHECK-LABEL: func.func @again
// CHECK:         tp.fused linears
// CHECK-NEXT:      tp.linear "a" %arg0
// CHECK-NEXT:      tp.linear "b" %arg0
module {
  tp.param @a : tensor<16x64xf32>
  tp.param @b : tensor<16x64xf32>
  tp.param @c : tensor<16x64xf32>
  func.func @forward(%x: tensor<?x64xf32>, %y: tensor<?x64xf32>) -> (tensor<?x16xf32>, tensor<?x16xf32>, tensor<?x16xf32>, tensor<?x16xf32>) {
    %wa = tp.weight @a : tensor<16x64xf32>
    %xa = tp.linear "a" %x, %wa : (tensor<?x64xf32>, tensor<16x64xf32>) -> tensor<?x16xf32>
    %wb = tp.weight @b : tensor<16x64xf32>
    %xb = tp.linear "b" %x, %wb : (tensor<?x64xf32>, tensor<16x64xf32>) -> tensor<?x16xf32>
    %ya = tp.linear "a" %y, %wa : (tensor<?x64xf32>, tensor<16x64xf32>) -> tensor<?x16xf32>
    %wc = tp.weight @c : tensor<16x64xf32>
    %yc = tp.linear "c" %y, %wc : (tensor<?x64xf32>, tensor<16x64xf32>) -> tensor<?x16xf32>
    return %xa, %xb, %ya, %yc : tensor<?x16xf32>, tensor<?x16xf32>, tensor<?x16xf32>, tensor<?x16xf32>
  }
  func.func @again(%x: tensor<?x64xf32>) -> (tensor<?x16xf32>, tensor<?x16xf32>) {
    %wa = tp.weight @a : tensor<16x64xf32>
    %xa = tp.linear "a" %x, %wa : (tensor<?x64xf32>, tensor<16x64xf32>) -> tensor<?x16xf32>
    %wb = tp.weight @b : tensor<16x64xf32>
    %xb = tp.linear "b" %x, %wb : (tensor<?x64xf32>, tensor<16x64xf32>) -> tensor<?x16xf32>
    return %xa, %xb : tensor<?x16xf32>, tensor<?x16xf32>
  }
}

// -----

// In the other order, the first function's group is the one that stands: @again's {a, c}
// would overlap {a, b}.
// CHECK-LABEL: func.func @first
// CHECK:         tp.fused linears
// CHECK-LABEL: func.func @second
// CHECK-NOT:     tp.fused
// CHECK:         return
module {
  tp.param @a : tensor<16x64xf32>
  tp.param @b : tensor<16x64xf32>
  tp.param @c : tensor<16x64xf32>
  func.func @first(%x: tensor<?x64xf32>) -> (tensor<?x16xf32>, tensor<?x16xf32>) {
    %wa = tp.weight @a : tensor<16x64xf32>
    %xa = tp.linear "a" %x, %wa : (tensor<?x64xf32>, tensor<16x64xf32>) -> tensor<?x16xf32>
    %wb = tp.weight @b : tensor<16x64xf32>
    %xb = tp.linear "b" %x, %wb : (tensor<?x64xf32>, tensor<16x64xf32>) -> tensor<?x16xf32>
    return %xa, %xb : tensor<?x16xf32>, tensor<?x16xf32>
  }
  func.func @second(%x: tensor<?x64xf32>) -> (tensor<?x16xf32>, tensor<?x16xf32>) {
    %wa = tp.weight @a : tensor<16x64xf32>
    %xa = tp.linear "a" %x, %wa : (tensor<?x64xf32>, tensor<16x64xf32>) -> tensor<?x16xf32>
    %wc = tp.weight @c : tensor<16x64xf32>
    %xc = tp.linear "c" %x, %wc : (tensor<?x64xf32>, tensor<16x64xf32>) -> tensor<?x16xf32>
    return %xa, %xc : tensor<?x16xf32>, tensor<?x16xf32>
  }
}
