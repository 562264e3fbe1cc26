// A model with no decoder layer: nothing to split into stages.
module @tiny {
  tp.param @"lm_head.weight" : tensor<32x16xf32>
  func.func @forward(%ids: tensor<?xi64>, %pos: tensor<?xi64>, %x: tensor<?x16xf32>) -> tensor<?x32xf32> {
    %w = tp.weight @"lm_head.weight" : tensor<32x16xf32>
    %y = tp.linear "lm_head" %x, %w : (tensor<?x16xf32>, tensor<32x16xf32>) -> tensor<?x32xf32>
    return %y : tensor<?x32xf32>
  }
}
