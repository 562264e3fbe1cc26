// Every (source, target) pair of placements as a chain Replicate -> A -> B -> Replicate
// on a [tokens, 10] tensor (10 splits unevenly over 3 and 4 ranks; [4 | 6] are uneven
// strided blocks). The output concatenates all chains: run at any tp it must equal tp 1.
module @redistribute_pairs {
  tp.param @"model.embed_tokens.weight" : tensor<32x10xf32>
  func.func @forward(%ids: tensor<?xi64>) -> tensor<?x200xf32, #tp.replicate> {
    %t = tp.weight @"model.embed_tokens.weight" : tensor<32x10xf32>
    %x = tp.embedding "model.embed_tokens" %ids, %t : (tensor<?xi64>, tensor<32x10xf32>) -> tensor<?x10xf32, #tp.replicate>
    %p0_1 = tp.redistribute %x {module = "P->R"} : tensor<?x10xf32, #tp.replicate> -> tensor<?x10xf32, #tp.partial<sum>>
    %p0_2 = tp.redistribute %p0_1 {module = "P->R"} : tensor<?x10xf32, #tp.partial<sum>> -> tensor<?x10xf32, #tp.replicate>
    %p0_3 = tp.redistribute %p0_2 {module = "P->R"} : tensor<?x10xf32, #tp.replicate> -> tensor<?x10xf32, #tp.replicate>
    %p1_1 = tp.redistribute %x {module = "P->S0"} : tensor<?x10xf32, #tp.replicate> -> tensor<?x10xf32, #tp.partial<sum>>
    %p1_2 = tp.redistribute %p1_1 {module = "P->S0"} : tensor<?x10xf32, #tp.partial<sum>> -> tensor<?x10xf32, #tp.shard<0>>
    %p1_3 = tp.redistribute %p1_2 {module = "P->S0"} : tensor<?x10xf32, #tp.shard<0>> -> tensor<?x10xf32, #tp.replicate>
    %p2_1 = tp.redistribute %x {module = "P->S1"} : tensor<?x10xf32, #tp.replicate> -> tensor<?x10xf32, #tp.partial<sum>>
    %p2_2 = tp.redistribute %p2_1 {module = "P->S1"} : tensor<?x10xf32, #tp.partial<sum>> -> tensor<?x10xf32, #tp.shard<1>>
    %p2_3 = tp.redistribute %p2_2 {module = "P->S1"} : tensor<?x10xf32, #tp.shard<1>> -> tensor<?x10xf32, #tp.replicate>
    %p3_1 = tp.redistribute %x {module = "P->SS1"} : tensor<?x10xf32, #tp.replicate> -> tensor<?x10xf32, #tp.partial<sum>>
    %p3_2 = tp.redistribute %p3_1 {module = "P->SS1"} : tensor<?x10xf32, #tp.partial<sum>> -> tensor<?x10xf32, #tp.strided_shard<1, [4, 6]>>
    %p3_3 = tp.redistribute %p3_2 {module = "P->SS1"} : tensor<?x10xf32, #tp.strided_shard<1, [4, 6]>> -> tensor<?x10xf32, #tp.replicate>
    %p4_1 = tp.redistribute %x {module = "S0->R"} : tensor<?x10xf32, #tp.replicate> -> tensor<?x10xf32, #tp.shard<0>>
    %p4_2 = tp.redistribute %p4_1 {module = "S0->R"} : tensor<?x10xf32, #tp.shard<0>> -> tensor<?x10xf32, #tp.replicate>
    %p4_3 = tp.redistribute %p4_2 {module = "S0->R"} : tensor<?x10xf32, #tp.replicate> -> tensor<?x10xf32, #tp.replicate>
    %p5_1 = tp.redistribute %x {module = "S0->P"} : tensor<?x10xf32, #tp.replicate> -> tensor<?x10xf32, #tp.shard<0>>
    %p5_2 = tp.redistribute %p5_1 {module = "S0->P"} : tensor<?x10xf32, #tp.shard<0>> -> tensor<?x10xf32, #tp.partial<sum>>
    %p5_3 = tp.redistribute %p5_2 {module = "S0->P"} : tensor<?x10xf32, #tp.partial<sum>> -> tensor<?x10xf32, #tp.replicate>
    %p6_1 = tp.redistribute %x {module = "S0->S1"} : tensor<?x10xf32, #tp.replicate> -> tensor<?x10xf32, #tp.shard<0>>
    %p6_2 = tp.redistribute %p6_1 {module = "S0->S1"} : tensor<?x10xf32, #tp.shard<0>> -> tensor<?x10xf32, #tp.shard<1>>
    %p6_3 = tp.redistribute %p6_2 {module = "S0->S1"} : tensor<?x10xf32, #tp.shard<1>> -> tensor<?x10xf32, #tp.replicate>
    %p7_1 = tp.redistribute %x {module = "S0->SS1"} : tensor<?x10xf32, #tp.replicate> -> tensor<?x10xf32, #tp.shard<0>>
    %p7_2 = tp.redistribute %p7_1 {module = "S0->SS1"} : tensor<?x10xf32, #tp.shard<0>> -> tensor<?x10xf32, #tp.strided_shard<1, [4, 6]>>
    %p7_3 = tp.redistribute %p7_2 {module = "S0->SS1"} : tensor<?x10xf32, #tp.strided_shard<1, [4, 6]>> -> tensor<?x10xf32, #tp.replicate>
    %p8_1 = tp.redistribute %x {module = "S1->R"} : tensor<?x10xf32, #tp.replicate> -> tensor<?x10xf32, #tp.shard<1>>
    %p8_2 = tp.redistribute %p8_1 {module = "S1->R"} : tensor<?x10xf32, #tp.shard<1>> -> tensor<?x10xf32, #tp.replicate>
    %p8_3 = tp.redistribute %p8_2 {module = "S1->R"} : tensor<?x10xf32, #tp.replicate> -> tensor<?x10xf32, #tp.replicate>
    %p9_1 = tp.redistribute %x {module = "S1->P"} : tensor<?x10xf32, #tp.replicate> -> tensor<?x10xf32, #tp.shard<1>>
    %p9_2 = tp.redistribute %p9_1 {module = "S1->P"} : tensor<?x10xf32, #tp.shard<1>> -> tensor<?x10xf32, #tp.partial<sum>>
    %p9_3 = tp.redistribute %p9_2 {module = "S1->P"} : tensor<?x10xf32, #tp.partial<sum>> -> tensor<?x10xf32, #tp.replicate>
    %p10_1 = tp.redistribute %x {module = "S1->S0"} : tensor<?x10xf32, #tp.replicate> -> tensor<?x10xf32, #tp.shard<1>>
    %p10_2 = tp.redistribute %p10_1 {module = "S1->S0"} : tensor<?x10xf32, #tp.shard<1>> -> tensor<?x10xf32, #tp.shard<0>>
    %p10_3 = tp.redistribute %p10_2 {module = "S1->S0"} : tensor<?x10xf32, #tp.shard<0>> -> tensor<?x10xf32, #tp.replicate>
    %p11_1 = tp.redistribute %x {module = "S1->SS1"} : tensor<?x10xf32, #tp.replicate> -> tensor<?x10xf32, #tp.shard<1>>
    %p11_2 = tp.redistribute %p11_1 {module = "S1->SS1"} : tensor<?x10xf32, #tp.shard<1>> -> tensor<?x10xf32, #tp.strided_shard<1, [4, 6]>>
    %p11_3 = tp.redistribute %p11_2 {module = "S1->SS1"} : tensor<?x10xf32, #tp.strided_shard<1, [4, 6]>> -> tensor<?x10xf32, #tp.replicate>
    %p12_1 = tp.redistribute %x {module = "SS1->R"} : tensor<?x10xf32, #tp.replicate> -> tensor<?x10xf32, #tp.strided_shard<1, [4, 6]>>
    %p12_2 = tp.redistribute %p12_1 {module = "SS1->R"} : tensor<?x10xf32, #tp.strided_shard<1, [4, 6]>> -> tensor<?x10xf32, #tp.replicate>
    %p12_3 = tp.redistribute %p12_2 {module = "SS1->R"} : tensor<?x10xf32, #tp.replicate> -> tensor<?x10xf32, #tp.replicate>
    %p13_1 = tp.redistribute %x {module = "SS1->P"} : tensor<?x10xf32, #tp.replicate> -> tensor<?x10xf32, #tp.strided_shard<1, [4, 6]>>
    %p13_2 = tp.redistribute %p13_1 {module = "SS1->P"} : tensor<?x10xf32, #tp.strided_shard<1, [4, 6]>> -> tensor<?x10xf32, #tp.partial<sum>>
    %p13_3 = tp.redistribute %p13_2 {module = "SS1->P"} : tensor<?x10xf32, #tp.partial<sum>> -> tensor<?x10xf32, #tp.replicate>
    %p14_1 = tp.redistribute %x {module = "SS1->S0"} : tensor<?x10xf32, #tp.replicate> -> tensor<?x10xf32, #tp.strided_shard<1, [4, 6]>>
    %p14_2 = tp.redistribute %p14_1 {module = "SS1->S0"} : tensor<?x10xf32, #tp.strided_shard<1, [4, 6]>> -> tensor<?x10xf32, #tp.shard<0>>
    %p14_3 = tp.redistribute %p14_2 {module = "SS1->S0"} : tensor<?x10xf32, #tp.shard<0>> -> tensor<?x10xf32, #tp.replicate>
    %p15_1 = tp.redistribute %x {module = "SS1->S1"} : tensor<?x10xf32, #tp.replicate> -> tensor<?x10xf32, #tp.strided_shard<1, [4, 6]>>
    %p15_2 = tp.redistribute %p15_1 {module = "SS1->S1"} : tensor<?x10xf32, #tp.strided_shard<1, [4, 6]>> -> tensor<?x10xf32, #tp.shard<1>>
    %p15_3 = tp.redistribute %p15_2 {module = "SS1->S1"} : tensor<?x10xf32, #tp.shard<1>> -> tensor<?x10xf32, #tp.replicate>
    %p16_1 = tp.redistribute %x {module = "R->P"} : tensor<?x10xf32, #tp.replicate> -> tensor<?x10xf32, #tp.partial<sum>>
    %p16_2 = tp.redistribute %p16_1 {module = "R->P"} : tensor<?x10xf32, #tp.partial<sum>> -> tensor<?x10xf32, #tp.replicate>
    %p17_1 = tp.redistribute %x {module = "R->S0"} : tensor<?x10xf32, #tp.replicate> -> tensor<?x10xf32, #tp.shard<0>>
    %p17_2 = tp.redistribute %p17_1 {module = "R->S0"} : tensor<?x10xf32, #tp.shard<0>> -> tensor<?x10xf32, #tp.replicate>
    %p18_1 = tp.redistribute %x {module = "R->S1"} : tensor<?x10xf32, #tp.replicate> -> tensor<?x10xf32, #tp.shard<1>>
    %p18_2 = tp.redistribute %p18_1 {module = "R->S1"} : tensor<?x10xf32, #tp.shard<1>> -> tensor<?x10xf32, #tp.replicate>
    %p19_1 = tp.redistribute %x {module = "R->SS1"} : tensor<?x10xf32, #tp.replicate> -> tensor<?x10xf32, #tp.strided_shard<1, [4, 6]>>
    %p19_2 = tp.redistribute %p19_1 {module = "R->SS1"} : tensor<?x10xf32, #tp.strided_shard<1, [4, 6]>> -> tensor<?x10xf32, #tp.replicate>
    %all = tp.concat "out" %p0_3, %p1_3, %p2_3, %p3_3, %p4_3, %p5_3, %p6_3, %p7_3, %p8_3, %p9_3, %p10_3, %p11_3, %p12_3, %p13_3, %p14_3, %p15_3, %p16_2, %p17_2, %p18_2, %p19_2 {dim = 1 : i64} : (tensor<?x10xf32, #tp.replicate>, tensor<?x10xf32, #tp.replicate>, tensor<?x10xf32, #tp.replicate>, tensor<?x10xf32, #tp.replicate>, tensor<?x10xf32, #tp.replicate>, tensor<?x10xf32, #tp.replicate>, tensor<?x10xf32, #tp.replicate>, tensor<?x10xf32, #tp.replicate>, tensor<?x10xf32, #tp.replicate>, tensor<?x10xf32, #tp.replicate>, tensor<?x10xf32, #tp.replicate>, tensor<?x10xf32, #tp.replicate>, tensor<?x10xf32, #tp.replicate>, tensor<?x10xf32, #tp.replicate>, tensor<?x10xf32, #tp.replicate>, tensor<?x10xf32, #tp.replicate>, tensor<?x10xf32, #tp.replicate>, tensor<?x10xf32, #tp.replicate>, tensor<?x10xf32, #tp.replicate>, tensor<?x10xf32, #tp.replicate>) -> tensor<?x200xf32, #tp.replicate>
    return %all : tensor<?x200xf32, #tp.replicate>
  }
}
