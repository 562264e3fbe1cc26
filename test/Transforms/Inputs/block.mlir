// A small block for the strategy tests: embedding, norm, an MLP with biases, a residual,
// lm_head.
module @block {
  tp.param @"model.embed_tokens.weight" : tensor<32x8xf32>
  tp.param @"model.norm.weight" : tensor<8xf32>
  tp.param @"model.fc1.weight" : tensor<16x8xf32>
  tp.param @"model.fc1.bias" : tensor<16xf32>
  tp.param @"model.fc2.weight" : tensor<8x16xf32>
  tp.param @"model.fc2.bias" : tensor<8xf32>
  tp.param @"lm_head.weight" : tensor<32x8xf32>
  func.func @forward(%ids: tensor<?xi64>) -> tensor<?x32xf32> {
    %we = tp.weight @"model.embed_tokens.weight" : tensor<32x8xf32>
    %h = tp.embedding "model.embed_tokens" %ids, %we : (tensor<?xi64>, tensor<32x8xf32>) -> tensor<?x8xf32>
    %wn = tp.weight @"model.norm.weight" : tensor<8xf32>
    %n = tp.rms_norm "model.norm" %h, %wn {epsilon = 1.0e-06 : f64} : (tensor<?x8xf32>, tensor<8xf32>) -> tensor<?x8xf32>
    %w1 = tp.weight @"model.fc1.weight" : tensor<16x8xf32>
    %b1 = tp.weight @"model.fc1.bias" : tensor<16xf32>
    %u = tp.linear "model.fc1" %n, %w1, %b1 : (tensor<?x8xf32>, tensor<16x8xf32>, tensor<16xf32>) -> tensor<?x16xf32>
    %g = tp.gelu "model.act" %u {approximate = "tanh"} : (tensor<?x16xf32>) -> tensor<?x16xf32>
    %w2 = tp.weight @"model.fc2.weight" : tensor<8x16xf32>
    %b2 = tp.weight @"model.fc2.bias" : tensor<8xf32>
    %d = tp.linear "model.fc2" %g, %w2, %b2 : (tensor<?x16xf32>, tensor<8x16xf32>, tensor<8xf32>) -> tensor<?x8xf32>
    %r = tp.add "model" %h, %d : (tensor<?x8xf32>, tensor<?x8xf32>) -> tensor<?x8xf32>
    %wl = tp.weight @"lm_head.weight" : tensor<32x8xf32>
    %logits = tp.linear "lm_head" %r, %wl : (tensor<?x8xf32>, tensor<32x8xf32>) -> tensor<?x32xf32>
    return %logits : tensor<?x32xf32>
  }
}
