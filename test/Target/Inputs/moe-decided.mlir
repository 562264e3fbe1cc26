// A decided program with a mixture-of-experts router, which the CUDA target cannot run yet
// (lower-to-emitc-errors.mlir).
module @moe attributes {tp.mesh = #tp.mesh<tp = 1>} {
  tp.param @"embed.weight" : tensor<32x8xf32>
  tp.param @"gate.weight" : tensor<4x8xf32>
  func.func @forward(%ids: tensor<?xi64>, %positions: tensor<?xi64>) -> tensor<?x4xf32> attributes {tp.arena_size = 12 : i64} {
    %we = tp.weight @"embed.weight" : tensor<32x8xf32>
    %h = tp.embedding "embed" %ids, %we {tp.arena = array<i64: 0>} : (tensor<?xi64>, tensor<32x8xf32>) -> tensor<?x8xf32>
    %wg = tp.weight @"gate.weight" : tensor<4x8xf32>
    // expected-error @+1 {{the CUDA target cannot run mixture-of-experts layers yet}}
    %r = tp.router "gate" %h, %wg {top_k = 2 : i64, tp.arena = array<i64: 8>} : (tensor<?x8xf32>, tensor<4x8xf32>) -> tensor<?x4xf32>
    return %r : tensor<?x4xf32>
  }
}
