// tp-greedy-argmax on hand-written partitioned IR: the forward's returned gather of the
// vocabulary-split logits is marked argmax_if_greedy where the target's runtime finds a
// greedy step's argmax on the ranks (the CPU's), and left as it is where not (CUDA's), where
// the gather is of rows, or where the gathered logits are read by anything but the return.
// RUN: tpc-opt %s -split-input-file --tp-set-target=target=cpu --tp-greedy-argmax | FileCheck %s
// RUN: tpc-opt %s -split-input-file --tp-set-target=target=cuda --tp-greedy-argmax | FileCheck %s --check-prefix=CUDA
// RUN: not tpc-opt %s -split-input-file --tp-greedy-argmax 2>&1 | FileCheck %s --check-prefix=NOTARGET

// lm_head colwise_gather_output at tp 2: its gather is the forward's result.
// CHECK-LABEL: func.func @logits
// CHECK:         tp.all_gather %{{.*}} dim = 1 {argmax_if_greedy, module = "lm_head"}
// CUDA-LABEL:  func.func @logits
// CUDA-NOT:      argmax_if_greedy
// NOTARGET: error: tp-greedy-argmax needs the module's target
module attributes {tp.mesh = #tp.mesh<tp = 2>} {
  tp.param @lm {placement = #tp.shard<0>} : tensor<128x64xf32>
  func.func @logits(%x: tensor<1x64xf32, #tp.replicate>) -> tensor<1x256xf32, #tp.replicate> {
    %w = tp.weight @lm : tensor<128x64xf32, #tp.shard<0>>
    %l = tp.linear "lm_head" %x, %w : (tensor<1x64xf32, #tp.replicate>, tensor<128x64xf32, #tp.shard<0>>) -> tensor<1x128xf32, #tp.shard<1>>
    %g = tp.all_gather %l dim = 1 {module = "lm_head"} : tensor<1x128xf32, #tp.shard<1>> -> tensor<1x256xf32, #tp.replicate>
    return %g : tensor<1x256xf32, #tp.replicate>
  }
}

// -----

// With pipeline stages the logits come back to the first stage: the transfer is marked (the
// last stage sends each row's argmax), and so is the gather before it.
// CHECK-LABEL: func.func @staged
// CHECK:         %[[G:.*]] = tp.all_gather %{{.*}} dim = 1 {argmax_if_greedy, module = "lm_head"
// CHECK:         tp.transfer %[[G]] from 1 to 0 {argmax_if_greedy, module = "lm_head"
// CUDA-LABEL:  func.func @staged
// CUDA-NOT:      argmax_if_greedy
module attributes {tp.mesh = #tp.mesh<pp = 2, tp = 2>} {
  tp.param @lm {placement = #tp.shard<0>} : tensor<128x64xf32>
  func.func @staged(%x: tensor<1x64xf32, #tp.replicate>) -> tensor<1x256xf32, #tp.replicate> {
    %w = tp.weight @lm : tensor<128x64xf32, #tp.shard<0>>
    %l = tp.linear "lm_head" %x, %w {tp.stage = 1 : i64} : (tensor<1x64xf32, #tp.replicate>, tensor<128x64xf32, #tp.shard<0>>) -> tensor<1x128xf32, #tp.shard<1>>
    %g = tp.all_gather %l dim = 1 {module = "lm_head", tp.stage = 1 : i64} : tensor<1x128xf32, #tp.shard<1>> -> tensor<1x256xf32, #tp.replicate>
    %b = tp.transfer %g from 1 to 0 {module = "lm_head", tp.stage = 0 : i64} : tensor<1x256xf32, #tp.replicate>
    return %b : tensor<1x256xf32, #tp.replicate>
  }
}

// -----

// A gather of rows (sequence parallelism's) and a gather whose result is read before it is
// returned: neither is the forward's logits alone.
// CHECK-LABEL: func.func @not_logits
// CHECK-NOT:     argmax_if_greedy
// CHECK:         return
module attributes {tp.mesh = #tp.mesh<tp = 2>} {
  func.func @not_logits(%x: tensor<?x64xf32, #tp.shard<0>>, %y: tensor<1x128xf32, #tp.shard<1>>)
      -> (tensor<?x64xf32, #tp.replicate>, tensor<1x256xf32, #tp.replicate>) {
    %r = tp.all_gather %x dim = 0 : tensor<?x64xf32, #tp.shard<0>> -> tensor<?x64xf32, #tp.replicate>
    %g = tp.all_gather %y dim = 1 : tensor<1x128xf32, #tp.shard<1>> -> tensor<1x256xf32, #tp.replicate>
    %s = tp.scale "lm_head" %g {factor = 2.0 : f64} : (tensor<1x256xf32, #tp.replicate>) -> tensor<1x256xf32, #tp.replicate>
    return %r, %s : tensor<?x64xf32, #tp.replicate>, tensor<1x256xf32, #tp.replicate>
  }
}
