// A one-layer Phi3-shaped model: fused qkv_proj [q | k | v] (GQA) and gate_up_proj [gate | up].
module @tiny_phi3 {
  tp.param @"model.embed_tokens.weight" : tensor<256x64xf32>
  tp.param @"model.layers.0.input_layernorm.weight" : tensor<64xf32>
  tp.param @"model.layers.0.self_attn.qkv_proj.weight" : tensor<128x64xf32>
  tp.param @"model.layers.0.self_attn.o_proj.weight" : tensor<64x64xf32>
  tp.param @"model.layers.0.post_attention_layernorm.weight" : tensor<64xf32>
  tp.param @"model.layers.0.mlp.gate_up_proj.weight" : tensor<256x64xf32>
  tp.param @"model.layers.0.mlp.down_proj.weight" : tensor<64x128xf32>
  tp.param @"model.norm.weight" : tensor<64xf32>
  tp.param @"lm_head.weight" : tensor<256x64xf32>
  func.func @forward(%ids: tensor<?xi64>, %pos: tensor<?xi64>) -> tensor<?x256xf32> {
    %we = tp.weight @"model.embed_tokens.weight" : tensor<256x64xf32>
    %h = tp.embedding "model.embed_tokens" %ids, %we : (tensor<?xi64>, tensor<256x64xf32>) -> tensor<?x64xf32>
    %wn1 = tp.weight @"model.layers.0.input_layernorm.weight" : tensor<64xf32>
    %n1 = tp.rms_norm "model.layers.0.input_layernorm" %h, %wn1 {epsilon = 1.0e-05 : f64} : (tensor<?x64xf32>, tensor<64xf32>) -> tensor<?x64xf32>
    %wqkv = tp.weight @"model.layers.0.self_attn.qkv_proj.weight" : tensor<128x64xf32>
    %qkv = tp.linear "model.layers.0.self_attn.qkv_proj" %n1, %wqkv : (tensor<?x64xf32>, tensor<128x64xf32>) -> tensor<?x128xf32>
    %q = tp.slice "model.layers.0.self_attn" %qkv {dim = -1 : i64, offset = 0 : i64, size = 64 : i64} : (tensor<?x128xf32>) -> tensor<?x64xf32>
    %k = tp.slice "model.layers.0.self_attn" %qkv {dim = -1 : i64, offset = 64 : i64, size = 32 : i64} : (tensor<?x128xf32>) -> tensor<?x32xf32>
    %v = tp.slice "model.layers.0.self_attn" %qkv {dim = -1 : i64, offset = 96 : i64, size = 32 : i64} : (tensor<?x128xf32>) -> tensor<?x32xf32>
    %qr = tp.rotary "model.layers.0.self_attn" %q, %pos {head_dim = 16 : i64, theta = 1.0e+04 : f64} : (tensor<?x64xf32>, tensor<?xi64>) -> tensor<?x64xf32>
    %kr = tp.rotary "model.layers.0.self_attn" %k, %pos {head_dim = 16 : i64, theta = 1.0e+04 : f64} : (tensor<?x32xf32>, tensor<?xi64>) -> tensor<?x32xf32>
    %a = tp.attention "model.layers.0.self_attn" %qr, %kr, %v {head_dim = 16 : i64, num_heads = 4 : i64, num_kv_heads = 2 : i64} : (tensor<?x64xf32>, tensor<?x32xf32>, tensor<?x32xf32>) -> tensor<?x64xf32>
    %wo = tp.weight @"model.layers.0.self_attn.o_proj.weight" : tensor<64x64xf32>
    %ao = tp.linear "model.layers.0.self_attn.o_proj" %a, %wo : (tensor<?x64xf32>, tensor<64x64xf32>) -> tensor<?x64xf32>
    %h1 = tp.add "model.layers.0" %h, %ao : (tensor<?x64xf32>, tensor<?x64xf32>) -> tensor<?x64xf32>
    %wn2 = tp.weight @"model.layers.0.post_attention_layernorm.weight" : tensor<64xf32>
    %n2 = tp.rms_norm "model.layers.0.post_attention_layernorm" %h1, %wn2 {epsilon = 1.0e-05 : f64} : (tensor<?x64xf32>, tensor<64xf32>) -> tensor<?x64xf32>
    %wgu = tp.weight @"model.layers.0.mlp.gate_up_proj.weight" : tensor<256x64xf32>
    %gu = tp.linear "model.layers.0.mlp.gate_up_proj" %n2, %wgu : (tensor<?x64xf32>, tensor<256x64xf32>) -> tensor<?x256xf32>
    %g = tp.slice "model.layers.0.mlp" %gu {dim = -1 : i64, offset = 0 : i64, size = 128 : i64} : (tensor<?x256xf32>) -> tensor<?x128xf32>
    %u = tp.slice "model.layers.0.mlp" %gu {dim = -1 : i64, offset = 128 : i64, size = 128 : i64} : (tensor<?x256xf32>) -> tensor<?x128xf32>
    %s = tp.silu "model.layers.0.mlp.activation_fn" %g : (tensor<?x128xf32>) -> tensor<?x128xf32>
    %m = tp.mul "model.layers.0.mlp" %s, %u : (tensor<?x128xf32>, tensor<?x128xf32>) -> tensor<?x128xf32>
    %wd = tp.weight @"model.layers.0.mlp.down_proj.weight" : tensor<64x128xf32>
    %d = tp.linear "model.layers.0.mlp.down_proj" %m, %wd : (tensor<?x128xf32>, tensor<64x128xf32>) -> tensor<?x64xf32>
    %h2 = tp.add "model.layers.0" %h1, %d : (tensor<?x64xf32>, tensor<?x64xf32>) -> tensor<?x64xf32>
    %wn = tp.weight @"model.norm.weight" : tensor<64xf32>
    %n = tp.rms_norm "model.norm" %h2, %wn {epsilon = 1.0e-05 : f64} : (tensor<?x64xf32>, tensor<64xf32>) -> tensor<?x64xf32>
    %wl = tp.weight @"lm_head.weight" : tensor<256x64xf32>
    %logits = tp.linear "lm_head" %n, %wl : (tensor<?x64xf32>, tensor<256x64xf32>) -> tensor<?x256xf32>
    return %logits : tensor<?x256xf32>
  }
}
