// A Mixtral-shaped layer, no norms: attention (4 and 2 KV heads of 16), a router (mlp.gate),
// experts stored as [E, 2 * intermediate, hidden] and [E, hidden, intermediate] (transformers
// 5). The plan tests need the parameters, and a forward, as tpc check compiles it.
module @tiny_mixtral {
  tp.param @"model.embed_tokens.weight" : tensor<256x64xf32>
  tp.param @"model.layers.0.self_attn.q_proj.weight" : tensor<64x64xf32>
  tp.param @"model.layers.0.self_attn.k_proj.weight" : tensor<32x64xf32>
  tp.param @"model.layers.0.self_attn.v_proj.weight" : tensor<32x64xf32>
  tp.param @"model.layers.0.self_attn.o_proj.weight" : tensor<64x64xf32>
  tp.param @"model.layers.0.mlp.gate.weight" : tensor<4x64xf32>
  tp.param @"model.layers.0.mlp.experts.gate_up_proj" : tensor<4x256x64xf32>
  tp.param @"model.layers.0.mlp.experts.down_proj" : tensor<4x64x128xf32>
  tp.param @"lm_head.weight" : tensor<256x64xf32>

  func.func @forward(%ids: tensor<?xi64>, %positions: tensor<?xi64>) -> tensor<?x256xf32> {
    %we = tp.weight @"model.embed_tokens.weight" : tensor<256x64xf32>
    %h0 = tp.embedding "model.embed_tokens" %ids, %we : (tensor<?xi64>, tensor<256x64xf32>) -> tensor<?x64xf32>
    %wq = tp.weight @"model.layers.0.self_attn.q_proj.weight" : tensor<64x64xf32>
    %q = tp.linear "model.layers.0.self_attn.q_proj" %h0, %wq : (tensor<?x64xf32>, tensor<64x64xf32>) -> tensor<?x64xf32>
    %wk = tp.weight @"model.layers.0.self_attn.k_proj.weight" : tensor<32x64xf32>
    %k = tp.linear "model.layers.0.self_attn.k_proj" %h0, %wk : (tensor<?x64xf32>, tensor<32x64xf32>) -> tensor<?x32xf32>
    %wv = tp.weight @"model.layers.0.self_attn.v_proj.weight" : tensor<32x64xf32>
    %v = tp.linear "model.layers.0.self_attn.v_proj" %h0, %wv : (tensor<?x64xf32>, tensor<32x64xf32>) -> tensor<?x32xf32>
    %qr = tp.rotary "model.layers.0.self_attn" %q, %positions {head_dim = 16 : i64, theta = 1.0e+06 : f64} : (tensor<?x64xf32>, tensor<?xi64>) -> tensor<?x64xf32>
    %kr = tp.rotary "model.layers.0.self_attn" %k, %positions {head_dim = 16 : i64, theta = 1.0e+06 : f64} : (tensor<?x32xf32>, tensor<?xi64>) -> tensor<?x32xf32>
    %attn = tp.attention "model.layers.0.self_attn" %qr, %kr, %v {head_dim = 16 : i64, num_heads = 4 : i64, num_kv_heads = 2 : i64} : (tensor<?x64xf32>, tensor<?x32xf32>, tensor<?x32xf32>) -> tensor<?x64xf32>
    %wo = tp.weight @"model.layers.0.self_attn.o_proj.weight" : tensor<64x64xf32>
    %o = tp.linear "model.layers.0.self_attn.o_proj" %attn, %wo : (tensor<?x64xf32>, tensor<64x64xf32>) -> tensor<?x64xf32>
    %h1 = tp.add "model.layers.0" %h0, %o : (tensor<?x64xf32>, tensor<?x64xf32>) -> tensor<?x64xf32>
    %wg = tp.weight @"model.layers.0.mlp.gate.weight" : tensor<4x64xf32>
    %routing = tp.router "model.layers.0.mlp.gate" %h1, %wg {top_k = 2 : i64} : (tensor<?x64xf32>, tensor<4x64xf32>) -> tensor<?x4xf32>
    %wgu = tp.weight @"model.layers.0.mlp.experts.gate_up_proj" : tensor<4x256x64xf32>
    %wd = tp.weight @"model.layers.0.mlp.experts.down_proj" : tensor<4x64x128xf32>
    %moe = tp.experts "model.layers.0.mlp.experts" %h1, %routing, %wgu, %wd : (tensor<?x64xf32>, tensor<?x4xf32>, tensor<4x256x64xf32>, tensor<4x64x128xf32>) -> tensor<?x64xf32>
    %h2 = tp.add "model.layers.0" %h1, %moe : (tensor<?x64xf32>, tensor<?x64xf32>) -> tensor<?x64xf32>
    %wl = tp.weight @"lm_head.weight" : tensor<256x64xf32>
    %logits = tp.linear "lm_head" %h2, %wl : (tensor<?x64xf32>, tensor<256x64xf32>) -> tensor<?x256xf32>
    return %logits : tensor<?x256xf32>
  }
}
