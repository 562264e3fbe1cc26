// What --target cuda must not fuse: a silu with two users (inlining it would compute it
// twice, or need a store the chain does not make), a norm that does not follow its chain
// (a linear runs in between), and query and key rotaries with different frequencies.
module @limits {
  tp.param @"embed.weight" : tensor<32x16xf32>
  tp.param @"norm.weight" : tensor<16xf32>
  tp.param @"q.weight" : tensor<16x16xf32>
  tp.param @"k.weight" : tensor<8x16xf32>
  tp.param @"v.weight" : tensor<8x16xf32>
  tp.param @"o.weight" : tensor<16x16xf32>
  tp.param @"head.weight" : tensor<32x16xf32>

  func.func @forward(%ids: tensor<?xi64>, %positions: tensor<?xi64>) -> tensor<?x32xf32> {
    %we = tp.weight @"embed.weight" : tensor<32x16xf32>
    %h = tp.embedding "embed" %ids, %we : (tensor<?xi64>, tensor<32x16xf32>) -> tensor<?x16xf32>
    %wq = tp.weight @"q.weight" : tensor<16x16xf32>
    %q = tp.linear "q" %h, %wq : (tensor<?x16xf32>, tensor<16x16xf32>) -> tensor<?x16xf32>
    %wk = tp.weight @"k.weight" : tensor<8x16xf32>
    %k = tp.linear "k" %h, %wk : (tensor<?x16xf32>, tensor<8x16xf32>) -> tensor<?x8xf32>
    %wv = tp.weight @"v.weight" : tensor<8x16xf32>
    %v = tp.linear "v" %h, %wv : (tensor<?x16xf32>, tensor<8x16xf32>) -> tensor<?x8xf32>
    %qr = tp.rotary "attn" %q, %positions {head_dim = 8 : i64, theta = 1.00000000000000000e+04 : f64} : (tensor<?x16xf32>, tensor<?xi64>) -> tensor<?x16xf32>
    %kr = tp.rotary "attn" %k, %positions {head_dim = 8 : i64, theta = 5.00000000000000000e+05 : f64} : (tensor<?x8xf32>, tensor<?xi64>) -> tensor<?x8xf32>
    %a = tp.attention "attn" %qr, %kr, %v {head_dim = 8 : i64, num_heads = 2 : i64, num_kv_heads = 1 : i64} : (tensor<?x16xf32>, tensor<?x8xf32>, tensor<?x8xf32>) -> tensor<?x16xf32>
    %s = tp.silu "mlp" %a : (tensor<?x16xf32>) -> tensor<?x16xf32>
    %m = tp.mul "mlp" %s, %h : (tensor<?x16xf32>, tensor<?x16xf32>) -> tensor<?x16xf32>
    %r = tp.add "mlp" %s, %m : (tensor<?x16xf32>, tensor<?x16xf32>) -> tensor<?x16xf32>
    %wo = tp.weight @"o.weight" : tensor<16x16xf32>
    %o = tp.linear "o" %r, %wo : (tensor<?x16xf32>, tensor<16x16xf32>) -> tensor<?x16xf32>
    %wn = tp.weight @"norm.weight" : tensor<16xf32>
    %n = tp.rms_norm "norm" %r, %wn {epsilon = 1.00000000000000008e-05 : f64} : (tensor<?x16xf32>, tensor<16xf32>) -> tensor<?x16xf32>
    %sum = tp.add "out" %n, %o : (tensor<?x16xf32>, tensor<?x16xf32>) -> tensor<?x16xf32>
    %wh = tp.weight @"head.weight" : tensor<32x16xf32>
    %logits = tp.linear "head" %sum, %wh : (tensor<?x16xf32>, tensor<32x16xf32>) -> tensor<?x32xf32>
    return %logits : tensor<?x32xf32>
  }
}
