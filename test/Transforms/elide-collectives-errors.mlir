// tp-elide-collectives needs to know the mesh: a module without tp.mesh is refused, not
// taken for one rank (its all_reduce would silently become a no-op).
// RUN: tpc-opt %s --tp-elide-collectives -verify-diagnostics

// expected-error @+1 {{no tp.mesh on the module: run tp-apply-plan first}}
module {
  func.func @forward(%x: tensor<4x8xf32, #tp.partial<sum>>) -> tensor<4x8xf32, #tp.replicate> {
    %r = tp.all_reduce %x sum : tensor<4x8xf32, #tp.partial<sum>> -> tensor<4x8xf32, #tp.replicate>
    return %r : tensor<4x8xf32, #tp.replicate>
  }
}
