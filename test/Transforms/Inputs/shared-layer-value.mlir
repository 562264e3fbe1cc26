// Layer 1 reads layer 0's activation (not its output): no split may separate the two.
module @shared {
  tp.param @"model.embed_tokens.weight" : tensor<32x16xf32>
  func.func @forward(%ids: tensor<?xi64>, %pos: tensor<?xi64>) -> tensor<?x16xf32> {
    %t = tp.weight @"model.embed_tokens.weight" : tensor<32x16xf32>
    %h = tp.embedding "model.embed_tokens" %ids, %t : (tensor<?xi64>, tensor<32x16xf32>) -> tensor<?x16xf32>
    %a = tp.silu "model.layers.0.mlp" %h : (tensor<?x16xf32>) -> tensor<?x16xf32>
    %h1 = tp.add "model.layers.0" %h, %a : (tensor<?x16xf32>, tensor<?x16xf32>) -> tensor<?x16xf32>
    %m = tp.mul "model.layers.1.mlp" %h1, %a : (tensor<?x16xf32>, tensor<?x16xf32>) -> tensor<?x16xf32>
    %h2 = tp.add "model.layers.1" %h1, %m : (tensor<?x16xf32>, tensor<?x16xf32>) -> tensor<?x16xf32>
    return %h2 : tensor<?x16xf32>
  }
}
