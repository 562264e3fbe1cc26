// Three layers, each also reading the embedding itself (as Gemma 3n's per-layer inputs do).
module @perlayer {
  tp.param @"model.embed_tokens.weight" : tensor<32x16xf32>
  func.func @forward(%ids: tensor<?xi64>, %pos: tensor<?xi64>) -> tensor<?x16xf32> {
    %t = tp.weight @"model.embed_tokens.weight" : tensor<32x16xf32>
    %e = tp.embedding "model.embed_tokens" %ids, %t : (tensor<?xi64>, tensor<32x16xf32>) -> tensor<?x16xf32>
    %m0 = tp.mul "model.layers.0.mlp" %e, %e : (tensor<?x16xf32>, tensor<?x16xf32>) -> tensor<?x16xf32>
    %h0 = tp.add "model.layers.0" %e, %m0 : (tensor<?x16xf32>, tensor<?x16xf32>) -> tensor<?x16xf32>
    %m1 = tp.mul "model.layers.1.mlp" %h0, %e : (tensor<?x16xf32>, tensor<?x16xf32>) -> tensor<?x16xf32>
    %h1 = tp.add "model.layers.1" %h0, %m1 : (tensor<?x16xf32>, tensor<?x16xf32>) -> tensor<?x16xf32>
    %m2 = tp.mul "model.layers.2.mlp" %h1, %e : (tensor<?x16xf32>, tensor<?x16xf32>) -> tensor<?x16xf32>
    %h2 = tp.add "model.layers.2" %h1, %m2 : (tensor<?x16xf32>, tensor<?x16xf32>) -> tensor<?x16xf32>
    return %h2 : tensor<?x16xf32>
  }
}
