// Every tp op and attribute survives printing and parsing, in the custom and the generic form.
// RUN: tpc-opt %s | tpc-opt | FileCheck %s
// RUN: tpc-opt %s --mlir-print-op-generic | tpc-opt | FileCheck %s

// CHECK: module @ops attributes {tp.mesh = #tp.mesh<tp = 4>}
module @ops attributes {tp.mesh = #tp.mesh<tp = 4>} {
  // CHECK: tp.param @model.embed_tokens.weight {placement = #tp.shard<0>, strategy = "embedding_rowwise"} : tensor<256x64xbf16>
  tp.param @"model.embed_tokens.weight" {placement = #tp.shard<0>, strategy = "embedding_rowwise"} : tensor<256x64xbf16>
  // CHECK: tp.param @model.norm.weight {placement = #tp.replicate} : tensor<64xbf16>
  tp.param @"model.norm.weight" {placement = #tp.replicate} : tensor<64xbf16>
  // CHECK: tp.param @q.weight {placement = #tp.shard<-2>} : tensor<64x64xbf16>
  tp.param @"q.weight" {placement = #tp.shard<-2>} : tensor<64x64xbf16>
  // CHECK: tp.param @gate_up.weight {placement = #tp.strided_shard<-2, [128, 128]>} : tensor<256x64xbf16>
  tp.param @"gate_up.weight" {placement = #tp.strided_shard<-2, [128, 128]>} : tensor<256x64xbf16>
  // CHECK: tp.param @qkv.weight {placement = #tp.strided_shard<-2, [64, 32, 32]>} : tensor<128x64xbf16>
  tp.param @"qkv.weight" {placement = #tp.strided_shard<-2, [64, 32, 32]>} : tensor<128x64xbf16>
  // CHECK: tp.param @qkv.bias : tensor<128xbf16>
  tp.param @"qkv.bias" : tensor<128xbf16>
  // CHECK: tp.param @k.weight {head_repeat = 2 : i64, placement = #tp.shard<0>, shard = #tp.shard_desc<dim = 0, hf_shape = [32, 64], offsets = [0], sizes = [32], chunks = 2>} : tensor<16x64xbf16>
  tp.param @"k.weight" {head_repeat = 2 : i64, placement = #tp.shard<0>, shard = #tp.shard_desc<dim = 0, hf_shape = [32, 64], offsets = [0], sizes = [32], chunks = 2>} : tensor<16x64xbf16>

  // CHECK-LABEL: func.func @layers
  func.func @layers(%ids: tensor<?xi64>, %pos: tensor<?xi64>) -> tensor<?x64xbf16> {
    // CHECK: tp.weight @model.embed_tokens.weight : tensor<256x64xbf16>
    %table = tp.weight @"model.embed_tokens.weight" : tensor<256x64xbf16>
    // CHECK: tp.embedding "model.embed_tokens" %{{.*}}, %{{.*}} : (tensor<?xi64>, tensor<256x64xbf16>) -> tensor<?x64xbf16>
    %h = tp.embedding "model.embed_tokens" %ids, %table : (tensor<?xi64>, tensor<256x64xbf16>) -> tensor<?x64xbf16>
    %nw = tp.weight @"model.norm.weight" : tensor<64xbf16>
    // CHECK: tp.rms_norm "model.norm" %{{.*}}, %{{.*}} {epsilon = 9.9999999999999995E-7 : f64, weight_offset = 1.000000e+00 : f64}
    %n = tp.rms_norm "model.norm" %h, %nw {epsilon = 1.0e-6 : f64, weight_offset = 1.0 : f64} : (tensor<?x64xbf16>, tensor<64xbf16>) -> tensor<?x64xbf16>
    %qw = tp.weight @"q.weight" : tensor<64x64xbf16>
    // CHECK: tp.linear "q" %{{.*}}, %{{.*}} : (tensor<?x64xbf16>, tensor<64x64xbf16>) -> tensor<?x64xbf16>
    %q = tp.linear "q" %n, %qw : (tensor<?x64xbf16>, tensor<64x64xbf16>) -> tensor<?x64xbf16>
    %qkvw = tp.weight @"qkv.weight" : tensor<128x64xbf16>
    %qkvb = tp.weight @"qkv.bias" : tensor<128xbf16>
    // CHECK: tp.linear "qkv" %{{.*}}, %{{.*}}, %{{.*}} : (tensor<?x64xbf16>, tensor<128x64xbf16>, tensor<128xbf16>) -> tensor<?x128xbf16>
    %qkv = tp.linear "qkv" %n, %qkvw, %qkvb : (tensor<?x64xbf16>, tensor<128x64xbf16>, tensor<128xbf16>) -> tensor<?x128xbf16>
    // CHECK: tp.slice "attn" %{{.*}} {dim = -1 : i64, offset = 64 : i64, size = 32 : i64} : (tensor<?x128xbf16>) -> tensor<?x32xbf16>
    %k = tp.slice "attn" %qkv {dim = -1 : i64, offset = 64 : i64, size = 32 : i64} : (tensor<?x128xbf16>) -> tensor<?x32xbf16>
    %v = tp.slice "attn" %qkv {dim = 1 : i64, offset = 96 : i64, size = 32 : i64} : (tensor<?x128xbf16>) -> tensor<?x32xbf16>
    // CHECK: tp.rotary "attn" %{{.*}}, %{{.*}} {head_dim = 16 : i64, theta = 5.000000e+05 : f64} : (tensor<?x64xbf16>, tensor<?xi64>) -> tensor<?x64xbf16>
    %qr = tp.rotary "attn" %q, %pos {head_dim = 16 : i64, theta = 500000.0 : f64} : (tensor<?x64xbf16>, tensor<?xi64>) -> tensor<?x64xbf16>
    // CHECK: tp.attention "attn" %{{.*}}, %{{.*}}, %{{.*}} {head_dim = 16 : i64, num_heads = 4 : i64, num_kv_heads = 2 : i64, scale = 2.500000e-01 : f64, sliding_window = 4096 : i64}
    %a = tp.attention "attn" %qr, %k, %v {num_heads = 4 : i64, num_kv_heads = 2 : i64, head_dim = 16 : i64, sliding_window = 4096 : i64, scale = 0.25 : f64} : (tensor<?x64xbf16>, tensor<?x32xbf16>, tensor<?x32xbf16>) -> tensor<?x64xbf16>
    // CHECK: tp.silu "act" %{{.*}} : (tensor<?x64xbf16>) -> tensor<?x64xbf16>
    %s = tp.silu "act" %a : (tensor<?x64xbf16>) -> tensor<?x64xbf16>
    // CHECK: tp.gelu "act" %{{.*}} {approximate = "tanh"} : (tensor<?x64xbf16>) -> tensor<?x64xbf16>
    %g = tp.gelu "act" %s {approximate = "tanh"} : (tensor<?x64xbf16>) -> tensor<?x64xbf16>
    // CHECK: tp.gelu "act" %{{.*}} : (tensor<?x64xbf16>) -> tensor<?x64xbf16>
    %g2 = tp.gelu "act" %g : (tensor<?x64xbf16>) -> tensor<?x64xbf16>
    // CHECK: tp.mul "mlp" %{{.*}}, %{{.*}} : (tensor<?x64xbf16>, tensor<?x64xbf16>) -> tensor<?x64xbf16>
    %m = tp.mul "mlp" %g2, %s : (tensor<?x64xbf16>, tensor<?x64xbf16>) -> tensor<?x64xbf16>
    // CHECK: tp.add "layer" %{{.*}}, %{{.*}} {tp.strategy = #tp.strategy<"colwise", input = #tp.replicate, output = #tp.shard<-1>>}
    %r = tp.add "layer" %h, %m {tp.strategy = #tp.strategy<"colwise", input = #tp.replicate, output = #tp.shard<-1>>} : (tensor<?x64xbf16>, tensor<?x64xbf16>) -> tensor<?x64xbf16>
    // CHECK: tp.last_token "model.norm" %{{.*}} : (tensor<?x64xbf16>) -> tensor<1x64xbf16>
    %last = tp.last_token "model.norm" %m : (tensor<?x64xbf16>) -> tensor<1x64xbf16>
    // CHECK: tp.concat "attn" %{{.*}}, %{{.*}} {dim = -1 : i64} : (tensor<?x32xbf16>, tensor<?x32xbf16>) -> tensor<?x64xbf16>
    %c = tp.concat "attn" %k, %v {dim = -1 : i64} : (tensor<?x32xbf16>, tensor<?x32xbf16>) -> tensor<?x64xbf16>
    // CHECK: tp.add "layer" %{{.*}}, %{{.*}} {tp.strategy = #tp.strategy<"sequence_parallel">}
    %out = tp.add "layer" %r, %c {tp.strategy = #tp.strategy<"sequence_parallel">} : (tensor<?x64xbf16>, tensor<?x64xbf16>) -> tensor<?x64xbf16>
    return %out : tensor<?x64xbf16>
  }

  // CHECK-LABEL: func.func @imported
  // What `tpc import` adds for the architectures beyond Llama.
  func.func @imported(%h: tensor<?x64xf32>, %pos: tensor<?xi64>, %wn: tensor<16xf32>, %nw2: tensor<64xf32>, %wr: tensor<4x64xf32>, %wgu: tensor<4x256x64xf32>, %wd: tensor<4x64x128xf32>) -> tensor<?x64xf32> {
    // CHECK: tp.scale "model" %{{.*}} {factor = 8.000000e+00 : f64} : (tensor<?x64xf32>) -> tensor<?x64xf32>
    %s = tp.scale "model" %h {factor = 8.0 : f64} : (tensor<?x64xf32>) -> tensor<?x64xf32>
    // CHECK: tp.rms_norm "q_norm" %{{.*}}, %{{.*}} {epsilon = 9.9999999999999995E-7 : f64, head_dim = 16 : i64} : (tensor<?x64xf32>, tensor<16xf32>) -> tensor<?x64xf32>
    %n = tp.rms_norm "q_norm" %s, %wn {epsilon = 1.0e-6 : f64, head_dim = 16 : i64} : (tensor<?x64xf32>, tensor<16xf32>) -> tensor<?x64xf32>
    // CHECK: tp.sum_squares "k_norm" %{{.*}} {copies = 2 : i64} : (tensor<?x64xf32>) -> tensor<?x1xf32>
    %ss = tp.sum_squares "k_norm" %s {copies = 2 : i64} : (tensor<?x64xf32>) -> tensor<?x1xf32>
    // CHECK: tp.rms_norm "k_norm" %{{.*}}, %{{.*}}, %{{.*}} {epsilon = 9.9999999999999995E-7 : f64, features = 128 : i64} : (tensor<?x64xf32>, tensor<64xf32>, tensor<?x1xf32>) -> tensor<?x64xf32>
    %kn = tp.rms_norm "k_norm" %s, %nw2, %ss {epsilon = 1.0e-6 : f64, features = 128 : i64} : (tensor<?x64xf32>, tensor<64xf32>, tensor<?x1xf32>) -> tensor<?x64xf32>
    // CHECK: tp.rotary "attn" %{{.*}}, %{{.*}} {head_dim = 4 : i64, inv_freq = array<f64: 1.000000e+00, 1.250000e-03>, theta = 1.000000e+04 : f64}
    %r = tp.rotary "attn" %n, %pos {head_dim = 4 : i64, theta = 10000.0 : f64, inv_freq = array<f64: 1.0, 0.00125>} : (tensor<?x64xf32>, tensor<?xi64>) -> tensor<?x64xf32>
    // CHECK: tp.rotary "attn" %{{.*}}, %{{.*}} {head_dim = 4 : i64, inv_freq = array<f64: 1.000000e+00, 1.250000e-03>, scaling = 1.250000e+00 : f64, theta = 1.000000e+04 : f64}
    %ry = tp.rotary "attn" %n, %pos {head_dim = 4 : i64, theta = 10000.0 : f64, inv_freq = array<f64: 1.0, 0.00125>, scaling = 1.25 : f64} : (tensor<?x64xf32>, tensor<?xi64>) -> tensor<?x64xf32>
    // CHECK: tp.attention "attn" %{{.*}}, %{{.*}}, %{{.*}} {head_dim = 16 : i64, num_heads = 4 : i64, num_kv_heads = 4 : i64, softcap = 5.000000e+01 : f64}
    %a = tp.attention "attn" %r, %r, %r {num_heads = 4 : i64, num_kv_heads = 4 : i64, head_dim = 16 : i64, softcap = 50.0 : f64} : (tensor<?x64xf32>, tensor<?x64xf32>, tensor<?x64xf32>) -> tensor<?x64xf32>
    // CHECK: tp.softcap "lm_head" %{{.*}} {cap = 3.000000e+01 : f64} : (tensor<?x64xf32>) -> tensor<?x64xf32>
    %c = tp.softcap "lm_head" %a {cap = 30.0 : f64} : (tensor<?x64xf32>) -> tensor<?x64xf32>
    // CHECK: tp.router "mlp.gate" %{{.*}}, %{{.*}} {top_k = 2 : i64} : (tensor<?x64xf32>, tensor<4x64xf32>) -> tensor<?x4xf32>
    %g = tp.router "mlp.gate" %c, %wr {top_k = 2 : i64} : (tensor<?x64xf32>, tensor<4x64xf32>) -> tensor<?x4xf32>
    // CHECK: tp.experts "mlp.experts" %{{.*}}, %{{.*}}, %{{.*}}, %{{.*}} : (tensor<?x64xf32>, tensor<?x4xf32>, tensor<4x256x64xf32>, tensor<4x64x128xf32>) -> tensor<?x64xf32>
    %e = tp.experts "mlp.experts" %c, %g, %wgu, %wd : (tensor<?x64xf32>, tensor<?x4xf32>, tensor<4x256x64xf32>, tensor<4x64x128xf32>) -> tensor<?x64xf32>
    // CHECK: tp.identity "mlp.experts.zero" %{{.*}} : (tensor<?x64xf32>) -> tensor<?x64xf32>
    %i = tp.identity "mlp.experts.zero" %e : (tensor<?x64xf32>) -> tensor<?x64xf32>
    return %i : tensor<?x64xf32>
  }

  // GPT-OSS: attention sinks, a router with a bias and its softmax after the top k, experts
  // in [E, in, out] with gate and up interleaved, their biases and the clamped SwiGLU.
  // CHECK-LABEL: func.func @gpt_oss
  func.func @gpt_oss(%q: tensor<?x64xf32>, %k: tensor<?x32xf32>, %s: tensor<4xf32>, %x: tensor<?x16xf32>, %wr: tensor<4x16xf32>, %br: tensor<4xf32>, %gu: tensor<4x16x48xf32>, %d: tensor<4x24x16xf32>, %gb: tensor<4x48xf32>, %db: tensor<4x16xf32>) -> tensor<?x16xf32> {
    // CHECK: tp.attention "attn" %{{.*}}, %{{.*}}, %{{.*}}, %{{.*}} {head_dim = 16 : i64, num_heads = 4 : i64, num_kv_heads = 2 : i64} : (tensor<?x64xf32>, tensor<?x32xf32>, tensor<?x32xf32>, tensor<4xf32>) -> tensor<?x64xf32>
    %a = tp.attention "attn" %q, %k, %k, %s {num_heads = 4 : i64, num_kv_heads = 2 : i64, head_dim = 16 : i64} : (tensor<?x64xf32>, tensor<?x32xf32>, tensor<?x32xf32>, tensor<4xf32>) -> tensor<?x64xf32>
    // CHECK: tp.router "mlp.router" %{{.*}}, %{{.*}}, %{{.*}} {softmax_after_top_k = true, top_k = 2 : i64} : (tensor<?x16xf32>, tensor<4x16xf32>, tensor<4xf32>) -> tensor<?x4xf32>
    %r = tp.router "mlp.router" %x, %wr, %br {top_k = 2 : i64, softmax_after_top_k = true} : (tensor<?x16xf32>, tensor<4x16xf32>, tensor<4xf32>) -> tensor<?x4xf32>
    // CHECK: tp.experts "mlp.experts" %{{.*}}, %{{.*}}, %{{.*}}, %{{.*}}, %{{.*}}, %{{.*}} {activation = "clamped_swiglu", alpha = 1.702000e+00 : f64, layout = "in_out_interleaved", limit = 7.000000e+00 : f64} : (tensor<?x16xf32>, tensor<?x4xf32>, tensor<4x16x48xf32>, tensor<4x24x16xf32>, tensor<4x48xf32>, tensor<4x16xf32>) -> tensor<?x16xf32>
    %e = tp.experts "mlp.experts" %x, %r, %gu, %d, %gb, %db {activation = "clamped_swiglu", layout = "in_out_interleaved", alpha = 1.702 : f64, limit = 7.0 : f64} : (tensor<?x16xf32>, tensor<?x4xf32>, tensor<4x16x48xf32>, tensor<4x24x16xf32>, tensor<4x48xf32>, tensor<4x16xf32>) -> tensor<?x16xf32>
    return %e : tensor<?x16xf32>
  }

  // CHECK-LABEL: func.func @communication
  // Global shapes, placements as type encodings.
  func.func @communication(%p: tensor<8x64xf32, #tp.partial<sum>>) -> tensor<8x64xf32, #tp.replicate> {
    // CHECK: tp.redistribute %{{.*}} {module = "model.layers.0.mlp.down_proj"} : tensor<8x64xf32, #tp.partial<sum>> -> tensor<8x64xf32, #tp.replicate>
    %r = tp.redistribute %p {module = "model.layers.0.mlp.down_proj"} : tensor<8x64xf32, #tp.partial<sum>> -> tensor<8x64xf32, #tp.replicate>
    // CHECK: tp.redistribute %{{.*}} : tensor<8x64xf32, #tp.replicate> -> tensor<8x64xf32, #tp.strided_shard<-1, [32, 32]>>
    %s = tp.redistribute %r : tensor<8x64xf32, #tp.replicate> -> tensor<8x64xf32, #tp.strided_shard<-1, [32, 32]>>
    // CHECK: tp.local_reshard %{{.*}} : tensor<8x64xf32, #tp.replicate> -> tensor<8x64xf32, #tp.shard<1>>
    %l = tp.local_reshard %r : tensor<8x64xf32, #tp.replicate> -> tensor<8x64xf32, #tp.shard<1>>
    // CHECK: tp.all_reduce %{{.*}} sum : tensor<8x64xf32, #tp.partial<sum>> -> tensor<8x64xf32, #tp.replicate>
    %a = tp.all_reduce %p sum : tensor<8x64xf32, #tp.partial<sum>> -> tensor<8x64xf32, #tp.replicate>
    return %a : tensor<8x64xf32, #tp.replicate>
  }

  // CHECK-LABEL: func.func @local
  // Local shapes at tp 4, as tp-partition leaves them.
  func.func @local(%x: tensor<8x16xf32, #tp.shard<1>>, %y: tensor<8x16xf32, #tp.strided_shard<1, [32, 32]>>, %p: tensor<8x64xf32, #tp.partial<sum>>) {
    // CHECK: tp.all_gather %{{.*}} dim = 1 : tensor<8x16xf32, #tp.shard<1>> -> tensor<8x64xf32, #tp.replicate>
    %g = tp.all_gather %x dim = 1 : tensor<8x16xf32, #tp.shard<1>> -> tensor<8x64xf32, #tp.replicate>
    // CHECK: tp.all_gather %{{.*}} dim = 1 {blocks = array<i64: 32, 32>} : tensor<8x16xf32, #tp.strided_shard<1, [32, 32]>> -> tensor<8x64xf32, #tp.replicate>
    %gs = tp.all_gather %y dim = 1 {blocks = array<i64: 32, 32>} : tensor<8x16xf32, #tp.strided_shard<1, [32, 32]>> -> tensor<8x64xf32, #tp.replicate>
    // CHECK: tp.reduce_scatter %{{.*}} sum dim = 0 {module = "model.layers.0.self_attn.o_proj"} : tensor<8x64xf32, #tp.partial<sum>> -> tensor<2x64xf32, #tp.shard<0>>
    %rs = tp.reduce_scatter %p sum dim = 0 {module = "model.layers.0.self_attn.o_proj"} : tensor<8x64xf32, #tp.partial<sum>> -> tensor<2x64xf32, #tp.shard<0>>
    // CHECK: tp.reduce_scatter %{{.*}} sum dim = 1 {blocks = array<i64: 32, 32>} : tensor<8x64xf32, #tp.partial<sum>> -> tensor<8x16xf32, #tp.strided_shard<1, [32, 32]>>
    %rss = tp.reduce_scatter %p sum dim = 1 {blocks = array<i64: 32, 32>} : tensor<8x64xf32, #tp.partial<sum>> -> tensor<8x16xf32, #tp.strided_shard<1, [32, 32]>>
    // CHECK: tp.all_to_all %{{.*}} split_dim = 1 concat_dim = 0 : tensor<2x64xf32, #tp.shard<0>> -> tensor<8x16xf32, #tp.shard<1>>
    %t = tp.all_to_all %rs split_dim = 1 concat_dim = 0 : tensor<2x64xf32, #tp.shard<0>> -> tensor<8x16xf32, #tp.shard<1>>
    // CHECK: tp.local_reshard %{{.*}} : tensor<8x16xf32, #tp.shard<1>> -> tensor<8x64xf32, #tp.partial<sum>>
    %lp = tp.local_reshard %x : tensor<8x16xf32, #tp.shard<1>> -> tensor<8x64xf32, #tp.partial<sum>>
    return
  }
}
