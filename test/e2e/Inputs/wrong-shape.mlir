// The example's parameters with layer 0's q_proj the wrong shape (a checkpoint for a wrong model).
module {
  tp.param @"model.embed_tokens.weight" : tensor<256x64xf32>
  tp.param @"model.layers.0.input_layernorm.weight" : tensor<64xf32>
  tp.param @"model.layers.0.self_attn.q_proj.weight" : tensor<32x64xf32>
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
}
