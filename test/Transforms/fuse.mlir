// tp-fuse on hand-written partitioned IR: each kind of unit, each option turning its kind
// off, and the chains that must stay apart.
// RUN: tpc-opt %s -split-input-file --tp-fuse | FileCheck %s
// RUN: tpc-opt %s -split-input-file --tp-fuse="elementwise=false" | FileCheck %s --check-prefix=NOEW
// RUN: tpc-opt %s -split-input-file --tp-fuse="norm=false" | FileCheck %s --check-prefix=NONORM
// RUN: tpc-opt %s -split-input-file --tp-fuse="rotary=false" | FileCheck %s --check-prefix=NOROT

// SwiGLU: silu(gate) * up is one kernel that stores the product only.
// CHECK-LABEL: func.func @swiglu
// CHECK-NEXT:    %[[F:.*]] = tp.fused elementwise -> tensor<?x64xf32, #tp.shard<1>> {
// CHECK-NEXT:      %[[S:.*]] = tp.silu "mlp" %arg0
// CHECK-NEXT:      %[[M:.*]] = tp.mul "mlp" %[[S]], %arg1
// CHECK-NEXT:      tp.yield %[[M]] : tensor<?x64xf32, #tp.shard<1>>
// CHECK-NEXT:    }
// CHECK-NEXT:    return %[[F]]
// NOEW-LABEL: func.func @swiglu
// NOEW-NOT:     tp.fused
// NOEW:         return
// NONORM-LABEL: func.func @swiglu
// NONORM-NEXT:    tp.fused elementwise
// NOROT-LABEL: func.func @swiglu
// NOROT-NEXT:    tp.fused elementwise
module attributes {tp.mesh = #tp.mesh<tp = 2>} {
  func.func @swiglu(%gate: tensor<?x64xf32, #tp.shard<1>>, %up: tensor<?x64xf32, #tp.shard<1>>) -> tensor<?x64xf32, #tp.shard<1>> {
    %s = tp.silu "mlp" %gate : (tensor<?x64xf32, #tp.shard<1>>) -> tensor<?x64xf32, #tp.shard<1>>
    %m = tp.mul "mlp" %s, %up : (tensor<?x64xf32, #tp.shard<1>>, tensor<?x64xf32, #tp.shard<1>>) -> tensor<?x64xf32, #tp.shard<1>>
    return %m : tensor<?x64xf32, #tp.shard<1>>
  }
}

// -----

// Pre-norm: the residual add and the next RMSNorm (only its weight in between) are one
// kernel that stores both, the sum being the residual stream. Without elementwise fusion
// the add is a chain of one, and still takes the norm.
// CHECK-LABEL: func.func @residual_norm
// CHECK-NEXT:    %[[W:.*]] = tp.weight @norm : tensor<64xf32>
// CHECK-NEXT:    %[[F:.*]]:2 = tp.fused norm -> tensor<?x64xf32>, tensor<?x64xf32> {
// CHECK-NEXT:      %[[S:.*]] = tp.add "model.layers.0" %arg0, %arg1
// CHECK-NEXT:      %[[N:.*]] = tp.rms_norm "model.layers.1.input_layernorm" %[[S]], %[[W]]
// CHECK-NEXT:      tp.yield %[[S]], %[[N]] : tensor<?x64xf32>, tensor<?x64xf32>
// CHECK-NEXT:    }
// CHECK-NEXT:    return %[[F]]#0, %[[F]]#1
// NOEW-LABEL: func.func @residual_norm
// NOEW:         tp.fused norm
// NONORM-LABEL: func.func @residual_norm
// NONORM-NOT:     tp.fused
// NONORM:         return
module {
  tp.param @norm : tensor<64xf32>
  func.func @residual_norm(%a: tensor<?x64xf32>, %b: tensor<?x64xf32>) -> (tensor<?x64xf32>, tensor<?x64xf32>) {
    %s = tp.add "model.layers.0" %a, %b : (tensor<?x64xf32>, tensor<?x64xf32>) -> tensor<?x64xf32>
    %w = tp.weight @norm : tensor<64xf32>
    %n = tp.rms_norm "model.layers.1.input_layernorm" %s, %w {epsilon = 1.0e-05 : f64} : (tensor<?x64xf32>, tensor<64xf32>) -> tensor<?x64xf32>
    return %s, %n : tensor<?x64xf32>, tensor<?x64xf32>
  }
}

// -----

// A chain of two before the norm: the kernel computes both and the norm; the scale is never
// stored. With norm fusion off, the chain is an elementwise unit and the norm its own op.
// CHECK-LABEL: func.func @chain_norm
// CHECK:         %[[F:.*]]:2 = tp.fused norm -> tensor<?x64xf32>, tensor<?x64xf32> {
// CHECK-NEXT:      %[[C:.*]] = tp.scale "model" %arg0
// CHECK-NEXT:      %[[S:.*]] = tp.add "model.layers.0" %[[C]], %arg1
// CHECK-NEXT:      %[[N:.*]] = tp.rms_norm
// CHECK-NEXT:      tp.yield %[[S]], %[[N]]
// NONORM-LABEL: func.func @chain_norm
// NONORM:         %[[E:.*]] = tp.fused elementwise -> tensor<?x64xf32> {
// NONORM-NEXT:      tp.scale
// NONORM-NEXT:      tp.add
// NONORM-NEXT:      tp.yield
// NONORM-NEXT:    }
// NONORM-NEXT:    tp.rms_norm "model.layers.0.input_layernorm" %[[E]]
// NOEW-LABEL: func.func @chain_norm
// NOEW:         tp.scale "model" %arg0
// NOEW-NEXT:    %[[W:.*]] = tp.weight
// NOEW-NEXT:    tp.fused norm
// NOEW-NEXT:      tp.add
// NOEW-NEXT:      tp.rms_norm
module {
  tp.param @norm : tensor<64xf32>
  func.func @chain_norm(%a: tensor<?x64xf32>, %b: tensor<?x64xf32>) -> (tensor<?x64xf32>, tensor<?x64xf32>) {
    %c = tp.scale "model" %a {factor = 8.0 : f64} : (tensor<?x64xf32>) -> tensor<?x64xf32>
    %w = tp.weight @norm : tensor<64xf32>
    %s = tp.add "model.layers.0" %c, %b : (tensor<?x64xf32>, tensor<?x64xf32>) -> tensor<?x64xf32>
    %n = tp.rms_norm "model.layers.0.input_layernorm" %s, %w {epsilon = 1.0e-05 : f64} : (tensor<?x64xf32>, tensor<64xf32>) -> tensor<?x64xf32>
    return %s, %n : tensor<?x64xf32>, tensor<?x64xf32>
  }
}

// -----

// The query and key rotaries of one attention, at the same positions and frequencies, are
// one kernel; the unit stands where the later one stood.
// CHECK-LABEL: func.func @rotary
// CHECK-NEXT:    %[[R:.*]]:2 = tp.fused rotary -> tensor<?x32xf32, #tp.shard<1>>, tensor<?x16xf32, #tp.shard<1>> {
// CHECK-NEXT:      %[[Q:.*]] = tp.rotary "attn" %arg0, %arg3
// CHECK-NEXT:      %[[K:.*]] = tp.rotary "attn" %arg1, %arg3
// CHECK-NEXT:      tp.yield %[[Q]], %[[K]]
// CHECK-NEXT:    }
// CHECK-NEXT:    tp.attention "attn" %[[R]]#0, %[[R]]#1, %arg2
// NOEW-LABEL: func.func @rotary
// NOEW-NEXT:    tp.fused rotary
// NOROT-LABEL: func.func @rotary
// NOROT-NOT:     tp.fused
// NOROT:         return
module attributes {tp.mesh = #tp.mesh<tp = 2>} {
  func.func @rotary(%q: tensor<?x32xf32, #tp.shard<1>>, %k: tensor<?x16xf32, #tp.shard<1>>, %v: tensor<?x16xf32, #tp.shard<1>>, %pos: tensor<?xi64, #tp.replicate>) -> tensor<?x32xf32, #tp.shard<1>> {
    %rq = tp.rotary "attn" %q, %pos {head_dim = 16 : i64, theta = 1.0e+04 : f64} : (tensor<?x32xf32, #tp.shard<1>>, tensor<?xi64, #tp.replicate>) -> tensor<?x32xf32, #tp.shard<1>>
    %rk = tp.rotary "attn" %k, %pos {head_dim = 16 : i64, theta = 1.0e+04 : f64} : (tensor<?x16xf32, #tp.shard<1>>, tensor<?xi64, #tp.replicate>) -> tensor<?x16xf32, #tp.shard<1>>
    %o = tp.attention "attn" %rq, %rk, %v {head_dim = 16 : i64, num_heads = 2 : i64, num_kv_heads = 1 : i64} : (tensor<?x32xf32, #tp.shard<1>>, tensor<?x16xf32, #tp.shard<1>>, tensor<?x16xf32, #tp.shard<1>>) -> tensor<?x32xf32, #tp.shard<1>>
    return %o : tensor<?x32xf32, #tp.shard<1>>
  }
}

// -----

// A value with two users is stored: silu feeds the mul and is returned, so it is no part of
// the mul's kernel (and a chain of one op is no unit).
// CHECK-LABEL: func.func @two_users
// CHECK-NOT:     tp.fused
// CHECK:         return
module {
  func.func @two_users(%gate: tensor<?x64xf32>, %up: tensor<?x64xf32>) -> (tensor<?x64xf32>, tensor<?x64xf32>) {
    %s = tp.silu "mlp" %gate : (tensor<?x64xf32>) -> tensor<?x64xf32>
    %m = tp.mul "mlp" %s, %up : (tensor<?x64xf32>, tensor<?x64xf32>) -> tensor<?x64xf32>
    return %s, %m : tensor<?x64xf32>, tensor<?x64xf32>
  }
}

// -----

// An rms_norm separated from its chain by an op other than a weight is no part of it: the
// norm's output could not take its slot as early as the chain's.
// CHECK-LABEL: func.func @norm_not_adjacent
// CHECK-NOT:     tp.fused
// CHECK:         return
module {
  tp.param @norm : tensor<64xf32>
  tp.param @proj : tensor<64x64xf32>
  func.func @norm_not_adjacent(%a: tensor<?x64xf32>, %b: tensor<?x64xf32>) -> (tensor<?x64xf32>, tensor<?x64xf32>) {
    %s = tp.add "model.layers.0" %a, %b : (tensor<?x64xf32>, tensor<?x64xf32>) -> tensor<?x64xf32>
    %wp = tp.weight @proj : tensor<64x64xf32>
    %p = tp.linear "other" %a, %wp : (tensor<?x64xf32>, tensor<64x64xf32>) -> tensor<?x64xf32>
    %w = tp.weight @norm : tensor<64xf32>
    %n = tp.rms_norm "model.layers.1.input_layernorm" %s, %w {epsilon = 1.0e-05 : f64} : (tensor<?x64xf32>, tensor<64xf32>) -> tensor<?x64xf32>
    return %p, %n : tensor<?x64xf32>, tensor<?x64xf32>
  }
}

// -----

// Rotaries with different frequencies are different kernels: another theta...
// CHECK-LABEL: func.func @rotary_other_theta
// CHECK-NOT:     tp.fused
// CHECK:         return
module {
  func.func @rotary_other_theta(%q: tensor<?x32xf32>, %k: tensor<?x16xf32>, %v: tensor<?x16xf32>, %pos: tensor<?xi64>) -> tensor<?x32xf32> {
    %rq = tp.rotary "attn" %q, %pos {head_dim = 16 : i64, theta = 1.0e+04 : f64} : (tensor<?x32xf32>, tensor<?xi64>) -> tensor<?x32xf32>
    %rk = tp.rotary "attn" %k, %pos {head_dim = 16 : i64, theta = 5.0e+05 : f64} : (tensor<?x16xf32>, tensor<?xi64>) -> tensor<?x16xf32>
    %o = tp.attention "attn" %rq, %rk, %v {head_dim = 16 : i64, num_heads = 2 : i64, num_kv_heads = 1 : i64} : (tensor<?x32xf32>, tensor<?x16xf32>, tensor<?x16xf32>) -> tensor<?x32xf32>
    return %o : tensor<?x32xf32>
  }
}

// -----

// ... or other inverse frequencies (a scaled RoPE on one of them only).
// CHECK-LABEL: func.func @rotary_other_inv_freq
// CHECK-NOT:     tp.fused
// CHECK:         return
module {
  func.func @rotary_other_inv_freq(%q: tensor<?x8xf32>, %k: tensor<?x8xf32>, %v: tensor<?x8xf32>, %pos: tensor<?xi64>) -> tensor<?x8xf32> {
    %rq = tp.rotary "attn" %q, %pos {head_dim = 4 : i64, theta = 1.0e+04 : f64, inv_freq = array<f64: 1.0, 0.01>} : (tensor<?x8xf32>, tensor<?xi64>) -> tensor<?x8xf32>
    %rk = tp.rotary "attn" %k, %pos {head_dim = 4 : i64, theta = 1.0e+04 : f64} : (tensor<?x8xf32>, tensor<?xi64>) -> tensor<?x8xf32>
    %o = tp.attention "attn" %rq, %rk, %v {head_dim = 4 : i64, num_heads = 2 : i64, num_kv_heads = 2 : i64} : (tensor<?x8xf32>, tensor<?x8xf32>, tensor<?x8xf32>) -> tensor<?x8xf32>
    return %o : tensor<?x8xf32>
  }
}

// -----

// ... or other positions.
// CHECK-LABEL: func.func @rotary_other_positions
// CHECK-NOT:     tp.fused
// CHECK:         return
module {
  func.func @rotary_other_positions(%q: tensor<?x8xf32>, %k: tensor<?x8xf32>, %v: tensor<?x8xf32>, %pq: tensor<?xi64>, %pk: tensor<?xi64>) -> tensor<?x8xf32> {
    %rq = tp.rotary "attn" %q, %pq {head_dim = 4 : i64, theta = 1.0e+04 : f64} : (tensor<?x8xf32>, tensor<?xi64>) -> tensor<?x8xf32>
    %rk = tp.rotary "attn" %k, %pk {head_dim = 4 : i64, theta = 1.0e+04 : f64} : (tensor<?x8xf32>, tensor<?xi64>) -> tensor<?x8xf32>
    %o = tp.attention "attn" %rq, %rk, %v {head_dim = 4 : i64, num_heads = 2 : i64, num_kv_heads = 2 : i64} : (tensor<?x8xf32>, tensor<?x8xf32>, tensor<?x8xf32>) -> tensor<?x8xf32>
    return %o : tensor<?x8xf32>
  }
}
