// A gated MLP with a fused [gate | up] projection, for the packed strategies.
module @gated {
  tp.param @"model.mlp.gate_up_proj.weight" : tensor<16x8xf32>
  tp.param @"model.mlp.down_proj.weight" : tensor<8x8xf32>
  func.func @forward(%x: tensor<?x8xf32>) -> tensor<?x8xf32> {
    %wgu = tp.weight @"model.mlp.gate_up_proj.weight" : tensor<16x8xf32>
    %gu = tp.linear "model.mlp.gate_up_proj" %x, %wgu : (tensor<?x8xf32>, tensor<16x8xf32>) -> tensor<?x16xf32>
    %gate = tp.slice "model.mlp" %gu {dim = -1 : i64, offset = 0 : i64, size = 8 : i64} : (tensor<?x16xf32>) -> tensor<?x8xf32>
    %up = tp.slice "model.mlp" %gu {dim = -1 : i64, offset = 8 : i64, size = 8 : i64} : (tensor<?x16xf32>) -> tensor<?x8xf32>
    %act = tp.silu "model.mlp.act_fn" %gate : (tensor<?x8xf32>) -> tensor<?x8xf32>
    %m = tp.mul "model.mlp" %act, %up : (tensor<?x8xf32>, tensor<?x8xf32>) -> tensor<?x8xf32>
    %wd = tp.weight @"model.mlp.down_proj.weight" : tensor<8x8xf32>
    %y = tp.linear "model.mlp.down_proj" %m, %wd : (tensor<?x8xf32>, tensor<8x8xf32>) -> tensor<?x8xf32>
    return %y : tensor<?x8xf32>
  }
}
