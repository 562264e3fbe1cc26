// One Llama layer with 9 query heads and 3 KV heads of 4 (tpc import of a hand-written config): no tp size but 1, 3 and 9 divides its heads.
module @llama attributes {tp.hf_model_type = "llama", tp.hf_tied = false, tp.max_position_embeddings = 64 : i64} {
  tp.param @"model.embed_tokens.weight" : tensor<64x36xf32>
  tp.param @"model.layers.0.input_layernorm.weight" : tensor<36xf32>
  tp.param @"model.layers.0.self_attn.q_proj.weight" : tensor<36x36xf32>
  tp.param @"model.layers.0.self_attn.k_proj.weight" : tensor<12x36xf32>
  tp.param @"model.layers.0.self_attn.v_proj.weight" : tensor<12x36xf32>
  tp.param @"model.layers.0.self_attn.o_proj.weight" : tensor<36x36xf32>
  tp.param @"model.layers.0.post_attention_layernorm.weight" : tensor<36xf32>
  tp.param @"model.layers.0.mlp.gate_proj.weight" : tensor<40x36xf32>
  tp.param @"model.layers.0.mlp.up_proj.weight" : tensor<40x36xf32>
  tp.param @"model.layers.0.mlp.down_proj.weight" : tensor<36x40xf32>
  tp.param @"model.norm.weight" : tensor<36xf32>
  tp.param @"lm_head.weight" : tensor<64x36xf32>

  func.func @forward(%ids: tensor<?xi64>, %positions: tensor<?xi64>) -> tensor<?x64xf32> {
    %w1 = tp.weight @"model.embed_tokens.weight" : tensor<64x36xf32>
    %h0 = tp.embedding "model.embed_tokens" %ids, %w1 : (tensor<?xi64>, tensor<64x36xf32>) -> tensor<?x36xf32>
    // model.layers.0
    %w2 = tp.weight @"model.layers.0.input_layernorm.weight" : tensor<36xf32>
    %l0_norm1 = tp.rms_norm "model.layers.0.input_layernorm" %h0, %w2 {epsilon = 1.00000000000000008e-05 : f64} : (tensor<?x36xf32>, tensor<36xf32>) -> tensor<?x36xf32>
    %w3 = tp.weight @"model.layers.0.self_attn.q_proj.weight" : tensor<36x36xf32>
    %l0_q = tp.linear "model.layers.0.self_attn.q_proj" %l0_norm1, %w3 : (tensor<?x36xf32>, tensor<36x36xf32>) -> tensor<?x36xf32>
    %w4 = tp.weight @"model.layers.0.self_attn.k_proj.weight" : tensor<12x36xf32>
    %l0_k = tp.linear "model.layers.0.self_attn.k_proj" %l0_norm1, %w4 : (tensor<?x36xf32>, tensor<12x36xf32>) -> tensor<?x12xf32>
    %w5 = tp.weight @"model.layers.0.self_attn.v_proj.weight" : tensor<12x36xf32>
    %l0_v = tp.linear "model.layers.0.self_attn.v_proj" %l0_norm1, %w5 : (tensor<?x36xf32>, tensor<12x36xf32>) -> tensor<?x12xf32>
    %l0_qr = tp.rotary "model.layers.0.self_attn" %l0_q, %positions {head_dim = 4 : i64, theta = 1.00000000000000000e+04 : f64} : (tensor<?x36xf32>, tensor<?xi64>) -> tensor<?x36xf32>
    %l0_kr = tp.rotary "model.layers.0.self_attn" %l0_k, %positions {head_dim = 4 : i64, theta = 1.00000000000000000e+04 : f64} : (tensor<?x12xf32>, tensor<?xi64>) -> tensor<?x12xf32>
    %l0_attn = tp.attention "model.layers.0.self_attn" %l0_qr, %l0_kr, %l0_v {head_dim = 4 : i64, num_heads = 9 : i64, num_kv_heads = 3 : i64} : (tensor<?x36xf32>, tensor<?x12xf32>, tensor<?x12xf32>) -> tensor<?x36xf32>
    %w6 = tp.weight @"model.layers.0.self_attn.o_proj.weight" : tensor<36x36xf32>
    %l0_o = tp.linear "model.layers.0.self_attn.o_proj" %l0_attn, %w6 : (tensor<?x36xf32>, tensor<36x36xf32>) -> tensor<?x36xf32>
    %l0_h1 = tp.add "model.layers.0" %h0, %l0_o : (tensor<?x36xf32>, tensor<?x36xf32>) -> tensor<?x36xf32>
    %w7 = tp.weight @"model.layers.0.post_attention_layernorm.weight" : tensor<36xf32>
    %l0_norm2 = tp.rms_norm "model.layers.0.post_attention_layernorm" %l0_h1, %w7 {epsilon = 1.00000000000000008e-05 : f64} : (tensor<?x36xf32>, tensor<36xf32>) -> tensor<?x36xf32>
    %w8 = tp.weight @"model.layers.0.mlp.gate_proj.weight" : tensor<40x36xf32>
    %l0_gate = tp.linear "model.layers.0.mlp.gate_proj" %l0_norm2, %w8 : (tensor<?x36xf32>, tensor<40x36xf32>) -> tensor<?x40xf32>
    %w9 = tp.weight @"model.layers.0.mlp.up_proj.weight" : tensor<40x36xf32>
    %l0_up = tp.linear "model.layers.0.mlp.up_proj" %l0_norm2, %w9 : (tensor<?x36xf32>, tensor<40x36xf32>) -> tensor<?x40xf32>
    %l0_act = tp.silu "model.layers.0.mlp" %l0_gate : (tensor<?x40xf32>) -> tensor<?x40xf32>
    %l0_mul = tp.mul "model.layers.0.mlp" %l0_act, %l0_up : (tensor<?x40xf32>, tensor<?x40xf32>) -> tensor<?x40xf32>
    %w10 = tp.weight @"model.layers.0.mlp.down_proj.weight" : tensor<36x40xf32>
    %l0_down = tp.linear "model.layers.0.mlp.down_proj" %l0_mul, %w10 : (tensor<?x40xf32>, tensor<36x40xf32>) -> tensor<?x36xf32>
    %l0_h2 = tp.add "model.layers.0" %l0_h1, %l0_down : (tensor<?x36xf32>, tensor<?x36xf32>) -> tensor<?x36xf32>
    // the head
    %w11 = tp.weight @"model.norm.weight" : tensor<36xf32>
    %final_norm = tp.rms_norm "model.norm" %l0_h2, %w11 {epsilon = 1.00000000000000008e-05 : f64} : (tensor<?x36xf32>, tensor<36xf32>) -> tensor<?x36xf32>
    %w12 = tp.weight @"lm_head.weight" : tensor<64x36xf32>
    %logits = tp.linear "lm_head" %final_norm, %w12 : (tensor<?x36xf32>, tensor<64x36xf32>) -> tensor<?x64xf32>
    return %logits : tensor<?x64xf32>
  }
}
