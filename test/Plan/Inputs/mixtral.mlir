// Mixtral-shaped parameters for one layer: attention, a router (mlp.gate) and experts stored
// as [E, 2 * intermediate, hidden] and [E, hidden, intermediate] (transformers 5). Expert ops
// come with the import issue; the plan tests only need the parameters.
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
}
