// Every verifier error of the tp dialect, each naming the module and the mismatch.
// RUN: tpc-opt %s -split-input-file -verify-diagnostics

// expected-error @+1 {{parameter w: Shard(2) needs dim 2, but the tensor has rank 2}}
tp.param @w {placement = #tp.shard<2>} : tensor<64x64xf32>

// -----

// expected-error @+1 {{parameter w: Shard(-3) needs dim -3, but the tensor has rank 2}}
tp.param @w {placement = #tp.shard<-3>} : tensor<64x64xf32>

// -----

// expected-error @+1 {{parameter gate_up: StridedShard(-2, [32, 32]): the blocks add up to 64, but dim -2 has 96}}
tp.param @gate_up {placement = #tp.strided_shard<-2, [32, 32]>} : tensor<96x64xf32>

// -----

// expected-error @+1 {{a strided shard needs at least two blocks, got 1}}
tp.param @w {placement = #tp.strided_shard<0, [64]>} : tensor<64x64xf32>

// -----

// expected-error @+1 {{strided shard blocks must be positive, got 0}}
tp.param @w {placement = #tp.strided_shard<0, [64, 0]>} : tensor<64x64xf32>

// -----

// expected-error @+1 {{the tp size must be at least 1, got 0}}
module attributes {tp.mesh = #tp.mesh<tp = 0>} {}

// -----

module {
  // expected-error @+1 {{'tp.mesh' belongs on the module, not on func.func}}
  func.func @f() attributes {tp.mesh = #tp.mesh<tp = 2>} { return }
}

// -----

// expected-error @+1 {{'tp.mesh' must be a #tp.mesh, got 2 : i64}}
module attributes {tp.mesh = 2} {}

// -----

module {
  // expected-error @+1 {{'tp.strategy' must be a #tp.strategy, got "colwise"}}
  func.func @f() attributes {tp.strategy = "colwise"} { return }
}

// -----

// expected-error @+1 {{unknown tp dialect attribute 'tp.plan'}}
module attributes {tp.plan = "plan.json"} {}

// -----

func.func @f(%x: tensor<4xf32>) {
  // expected-error @+1 {{'tp.operand_layouts' must list one placement per operand}}
  return {tp.operand_layouts = [#tp.replicate, #tp.replicate]} %x : tensor<4xf32>
}

// -----

module {
  // expected-error @+1 {{'tp.output_layout' must be a placement on a one-result op}}
  func.func @f() attributes {tp.output_layout = #tp.replicate} { return }
}

// -----

// expected-error @+1 {{shard_desc: block [16, 48) is outside dim 0 of size 32}}
tp.param @w {shard = #tp.shard_desc<dim = 0, hf_shape = [32, 64], offsets = [16], sizes = [32], chunks = 2>} : tensor<16x64xf32>

// -----

// expected-error @+1 {{shard_desc: chunks must be at least 1, got 0}}
tp.param @w {shard = #tp.shard_desc<dim = 0, hf_shape = [32, 64], offsets = [0], sizes = [32], chunks = 0>} : tensor<16x64xf32>

// -----

tp.param @w {placement = #tp.shard<0>} : tensor<4x8xf32>
func.func @f() {
  // expected-error @+1 {{parameter w is placed Shard(0), but tp.weight reads it as Shard(1)}}
  %w = tp.weight @w : tensor<4x8xf32, #tp.shard<1>>
  return
}

// -----

// expected-error @+1 {{'tp.param' op expects parent op 'builtin.module'}}
func.func @f() { tp.param @w : tensor<4xf32> return }

// -----

func.func @f() {
  // expected-error @+1 {{no tp.param named @missing}}
  %w = tp.weight @missing : tensor<4xf32>
  return
}

// -----

tp.param @w : tensor<4x8xf32>
func.func @f() {
  // expected-error @+1 {{parameter w is 'tensor<4x8xf32>', but tp.weight reads it as 'tensor<8x4xf32>'}}
  %w = tp.weight @w : tensor<8x4xf32>
  return
}

// -----

func.func @f(%ids: tensor<?xi64>, %t: tensor<256xf32>) {
  // expected-error @+1 {{model.embed_tokens (tp.embedding): the table must have rank 2, got 256}}
  %h = tp.embedding "model.embed_tokens" %ids, %t : (tensor<?xi64>, tensor<256xf32>) -> tensor<?x64xf32>
  return
}

// -----

func.func @f(%ids: tensor<?xi64>, %t: tensor<256x64xf32>) {
  // expected-error @+1 {{model.embed_tokens (tp.embedding): the result should be ?x64 (ids x embedding dim), got ?x32}}
  %h = tp.embedding "model.embed_tokens" %ids, %t : (tensor<?xi64>, tensor<256x64xf32>) -> tensor<?x32xf32>
  return
}

// -----

func.func @f(%ids: tensor<?xi64>, %t: tensor<256x64xf32>) {
  // expected-error @+1 {{model.embed_tokens (tp.embedding): the result has element type 'bf16', expected 'f32'}}
  %h = tp.embedding "model.embed_tokens" %ids, %t : (tensor<?xi64>, tensor<256x64xf32>) -> tensor<?x64xbf16>
  return
}

// -----

func.func @f(%x: tensor<?x64xf32>, %w: tensor<32xf32>) {
  // expected-error @+1 {{model.norm (tp.rms_norm): the weight has 32 elements, but the input has 64 features}}
  %n = tp.rms_norm "model.norm" %x, %w {epsilon = 1.0e-5 : f64} : (tensor<?x64xf32>, tensor<32xf32>) -> tensor<?x64xf32>
  return
}

// -----

func.func @f(%x: tensor<?x64xf32>, %w: tensor<64xf32>, %t: tensor<?x1xf32>) {
  // expected-error @+1 {{q_norm (tp.rms_norm): a norm given sum_squares needs the row's width as `features`}}
  %n = tp.rms_norm "q_norm" %x, %w, %t {epsilon = 1.0e-5 : f64} : (tensor<?x64xf32>, tensor<64xf32>, tensor<?x1xf32>) -> tensor<?x64xf32>
  return
}

// -----

func.func @f(%x: tensor<?x64xf32>, %w: tensor<64xf32>) {
  // expected-error @+1 {{q_norm (tp.rms_norm): `features` is the width of a row split by features: it needs sum_squares}}
  %n = tp.rms_norm "q_norm" %x, %w {epsilon = 1.0e-5 : f64, features = 128 : i64} : (tensor<?x64xf32>, tensor<64xf32>) -> tensor<?x64xf32>
  return
}

// -----

func.func @f(%x: tensor<?x64xf32>, %w: tensor<16xf32>, %t: tensor<?x1xf32>) {
  // expected-error @+1 {{q_norm (tp.rms_norm): a per-head norm (head_dim) takes no sum_squares}}
  %n = tp.rms_norm "q_norm" %x, %w, %t {epsilon = 1.0e-5 : f64, head_dim = 16 : i64, features = 64 : i64} : (tensor<?x64xf32>, tensor<16xf32>, tensor<?x1xf32>) -> tensor<?x64xf32>
  return
}

// -----

func.func @f(%x: tensor<?x64xf32>, %w: tensor<64xf32>, %t: tensor<?x2xf32>) {
  // expected-error @+1 {{q_norm (tp.rms_norm): sum_squares should be ?x1, got ?x2}}
  %n = tp.rms_norm "q_norm" %x, %w, %t {epsilon = 1.0e-5 : f64, features = 128 : i64} : (tensor<?x64xf32>, tensor<64xf32>, tensor<?x2xf32>) -> tensor<?x64xf32>
  return
}

// -----

func.func @f(%x: tensor<?x64xf32>) {
  // expected-error @+1 {{q_norm (tp.sum_squares): the result should be ?x1, got ?x64}}
  %n = tp.sum_squares "q_norm" %x : (tensor<?x64xf32>) -> tensor<?x64xf32>
  return
}

// -----

func.func @f(%x: tensor<?x64xf32>) {
  // expected-error @+1 {{'tp.sum_squares' op attribute 'copies' failed to satisfy constraint}}
  %n = tp.sum_squares "q_norm" %x {copies = 0 : i64} : (tensor<?x64xf32>) -> tensor<?x1xf32>
  return
}

// -----

func.func @f(%x: tensor<?x64xf32>, %w: tensor<64xf32>) {
  // expected-error @+1 {{model.norm (tp.rms_norm): epsilon must be positive}}
  %n = tp.rms_norm "model.norm" %x, %w {epsilon = 0.0 : f64} : (tensor<?x64xf32>, tensor<64xf32>) -> tensor<?x64xf32>
  return
}

// -----

func.func @f(%x: tensor<64xf32>, %w: tensor<64xf32>) {
  // expected-error @+1 {{model.norm (tp.rms_norm): the input must have rank 2, got 64}}
  %n = tp.rms_norm "model.norm" %x, %w {epsilon = 1.0e-5 : f64} : (tensor<64xf32>, tensor<64xf32>) -> tensor<64xf32>
  return
}

// -----

func.func @f(%x: tensor<?x64xf32>, %w: tensor<64xf32>) {
  // expected-error @+1 {{model.norm (tp.rms_norm): the result should be ?x64, got ?x32}}
  %n = tp.rms_norm "model.norm" %x, %w {epsilon = 1.0e-5 : f64} : (tensor<?x64xf32>, tensor<64xf32>) -> tensor<?x32xf32>
  return
}

// -----

func.func @f(%x: tensor<?x48xf32>, %w: tensor<64x64xf32>) {
  // expected-error @+1 {{model.layers.0.self_attn.q_proj (tp.linear): the weight is 64x64 [out x in] and expects 64 input features, but the input has 48}}
  %y = tp.linear "model.layers.0.self_attn.q_proj" %x, %w : (tensor<?x48xf32>, tensor<64x64xf32>) -> tensor<?x64xf32>
  return
}

// -----

func.func @f(%x: tensor<?x64xf32>, %w: tensor<64xf32>) {
  // expected-error @+1 {{model.layers.0.self_attn.q_proj (tp.linear): the weight must have rank 2, got 64}}
  %y = tp.linear "model.layers.0.self_attn.q_proj" %x, %w : (tensor<?x64xf32>, tensor<64xf32>) -> tensor<?x64xf32>
  return
}

// -----

func.func @f(%x: tensor<?x64xf32>, %w: tensor<32x64xf32>, %b: tensor<64xf32>) {
  // expected-error @+1 {{model.layers.0.self_attn.q_proj (tp.linear): the bias has 64 elements, but the weight has 32 output features}}
  %y = tp.linear "model.layers.0.self_attn.q_proj" %x, %w, %b : (tensor<?x64xf32>, tensor<32x64xf32>, tensor<64xf32>) -> tensor<?x32xf32>
  return
}

// -----

func.func @f(%x: tensor<?x64xf32>, %w: tensor<32x64xf32>) {
  // expected-error @+1 {{model.layers.0.self_attn.q_proj (tp.linear): the result should be ?x32, got ?x64}}
  %y = tp.linear "model.layers.0.self_attn.q_proj" %x, %w : (tensor<?x64xf32>, tensor<32x64xf32>) -> tensor<?x64xf32>
  return
}

// -----

func.func @f(%x: tensor<?x64xf32>, %w: tensor<32x64xbf16>) {
  // expected-error @+1 {{model.layers.0.self_attn.q_proj (tp.linear): the weight has element type 'bf16', expected 'f32'}}
  %y = tp.linear "model.layers.0.self_attn.q_proj" %x, %w : (tensor<?x64xf32>, tensor<32x64xbf16>) -> tensor<?x32xf32>
  return
}

// -----

func.func @f(%x: tensor<?x60xf32>, %pos: tensor<?xi64>) {
  // expected-error @+1 {{model.layers.0.self_attn (tp.rotary): head_dim 15 must be even to rotate halves}}
  %y = tp.rotary "model.layers.0.self_attn" %x, %pos {head_dim = 15 : i64, theta = 1.0e4 : f64} : (tensor<?x60xf32>, tensor<?xi64>) -> tensor<?x60xf32>
  return
}

// -----

func.func @f(%x: tensor<?x60xf32>, %pos: tensor<?xi64>) {
  // expected-error @+1 {{model.layers.0.self_attn (tp.rotary): the input has 60 features, not a whole number of heads of head_dim 16}}
  %y = tp.rotary "model.layers.0.self_attn" %x, %pos {head_dim = 16 : i64, theta = 1.0e4 : f64} : (tensor<?x60xf32>, tensor<?xi64>) -> tensor<?x60xf32>
  return
}

// -----

func.func @f(%x: tensor<5x64xf32>, %pos: tensor<4xi64>) {
  // expected-error @+1 {{model.layers.0.self_attn (tp.rotary): positions has 4 entries, but the input has 5 tokens}}
  %y = tp.rotary "model.layers.0.self_attn" %x, %pos {head_dim = 16 : i64, theta = 1.0e4 : f64} : (tensor<5x64xf32>, tensor<4xi64>) -> tensor<5x64xf32>
  return
}

// -----

func.func @f(%x: tensor<?x64xf32>, %pos: tensor<?xi64>) {
  // expected-error @+1 {{model.layers.0.self_attn (tp.rotary): theta must be positive}}
  %y = tp.rotary "model.layers.0.self_attn" %x, %pos {head_dim = 16 : i64, theta = 0.0 : f64} : (tensor<?x64xf32>, tensor<?xi64>) -> tensor<?x64xf32>
  return
}

// -----

func.func @f(%q: tensor<?x64xf32>, %k: tensor<?x48xf32>, %v: tensor<?x48xf32>) {
  // expected-error @+1 {{model.layers.0.self_attn (tp.attention): num_heads 4 is not a multiple of num_kv_heads 3}}
  %a = tp.attention "model.layers.0.self_attn" %q, %k, %v {num_heads = 4 : i64, num_kv_heads = 3 : i64, head_dim = 16 : i64} : (tensor<?x64xf32>, tensor<?x48xf32>, tensor<?x48xf32>) -> tensor<?x64xf32>
  return
}

// -----

func.func @f(%q: tensor<?x48xf32>, %k: tensor<?x32xf32>, %v: tensor<?x32xf32>) {
  // expected-error @+1 {{model.layers.0.self_attn (tp.attention): q has 48 features, but num_heads 4 x head_dim 16 = 64}}
  %a = tp.attention "model.layers.0.self_attn" %q, %k, %v {num_heads = 4 : i64, num_kv_heads = 2 : i64, head_dim = 16 : i64} : (tensor<?x48xf32>, tensor<?x32xf32>, tensor<?x32xf32>) -> tensor<?x64xf32>
  return
}

// -----

func.func @f(%q: tensor<?x64xf32>, %k: tensor<?x64xf32>, %v: tensor<?x32xf32>) {
  // expected-error @+1 {{model.layers.0.self_attn (tp.attention): k has 64 features, but num_kv_heads 2 x head_dim 16 = 32}}
  %a = tp.attention "model.layers.0.self_attn" %q, %k, %v {num_heads = 4 : i64, num_kv_heads = 2 : i64, head_dim = 16 : i64} : (tensor<?x64xf32>, tensor<?x64xf32>, tensor<?x32xf32>) -> tensor<?x64xf32>
  return
}

// -----

func.func @f(%q: tensor<?x64xf32>, %k: tensor<?x32xf32>, %v: tensor<?x16xf32>) {
  // expected-error @+1 {{model.layers.0.self_attn (tp.attention): v has 16 features, but num_kv_heads 2 x head_dim 16 = 32}}
  %a = tp.attention "model.layers.0.self_attn" %q, %k, %v {num_heads = 4 : i64, num_kv_heads = 2 : i64, head_dim = 16 : i64} : (tensor<?x64xf32>, tensor<?x32xf32>, tensor<?x16xf32>) -> tensor<?x64xf32>
  return
}

// -----

func.func @f(%q: tensor<5x64xf32>, %k: tensor<4x32xf32>, %v: tensor<4x32xf32>) {
  // expected-error @+1 {{model.layers.0.self_attn (tp.attention): q, k and v must have the same number of tokens, got 5 and 4}}
  %a = tp.attention "model.layers.0.self_attn" %q, %k, %v {num_heads = 4 : i64, num_kv_heads = 2 : i64, head_dim = 16 : i64} : (tensor<5x64xf32>, tensor<4x32xf32>, tensor<4x32xf32>) -> tensor<5x64xf32>
  return
}

// -----

func.func @f(%q: tensor<?x64xf32>, %k: tensor<?x32xbf16>, %v: tensor<?x32xf32>) {
  // expected-error @+1 {{model.layers.0.self_attn (tp.attention): k has element type 'bf16', expected 'f32'}}
  %a = tp.attention "model.layers.0.self_attn" %q, %k, %v {num_heads = 4 : i64, num_kv_heads = 2 : i64, head_dim = 16 : i64} : (tensor<?x64xf32>, tensor<?x32xbf16>, tensor<?x32xf32>) -> tensor<?x64xf32>
  return
}

// -----

func.func @f(%q: tensor<?x64xf32>, %k: tensor<?x32xf32>, %v: tensor<?x32xf32>) {
  // expected-error @+1 {{'tp.attention' op attribute 'num_heads' failed to satisfy constraint: 64-bit integer attribute whose value is positive}}
  %a = tp.attention "model.layers.0.self_attn" %q, %k, %v {num_heads = 0 : i64, num_kv_heads = 2 : i64, head_dim = 16 : i64} : (tensor<?x64xf32>, tensor<?x32xf32>, tensor<?x32xf32>) -> tensor<?x64xf32>
  return
}

// -----

func.func @f(%x: tensor<?x64xf32>) {
  // expected-error @+1 {{model.layers.0.mlp.act_fn (tp.silu): elementwise operands and result must match, got 'tensor<?x64xf32>' and 'tensor<?x32xf32>'}}
  %y = tp.silu "model.layers.0.mlp.act_fn" %x : (tensor<?x64xf32>) -> tensor<?x32xf32>
  return
}

// -----

func.func @f(%x: tensor<?x64xf32>) {
  // expected-error @+1 {{model.layers.0.mlp.act_fn (tp.gelu): approximate must be "none" or "tanh", got "erf"}}
  %y = tp.gelu "model.layers.0.mlp.act_fn" %x {approximate = "erf"} : (tensor<?x64xf32>) -> tensor<?x64xf32>
  return
}

// -----

func.func @f(%a: tensor<?x64xf32>, %b: tensor<?x128xf32>) {
  // expected-error @+1 {{model.layers.0.mlp (tp.mul): elementwise operands and result must match, got 'tensor<?x64xf32>' and 'tensor<?x128xf32>'}}
  %y = tp.mul "model.layers.0.mlp" %a, %b : (tensor<?x64xf32>, tensor<?x128xf32>) -> tensor<?x64xf32>
  return
}

// -----

func.func @f(%a: tensor<?x64xf32>, %b: tensor<?x64xbf16>) {
  // expected-error @+1 {{model.layers.0 (tp.add): elementwise operands and result must match, got 'tensor<?x64xf32>' and 'tensor<?x64xbf16>'}}
  %y = tp.add "model.layers.0" %a, %b : (tensor<?x64xf32>, tensor<?x64xbf16>) -> tensor<?x64xf32>
  return
}

// -----

func.func @f(%x: tensor<?x96xf32>) {
  // expected-error @+1 {{model.layers.0.self_attn (tp.slice): slice [64, 128) of dim -1 runs past its size 96}}
  %y = tp.slice "model.layers.0.self_attn" %x {dim = -1 : i64, offset = 64 : i64, size = 64 : i64} : (tensor<?x96xf32>) -> tensor<?x64xf32>
  return
}

// -----

func.func @f(%x: tensor<?x96xf32>) {
  // expected-error @+1 {{model.layers.0.self_attn (tp.slice): dim 2 is out of range for ?x96}}
  %y = tp.slice "model.layers.0.self_attn" %x {dim = 2 : i64, offset = 0 : i64, size = 32 : i64} : (tensor<?x96xf32>) -> tensor<?x32xf32>
  return
}

// -----

func.func @f(%x: tensor<?x96xf32>) {
  // expected-error @+1 {{model.layers.0.self_attn (tp.slice): the result should be ?x32, got ?x64}}
  %y = tp.slice "model.layers.0.self_attn" %x {dim = 1 : i64, offset = 0 : i64, size = 32 : i64} : (tensor<?x96xf32>) -> tensor<?x64xf32>
  return
}

// -----

func.func @f() {
  // expected-error @+1 {{model.layers.0.mlp (tp.concat): needs at least one input}}
  %y = tp.concat "model.layers.0.mlp" {dim = 1 : i64} : () -> tensor<?x64xf32>
  return
}

// -----

func.func @f(%a: tensor<4x32xf32>, %b: tensor<5x32xf32>) {
  // expected-error @+1 {{model.layers.0.mlp (tp.concat): inputs differ outside dim 1: 4x32 and 5x32}}
  %y = tp.concat "model.layers.0.mlp" %a, %b {dim = 1 : i64} : (tensor<4x32xf32>, tensor<5x32xf32>) -> tensor<4x64xf32>
  return
}

// -----

func.func @f(%a: tensor<4x32xf32>, %b: tensor<4x32xbf16>) {
  // expected-error @+1 {{model.layers.0.mlp (tp.concat): inputs must share rank and element type, got 'tensor<4x32xf32>' and 'tensor<4x32xbf16>'}}
  %y = tp.concat "model.layers.0.mlp" %a, %b {dim = 1 : i64} : (tensor<4x32xf32>, tensor<4x32xbf16>) -> tensor<4x64xf32>
  return
}

// -----

func.func @f(%a: tensor<4x32xf32>, %b: tensor<4x32xf32>) {
  // expected-error @+1 {{model.layers.0.mlp (tp.concat): the result should be 4x64, got 4x48}}
  %y = tp.concat "model.layers.0.mlp" %a, %b {dim = 1 : i64} : (tensor<4x32xf32>, tensor<4x32xf32>) -> tensor<4x48xf32>
  return
}

// -----

func.func @f(%x: tensor<8x64xf32, #tp.partial<sum>>) {
  // expected-error @+1 {{model.layers.0.mlp.down_proj (tp.redistribute): Shard(2) needs dim 2, but the tensor has rank 2}}
  %y = tp.redistribute %x {module = "model.layers.0.mlp.down_proj"} : tensor<8x64xf32, #tp.partial<sum>> -> tensor<8x64xf32, #tp.shard<2>>
  return
}

// -----

func.func @f(%x: tensor<8x64xf32, #tp.replicate>) {
  // expected-error @+1 {{tp.redistribute: StridedShard(1, [16, 16]): the blocks add up to 32, but dim 1 has 64}}
  %y = tp.redistribute %x : tensor<8x64xf32, #tp.replicate> -> tensor<8x64xf32, #tp.strided_shard<1, [16, 16]>>
  return
}

// -----

func.func @f(%x: tensor<8x64xf32>) {
  // expected-error @+1 {{tp.redistribute: the operand and result types must carry placements, got 'tensor<8x64xf32>' -> 'tensor<8x64xf32, #tp.replicate>'}}
  %y = tp.redistribute %x : tensor<8x64xf32> -> tensor<8x64xf32, #tp.replicate>
  return
}

// -----

func.func @f(%x: tensor<8x64xf32, #tp.shard<1>>) {
  // expected-error @+1 {{lm_head (tp.redistribute): a change of placement keeps the shape, got 'tensor<8x64xf32, #tp.shard<1>>' -> 'tensor<8x16xf32, #tp.replicate>'}}
  %y = tp.redistribute %x {module = "lm_head"} : tensor<8x64xf32, #tp.shard<1>> -> tensor<8x16xf32, #tp.replicate>
  return
}

// -----

func.func @f(%x: tensor<8x64xf32, #tp.shard<1>>) {
  // expected-error @+1 {{tp.local_reshard: Shard(1) -> Replicate() needs communication; use tp.redistribute}}
  %y = tp.local_reshard %x : tensor<8x64xf32, #tp.shard<1>> -> tensor<8x64xf32, #tp.replicate>
  return
}

// -----

func.func @f(%x: tensor<8x64xf32, #tp.replicate>) {
  // expected-error @+1 {{tp.local_reshard: a change of placement keeps the rank and element type, got 'tensor<8x64xf32, #tp.replicate>' -> 'tensor<8x64xbf16, #tp.shard<1>>'}}
  %y = tp.local_reshard %x : tensor<8x64xf32, #tp.replicate> -> tensor<8x64xbf16, #tp.shard<1>>
  return
}

// -----

func.func @f(%x: tensor<8x64xf32, #tp.partial<sum>>) {
  // expected-error @+1 {{tp.all_reduce: the sum keeps the shape, got 'tensor<8x64xf32, #tp.partial<sum>>' -> 'tensor<8x32xf32, #tp.replicate>'}}
  %y = tp.all_reduce %x sum : tensor<8x64xf32, #tp.partial<sum>> -> tensor<8x32xf32, #tp.replicate>
  return
}

// -----

func.func @f(%x: tensor<8x16xf32>) {
  // expected-error @+1 {{tp.all_gather: dim 2 is out of range for 8x16}}
  %y = tp.all_gather %x dim = 2 : tensor<8x16xf32> -> tensor<8x64xf32>
  return
}

// -----

func.func @f(%x: tensor<8x16xf32>) {
  // expected-error @+1 {{lm_head (tp.all_gather): only dim 1 may change size, got 'tensor<8x16xf32>' -> 'tensor<4x64xf32>'}}
  %y = tp.all_gather %x dim = 1 {module = "lm_head"} : tensor<8x16xf32> -> tensor<4x64xf32>
  return
}

// -----

func.func @f(%x: tensor<8x16xf32>) -> tensor<32x16xf32> {
  // expected-error @+1 {{tp.all_gather: argmax_if_greedy needs a gather of the columns of a 2-D tensor (the logits), got dim 0 of 'tensor<8x16xf32>'}}
  %y = tp.all_gather %x dim = 0 {argmax_if_greedy} : tensor<8x16xf32> -> tensor<32x16xf32>
  return %y : tensor<32x16xf32>
}

// -----

func.func @f(%x: tensor<8x16xf32>) -> tensor<8x64xf32> {
  // expected-error @+1 {{lm_head (tp.all_gather): argmax_if_greedy needs the gathered logits to be used by the forward's return alone (or by a transfer marked alike)}}
  %y = tp.all_gather %x dim = 1 {argmax_if_greedy, module = "lm_head"} : tensor<8x16xf32> -> tensor<8x64xf32>
  %z = tp.add "model" %y, %y : (tensor<8x64xf32>, tensor<8x64xf32>) -> tensor<8x64xf32>
  return %z : tensor<8x64xf32>
}

// -----

// A transfer marked argmax_if_greedy is the logits' way back to the first stage: 2-D, and
// returned alone.
module attributes {tp.mesh = #tp.mesh<pp = 2, tp = 1>} {
  func.func @f(%x: tensor<8x16xf32>) -> tensor<8x16xf32> {
    // expected-error @+1 {{lm_head (tp.transfer): argmax_if_greedy needs a transfer of a 2-D tensor (the logits) that the forward returns alone, got 'tensor<8x16xf32>'}}
    %y = tp.transfer %x from 1 to 0 {argmax_if_greedy, module = "lm_head"} : tensor<8x16xf32>
    %z = tp.add "model" %y, %y : (tensor<8x16xf32>, tensor<8x16xf32>) -> tensor<8x16xf32>
    return %z : tensor<8x16xf32>
  }
}

// -----

func.func @f(%x: tensor<8x64xf32>) {
  // expected-error @+1 {{tp.reduce_scatter: only dim 0 may change size, got 'tensor<8x64xf32>' -> 'tensor<2x32xf32>'}}
  %y = tp.reduce_scatter %x sum dim = 0 : tensor<8x64xf32> -> tensor<2x32xf32>
  return
}

// -----

func.func @f(%x: tensor<8x64xf32>) {
  // expected-error @+1 {{tp.all_to_all: split_dim and concat_dim must differ}}
  %y = tp.all_to_all %x split_dim = 1 concat_dim = -1 : tensor<8x64xf32> -> tensor<8x64xf32>
  return
}

// -----

func.func @f(%x: tensor<8x64xf32>) {
  // expected-error @+1 {{tp.all_to_all: dim 2 is out of range for 8x64}}
  %y = tp.all_to_all %x split_dim = 2 concat_dim = 0 : tensor<8x64xf32> -> tensor<8x64xf32>
  return
}

// -----

func.func @f(%x: tensor<8x64xf32>) {
  // expected-error @+1 {{tp.all_to_all: the result must keep rank and element type, got 'tensor<8x64xf32>' -> 'tensor<512xf32>'}}
  %y = tp.all_to_all %x split_dim = 1 concat_dim = 0 : tensor<8x64xf32> -> tensor<512xf32>
  return
}

// -----

func.func @f(%x: tensor<?x64xf32>, %w: tensor<32x64xf32>, %b: tensor<32x1xf32>) {
  // expected-error @+1 {{model.layers.0.self_attn.q_proj (tp.linear): the bias must have rank 1, got 32x1}}
  %y = tp.linear "model.layers.0.self_attn.q_proj" %x, %w, %b : (tensor<?x64xf32>, tensor<32x64xf32>, tensor<32x1xf32>) -> tensor<?x32xf32>
  return
}

// -----

func.func @f(%q: tensor<64xf32>, %k: tensor<?x32xf32>, %v: tensor<?x32xf32>) {
  // expected-error @+1 {{model.layers.0.self_attn (tp.attention): q must have rank 2, got 64}}
  %a = tp.attention "model.layers.0.self_attn" %q, %k, %v {num_heads = 4 : i64, num_kv_heads = 2 : i64, head_dim = 16 : i64} : (tensor<64xf32>, tensor<?x32xf32>, tensor<?x32xf32>) -> tensor<?x64xf32>
  return
}

// -----

func.func @f(%x: tensor<?x64xf32>, %w: tensor<64xf32>) {
  // expected-error @+1 {{model.norm (tp.rms_norm): the result must have rank 2, got 64}}
  %n = tp.rms_norm "model.norm" %x, %w {epsilon = 1.0e-5 : f64} : (tensor<?x64xf32>, tensor<64xf32>) -> tensor<64xf32>
  return
}

// -----

func.func @f(%x: tensor<?x8xf32>) {
  // expected-error @+1 {{model.norm (tp.last_token): the result should be 1x8, got 2x8}}
  %y = tp.last_token "model.norm" %x : (tensor<?x8xf32>) -> tensor<2x8xf32>
  return
}

// -----

func.func @f(%x: tensor<?x64xf32>, %w: tensor<8xf32>) {
  // expected-error @+1 {{q_norm (tp.rms_norm): the weight has 8 elements, but head_dim is 16}}
  %n = tp.rms_norm "q_norm" %x, %w {epsilon = 1.0e-6 : f64, head_dim = 16 : i64} : (tensor<?x64xf32>, tensor<8xf32>) -> tensor<?x64xf32>
  return
}

// -----

func.func @f(%x: tensor<?x60xf32>, %w: tensor<16xf32>) {
  // expected-error @+1 {{q_norm (tp.rms_norm): the input has 60 features, not a whole number of heads of head_dim 16}}
  %n = tp.rms_norm "q_norm" %x, %w {epsilon = 1.0e-6 : f64, head_dim = 16 : i64} : (tensor<?x60xf32>, tensor<16xf32>) -> tensor<?x60xf32>
  return
}

// -----

func.func @f(%x: tensor<?x64xf32>, %pos: tensor<?xi64>) {
  // expected-error @+1 {{attn (tp.rotary): inv_freq has 3 frequencies, but head_dim 16 needs 8}}
  %r = tp.rotary "attn" %x, %pos {head_dim = 16 : i64, theta = 1.0e4 : f64, inv_freq = array<f64: 1.0, 0.1, 0.01>} : (tensor<?x64xf32>, tensor<?xi64>) -> tensor<?x64xf32>
  return
}

// -----

func.func @f(%q: tensor<?x64xf32>) {
  // expected-error @+1 {{attn (tp.attention): softcap must be positive}}
  %a = tp.attention "attn" %q, %q, %q {num_heads = 4 : i64, num_kv_heads = 4 : i64, head_dim = 16 : i64, softcap = 0.0 : f64} : (tensor<?x64xf32>, tensor<?x64xf32>, tensor<?x64xf32>) -> tensor<?x64xf32>
  return
}

// -----

func.func @f(%x: tensor<?x64xf32>) {
  // expected-error @+1 {{lm_head (tp.softcap): cap must be positive}}
  %c = tp.softcap "lm_head" %x {cap = -1.0 : f64} : (tensor<?x64xf32>) -> tensor<?x64xf32>
  return
}

// -----

func.func @f(%x: tensor<?x64xf32>, %w: tensor<4x32xf32>) {
  // expected-error @+1 {{mlp.gate (tp.router): the weight is 4x32 [experts x hidden], but the input has 64 features}}
  %g = tp.router "mlp.gate" %x, %w {top_k = 2 : i64} : (tensor<?x64xf32>, tensor<4x32xf32>) -> tensor<?x4xf32>
  return
}

// -----

func.func @f(%x: tensor<?x64xf32>, %w: tensor<4x64xf32>) {
  // expected-error @+1 {{mlp.gate (tp.router): top_k 5 exceeds the 4 experts}}
  %g = tp.router "mlp.gate" %x, %w {top_k = 5 : i64} : (tensor<?x64xf32>, tensor<4x64xf32>) -> tensor<?x4xf32>
  return
}

// -----

func.func @f(%x: tensor<?x64xf32>, %r: tensor<?x4xf32>, %gu: tensor<4x256x64xf32>, %d: tensor<4x64x64xf32>) {
  // expected-error @+1 {{mlp.experts (tp.experts): gate_up 4x256x64 must hold 2 x 64 rows, the inter size of down 4x64x64}}
  %e = tp.experts "mlp.experts" %x, %r, %gu, %d : (tensor<?x64xf32>, tensor<?x4xf32>, tensor<4x256x64xf32>, tensor<4x64x64xf32>) -> tensor<?x64xf32>
  return
}

// -----

func.func @f(%x: tensor<?x64xf32>, %r: tensor<?x3xf32>, %gu: tensor<4x256x64xf32>, %d: tensor<4x64x128xf32>) {
  // expected-error @+1 {{mlp.experts (tp.experts): gate_up has 4 experts, down 4 and the routing weights 3}}
  %e = tp.experts "mlp.experts" %x, %r, %gu, %d : (tensor<?x64xf32>, tensor<?x3xf32>, tensor<4x256x64xf32>, tensor<4x64x128xf32>) -> tensor<?x64xf32>
  return
}

// -----

func.func @f(%x: tensor<?x64xf32>, %r: tensor<?x4xf32>, %gu: tensor<4x256x64xf32>, %d: tensor<4x64x128xf32>) {
  // expected-error @+1 {{mlp.experts (tp.experts): activation must be "silu", "gelu_tanh" or "clamped_swiglu", got "relu"}}
  %e = tp.experts "mlp.experts" %x, %r, %gu, %d {activation = "relu"} : (tensor<?x64xf32>, tensor<?x4xf32>, tensor<4x256x64xf32>, tensor<4x64x128xf32>) -> tensor<?x64xf32>
  return
}

// -----

// Llama 4's forms.
func.func @f(%q: tensor<?x64xf32>, %k: tensor<?x32xf32>, %v: tensor<?x32xf32>) {
  // expected-error @+1 {{model.layers.0.self_attn (tp.attention): chunk_size and sliding_window do not combine (a layer is chunked or slides)}}
  %a = tp.attention "model.layers.0.self_attn" %q, %k, %v {num_heads = 4 : i64, num_kv_heads = 2 : i64, head_dim = 16 : i64, chunk_size = 8 : i64, sliding_window = 8 : i64} : (tensor<?x64xf32>, tensor<?x32xf32>, tensor<?x32xf32>) -> tensor<?x64xf32>
  return
}

// -----

func.func @f(%q: tensor<?x64xf32>, %k: tensor<?x32xf32>, %v: tensor<?x32xf32>) {
  // expected-error @+1 {{model.layers.0.self_attn (tp.attention): temperature_floor and temperature_scale come together}}
  %a = tp.attention "model.layers.0.self_attn" %q, %k, %v {num_heads = 4 : i64, num_kv_heads = 2 : i64, head_dim = 16 : i64, temperature_floor = 8.0 : f64} : (tensor<?x64xf32>, tensor<?x32xf32>, tensor<?x32xf32>) -> tensor<?x64xf32>
  return
}

// -----

func.func @f(%q: tensor<?x64xf32>, %k: tensor<?x32xf32>, %v: tensor<?x32xf32>) {
  // expected-error @+1 {{model.layers.0.self_attn (tp.attention): temperature_floor must be positive}}
  %a = tp.attention "model.layers.0.self_attn" %q, %k, %v {num_heads = 4 : i64, num_kv_heads = 2 : i64, head_dim = 16 : i64, temperature_floor = 0.0 : f64, temperature_scale = 0.1 : f64} : (tensor<?x64xf32>, tensor<?x32xf32>, tensor<?x32xf32>) -> tensor<?x64xf32>
  return
}

// -----

func.func @f(%q: tensor<?x64xf32>, %k: tensor<?x32xf32>, %v: tensor<?x32xf32>) {
  // expected-error @+1 {{'tp.attention' op attribute 'chunk_size' failed to satisfy constraint}}
  %a = tp.attention "model.layers.0.self_attn" %q, %k, %v {num_heads = 4 : i64, num_kv_heads = 2 : i64, head_dim = 16 : i64, chunk_size = 0 : i64} : (tensor<?x64xf32>, tensor<?x32xf32>, tensor<?x32xf32>) -> tensor<?x64xf32>
  return
}

// -----

func.func @f(%x: tensor<?x60xf32>) {
  // expected-error @+1 {{model.layers.0.self_attn.qk_norm (tp.l2_norm): the input has 60 features, not a whole number of heads of head_dim 16}}
  %n = tp.l2_norm "model.layers.0.self_attn.qk_norm" %x {epsilon = 1.0e-5 : f64, head_dim = 16 : i64} : (tensor<?x60xf32>) -> tensor<?x60xf32>
  return
}

// -----

func.func @f(%x: tensor<?x64xf32>) {
  // expected-error @+1 {{model.layers.0.self_attn.qk_norm (tp.l2_norm): epsilon must be positive}}
  %n = tp.l2_norm "model.layers.0.self_attn.qk_norm" %x {epsilon = 0.0 : f64, head_dim = 16 : i64} : (tensor<?x64xf32>) -> tensor<?x64xf32>
  return
}

// -----

func.func @f(%x: tensor<?x64xf32>, %w: tensor<4x64xf32>) {
  // expected-error @+1 {{model.layers.0.feed_forward.router (tp.router): a sigmoid router (Llama 4) takes no softmax_after_top_k, groups, scale or normalize}}
  %g = tp.router "model.layers.0.feed_forward.router" %x, %w {top_k = 1 : i64, sigmoid = true} : (tensor<?x64xf32>, tensor<4x64xf32>) -> tensor<?x4xf32>
  return
}

// -----

func.func @f(%x: tensor<?x64xf32>, %r: tensor<?x4xf32>, %gu: tensor<4x64x256xf32>, %d: tensor<4x128x64xf32>) {
  // expected-error @+1 {{mlp.experts (tp.experts): layout must be "out_in", "in_out" or "in_out_interleaved", got "rows"}}
  %e = tp.experts "mlp.experts" %x, %r, %gu, %d {layout = "rows"} : (tensor<?x64xf32>, tensor<?x4xf32>, tensor<4x64x256xf32>, tensor<4x128x64xf32>) -> tensor<?x64xf32>
  return
}

// -----

func.func @f(%x: tensor<?x64xf32>, %r: tensor<?x4xf32>, %gu: tensor<4x64x256xf32>, %d: tensor<4x64x64xf32>) {
  // expected-error @+1 {{mlp.experts (tp.experts): gate_up 4x64x256 must hold 2 x 64 columns, the inter size of down 4x64x64}}
  %e = tp.experts "mlp.experts" %x, %r, %gu, %d {layout = "in_out", scale_input = true} : (tensor<?x64xf32>, tensor<?x4xf32>, tensor<4x64x256xf32>, tensor<4x64x64xf32>) -> tensor<?x64xf32>
  return
}

// -----

// expected-error @+1 {{'tp.hf_tied' must be a bool, got "yes"}}
module attributes {tp.hf_tied = "yes"} {
}

// -----

module {
  // expected-error @+1 {{'tp.max_position_embeddings' belongs on the module, not on func.func}}
  func.func @f() attributes {tp.max_position_embeddings = 2048 : i64} { return }
}

// -----

// expected-error @+1 {{'tp.max_position_embeddings' must be a positive i64, got 0 : i64}}
module attributes {tp.max_position_embeddings = 0 : i64} {}

// -----

// expected-error @+1 {{'tp.max_position_embeddings' must be a positive i64, got 2048 : i32}}
module attributes {tp.max_position_embeddings = 2048 : i32} {}

// -----

// expected-error @+1 {{'tp.max_position_embeddings' must be a positive i64, got "2048"}}
module attributes {tp.max_position_embeddings = "2048"} {}

// -----

// tp.fused: the unit's body and what it yields.

func.func @f(%x: tensor<?x64xf32>) -> tensor<?x64xf32> {
  // expected-error @+1 {{'tp.fused' op body must end in tp.yield}}
  %f = tp.fused elementwise -> tensor<?x64xf32> {
    %s = tp.silu "mlp" %x : (tensor<?x64xf32>) -> tensor<?x64xf32>
    func.return %s : tensor<?x64xf32>
  }
  return %f : tensor<?x64xf32>
}

// -----

func.func @f(%x: tensor<?x64xf32>) -> tensor<?x64xf32> {
  // expected-error @+1 {{'tp.fused' op yields 'tensor<?x32xf32>', but its results are 'tensor<?x64xf32>'}}
  %f = tp.fused elementwise -> tensor<?x64xf32> {
    %s = tp.silu "mlp" %x : (tensor<?x64xf32>) -> tensor<?x64xf32>
    %t = tp.slice "mlp" %s {dim = 1 : i64, offset = 0 : i64, size = 32 : i64} : (tensor<?x64xf32>) -> tensor<?x32xf32>
    tp.yield %t : tensor<?x32xf32>
  }
  return %f : tensor<?x64xf32>
}

// -----

func.func @f() {
  // expected-error @+1 {{'tp.fused' op has an empty body}}
  tp.fused elementwise {
    tp.yield
  }
  return
}

// -----

func.func @f(%x: tensor<?x64xf32>, %w: tensor<64xf32>) -> tensor<?x64xf32> {
  // expected-error @+1 {{'tp.fused' op 'elementwise' holds elementwise ops only}}
  %f = tp.fused elementwise -> tensor<?x64xf32> {
    %s = tp.silu "mlp" %x : (tensor<?x64xf32>) -> tensor<?x64xf32>
    %n = tp.rms_norm "ln" %s, %w {epsilon = 1.0e-05 : f64} : (tensor<?x64xf32>, tensor<64xf32>) -> tensor<?x64xf32>
    tp.yield %n : tensor<?x64xf32>
  }
  return %f : tensor<?x64xf32>
}

// -----

func.func @f(%x: tensor<?x64xf32>, %y: tensor<?x64xf32>) -> (tensor<?x64xf32>, tensor<?x64xf32>) {
  // expected-error @+1 {{'tp.fused' op 'norm' holds an elementwise chain, then an rms_norm}}
  %f:2 = tp.fused norm -> tensor<?x64xf32>, tensor<?x64xf32> {
    %s = tp.add "layer" %x, %y : (tensor<?x64xf32>, tensor<?x64xf32>) -> tensor<?x64xf32>
    %t = tp.silu "layer" %s : (tensor<?x64xf32>) -> tensor<?x64xf32>
    tp.yield %s, %t : tensor<?x64xf32>, tensor<?x64xf32>
  }
  return %f#0, %f#1 : tensor<?x64xf32>, tensor<?x64xf32>
}

// -----

func.func @f(%x: tensor<?x64xf32>, %w: tensor<64xf32>) -> tensor<?x64xf32> {
  // expected-error @+1 {{'tp.fused' op 'norm' holds an elementwise chain, then an rms_norm}}
  %f = tp.fused norm -> tensor<?x64xf32> {
    %n = tp.rms_norm "ln" %x, %w {epsilon = 1.0e-05 : f64} : (tensor<?x64xf32>, tensor<64xf32>) -> tensor<?x64xf32>
    tp.yield %n : tensor<?x64xf32>
  }
  return %f : tensor<?x64xf32>
}

// -----

func.func @f(%x: tensor<?x64xf32>, %y: tensor<?x64xf32>, %w: tensor<64xf32>) -> tensor<?x64xf32> {
  // expected-error @+1 {{'tp.fused' op 'norm' yields 2 values}}
  %f = tp.fused norm -> tensor<?x64xf32> {
    %s = tp.add "layer" %x, %y : (tensor<?x64xf32>, tensor<?x64xf32>) -> tensor<?x64xf32>
    %n = tp.rms_norm "ln" %s, %w {epsilon = 1.0e-05 : f64} : (tensor<?x64xf32>, tensor<64xf32>) -> tensor<?x64xf32>
    tp.yield %n : tensor<?x64xf32>
  }
  return %f : tensor<?x64xf32>
}

// -----

func.func @f(%x: tensor<?x64xf32>, %y: tensor<?x64xf32>) -> (tensor<?x64xf32>, tensor<?x64xf32>) {
  // expected-error @+1 {{'tp.fused' op 'elementwise' yields 1 value}}
  %f:2 = tp.fused elementwise -> tensor<?x64xf32>, tensor<?x64xf32> {
    %s = tp.silu "mlp" %x : (tensor<?x64xf32>) -> tensor<?x64xf32>
    %m = tp.mul "mlp" %s, %y : (tensor<?x64xf32>, tensor<?x64xf32>) -> tensor<?x64xf32>
    tp.yield %s, %m : tensor<?x64xf32>, tensor<?x64xf32>
  }
  return %f#0, %f#1 : tensor<?x64xf32>, tensor<?x64xf32>
}

// -----

func.func @f(%x: tensor<?x64xf32>, %y: tensor<?x64xf32>, %w: tensor<64xf32>) -> (tensor<?x64xf32>, tensor<?x64xf32>) {
  // expected-error @+1 {{'tp.fused' op 'norm' yields the chain's last value, then its rms_norm}}
  %f:2 = tp.fused norm -> tensor<?x64xf32>, tensor<?x64xf32> {
    %s = tp.add "layer" %x, %y : (tensor<?x64xf32>, tensor<?x64xf32>) -> tensor<?x64xf32>
    %n = tp.rms_norm "ln" %s, %w {epsilon = 1.0e-05 : f64} : (tensor<?x64xf32>, tensor<64xf32>) -> tensor<?x64xf32>
    tp.yield %n, %s : tensor<?x64xf32>, tensor<?x64xf32>
  }
  return %f#0, %f#1 : tensor<?x64xf32>, tensor<?x64xf32>
}

// -----

func.func @f(%x: tensor<?x64xf32>, %y: tensor<?x64xf32>, %w: tensor<64xf32>) -> (tensor<?x64xf32>, tensor<?x64xf32>) {
  // expected-error @+1 {{'tp.fused' op 'norm' yields the chain's last value, then its rms_norm}}
  %f:2 = tp.fused norm -> tensor<?x64xf32>, tensor<?x64xf32> {
    %s = tp.add "layer" %x, %y : (tensor<?x64xf32>, tensor<?x64xf32>) -> tensor<?x64xf32>
    %n = tp.rms_norm "ln" %x, %w {epsilon = 1.0e-05 : f64} : (tensor<?x64xf32>, tensor<64xf32>) -> tensor<?x64xf32>
    tp.yield %s, %n : tensor<?x64xf32>, tensor<?x64xf32>
  }
  return %f#0, %f#1 : tensor<?x64xf32>, tensor<?x64xf32>
}

// -----

func.func @f(%x: tensor<?x64xf32>, %y: tensor<?x64xf32>) -> tensor<?x64xf32> {
  // expected-error @+1 {{'tp.fused' op 'elementwise' yields the chain's last value}}
  %f = tp.fused elementwise -> tensor<?x64xf32> {
    %s = tp.silu "mlp" %x : (tensor<?x64xf32>) -> tensor<?x64xf32>
    %m = tp.mul "mlp" %s, %y : (tensor<?x64xf32>, tensor<?x64xf32>) -> tensor<?x64xf32>
    tp.yield %s : tensor<?x64xf32>
  }
  return %f : tensor<?x64xf32>
}

// -----

func.func @f(%q: tensor<?x32xf32>, %k: tensor<?x32xf32>, %pos: tensor<?xi64>) -> (tensor<?x32xf32>, tensor<?x32xf32>) {
  // expected-error @+1 {{'tp.fused' op 'rotary' yields its two rotaries' results in order}}
  %f:2 = tp.fused rotary -> tensor<?x32xf32>, tensor<?x32xf32> {
    %a = tp.rotary "attn" %q, %pos {head_dim = 16 : i64, theta = 1.0e+04 : f64} : (tensor<?x32xf32>, tensor<?xi64>) -> tensor<?x32xf32>
    %b = tp.rotary "attn" %k, %pos {head_dim = 16 : i64, theta = 1.0e+04 : f64} : (tensor<?x32xf32>, tensor<?xi64>) -> tensor<?x32xf32>
    tp.yield %b, %a : tensor<?x32xf32>, tensor<?x32xf32>
  }
  return %f#0, %f#1 : tensor<?x32xf32>, tensor<?x32xf32>
}

// -----

func.func @f(%q: tensor<?x32xf32>, %pos: tensor<?xi64>) -> (tensor<?x32xf32>, tensor<?x32xf32>) {
  // expected-error @+1 {{'tp.fused' op 'rotary' holds two tp.rotary ops and yields both}}
  %f:2 = tp.fused rotary -> tensor<?x32xf32>, tensor<?x32xf32> {
    %r = tp.rotary "attn" %q, %pos {head_dim = 16 : i64, theta = 1.0e+04 : f64} : (tensor<?x32xf32>, tensor<?xi64>) -> tensor<?x32xf32>
    %s = tp.silu "attn" %r : (tensor<?x32xf32>) -> tensor<?x32xf32>
    tp.yield %r, %s : tensor<?x32xf32>, tensor<?x32xf32>
  }
  return %f#0, %f#1 : tensor<?x32xf32>, tensor<?x32xf32>
}

// -----

func.func @f(%x: tensor<?x64xf32>, %w: tensor<32x64xf32>) -> tensor<?x32xf32> {
  // expected-error @+1 {{'tp.fused' op 'linears' holds two or more tp.linear ops}}
  %f = tp.fused linears -> tensor<?x32xf32> {
    %q = tp.linear "q_proj" %x, %w : (tensor<?x64xf32>, tensor<32x64xf32>) -> tensor<?x32xf32>
    tp.yield %q : tensor<?x32xf32>
  }
  return %f : tensor<?x32xf32>
}

// -----

func.func @f(%x: tensor<?x64xf32>, %y: tensor<?x64xf32>, %w: tensor<32x64xf32>) -> (tensor<?x32xf32>, tensor<?x32xf32>) {
  // expected-error @+1 {{'tp.fused' op 'linears' yields each linear's result in order, all of one input}}
  %f:2 = tp.fused linears -> tensor<?x32xf32>, tensor<?x32xf32> {
    %a = tp.linear "a" %x, %w : (tensor<?x64xf32>, tensor<32x64xf32>) -> tensor<?x32xf32>
    %b = tp.linear "b" %y, %w : (tensor<?x64xf32>, tensor<32x64xf32>) -> tensor<?x32xf32>
    tp.yield %a, %b : tensor<?x32xf32>, tensor<?x32xf32>
  }
  return %f#0, %f#1 : tensor<?x32xf32>, tensor<?x32xf32>
}

// -----

func.func @f(%x: tensor<?x64xf32>, %w: tensor<32x64xf32>) -> (tensor<?x32xf32>, tensor<?x32xf32>) {
  // expected-error @+1 {{'tp.fused' op 'linears' yields each linear's result in order, all of one input}}
  %f:2 = tp.fused linears -> tensor<?x32xf32>, tensor<?x32xf32> {
    %a = tp.linear "a" %x, %w : (tensor<?x64xf32>, tensor<32x64xf32>) -> tensor<?x32xf32>
    %b = tp.linear "b" %x, %w : (tensor<?x64xf32>, tensor<32x64xf32>) -> tensor<?x32xf32>
    tp.yield %b, %a : tensor<?x32xf32>, tensor<?x32xf32>
  }
  return %f#0, %f#1 : tensor<?x32xf32>, tensor<?x32xf32>
}

// -----

func.func @f(%x: tensor<?x64xf32>) -> tensor<?x64xf32> {
  // A kind is one of the enum's: anything else does not parse.
  // expected-error @+2 {{expected ::tpc::tp::FusedKind to be one of: elementwise, norm, rotary, linears}}
  // expected-error @+1 {{failed to parse TP_FusedKindAttr parameter 'value'}}
  %f = tp.fused softmax -> tensor<?x64xf32> {
    %s = tp.silu "mlp" %x : (tensor<?x64xf32>) -> tensor<?x64xf32>
    tp.yield %s : tensor<?x64xf32>
  }
  return %f : tensor<?x64xf32>
}

// -----

// The decisions' attributes: tp.arena, tp.arena_size, tp.sequence_parallel.

func.func @f(%x: tensor<?x64xf32>) -> tensor<?x64xf32> {
  // expected-error @+1 {{'tp.arena' must give one offset (>= 0) per result, got array<i64: 0, 64>}}
  %s = tp.silu "mlp" %x {tp.arena = array<i64: 0, 64>} : (tensor<?x64xf32>) -> tensor<?x64xf32>
  return %s : tensor<?x64xf32>
}

// -----

func.func @f(%x: tensor<?x64xf32>) -> tensor<?x64xf32> {
  // expected-error @+1 {{'tp.arena' must give one offset (>= 0) per result, got array<i64: -64>}}
  %s = tp.silu "mlp" %x {tp.arena = array<i64: -64>} : (tensor<?x64xf32>) -> tensor<?x64xf32>
  return %s : tensor<?x64xf32>
}

// -----

func.func @f(%x: tensor<?x64xf32>) -> tensor<?x64xf32> {
  // expected-error @+1 {{'tp.arena' must give one offset (>= 0) per result, got 0 : i64}}
  %s = tp.silu "mlp" %x {tp.arena = 0 : i64} : (tensor<?x64xf32>) -> tensor<?x64xf32>
  return %s : tensor<?x64xf32>
}

// -----

// expected-error @+1 {{'tp.arena_size' belongs on a function, not on builtin.module}}
module attributes {tp.arena_size = 128 : i64} {}

// -----

module {
  // expected-error @+1 {{'tp.arena_size' must be an integer, got "128"}}
  func.func @f() attributes {tp.arena_size = "128"} { return }
}

// -----

// expected-error @+1 {{'tp.sequence_parallel' belongs on a function, not on builtin.module}}
module attributes {tp.sequence_parallel = 2 : i64} {}

// -----

module {
  // expected-error @+1 {{'tp.sequence_parallel' must be a positive i64 (the token multiple it runs), got true}}
  func.func @f() attributes {tp.sequence_parallel = true} { return }
}

// -----

module {
  // expected-error @+1 {{'tp.sequence_parallel' must be a positive i64 (the token multiple it runs), got 0}}
  func.func @f() attributes {tp.sequence_parallel = 0 : i64} { return }
}

// -----

// The target: on the module, a #tp.target, whose activation is a float type of whole bytes.

module {
  // expected-error @+1 {{'tp.target' belongs on the module, not on func.func}}
  func.func @f() attributes {tp.target = #tp.target<name = "cpu", activation = f32, fuse_elementwise = false, fuse_norm = false, fuse_rotary = false, group_linears = false, gather = variable, greedy_argmax = true, arena_align = 1>} { return }
}

// -----

// expected-error @+1 {{'tp.target' must be a #tp.target, got "cpu"}}
module attributes {tp.target = "cpu"} {}

// -----

// expected-error @+1 {{a target's activation must be a float type of whole bytes, got 'i32'}}
module attributes {tp.target = #tp.target<name = "cpu", activation = i32, fuse_elementwise = false, fuse_norm = false, fuse_rotary = false, group_linears = false, gather = variable, greedy_argmax = true, arena_align = 1>} {}

// -----

func.func @f(%x: tensor<?x64xf32>, %pos: tensor<?xi64>) {
  // expected-error @+1 {{attn (tp.rotary): scaling must be a positive number, got 0}}
  %r = tp.rotary "attn" %x, %pos {head_dim = 16 : i64, theta = 1.0e4 : f64, scaling = 0.0 : f64} : (tensor<?x64xf32>, tensor<?xi64>) -> tensor<?x64xf32>
  return
}

// -----

func.func @f(%q: tensor<?x64xf32>, %k: tensor<?x32xf32>, %s: tensor<3xf32>) {
  // expected-error @+1 {{attn (tp.attention): sinks has 3 elements, but num_heads is 4}}
  %a = tp.attention "attn" %q, %k, %k, %s {num_heads = 4 : i64, num_kv_heads = 2 : i64, head_dim = 16 : i64} : (tensor<?x64xf32>, tensor<?x32xf32>, tensor<?x32xf32>, tensor<3xf32>) -> tensor<?x64xf32>
  return
}

// -----

func.func @f(%x: tensor<?x16xf32>, %w: tensor<4x16xf32>, %b: tensor<3xf32>) {
  // expected-error @+1 {{router (tp.router): the bias has 3 elements, but the weight has 4 experts}}
  %r = tp.router "router" %x, %w, %b {top_k = 2 : i64, softmax_after_top_k = true} : (tensor<?x16xf32>, tensor<4x16xf32>, tensor<3xf32>) -> tensor<?x4xf32>
  return
}

// -----

func.func @f(%x: tensor<?x16xf32>, %r: tensor<?x4xf32>, %gu: tensor<4x16x48xf32>, %d: tensor<4x24x16xf32>) {
  // expected-error @+1 {{experts (tp.experts): alpha and limit come with activation "clamped_swiglu", and it needs both}}
  %y = tp.experts "experts" %x, %r, %gu, %d {activation = "clamped_swiglu", layout = "in_out_interleaved", alpha = 1.702 : f64} : (tensor<?x16xf32>, tensor<?x4xf32>, tensor<4x16x48xf32>, tensor<4x24x16xf32>) -> tensor<?x16xf32>
  return
}

// -----

func.func @f(%x: tensor<?x16xf32>, %r: tensor<?x4xf32>, %gu: tensor<4x16x48xf32>, %d: tensor<4x24x16xf32>) {
  // expected-error @+1 {{experts (tp.experts): alpha and limit must be positive}}
  %y = tp.experts "experts" %x, %r, %gu, %d {activation = "clamped_swiglu", layout = "in_out_interleaved", alpha = 1.702 : f64, limit = -7.0 : f64} : (tensor<?x16xf32>, tensor<?x4xf32>, tensor<4x16x48xf32>, tensor<4x24x16xf32>) -> tensor<?x16xf32>
  return
}

// -----

func.func @f(%x: tensor<?x16xf32>, %r: tensor<?x4xf32>, %gu: tensor<4x16x48xf32>, %d: tensor<4x24x16xf32>) {
  // expected-error @+1 {{experts (tp.experts): layout must be "out_in", "in_out" or "in_out_interleaved", got "in_out_packed"}}
  %y = tp.experts "experts" %x, %r, %gu, %d {layout = "in_out_packed"} : (tensor<?x16xf32>, tensor<?x4xf32>, tensor<4x16x48xf32>, tensor<4x24x16xf32>) -> tensor<?x16xf32>
  return
}

// -----

func.func @f(%x: tensor<?x16xf32>, %r: tensor<?x4xf32>, %gu: tensor<4x48x16xf32>, %d: tensor<4x16x24xf32>) {
  // expected-error @+1 {{experts (tp.experts): gate_up 4x48x16 and down 4x16x24 do not fit an input of 16 features}}
  %y = tp.experts "experts" %x, %r, %gu, %d {layout = "in_out_interleaved"} : (tensor<?x16xf32>, tensor<?x4xf32>, tensor<4x48x16xf32>, tensor<4x16x24xf32>) -> tensor<?x16xf32>
  return
}

// -----

func.func @f(%x: tensor<?x16xf32>, %r: tensor<?x4xf32>, %gu: tensor<4x16x48xf32>, %d: tensor<4x24x16xf32>, %gb: tensor<4x48xf32>, %db: tensor<4x24xf32>) {
  // expected-error @+1 {{experts (tp.experts): gate_up_bias 4x48 and down_bias 4x24 do not fit gate_up 4x16x48 and down 4x24x16}}
  %y = tp.experts "experts" %x, %r, %gu, %d, %gb, %db {layout = "in_out_interleaved"} : (tensor<?x16xf32>, tensor<?x4xf32>, tensor<4x16x48xf32>, tensor<4x24x16xf32>, tensor<4x48xf32>, tensor<4x24xf32>) -> tensor<?x16xf32>
  return
}


// -----

func.func @f(%x: tensor<?x48xf32>, %p: tensor<?xi64>) {
  // expected-error @+1 {{attn (tp.rotary): unrotated 12 leaves nothing of head_dim 12 to rotate}}
  %r = tp.rotary "attn" %x, %p {head_dim = 12 : i64, theta = 1.0e4 : f64, unrotated = 12 : i64} : (tensor<?x48xf32>, tensor<?xi64>) -> tensor<?x48xf32>
  return
}

// -----

func.func @f(%x: tensor<?x48xf32>, %p: tensor<?xi64>) {
  // expected-error @+1 {{attn (tp.rotary): the rotated part of each head, head_dim 12 - unrotated 7, must be even}}
  %r = tp.rotary "attn" %x, %p {head_dim = 12 : i64, theta = 1.0e4 : f64, unrotated = 7 : i64} : (tensor<?x48xf32>, tensor<?xi64>) -> tensor<?x48xf32>
  return
}

// -----

func.func @f(%x: tensor<?x48xf32>, %p: tensor<?xi64>) {
  // expected-error @+1 {{attn (tp.rotary): inv_freq has 3 frequencies, but the rotated part 4 needs 2}}
  %r = tp.rotary "attn" %x, %p {head_dim = 12 : i64, theta = 1.0e4 : f64, unrotated = 8 : i64, inv_freq = array<f64: 1.0, 0.1, 0.01>} : (tensor<?x48xf32>, tensor<?xi64>) -> tensor<?x48xf32>
  return
}

// -----

func.func @f(%x: tensor<?x56xf32>) {
  // expected-error @+1 {{attn (tp.head_slice): columns [8, 16) are not inside a head of head_dim 14}}
  %r = tp.head_slice "attn" %x {head_dim = 14 : i64, offset = 8 : i64, size = 8 : i64} : (tensor<?x56xf32>) -> tensor<?x32xf32>
  return
}

// -----

func.func @f(%x: tensor<?x56xf32>) {
  // expected-error @+1 {{attn (tp.head_slice): the result should be ?x24, got ?x32}}
  %r = tp.head_slice "attn" %x {head_dim = 14 : i64, offset = 8 : i64, size = 6 : i64} : (tensor<?x56xf32>) -> tensor<?x32xf32>
  return
}

// -----

func.func @f(%x: tensor<?x30xf32>, %s: tensor<?x4xf32>) {
  // expected-error @+1 {{attn (tp.concat_heads): the heads have 30 features, not a whole number of heads of head_dim 8}}
  %r = tp.concat_heads "attn" %x, %s {head_dim = 8 : i64} : (tensor<?x30xf32>, tensor<?x4xf32>) -> tensor<?x48xf32>
  return
}

// -----

func.func @f(%x: tensor<?x32xf32>, %s: tensor<?x4xf32>) {
  // expected-error @+1 {{attn (tp.concat_heads): the result should be ?x48, got ?x36}}
  %r = tp.concat_heads "attn" %x, %s {head_dim = 8 : i64} : (tensor<?x32xf32>, tensor<?x4xf32>) -> tensor<?x36xf32>
  return
}

// -----

func.func @f(%q: tensor<?x48xf32>, %k: tensor<?x48xf32>, %v: tensor<?x48xf32>) {
  // expected-error @+1 {{attn (tp.attention): v has 48 features, but num_kv_heads 4 x value_head_dim 6 = 24}}
  %o = tp.attention "attn" %q, %k, %v {head_dim = 12 : i64, num_heads = 4 : i64, num_kv_heads = 4 : i64, value_head_dim = 6 : i64} : (tensor<?x48xf32>, tensor<?x48xf32>, tensor<?x48xf32>) -> tensor<?x24xf32>
  return
}

// -----

func.func @f(%x: tensor<?x16xf32>, %w: tensor<4x16xf32>) {
  // expected-error @+1 {{gate (tp.router): the 4 experts do not split into 3 equal groups}}
  %r = tp.router "gate" %x, %w {top_k = 2 : i64, groups = 3 : i64, top_groups = 1 : i64} : (tensor<?x16xf32>, tensor<4x16xf32>) -> tensor<?x4xf32>
  return
}

// -----

func.func @f(%x: tensor<?x16xf32>, %w: tensor<4x16xf32>) {
  // expected-error @+1 {{gate (tp.router): top_k 3 exceeds the 2 experts of the top_groups}}
  %r = tp.router "gate" %x, %w {top_k = 3 : i64, groups = 2 : i64, top_groups = 1 : i64} : (tensor<?x16xf32>, tensor<4x16xf32>) -> tensor<?x4xf32>
  return
}

// -----

func.func @f(%x: tensor<?x16xf32>, %w: tensor<4x16xf32>) {
  // expected-error @+1 {{gate (tp.router): groups and top_groups come together}}
  %r = tp.router "gate" %x, %w {top_k = 2 : i64, groups = 2 : i64} : (tensor<?x16xf32>, tensor<4x16xf32>) -> tensor<?x4xf32>
  return
}

// -----

// expected-error @+1 {{the pp size must be at least 1, got 0}}
module attributes {tp.mesh = #tp.mesh<pp = 0, tp = 2>} {
}

// -----

module attributes {tp.mesh = #tp.mesh<pp = 2, tp = 1>} {
  func.func @f(%x: tensor<?x8xf32>) {
    // expected-error @+1 {{'tp.transfer' op sends from stage 1 to stage 1; a transfer joins two different stages}}
    %y = tp.transfer %x from 1 to 1 : tensor<?x8xf32>
    return
  }
}

// -----

module attributes {tp.mesh = #tp.mesh<pp = 2, tp = 1>} {
  func.func @f(%x: tensor<?x8xf32>) {
    // expected-error @+1 {{'tp.transfer' op sends from stage 0 to stage 2, but the mesh has 2 stages}}
    %y = tp.transfer %x from 0 to 2 : tensor<?x8xf32>
    return
  }
}

// -----

module attributes {tp.mesh = #tp.mesh<pp = 2, tp = 1>} {
  func.func @f(%x: tensor<?x8xf32>) {
    // expected-error @+1 {{'tp.stage' is stage 2, but the mesh has 2 stages}}
    %y = tp.transfer %x from 0 to 1 {tp.stage = 2 : i64} : tensor<?x8xf32>
    return
  }
}

// -----

func.func @f(%x: tensor<?x8xf32>) {
  // expected-error @+1 {{'tp.stage' must be a stage (an i64 >= 0), got -1 : i64}}
  %y = tp.transfer %x from 0 to 1 {tp.stage = -1 : i64} : tensor<?x8xf32>
  return
}

// -----

// expected-error @+1 {{parameter w: stages must list stages (>= 0) once each, sorted, got array<i64: 1, 0>}}
tp.param @w {stages = array<i64: 1, 0>} : tensor<8xf32>

// -----

// expected-error @+1 {{'tp.stage_layers' must give each stage of the mesh its layers (>= 1), got array<i64: 2>}}
module attributes {tp.mesh = #tp.mesh<pp = 2, tp = 1>, tp.stage_layers = array<i64: 2>} {
}
