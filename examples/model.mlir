// Imported by `tpc import` from config.json (LlamaForCausalLM): 2 layers, hidden 64, 4 heads of 16, 2 KV heads, intermediate 128, vocab 256.
module @llama attributes {tp.hf_model_type = "llama", tp.hf_tied = false, tp.eos_token_ids = array<i64: 2>, tp.max_position_embeddings = 2048 : i64} {
  tp.param @"model.embed_tokens.weight" : tensor<256x64xf32>
  tp.param @"model.layers.0.input_layernorm.weight" : tensor<64xf32>
  tp.param @"model.layers.0.self_attn.q_proj.weight" : tensor<64x64xf32>
  tp.param @"model.layers.0.self_attn.k_proj.weight" : tensor<32x64xf32>
  tp.param @"model.layers.0.self_attn.v_proj.weight" : tensor<32x64xf32>
  tp.param @"model.layers.0.self_attn.o_proj.weight" : tensor<64x64xf32>
  tp.param @"model.layers.0.post_attention_layernorm.weight" : tensor<64xf32>
  tp.param @"model.layers.0.mlp.gate_proj.weight" : tensor<128x64xf32>
  tp.param @"model.layers.0.mlp.up_proj.weight" : tensor<128x64xf32>
  tp.param @"model.layers.0.mlp.down_proj.weight" : tensor<64x128xf32>
  tp.param @"model.layers.1.input_layernorm.weight" : tensor<64xf32>
  tp.param @"model.layers.1.self_attn.q_proj.weight" : tensor<64x64xf32>
  tp.param @"model.layers.1.self_attn.k_proj.weight" : tensor<32x64xf32>
  tp.param @"model.layers.1.self_attn.v_proj.weight" : tensor<32x64xf32>
  tp.param @"model.layers.1.self_attn.o_proj.weight" : tensor<64x64xf32>
  tp.param @"model.layers.1.post_attention_layernorm.weight" : tensor<64xf32>
  tp.param @"model.layers.1.mlp.gate_proj.weight" : tensor<128x64xf32>
  tp.param @"model.layers.1.mlp.up_proj.weight" : tensor<128x64xf32>
  tp.param @"model.layers.1.mlp.down_proj.weight" : tensor<64x128xf32>
  tp.param @"model.norm.weight" : tensor<64xf32>
  tp.param @"lm_head.weight" : tensor<256x64xf32>

  func.func @forward(%ids: tensor<?xi64>, %positions: tensor<?xi64>) -> tensor<?x256xf32> {
    %w1 = tp.weight @"model.embed_tokens.weight" : tensor<256x64xf32>
    %h0 = tp.embedding "model.embed_tokens" %ids, %w1 : (tensor<?xi64>, tensor<256x64xf32>) -> tensor<?x64xf32>
    // model.layers.0
    %w2 = tp.weight @"model.layers.0.input_layernorm.weight" : tensor<64xf32>
    %l0_norm1 = tp.rms_norm "model.layers.0.input_layernorm" %h0, %w2 {epsilon = 1.00000000000000008e-05 : f64} : (tensor<?x64xf32>, tensor<64xf32>) -> tensor<?x64xf32>
    %w3 = tp.weight @"model.layers.0.self_attn.q_proj.weight" : tensor<64x64xf32>
    %l0_q = tp.linear "model.layers.0.self_attn.q_proj" %l0_norm1, %w3 : (tensor<?x64xf32>, tensor<64x64xf32>) -> tensor<?x64xf32>
    %w4 = tp.weight @"model.layers.0.self_attn.k_proj.weight" : tensor<32x64xf32>
    %l0_k = tp.linear "model.layers.0.self_attn.k_proj" %l0_norm1, %w4 : (tensor<?x64xf32>, tensor<32x64xf32>) -> tensor<?x32xf32>
    %w5 = tp.weight @"model.layers.0.self_attn.v_proj.weight" : tensor<32x64xf32>
    %l0_v = tp.linear "model.layers.0.self_attn.v_proj" %l0_norm1, %w5 : (tensor<?x64xf32>, tensor<32x64xf32>) -> tensor<?x32xf32>
    %l0_qr = tp.rotary "model.layers.0.self_attn" %l0_q, %positions {head_dim = 16 : i64, theta = 1.00000000000000000e+04 : f64} : (tensor<?x64xf32>, tensor<?xi64>) -> tensor<?x64xf32>
    %l0_kr = tp.rotary "model.layers.0.self_attn" %l0_k, %positions {head_dim = 16 : i64, theta = 1.00000000000000000e+04 : f64} : (tensor<?x32xf32>, tensor<?xi64>) -> tensor<?x32xf32>
    %l0_attn = tp.attention "model.layers.0.self_attn" %l0_qr, %l0_kr, %l0_v {head_dim = 16 : i64, num_heads = 4 : i64, num_kv_heads = 2 : i64} : (tensor<?x64xf32>, tensor<?x32xf32>, tensor<?x32xf32>) -> tensor<?x64xf32>
    %w6 = tp.weight @"model.layers.0.self_attn.o_proj.weight" : tensor<64x64xf32>
    %l0_o = tp.linear "model.layers.0.self_attn.o_proj" %l0_attn, %w6 : (tensor<?x64xf32>, tensor<64x64xf32>) -> tensor<?x64xf32>
    %l0_h1 = tp.add "model.layers.0" %h0, %l0_o : (tensor<?x64xf32>, tensor<?x64xf32>) -> tensor<?x64xf32>
    %w7 = tp.weight @"model.layers.0.post_attention_layernorm.weight" : tensor<64xf32>
    %l0_norm2 = tp.rms_norm "model.layers.0.post_attention_layernorm" %l0_h1, %w7 {epsilon = 1.00000000000000008e-05 : f64} : (tensor<?x64xf32>, tensor<64xf32>) -> tensor<?x64xf32>
    %w8 = tp.weight @"model.layers.0.mlp.gate_proj.weight" : tensor<128x64xf32>
    %l0_gate = tp.linear "model.layers.0.mlp.gate_proj" %l0_norm2, %w8 : (tensor<?x64xf32>, tensor<128x64xf32>) -> tensor<?x128xf32>
    %w9 = tp.weight @"model.layers.0.mlp.up_proj.weight" : tensor<128x64xf32>
    %l0_up = tp.linear "model.layers.0.mlp.up_proj" %l0_norm2, %w9 : (tensor<?x64xf32>, tensor<128x64xf32>) -> tensor<?x128xf32>
    %l0_act = tp.silu "model.layers.0.mlp" %l0_gate : (tensor<?x128xf32>) -> tensor<?x128xf32>
    %l0_mul = tp.mul "model.layers.0.mlp" %l0_act, %l0_up : (tensor<?x128xf32>, tensor<?x128xf32>) -> tensor<?x128xf32>
    %w10 = tp.weight @"model.layers.0.mlp.down_proj.weight" : tensor<64x128xf32>
    %l0_down = tp.linear "model.layers.0.mlp.down_proj" %l0_mul, %w10 : (tensor<?x128xf32>, tensor<64x128xf32>) -> tensor<?x64xf32>
    %l0_h2 = tp.add "model.layers.0" %l0_h1, %l0_down : (tensor<?x64xf32>, tensor<?x64xf32>) -> tensor<?x64xf32>
    // model.layers.1
    %w11 = tp.weight @"model.layers.1.input_layernorm.weight" : tensor<64xf32>
    %l1_norm1 = tp.rms_norm "model.layers.1.input_layernorm" %l0_h2, %w11 {epsilon = 1.00000000000000008e-05 : f64} : (tensor<?x64xf32>, tensor<64xf32>) -> tensor<?x64xf32>
    %w12 = tp.weight @"model.layers.1.self_attn.q_proj.weight" : tensor<64x64xf32>
    %l1_q = tp.linear "model.layers.1.self_attn.q_proj" %l1_norm1, %w12 : (tensor<?x64xf32>, tensor<64x64xf32>) -> tensor<?x64xf32>
    %w13 = tp.weight @"model.layers.1.self_attn.k_proj.weight" : tensor<32x64xf32>
    %l1_k = tp.linear "model.layers.1.self_attn.k_proj" %l1_norm1, %w13 : (tensor<?x64xf32>, tensor<32x64xf32>) -> tensor<?x32xf32>
    %w14 = tp.weight @"model.layers.1.self_attn.v_proj.weight" : tensor<32x64xf32>
    %l1_v = tp.linear "model.layers.1.self_attn.v_proj" %l1_norm1, %w14 : (tensor<?x64xf32>, tensor<32x64xf32>) -> tensor<?x32xf32>
    %l1_qr = tp.rotary "model.layers.1.self_attn" %l1_q, %positions {head_dim = 16 : i64, theta = 1.00000000000000000e+04 : f64} : (tensor<?x64xf32>, tensor<?xi64>) -> tensor<?x64xf32>
    %l1_kr = tp.rotary "model.layers.1.self_attn" %l1_k, %positions {head_dim = 16 : i64, theta = 1.00000000000000000e+04 : f64} : (tensor<?x32xf32>, tensor<?xi64>) -> tensor<?x32xf32>
    %l1_attn = tp.attention "model.layers.1.self_attn" %l1_qr, %l1_kr, %l1_v {head_dim = 16 : i64, num_heads = 4 : i64, num_kv_heads = 2 : i64} : (tensor<?x64xf32>, tensor<?x32xf32>, tensor<?x32xf32>) -> tensor<?x64xf32>
    %w15 = tp.weight @"model.layers.1.self_attn.o_proj.weight" : tensor<64x64xf32>
    %l1_o = tp.linear "model.layers.1.self_attn.o_proj" %l1_attn, %w15 : (tensor<?x64xf32>, tensor<64x64xf32>) -> tensor<?x64xf32>
    %l1_h1 = tp.add "model.layers.1" %l0_h2, %l1_o : (tensor<?x64xf32>, tensor<?x64xf32>) -> tensor<?x64xf32>
    %w16 = tp.weight @"model.layers.1.post_attention_layernorm.weight" : tensor<64xf32>
    %l1_norm2 = tp.rms_norm "model.layers.1.post_attention_layernorm" %l1_h1, %w16 {epsilon = 1.00000000000000008e-05 : f64} : (tensor<?x64xf32>, tensor<64xf32>) -> tensor<?x64xf32>
    %w17 = tp.weight @"model.layers.1.mlp.gate_proj.weight" : tensor<128x64xf32>
    %l1_gate = tp.linear "model.layers.1.mlp.gate_proj" %l1_norm2, %w17 : (tensor<?x64xf32>, tensor<128x64xf32>) -> tensor<?x128xf32>
    %w18 = tp.weight @"model.layers.1.mlp.up_proj.weight" : tensor<128x64xf32>
    %l1_up = tp.linear "model.layers.1.mlp.up_proj" %l1_norm2, %w18 : (tensor<?x64xf32>, tensor<128x64xf32>) -> tensor<?x128xf32>
    %l1_act = tp.silu "model.layers.1.mlp" %l1_gate : (tensor<?x128xf32>) -> tensor<?x128xf32>
    %l1_mul = tp.mul "model.layers.1.mlp" %l1_act, %l1_up : (tensor<?x128xf32>, tensor<?x128xf32>) -> tensor<?x128xf32>
    %w19 = tp.weight @"model.layers.1.mlp.down_proj.weight" : tensor<64x128xf32>
    %l1_down = tp.linear "model.layers.1.mlp.down_proj" %l1_mul, %w19 : (tensor<?x128xf32>, tensor<64x128xf32>) -> tensor<?x64xf32>
    %l1_h2 = tp.add "model.layers.1" %l1_h1, %l1_down : (tensor<?x64xf32>, tensor<?x64xf32>) -> tensor<?x64xf32>
    // the head
    %w20 = tp.weight @"model.norm.weight" : tensor<64xf32>
    %final_norm = tp.rms_norm "model.norm" %l1_h2, %w20 {epsilon = 1.00000000000000008e-05 : f64} : (tensor<?x64xf32>, tensor<64xf32>) -> tensor<?x64xf32>
    %w21 = tp.weight @"lm_head.weight" : tensor<256x64xf32>
    %logits = tp.linear "lm_head" %final_norm, %w21 : (tensor<?x64xf32>, tensor<256x64xf32>) -> tensor<?x256xf32>
    return %logits : tensor<?x256xf32>
  }
}
