// tp-lower-redistribute: each redistribution becomes the planner's cheapest steps.
// RUN: tpc-opt %s --tp-lower-redistribute | FileCheck %s

module attributes {tp.mesh = #tp.mesh<tp = 4>} {
  // CHECK-LABEL: func.func @pairs
  func.func @pairs(%p: tensor<8x64xf32, #tp.partial<sum>>, %r: tensor<8x64xf32, #tp.replicate>,
                   %s0: tensor<8x64xf32, #tp.shard<0>>, %s1: tensor<8x64xf32, #tp.shard<1>>,
                   %ss: tensor<8x64xf32, #tp.strided_shard<1, [32, 16, 16]>>) {
    // CHECK: tp.all_reduce %arg0 sum {module = "o_proj"} : tensor<8x64xf32, #tp.partial<sum>> -> tensor<8x64xf32, #tp.replicate>
    %0 = tp.redistribute %p {module = "o_proj"} : tensor<8x64xf32, #tp.partial<sum>> -> tensor<8x64xf32, #tp.replicate>
    // CHECK: tp.reduce_scatter %arg0 sum dim = 0 : tensor<8x64xf32, #tp.partial<sum>> -> tensor<8x64xf32, #tp.shard<0>>
    %1 = tp.redistribute %p : tensor<8x64xf32, #tp.partial<sum>> -> tensor<8x64xf32, #tp.shard<0>>
    // CHECK: tp.reduce_scatter %arg0 sum dim = 1 {blocks = array<i64: 32, 16, 16>} : tensor<8x64xf32, #tp.partial<sum>> -> tensor<8x64xf32, #tp.strided_shard<1, [32, 16, 16]>>
    %2 = tp.redistribute %p : tensor<8x64xf32, #tp.partial<sum>> -> tensor<8x64xf32, #tp.strided_shard<1, [32, 16, 16]>>
    // CHECK: tp.all_gather %arg3 dim = 1 : tensor<8x64xf32, #tp.shard<1>> -> tensor<8x64xf32, #tp.replicate>
    %3 = tp.redistribute %s1 : tensor<8x64xf32, #tp.shard<1>> -> tensor<8x64xf32, #tp.replicate>
    // CHECK: tp.all_gather %arg4 dim = 1 {blocks = array<i64: 32, 16, 16>} : tensor<8x64xf32, #tp.strided_shard<1, [32, 16, 16]>> -> tensor<8x64xf32, #tp.replicate>
    %4 = tp.redistribute %ss : tensor<8x64xf32, #tp.strided_shard<1, [32, 16, 16]>> -> tensor<8x64xf32, #tp.replicate>
    // CHECK: tp.all_to_all %arg2 split_dim = 1 concat_dim = 0 : tensor<8x64xf32, #tp.shard<0>> -> tensor<8x64xf32, #tp.shard<1>>
    %5 = tp.redistribute %s0 : tensor<8x64xf32, #tp.shard<0>> -> tensor<8x64xf32, #tp.shard<1>>
    // CHECK: tp.local_reshard %arg1 : tensor<8x64xf32, #tp.replicate> -> tensor<8x64xf32, #tp.shard<1>>
    %6 = tp.redistribute %r : tensor<8x64xf32, #tp.replicate> -> tensor<8x64xf32, #tp.shard<1>>
    // CHECK: tp.local_reshard %arg1 : tensor<8x64xf32, #tp.replicate> -> tensor<8x64xf32, #tp.partial<sum>>
    %7 = tp.redistribute %r : tensor<8x64xf32, #tp.replicate> -> tensor<8x64xf32, #tp.partial<sum>>
    // CHECK: tp.local_reshard %arg3 : tensor<8x64xf32, #tp.shard<1>> -> tensor<8x64xf32, #tp.partial<sum>>
    %8 = tp.redistribute %s1 : tensor<8x64xf32, #tp.shard<1>> -> tensor<8x64xf32, #tp.partial<sum>>
    // A strided shard and a plain one of the same dim: two steps.
    // CHECK: %[[MID:.*]] = tp.{{all_gather|local_reshard}} %arg4
    // CHECK-NEXT: tp.{{local_reshard|reduce_scatter}} %[[MID]]{{.*}} -> tensor<8x64xf32, #tp.shard<1>>
    %9 = tp.redistribute %ss : tensor<8x64xf32, #tp.strided_shard<1, [32, 16, 16]>> -> tensor<8x64xf32, #tp.shard<1>>
    // CHECK-NOT: tp.redistribute
    return
  }
}
