// tp-insert-redistribute materializes what tp-propagate-layouts recorded: a redistribution
// after an op with an output hook, and one before each operand in the wrong placement,
// shared by consumers that need the same.
// RUN: tpc-opt %s --tp-insert-redistribute | FileCheck %s

module attributes {tp.mesh = #tp.mesh<tp = 2>} {
  tp.param @w : tensor<64x64xf32> 
  // CHECK-LABEL: func.func @f
  // CHECK-SAME: -> tensor<?x64xf32, #tp.replicate>
  func.func @f(%x: tensor<?x64xf32, #tp.replicate>) -> tensor<?x64xf32, #tp.replicate> {
    %w = tp.weight @w : tensor<64x64xf32, #tp.replicate>
    // The two consumers needing x split by features share one local reshard.
    // CHECK:      %[[S:.*]] = tp.redistribute %arg0 {module = "a"} : tensor<?x64xf32, #tp.replicate> -> tensor<?x64xf32, #tp.shard<1>>
    // CHECK:      tp.silu "a" %[[S]]
    %a = tp.silu "a" %x {tp.operand_layouts = [#tp.shard<1>]} : (tensor<?x64xf32, #tp.replicate>) -> tensor<?x64xf32, #tp.shard<1>>
    // CHECK-NEXT: tp.gelu "b" %[[S]]
    %b = tp.gelu "b" %x {tp.operand_layouts = [#tp.shard<1>]} : (tensor<?x64xf32, #tp.replicate>) -> tensor<?x64xf32, #tp.shard<1>>
    // CHECK-NEXT: %[[M:.*]] = tp.mul "c" {{.*}} -> tensor<?x64xf32, #tp.shard<1>>
    // CHECK-NEXT: %[[H:.*]] = tp.redistribute %[[M]] {module = "c"} : tensor<?x64xf32, #tp.shard<1>> -> tensor<?x64xf32, #tp.replicate>
    %c = tp.mul "c" %a, %b {tp.operand_layouts = [#tp.shard<1>, #tp.shard<1>], tp.output_layout = #tp.replicate} : (tensor<?x64xf32, #tp.shard<1>>, tensor<?x64xf32, #tp.shard<1>>) -> tensor<?x64xf32, #tp.shard<1>>
    // CHECK-NEXT: %[[Y:.*]] = tp.linear "d" %[[H]]
    %y = tp.linear "d" %c, %w {tp.operand_layouts = [#tp.replicate, #tp.replicate]} : (tensor<?x64xf32, #tp.shard<1>>, tensor<64x64xf32, #tp.replicate>) -> tensor<?x64xf32, #tp.replicate>
    // CHECK-NOT: tp.operand_layouts
    // CHECK: return %[[Y]] : tensor<?x64xf32, #tp.replicate>
    return {tp.operand_layouts = [#tp.replicate]} %y : tensor<?x64xf32, #tp.replicate>
  }
}
