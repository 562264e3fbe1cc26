// tp-weight-storage: the CPU target keeps a matrix in its stored type where only linears and
// embeddings read it (a tied table both look up and multiply by), holds what other kernels
// read (a norm's weight, stored bf16 too) in f32; --weights-dtype asks for a type instead;
// the GPU target holds everything in its activation type, bf16.
// RUN: tpc-opt %s --tp-set-target=target=cpu --tp-weight-storage | FileCheck %s
// RUN: tpc-opt %s --tp-set-target=target=cpu --tp-weight-storage="weights=f32" | FileCheck %s --check-prefix=F32
// RUN: tpc-opt %s --tp-set-target=target=cpu --tp-weight-storage="weights=f16" | FileCheck %s --check-prefix=F16
// RUN: tpc-opt %s --tp-set-target=target=cuda --tp-weight-storage | FileCheck %s --check-prefix=CUDA
// RUN: not tpc-opt %s --tp-set-target=target=cpu --tp-weight-storage="weights=int3" 2>&1 | FileCheck %s --check-prefix=BAD

// CHECK: tp.param @table {storage = #tp.storage<bf16>} : tensor<256x64xf32>
// CHECK: tp.param @norm : tensor<64xf32>
// CHECK: tp.param @proj {storage = #tp.storage<f16>} : tensor<64x64xf32>
// CHECK: tp.param @plain : tensor<64x64xf32>
// F32: tp.param @table : tensor<256x64xf32>
// F32: tp.param @norm : tensor<64xf32>
// F32: tp.param @proj : tensor<64x64xf32>
// F32: tp.param @plain : tensor<64x64xf32>
// F16: tp.param @table {storage = #tp.storage<f16>}
// F16: tp.param @norm : tensor<64xf32>
// F16: tp.param @proj {storage = #tp.storage<f16>}
// F16: tp.param @plain {storage = #tp.storage<f16>}
// CUDA: tp.param @table {storage = #tp.storage<bf16>}
// CUDA: tp.param @norm {storage = #tp.storage<bf16>}
// CUDA: tp.param @proj {storage = #tp.storage<bf16>}
// CUDA: tp.param @plain {storage = #tp.storage<bf16>}
// BAD: error: --weights-dtype int3 is not a weight type tpc holds weights in: stored, f32, bf16, f16, or q8_0 and q4_0 (quantized at load)
module attributes {tp.mesh = #tp.mesh<tp = 1>} {
  tp.param @table {storage = #tp.storage<bf16>} : tensor<256x64xf32>
  tp.param @norm {storage = #tp.storage<bf16>} : tensor<64xf32>
  tp.param @proj {storage = #tp.storage<f16>} : tensor<64x64xf32>
  tp.param @plain : tensor<64x64xf32>
  func.func @forward(%ids: tensor<?xi64>, %pos: tensor<?xi64>) -> tensor<?x256xf32> {
    %t = tp.weight @table : tensor<256x64xf32>
    %h = tp.embedding "model.embed_tokens" %ids, %t : (tensor<?xi64>, tensor<256x64xf32>) -> tensor<?x64xf32>
    %n = tp.weight @norm : tensor<64xf32>
    %x = tp.rms_norm "model.norm" %h, %n {epsilon = 1.0e-05 : f64} : (tensor<?x64xf32>, tensor<64xf32>) -> tensor<?x64xf32>
    %p = tp.weight @proj : tensor<64x64xf32>
    %y = tp.linear "model.proj" %x, %p : (tensor<?x64xf32>, tensor<64x64xf32>) -> tensor<?x64xf32>
    %q = tp.weight @plain : tensor<64x64xf32>
    %z = tp.linear "model.plain" %y, %q : (tensor<?x64xf32>, tensor<64x64xf32>) -> tensor<?x64xf32>
    %l = tp.linear "lm_head" %z, %t : (tensor<?x64xf32>, tensor<256x64xf32>) -> tensor<?x256xf32>
    return %l : tensor<?x256xf32>
  }
}
