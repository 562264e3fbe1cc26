// A mixture-of-experts block: a top-2 router over 4 experts (hidden 8, inter 6, gate_up held
// as transformers 5 does, [E, 2 * inter, hidden]) and a zero-compute identity expert beside
// them, summed inside the experts module (as LongCat's zero-compute experts are).
module @moe {
  tp.param @"model.mlp.gate.weight" : tensor<4x8xf32>
  tp.param @"model.mlp.experts.gate_up_proj" : tensor<4x12x8xf32>
  tp.param @"model.mlp.experts.down_proj" : tensor<4x8x6xf32>

  func.func @forward(%x: tensor<?x8xf32>) -> tensor<?x8xf32> {
    %wg = tp.weight @"model.mlp.gate.weight" : tensor<4x8xf32>
    %routing = tp.router "model.mlp.gate" %x, %wg {top_k = 2 : i64} : (tensor<?x8xf32>, tensor<4x8xf32>) -> tensor<?x4xf32>
    %wgu = tp.weight @"model.mlp.experts.gate_up_proj" : tensor<4x12x8xf32>
    %wd = tp.weight @"model.mlp.experts.down_proj" : tensor<4x8x6xf32>
    %moe = tp.experts "model.mlp.experts" %x, %routing, %wgu, %wd : (tensor<?x8xf32>, tensor<?x4xf32>, tensor<4x12x8xf32>, tensor<4x8x6xf32>) -> tensor<?x8xf32>
    %id = tp.identity "model.mlp.experts.identity" %x : (tensor<?x8xf32>) -> tensor<?x8xf32>
    %sum = tp.add "model.mlp.experts" %moe, %id : (tensor<?x8xf32>, tensor<?x8xf32>) -> tensor<?x8xf32>
    return %sum : tensor<?x8xf32>
  }
}
