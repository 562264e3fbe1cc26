// tp-lower-to-emitc alone: a decided program (after tp-partition and the decision passes) in,
// EmitC out, for each target. Every op is one call, its output the arena slot tp-plan-arena
// recorded; a fused unit is a generated kernel (the one emitc.verbatim) and its call.
// RUN: tpc-opt %s --tp-set-target=target=cpu --tp-lower-to-emitc | FileCheck %s --check-prefix=CPU
// RUN: tpc-opt %s --tp-set-target=target=cuda --tp-lower-to-emitc | FileCheck %s --check-prefix=CUDA

module @tiny attributes {tp.mesh = #tp.mesh<tp = 1>, tp.eos_token_ids = array<i64: 7>} {
  tp.param @"embed.weight" : tensor<32x8xf32>
  tp.param @"up.weight" : tensor<8x8xf32>
  tp.param @"gate.weight" : tensor<8x8xf32>
  func.func @forward(%ids: tensor<?xi64>, %positions: tensor<?xi64>) -> tensor<?x8xf32> attributes {tp.arena_size = 24 : i64} {
    %we = tp.weight @"embed.weight" : tensor<32x8xf32>
    %h = tp.embedding "embed" %ids, %we {tp.arena = array<i64: 0>} : (tensor<?xi64>, tensor<32x8xf32>) -> tensor<?x8xf32>
    %wu = tp.weight @"up.weight" : tensor<8x8xf32>
    %wg = tp.weight @"gate.weight" : tensor<8x8xf32>
    %u = tp.linear "up" %h, %wu {tp.arena = array<i64: 8>} : (tensor<?x8xf32>, tensor<8x8xf32>) -> tensor<?x8xf32>
    %g = tp.linear "gate" %h, %wg {tp.arena = array<i64: 16>} : (tensor<?x8xf32>, tensor<8x8xf32>) -> tensor<?x8xf32>
    %m = tp.fused elementwise -> tensor<?x8xf32> attributes {tp.arena = array<i64: 0>} {
      %s = tp.silu "mlp" %g : (tensor<?x8xf32>) -> tensor<?x8xf32>
      %p = tp.mul "mlp" %s, %u : (tensor<?x8xf32>, tensor<?x8xf32>) -> tensor<?x8xf32>
      tp.yield %p : tensor<?x8xf32>
    }
    return %m : tensor<?x8xf32>
  }
}

// CPU:      emitc.include <"tpcrt/program.h">
// CPU-NEXT: emitc.verbatim "// silu, mul in mlp, as one loop.\0Astatic void forward_fused_0(tpcrt::Context &, int64_t rows, const float *in0, const float *in1, float *out) {
// CPU:      emitc.func @forward(%[[CX:.*]]: !emitc.opaque<"tpcrt::Context &">, %[[IDS:.*]]: !emitc.ptr<!emitc.opaque<"const int64_t">>, %{{.*}}: !emitc.ptr<!emitc.opaque<"const int64_t">>, %[[N:.*]]: i64) -> !emitc.ptr<!emitc.opaque<"float">> attributes {specifiers = ["static"]}
// CPU:        %[[WE:.*]] = call_opaque "tpcrt::weight"(%[[CX]]) {args = [0 : index, 0]}
// CPU-NEXT:   %[[H:.*]] = call_opaque "tpcrt::slot"(%[[CX]], %[[N]]) {args = [0 : index, 0, 1 : index]}
// CPU-NEXT:   call_opaque "tpcrt::embedding"(%[[CX]], %[[IDS]], %[[N]], %[[WE]], %[[H]]) {args = [0 : index, 1 : index, 2 : index, 3 : index, 32, 32, 8, #emitc.opaque<"false">, 4 : index]}
// CPU:        %[[U:.*]] = call_opaque "tpcrt::slot"(%[[CX]], %[[N]]) {args = [0 : index, 8, 1 : index]}
// CPU-NEXT:   call_opaque "tpcrt::linear"(%[[CX]], %[[H]], %[[N]], %{{.*}}, %[[U]]) {args = [0 : index, 1 : index, 2 : index, 8, 3 : index, 8, #emitc.opaque<"nullptr">, 4 : index]}
// CPU:        %[[G:.*]] = call_opaque "tpcrt::slot"(%[[CX]], %[[N]]) {args = [0 : index, 16, 1 : index]}
// CPU:        %[[M:.*]] = call_opaque "tpcrt::slot"(%[[CX]], %[[N]]) {args = [0 : index, 0, 1 : index]}
// CPU-NEXT:   call_opaque "forward_fused_0"(%[[CX]], %[[N]], %[[G]], %[[U]], %[[M]])
// CPU-NEXT:   return %[[M]]
// CPU:      emitc.func @main(%[[ARGC:.*]]: i32, %[[ARGV:.*]]: !emitc.ptr<!emitc.ptr<!emitc.opaque<"char">>>) -> i32
// CPU-NEXT:   %[[SPEC:.*]] = call_opaque "tpcrt::newSpec"() {args = [#emitc.opaque<"\22tiny\22">, 1, 8, 24, #emitc.opaque<"false">]}
// CPU-NEXT:   call_opaque "tpcrt::addParam"(%[[SPEC]]) {args = [0 : index, #emitc.opaque<"\22embed.weight\22">, #emitc.opaque<"std::vector<int64_t>{32, 8}">, #emitc.opaque<"tpcrt::SliceSpec{}">, #emitc.opaque<"std::vector<std::string>{}">]}
// CPU:        call_opaque "tpcrt::addEosId"(%[[SPEC]]) {args = [0 : index, 7]}
// CPU-NEXT:   call_opaque "tpcrt::setVariableGathers"(%[[SPEC]]) {args = [0 : index, #emitc.opaque<"true">]}
// CPU-NEXT:   call_opaque "tpcrt::setArgmaxOnRanks"(%[[SPEC]]) {args = [0 : index, #emitc.opaque<"false">]}
// CPU-NEXT:   call_opaque "tpcrt::setForwards"(%[[SPEC]]) {args = [0 : index, #emitc.opaque<"forward">, #emitc.opaque<"nullptr">]}
// CPU-NEXT:   %[[CODE:.*]] = call_opaque "tpcrt::runModel"(%[[SPEC]], %[[ARGC]], %[[ARGV]])
// CPU-NEXT:   return %[[CODE]] : i32
// CPU-NOT:  tp.

// CUDA:      emitc.include <"tpcrt/cuda/program.h">
// CUDA-NEXT: emitc.verbatim "// silu, mul in mlp, as one kernel.\0A__global__ void forward_fused_0_kernel(
// CUDA:      emitc.func @forward(%{{.*}}: !emitc.opaque<"tpcrt::cuda::Device &">,
// CUDA:        call_opaque "tpcrt::cuda::linear"
// CUDA:        call_opaque "forward_fused_0"
// CUDA:        call_opaque "tpcrt::cuda::setAttentionBounds"(%{{.*}}) {args = [0 : index, 0, 0]}
// CUDA-NEXT:   call_opaque "tpcrt::setVariableGathers"(%{{.*}}) {args = [0 : index, #emitc.opaque<"false">]}
// CUDA-NEXT:   call_opaque "tpcrt::setArgmaxOnRanks"(%{{.*}}) {args = [0 : index, #emitc.opaque<"false">]}
// CUDA-NEXT:   call_opaque "tpcrt::cuda::setForwards"
// CUDA-NEXT:   call_opaque "tpcrt::cuda::runModel"
