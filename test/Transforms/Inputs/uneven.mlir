// An MLP whose intermediate size (100) does not divide by tp 3.
module @uneven {
  tp.param @"model.layers.0.mlp.up_proj.weight" : tensor<100x96xf32>
  tp.param @"model.layers.0.mlp.down_proj.weight" : tensor<96x100xf32>
  func.func @forward(%x: tensor<?x96xf32>) -> tensor<?x96xf32> {
    %wu = tp.weight @"model.layers.0.mlp.up_proj.weight" : tensor<100x96xf32>
    %u = tp.linear "model.layers.0.mlp.up_proj" %x, %wu : (tensor<?x96xf32>, tensor<100x96xf32>) -> tensor<?x100xf32>
    %a = tp.silu "model.layers.0.mlp.act_fn" %u : (tensor<?x100xf32>) -> tensor<?x100xf32>
    %wd = tp.weight @"model.layers.0.mlp.down_proj.weight" : tensor<96x100xf32>
    %d = tp.linear "model.layers.0.mlp.down_proj" %a, %wd : (tensor<?x100xf32>, tensor<96x100xf32>) -> tensor<?x96xf32>
    return %d : tensor<?x96xf32>
  }
}
