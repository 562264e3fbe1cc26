// Attention with 6 query heads and 3 KV heads of 16, no rotary.
module @gqa3 {
  tp.param @"model.layers.0.self_attn.q_proj.weight" : tensor<96x96xf32>
  tp.param @"model.layers.0.self_attn.k_proj.weight" : tensor<48x96xf32>
  tp.param @"model.layers.0.self_attn.v_proj.weight" : tensor<48x96xf32>
  func.func @forward(%x: tensor<?x96xf32>) -> tensor<?x96xf32> {
    %wq = tp.weight @"model.layers.0.self_attn.q_proj.weight" : tensor<96x96xf32>
    %q = tp.linear "model.layers.0.self_attn.q_proj" %x, %wq : (tensor<?x96xf32>, tensor<96x96xf32>) -> tensor<?x96xf32>
    %wk = tp.weight @"model.layers.0.self_attn.k_proj.weight" : tensor<48x96xf32>
    %k = tp.linear "model.layers.0.self_attn.k_proj" %x, %wk : (tensor<?x96xf32>, tensor<48x96xf32>) -> tensor<?x48xf32>
    %wv = tp.weight @"model.layers.0.self_attn.v_proj.weight" : tensor<48x96xf32>
    %v = tp.linear "model.layers.0.self_attn.v_proj" %x, %wv : (tensor<?x96xf32>, tensor<48x96xf32>) -> tensor<?x48xf32>
    %a = tp.attention "model.layers.0.self_attn" %q, %k, %v {num_heads = 6 : i64, num_kv_heads = 3 : i64, head_dim = 16 : i64} : (tensor<?x96xf32>, tensor<?x48xf32>, tensor<?x48xf32>) -> tensor<?x96xf32>
    return %a : tensor<?x96xf32>
  }
}
