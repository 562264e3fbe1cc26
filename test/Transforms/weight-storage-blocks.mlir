// tp-weight-storage with a GGUF file's block types (issues 27, 48): the CPU target holds
// q8_0, q4_0, q4_1, q4_k and q6_k (and every other block type: WeightTypeTest) matrices as the
// file stores them, and holds in bf16 a matrix whose split along its input dimension would
// cut its blocks, saying so with the memory it costs and naming the tp sizes that would not
// (colwise splits cut rows, never blocks); --weights-dtype q8_0 (--quantize) quantizes the
// f32 matrices.
// RUN: tpc-opt %s --tp-set-target=target=cpu --tp-weight-storage 2>&1 | FileCheck %s
// RUN: tpc-opt %s --tp-set-target=target=cpu --tp-weight-storage="weights=q8_0" 2>&1 | FileCheck %s --check-prefix=Q8
// RUN: not tpc-opt %s --tp-set-target=target=cpu --tp-weight-storage="weights=q4_1" 2>&1 | FileCheck %s --check-prefix=BAD

// CHECK-DAG: warning: 1 q4_k weight (cut) split along its input dimension of 768 would cut blocks of 256 elements at tp 2: held in bf16 instead (0.0 MB per rank instead of 0.0 MB); tp sizes that keep them whole: 1, 3
// CHECK: tp.param @table {storage = #tp.storage<q8_0>} : tensor<256x64xf32>
// CHECK: tp.param @norm : tensor<64xf32>
// CHECK: tp.param @colwise {{.*}}storage = #tp.storage<q4_1>} : tensor<32x64xf32>
// CHECK: tp.param @rowwise {{.*}}storage = #tp.storage<q4_0>} : tensor<64x32xf32>
// CHECK: tp.param @cut {{.*}}storage = #tp.storage<bf16>} : tensor<64x384xf32>
// CHECK: tp.param @down {storage = #tp.storage<q6_k>} : tensor<64x256xf32>
// CHECK: tp.param @plain : tensor<64x64xf32>
// Q8: tp.param @table {storage = #tp.storage<q8_0>}
// Q8: tp.param @norm : tensor<64xf32>
// Q8: tp.param @plain {storage = #tp.storage<q8_0>}
// BAD: error: --weights-dtype q4_1 is not a weight type tpc holds weights in: stored, f32, bf16, f16, or q8_0 and q4_0 (quantized at load)
module attributes {tp.mesh = #tp.mesh<tp = 2>} {
  tp.param @table {storage = #tp.storage<q8_0>} : tensor<256x64xf32>
  tp.param @norm : tensor<64xf32>
  tp.param @colwise {shard = #tp.shard_desc<dim = 0, hf_shape = [64, 64], offsets = [0], sizes = [64], chunks = 2>, storage = #tp.storage<q4_1>} : tensor<32x64xf32>
  tp.param @rowwise {shard = #tp.shard_desc<dim = 1, hf_shape = [64, 64], offsets = [0], sizes = [64], chunks = 2>, storage = #tp.storage<q4_0>} : tensor<64x32xf32>
  tp.param @cut {shard = #tp.shard_desc<dim = 1, hf_shape = [64, 768], offsets = [0], sizes = [768], chunks = 2>, storage = #tp.storage<q4_k>} : tensor<64x384xf32>
  tp.param @down {storage = #tp.storage<q6_k>} : tensor<64x256xf32>
  tp.param @plain : tensor<64x64xf32>
  func.func @forward(%ids: tensor<?xi64>, %pos: tensor<?xi64>) -> tensor<?x256xf32> {
    %t = tp.weight @table : tensor<256x64xf32>
    %h = tp.embedding "model.embed_tokens" %ids, %t : (tensor<?xi64>, tensor<256x64xf32>) -> tensor<?x64xf32>
    %n = tp.weight @norm : tensor<64xf32>
    %x = tp.rms_norm "model.norm" %h, %n {epsilon = 1.0e-05 : f64} : (tensor<?x64xf32>, tensor<64xf32>) -> tensor<?x64xf32>
    %c = tp.weight @colwise : tensor<32x64xf32>
    %a = tp.linear "model.colwise" %x, %c : (tensor<?x64xf32>, tensor<32x64xf32>) -> tensor<?x32xf32>
    %r = tp.weight @rowwise : tensor<64x32xf32>
    %b = tp.linear "model.rowwise" %a, %r : (tensor<?x32xf32>, tensor<64x32xf32>) -> tensor<?x64xf32>
    %k = tp.weight @cut : tensor<64x384xf32>
    %u = tp.weight @down : tensor<64x256xf32>
    %w = tp.concat "model.wide" %b, %b, %b, %b {dim = 1 : i64} : (tensor<?x64xf32>, tensor<?x64xf32>, tensor<?x64xf32>, tensor<?x64xf32>) -> tensor<?x256xf32>
    %d = tp.linear "model.down" %w, %u : (tensor<?x256xf32>, tensor<64x256xf32>) -> tensor<?x64xf32>
    %q = tp.weight @plain : tensor<64x64xf32>
    %z = tp.linear "model.plain" %d, %q : (tensor<?x64xf32>, tensor<64x64xf32>) -> tensor<?x64xf32>
    %l = tp.linear "lm_head" %z, %t : (tensor<?x64xf32>, tensor<256x64xf32>) -> tensor<?x256xf32>
    return %l : tensor<?x256xf32>
  }
}
