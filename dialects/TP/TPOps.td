// Ops of the tp dialect: parameters, the layers of a Llama-family decoder, and collectives.
#ifndef TPC_TP_OPS_TD
#define TPC_TP_OPS_TD

include "TPDialect.td"
include "TPAttrs.td"
include "mlir/IR/SymbolInterfaces.td"
include "mlir/Interfaces/SideEffectInterfaces.td"
include "mlir/IR/OpBase.td"
include "mlir/Interfaces/InferTypeOpInterface.td"
include "mlir/Interfaces/ControlFlowInterfaces.td"

class TP_Op<string mnemonic, list<Trait> traits = []> : Op<TP_Dialect, mnemonic, traits>;

def TP_Tensor : RankedTensorOf<[AnyFloat]>;
def TP_IdTensor : 1DTensorOf<[AnySignlessInteger]>;
// An i64 read back as signed: dims may be negative and count from the last one, as in PyTorch.
def TP_I64Attr : TypedSignlessIntegerAttrBase<I64, "int64_t", "64-bit integer attribute"> {
  let convertFromStorage = "$_self.getValue().getSExtValue()";
}
def TP_PositiveI64 : ConfinedAttr<TP_I64Attr, [IntPositive]>;

//===----------------------------------------------------------------------===//
// Parameters
//===----------------------------------------------------------------------===//

def TP_ParamOp : TP_Op<"param", [Symbol, HasParent<"::mlir::ModuleOp">]> {
  let summary = "A model parameter, under its Hugging Face name and global shape";
  let description = [{
    ```mlir
    tp.param @"model.layers.0.self_attn.q_proj.weight" : tensor<4096x4096xbf16>
    ```
    `tp-apply-plan` adds the parameter's `placement` and the `strategy` that placed it.
    `head_repeat` marks k/v projections rewritten to virtual KV heads (each real head repeated
    that many times, so the type has that many times the HF rows). `tp-partition` turns the
    type into this rank's local shape and records in `shard` what to load from the HF tensor.
    `sources` names the checkpoint tensors the parameter stacks along dim 0 when a checkpoint
    saves it in pieces (Mixtral's experts.E.w1/w3/w2): the loader reads the parameter's own
    name when present, else these.

    `storage` is how its elements are stored, where that is not the type's element type:
    `tpc import` sets it from the checkpoint's tensors (`#tp.storage<bf16>`), and
    `tp-weight-storage` sets it to what the target's binary holds, which the loader, `tpc
    analyze` (weight bytes, bytes a step reads) and the lowering read. The tensor type stays
    the type of the arithmetic.

    `stages` (set by `tp-assign-stages` on a module with pipeline stages) lists the stages
    whose ops read the parameter, sorted: only their ranks load it. A tied embedding is read
    by the first stage and the last. Absent: every stage.
  }];
  let arguments = (ins SymbolNameAttr:$sym_name,
                       TypeAttrOf<AnyRankedTensor>:$type,
                       OptionalAttr<TP_PlacementAttr>:$placement,
                       OptionalAttr<StrAttr>:$strategy,
                       OptionalAttr<TP_I64Attr>:$head_repeat,
                       OptionalAttr<TP_ShardDescAttr>:$shard,
                       OptionalAttr<StrArrayAttr>:$sources,
                       OptionalAttr<TP_StorageAttr>:$storage,
                       OptionalAttr<DenseI64ArrayAttr>:$stages);
  let assemblyFormat = "$sym_name attr-dict `:` $type";
  let hasVerifier = 1;
  let extraClassDeclaration = [{
    ::mlir::RankedTensorType getTensorType() {
      return ::llvm::cast<::mlir::RankedTensorType>(getType());
    }
    /// How the elements are stored: `storage`, or else the type's element type.
    WeightType getWeightType();
  }];
}

def TP_WeightOp : TP_Op<"weight", [Pure, DeclareOpInterfaceMethods<SymbolUserOpInterface>]> {
  let summary = "The value of a parameter";
  let arguments = (ins FlatSymbolRefAttr:$param);
  let results = (outs AnyRankedTensor:$result);
  let assemblyFormat = "$param attr-dict `:` type($result)";
}

//===----------------------------------------------------------------------===//
// Layers. Activations are [seq, features] (batch 1); every op names its HF module.
//===----------------------------------------------------------------------===//

class TP_LayerOp<string mnemonic, list<Trait> traits = []>
    : TP_Op<mnemonic, !listconcat([Pure], traits)> {
  let hasVerifier = 1;
}

def TP_EmbeddingOp : TP_LayerOp<"embedding"> {
  let summary = "nn.Embedding: rows of the table for each token id";
  let description = [{
    With the table split by vocabulary (embedding_rowwise) each rank holds a chunk of rows: an
    id outside this rank's chunk looks up a clamped row whose output is zeroed, so the result
    is Partial and one all_reduce gives every rank the full embedding.
  }];
  let arguments = (ins StrAttr:$module, TP_IdTensor:$ids, TP_Tensor:$table);
  let results = (outs TP_Tensor:$result);
  let assemblyFormat = "$module $ids `,` $table attr-dict `:` functional-type(operands, results)";
}

def TP_RMSNormOp : TP_LayerOp<"rms_norm"> {
  let summary = "RMSNorm over the last dim: x / rms(x) * (weight + weight_offset)";
  let description = [{
    `weight_offset` is 1.0 for Gemma, whose norms scale by (1 + weight). With `head_dim` each
    head of the row is normalized on its own with one shared weight of head_dim elements
    (Qwen3's q_norm and k_norm), so heads split across ranks need nothing.

    With `sum_squares` ([seq, 1], each whole row's sum of squares, from tp.sum_squares and
    an all_reduce) the row may be split by features: each rank scales its own columns by
    rsqrt(sum_squares / features + epsilon), `features` being the whole row's width (OLMo2's
    q_norm and k_norm over sharded heads: tp-fold-redistribute writes this form).
  }];
  let arguments = (ins StrAttr:$module, TP_Tensor:$input, TP_Tensor:$weight,
                       Optional<TP_Tensor>:$sum_squares,
                       F64Attr:$epsilon, DefaultValuedAttr<F64Attr, "0.0">:$weight_offset,
                       OptionalAttr<TP_PositiveI64>:$head_dim,
                       OptionalAttr<TP_PositiveI64>:$features);
  let results = (outs TP_Tensor:$result);
  let assemblyFormat = [{
    $module $input `,` $weight (`,` $sum_squares^)? attr-dict `:` functional-type(operands, results)
  }];
}

def TP_L2NormOp : TP_LayerOp<"l2_norm"> {
  let summary = "Each head of head_dim columns divided by its root mean square; no weight";
  let description = [{
    x / sqrt(mean(x^2) + epsilon) over each head of `head_dim` columns: Llama 4's q/k norm
    (Llama4TextL2Norm), which has no learned weight. Heads split across ranks need nothing.
  }];
  let arguments = (ins StrAttr:$module, TP_Tensor:$input, F64Attr:$epsilon,
                       TP_PositiveI64:$head_dim);
  let results = (outs TP_Tensor:$result);
  let assemblyFormat = "$module $input attr-dict `:` functional-type(operands, results)";
}

def TP_SumSquaresOp : TP_LayerOp<"sum_squares"> {
  let summary = "Each row's sum of squares, [seq, features] -> [seq, 1]";
  let description = [{
    The first half of an RMSNorm whose row is split by features: each rank's sum over its
    columns is a summand (Partial), one all_reduce of a scalar per token gives the row's.
    With `copies` c > 1 the columns are virtual KV heads, each real head held by c
    consecutive ranks: only the first rank of each c contributes, so every real head counts
    once.
  }];
  let arguments = (ins StrAttr:$module, TP_Tensor:$input,
                       DefaultValuedAttr<TP_PositiveI64, "1">:$copies);
  let results = (outs TP_Tensor:$result);
  let assemblyFormat = "$module $input attr-dict `:` functional-type(operands, results)";
}

def TP_LinearOp : TP_LayerOp<"linear"> {
  let summary = "nn.Linear: x @ weight.T (+ bias), weight [out, in]";
  let description = [{
    With the weight split on its input features (rowwise) the result is Partial, and a
    replicated bias is added by rank 0 only, so the sum over ranks has it exactly once: the
    bias is added once, after the reduce.
  }];
  let arguments = (ins StrAttr:$module, TP_Tensor:$input, TP_Tensor:$weight,
                       Optional<TP_Tensor>:$bias);
  let results = (outs TP_Tensor:$result);
  let assemblyFormat = [{
    $module $input `,` $weight (`,` $bias^)? attr-dict `:` functional-type(operands, results)
  }];
}

def TP_RotaryOp : TP_LayerOp<"rotary"> {
  let summary = "Rotary position embedding of each head, at the given token positions";
  let description = [{
    The input is [seq, heads * head_dim]; each head is rotated in HF's rotate_half layout
    (the two halves of head_dim pair up) with inverse frequencies theta^(-2i/head_dim), or
    the head_dim/2 given in `inv_freq` where a scaled RoPE (llama3, yarn) computed them.
    `scaling` multiplies cos and sin (YaRN's attention_factor); absent, it is 1.

    DeepSeek's multi-head latent attention rotates in its complex form (`interleaved`:
    elements 2i and 2i+1 pair up) and only the last part of each head: the first `unrotated`
    elements of each head stay as they are (its "nope" dims), the other
    head_dim - unrotated rotate with frequencies over that many dims.
  }];
  let arguments = (ins StrAttr:$module, TP_Tensor:$input, TP_IdTensor:$positions,
                       TP_PositiveI64:$head_dim, F64Attr:$theta,
                       OptionalAttr<DenseF64ArrayAttr>:$inv_freq,
                       OptionalAttr<F64Attr>:$scaling,
                       DefaultValuedAttr<BoolAttr, "false">:$interleaved,
                       OptionalAttr<TP_PositiveI64>:$unrotated);
  let results = (outs TP_Tensor:$result);
  let assemblyFormat = [{
    $module $input `,` $positions attr-dict `:` functional-type(operands, results)
  }];
  let extraClassDeclaration = [{
    /// The inverse frequencies of the rotated dims, computed here once for every target:
    /// `inv_freq` where given, else theta^(-2i/d) over the d = head_dim - unrotated dims.
    /// The lowering hands them to the runtime as a table; no kernel computes them again.
    ::llvm::SmallVector<double> getFrequencies();
  }];
}

def TP_AttentionOp : TP_LayerOp<"attention"> {
  let summary = "Causal scaled dot-product attention with grouped KV heads, over a KV cache";
  let description = [{
    q is [seq, num_heads * head_dim]; k and v are [seq, num_kv_heads * head_dim]. Query head h
    reads KV head h / (num_heads / num_kv_heads). Keys and values are appended to the layer's
    KV cache, so a decode step attends over every earlier token. `scale` defaults to
    head_dim^-0.5; `sliding_window` W lets a query see the W latest keys (itself included);
    `softcap` c maps each score s to c * tanh(s / c) before the mask (Gemma2).

    Where tp divides neither the heads nor the KV heads evenly, tp-propagate-layouts gives
    each rank whole heads, unevenly, and records it: `rank_heads` holds, for each rank, the
    model's first query head it holds, how many it holds, and the first KV head it holds;
    `kv_group` is the model's query heads per KV head. Rank r's local query head h (h below
    its count) reads local KV head (first + h) / kv_group - first KV head; its heads past the
    count are padding and come out zero. num_heads and num_kv_heads are then tp times the
    largest rank's counts.

    `sinks` ([num_heads], GPT-OSS's learned attention sinks) gives each head a logit that
    joins the softmax's denominator and is then dropped: the weights of a row sum to less
    than 1. It is split with the heads.

    `value_head_dim` (DeepSeek's MLA: v_head_dim) is the width of each value head, and so of
    each output head, where it differs from head_dim, the width the queries and keys share.

    `chunk_size` C (Llama 4's chunked attention) lets the query at position p see the keys of
    its own chunk only, positions C * floor(p / C) .. p. `temperature_floor` F with
    `temperature_scale` S (Llama 4's attention temperature tuning, on its layers without RoPE)
    multiply the query at position p by log(floor((p + 1) / F) + 1) * S + 1.
  }];
  let arguments = (ins StrAttr:$module, TP_Tensor:$query, TP_Tensor:$key, TP_Tensor:$value,
                       Optional<TP_Tensor>:$sinks,
                       TP_PositiveI64:$num_heads, TP_PositiveI64:$num_kv_heads,
                       TP_PositiveI64:$head_dim,
                       OptionalAttr<TP_PositiveI64>:$sliding_window,
                       OptionalAttr<F64Attr>:$scale,
                       OptionalAttr<F64Attr>:$softcap,
                       OptionalAttr<DenseI64ArrayAttr>:$rank_heads,
                       OptionalAttr<TP_PositiveI64>:$kv_group,
                       OptionalAttr<TP_PositiveI64>:$value_head_dim,
                       OptionalAttr<TP_PositiveI64>:$chunk_size,
                       OptionalAttr<F64Attr>:$temperature_floor,
                       OptionalAttr<F64Attr>:$temperature_scale);
  let results = (outs TP_Tensor:$result);
  let assemblyFormat = [{
    $module $query `,` $key `,` $value (`,` $sinks^)? attr-dict `:`
    functional-type(operands, results)
  }];
}

class TP_UnaryOp<string mnemonic> : TP_LayerOp<mnemonic> {
  let results = (outs TP_Tensor:$result);
  let assemblyFormat = "$module $input attr-dict `:` functional-type(operands, results)";
}

def TP_SiluOp : TP_UnaryOp<"silu"> {
  let summary = "SiLU: x * sigmoid(x)";
  let arguments = (ins StrAttr:$module, TP_Tensor:$input);
}

def TP_GeluOp : TP_UnaryOp<"gelu"> {
  let summary = "GELU, exact (`none`) or with torch's tanh approximation (`tanh`)";
  let arguments = (ins StrAttr:$module, TP_Tensor:$input,
                       DefaultValuedStrAttr<StrAttr, "none">:$approximate);
}

def TP_ScaleOp : TP_UnaryOp<"scale"> {
  let summary = "x * factor (Gemma's embedding scale sqrt(hidden)); linear, so a sum stays one";
  let arguments = (ins StrAttr:$module, TP_Tensor:$input, F64Attr:$factor);
}

def TP_SoftcapOp : TP_UnaryOp<"softcap"> {
  let summary = "cap * tanh(x / cap) (Gemma2's final logit soft-capping)";
  let arguments = (ins StrAttr:$module, TP_Tensor:$input, F64Attr:$cap);
}

def TP_IdentityOp : TP_UnaryOp<"identity"> {
  let summary = "The input itself: a zero-compute expert, or a module with no math";
  let arguments = (ins StrAttr:$module, TP_Tensor:$input);
}

class TP_BinaryOp<string mnemonic> : TP_LayerOp<mnemonic> {
  let arguments = (ins StrAttr:$module, TP_Tensor:$lhs, TP_Tensor:$rhs);
  let results = (outs TP_Tensor:$result);
  let assemblyFormat = "$module $lhs `,` $rhs attr-dict `:` functional-type(operands, results)";
}

def TP_MulOp : TP_BinaryOp<"mul"> { let summary = "Elementwise product"; }
def TP_AddOp : TP_BinaryOp<"add"> { let summary = "Elementwise sum (residual connections)"; }

def TP_SliceOp : TP_LayerOp<"slice"> {
  let summary = "A contiguous range of one dim (splitting a fused projection)";
  let arguments = (ins StrAttr:$module, TP_Tensor:$input, TP_I64Attr:$dim,
                       ConfinedAttr<TP_I64Attr, [IntNonNegative]>:$offset, TP_PositiveI64:$size);
  let results = (outs TP_Tensor:$result);
  let assemblyFormat = "$module $input attr-dict `:` functional-type(operands, results)";
}

def TP_HeadSliceOp : TP_LayerOp<"head_slice"> {
  let summary = "Columns [offset, offset + size) of each head: [seq, n * head_dim] -> [seq, n * size]";
  let description = [{
    Splits per-head features that a projection packs in each head (DeepSeek's kv_b_proj: each
    head's key "nope" part, then its value). Heads are independent, so heads split across
    ranks need nothing.
  }];
  let arguments = (ins StrAttr:$module, TP_Tensor:$input, TP_PositiveI64:$head_dim,
                       ConfinedAttr<TP_I64Attr, [IntNonNegative]>:$offset, TP_PositiveI64:$size);
  let results = (outs TP_Tensor:$result);
  let assemblyFormat = "$module $input attr-dict `:` functional-type(operands, results)";
}

def TP_ConcatHeadsOp : TP_LayerOp<"concat_heads"> {
  let summary = "Each head of `heads`, then `shared`: [seq, n * d], [seq, s] -> [seq, n * (d + s)]";
  let description = [{
    DeepSeek's MLA key: each head's own part (from kv_b_proj) followed by the one rotary key
    every head shares. The shared part is replicated, so heads split across ranks need
    nothing.
  }];
  let arguments = (ins StrAttr:$module, TP_Tensor:$heads, TP_Tensor:$shared,
                       TP_PositiveI64:$head_dim);
  let results = (outs TP_Tensor:$result);
  let assemblyFormat = "$module $heads `,` $shared attr-dict `:` functional-type(operands, results)";
}

def TP_ConcatOp : TP_LayerOp<"concat"> {
  let summary = "Concatenation along one dim";
  let arguments = (ins StrAttr:$module, Variadic<TP_Tensor>:$inputs, TP_I64Attr:$dim);
  let results = (outs TP_Tensor:$result);
  let assemblyFormat = "$module $inputs attr-dict `:` functional-type(operands, results)";
}

def TP_RouterOp : TP_LayerOp<"router"> {
  let summary = "MoE top-k router: dense routing weights [seq, experts]";
  let description = [{
    logits = x @ weight.T (+ bias), [seq, E]; softmax over the experts; the top_k largest kept
    and (with `normalize`) divided by their sum; every other expert's weight is 0. With
    `softmax_after_top_k` (GPT-OSS) the top_k largest logits are chosen first and the softmax
    runs over those k alone (`normalize` then changes nothing). Dense weights make expert
    parallelism a placement: an `ep_router` rank keeps its experts' columns. DeepSeek's: with
    `groups` G and `top_groups` g the experts are G equal groups and the top_k come from the g
    groups whose best score is largest (group_limited_greedy); the kept weights are multiplied
    by `scale` (routed_scaling_factor). With `sigmoid` (Llama 4) the top_k largest logits are
    chosen and each kept expert's weight is the sigmoid of its logit, with no softmax.
  }];
  let arguments = (ins StrAttr:$module, TP_Tensor:$input, TP_Tensor:$weight,
                       Optional<TP_Tensor>:$bias,
                       TP_PositiveI64:$top_k, DefaultValuedAttr<BoolAttr, "true">:$normalize,
                       DefaultValuedAttr<BoolAttr, "false">:$softmax_after_top_k,
                       DefaultValuedAttr<BoolAttr, "false">:$sigmoid,
                       OptionalAttr<F64Attr>:$scale,
                       OptionalAttr<TP_PositiveI64>:$groups,
                       OptionalAttr<TP_PositiveI64>:$top_groups);
  let results = (outs TP_Tensor:$result);
  let assemblyFormat = [{
    $module $input `,` $weight (`,` $bias^)? attr-dict `:` functional-type(operands, results)
  }];
}

def TP_ExpertsOp : TP_LayerOp<"experts", [AttrSizedOperandSegments]> {
  let summary = "MoE experts: sum over e of routing[:, e] * down_e(act(gate_e x) * up_e x)";
  let description = [{
    With `layout` "out_in" (the default) gate_up is [E, 2 * inter, hidden] (gate rows, then up
    rows), down [E, hidden, inter], as transformers' MixtralExperts holds them. With
    "in_out_interleaved" (GPT-OSS) gate_up is [E, hidden, 2 * inter] with gate and up
    interleaved column by column (gate = [..., ::2], up = [..., 1::2]) and down is
    [E, inter, hidden]: x @ W rather than x @ W.T, as transformers' GptOssExperts holds and
    saves them, so the checkpoint loads as is. `gate_up_bias` [E, 2 * inter] and `down_bias`
    [E, hidden] (both or neither) belong to their expert: each is weighted by the expert's
    routing weight with the rest of its output.

    With "in_out" (Llama 4) gate_up is [E, hidden, 2 * inter] with the gate's columns first
    and up's after, down [E, inter, hidden], also applied as x @ W.

    With `scale_input` (Llama 4) the routing weight scales each expert's input rather than its
    output: sum over e of down_e(act(gate_e (w_e x)) * up_e (w_e x)).

    `activation` "clamped_swiglu" (GPT-OSS) computes, with gate clamped above at `limit` and up
    clamped to [-limit, limit], (up + 1) * gate * sigmoid(alpha * gate).

    Experts whose routing weight is 0 for a token are skipped. Split on experts
    (grouped_gemm) or on inter (packed_colwise gate_up with rowwise down for "out_in",
    packed_rowwise with colwise for "in_out"; without biases only), each rank's sum is a
    summand: the result is Partial.
  }];
  let arguments = (ins StrAttr:$module, TP_Tensor:$input, TP_Tensor:$routing,
                       TP_Tensor:$gate_up, TP_Tensor:$down,
                       Optional<TP_Tensor>:$gate_up_bias, Optional<TP_Tensor>:$down_bias,
                       DefaultValuedStrAttr<StrAttr, "silu">:$activation,
                       DefaultValuedStrAttr<StrAttr, "out_in">:$layout,
                       OptionalAttr<F64Attr>:$alpha, OptionalAttr<F64Attr>:$limit,
                       DefaultValuedAttr<BoolAttr, "false">:$scale_input);
  let results = (outs TP_Tensor:$result);
  let assemblyFormat = [{
    $module $input `,` $routing `,` $gate_up `,` $down (`,` $gate_up_bias^ `,` $down_bias)?
    attr-dict `:` functional-type(operands, results)
  }];
}

def TP_LastTokenOp : TP_LayerOp<"last_token"> {
  let summary = "The last token's row: what generation needs of the output";
  let description = [{
    `tp-last-token` puts it where the forward's output stops needing every token, so the
    final norm and lm_head run (and gather) on one row, as transformers' generate does with
    logits_to_keep=1.
  }];
  let arguments = (ins StrAttr:$module, TP_Tensor:$input);
  let results = (outs TP_Tensor:$result);
  let assemblyFormat = "$module $input attr-dict `:` functional-type(operands, results)";
}

//===----------------------------------------------------------------------===//
// Communication
//===----------------------------------------------------------------------===//

def TP_RedistributeOp : TP_Op<"redistribute", [Pure]> {
  let summary = "A change of placement; the planner decides which collectives it takes";
  let description = [{
    The placements are the encodings of the operand and result types, whose shapes are the
    same global shape: a redistribution changes where the data lives, not what it is.
    `tp-lower-redistribute` turns it into collectives and local reshards.
    ```mlir
    %r = tp.redistribute %p : tensor<?x64xf32, #tp.partial<sum>> -> tensor<?x64xf32, #tp.replicate>
    ```
  }];
  let arguments = (ins TP_Tensor:$input, OptionalAttr<StrAttr>:$module);
  let results = (outs TP_Tensor:$result);
  let assemblyFormat = "$input attr-dict `:` type($input) `->` type($result)";
  let hasVerifier = 1;
  let hasFolder = 1;
  let extraClassDeclaration = [{
    ::tpc::tp::PlacementAttr getSrc();
    ::tpc::tp::PlacementAttr getDst();
  }];
}

def TP_LocalReshardOp : TP_Op<"local_reshard", [Pure]> {
  let summary = "A change of placement that needs no communication";
  let description = [{
    Replicate -> Shard or StridedShard: keep this rank's chunk. Replicate -> Partial: rank 0
    keeps the value, the others hold zeros. Shard or StridedShard -> Partial: this rank's chunk
    in place, zeros elsewhere. Placements are the type encodings.
  }];
  let arguments = (ins TP_Tensor:$input, OptionalAttr<StrAttr>:$module);
  let results = (outs TP_Tensor:$result);
  let assemblyFormat = "$input attr-dict `:` type($input) `->` type($result)";
  let hasVerifier = 1;
}

def TP_TransferOp : TP_Op<"transfer", [Pure, AllTypesMatch<["input", "result"]>]> {
  let summary = "A value sent between pipeline stages: tp rank r of `from` to tp rank r of `to`";
  let description = [{
    `tp-insert-transfers` puts one where a value of one stage is read in another: the
    residual stream between layers, whatever else crosses, and the logits back to the first
    stage, which samples. Every stage has the same tp size, so each rank sends its own piece,
    whatever its placement, to the rank of the same tp index; the value is defined in `to`.
    ```mlir
    %h1 = tp.transfer %h from 0 to 1 {module = "model.layers.0"} : tensor<?x64xf32, #tp.replicate>
    ```
    `argmax_if_greedy` (set by tp-greedy-argmax, on the transfer of the logits the forward
    returns) lets the runtime send each row's argmax, one id a row, instead of the rows on a
    step whose sampled rows are all greedy: the last stage finds it (the first stage samples
    nothing it needs the rows for), and a step's logits do not cross the link.
  }];
  let arguments = (ins TP_Tensor:$input, TP_I64Attr:$from, TP_I64Attr:$to,
                       OptionalAttr<StrAttr>:$module, UnitAttr:$argmax_if_greedy);
  let results = (outs TP_Tensor:$result);
  let assemblyFormat = "$input `from` $from `to` $to attr-dict `:` type($input)";
  let hasVerifier = 1;
}

class TP_CollectiveOp<string mnemonic, list<Trait> traits = []>
    : TP_Op<mnemonic, !listconcat([Pure], traits)> {
  let results = (outs TP_Tensor:$result);
  let hasVerifier = 1;
}

def TP_AllReduceOp : TP_CollectiveOp<"all_reduce"> {
  let summary = "Partial -> Replicate: every rank gets the sum";
  let arguments = (ins TP_Tensor:$input,
                       DefaultValuedAttr<TP_ReduceKindAttr, "ReduceKind::sum">:$kind,
                       OptionalAttr<StrAttr>:$module);
  let assemblyFormat = "$input `` $kind attr-dict `:` type($input) `->` type($result)";
}

def TP_AllGatherOp : TP_CollectiveOp<"all_gather"> {
  let summary = "Shard(dim) -> Replicate: the ranks' chunks concatenated along dim";
  let description = [{
    With `blocks`, the input is StridedShard(dim, blocks): every rank holds its chunk of each
    block, and the gathered chunks are put back block by block.

    `argmax_if_greedy` (set by tp-greedy-argmax, on the gather of the logits that ends a
    forward): on a step whose every sampled row is greedy, the program gathers each rank's
    largest logit of every row and its id instead of the rows, and returns the argmax of each
    row in place of its logits. Only a 2-D gather along the last dim whose one user is the
    forward's return takes it.
  }];
  let arguments = (ins TP_Tensor:$input, TP_I64Attr:$dim,
                       OptionalAttr<DenseI64ArrayAttr>:$blocks, OptionalAttr<StrAttr>:$module,
                       UnitAttr:$argmax_if_greedy);
  let assemblyFormat = "$input `dim` `=` $dim attr-dict `:` type($input) `->` type($result)";
}

def TP_ReduceScatterOp : TP_CollectiveOp<"reduce_scatter"> {
  let summary = "Partial -> Shard(dim): the sum, and each rank keeps its chunk of dim";
  let description = [{ With `blocks`, each rank keeps its chunk of every block (StridedShard). }];
  let arguments = (ins TP_Tensor:$input, TP_I64Attr:$dim,
                       DefaultValuedAttr<TP_ReduceKindAttr, "ReduceKind::sum">:$kind,
                       OptionalAttr<DenseI64ArrayAttr>:$blocks, OptionalAttr<StrAttr>:$module);
  let assemblyFormat = [{
    $input `` $kind `dim` `=` $dim attr-dict `:` type($input) `->` type($result)
  }];
}

def TP_AllToAllOp : TP_CollectiveOp<"all_to_all"> {
  let summary = "Shard(concat_dim) -> Shard(split_dim): split one dim, gather another";
  let arguments = (ins TP_Tensor:$input, TP_I64Attr:$split_dim, TP_I64Attr:$concat_dim,
                       OptionalAttr<StrAttr>:$module);
  let assemblyFormat = [{
    $input `split_dim` `=` $split_dim `concat_dim` `=` $concat_dim attr-dict `:`
    type($input) `->` type($result)
  }];
}

//===----------------------------------------------------------------------===//
// Decisions of code generation (after tp-partition)
//===----------------------------------------------------------------------===//

def TP_FusedOp : TP_Op<"fused", [SingleBlock, RecursiveMemoryEffects]> {
  let summary = "Ops a target runs as one unit: one generated kernel, or one GEMM";
  let description = [{
    `tp-fuse` and `tp-group-linears` move the ops of a unit into the body, which may read
    any value defined above it; the body yields the values the unit stores, which are the
    op's results. The kinds:
    - `elementwise`: a chain of silu, gelu, scale, softcap, add and mul, computed in
      registers and stored once (yields the chain's last value);
    - `norm`: such a chain, then an rms_norm of its value (pre-norm's residual add and
      RMSNorm): yields both, the chain's value being the residual stream;
    - `rotary`: the rotary embeddings of one attention's query and key (yields both);
    - `linears`: linears that read one input (q, k, v; gate, up). Their weights are placed
      one after the other in memory and their results one after the other in the arena,
      so a one-row input is a single GEMM (yields each linear's result, in order).
    ```mlir
    %r:2 = tp.fused norm -> tensor<?x64xf32>, tensor<?x64xf32> {
      %s = tp.add "model.layers.0" %a, %b : ...
      %n = tp.rms_norm "model.layers.0.post_attention_layernorm" %s, %w {epsilon = 1.0e-05} : ...
      tp.yield %s, %n : tensor<?x64xf32>, tensor<?x64xf32>
    }
    ```
  }];
  let arguments = (ins TP_FusedKindAttr:$kind);
  let results = (outs Variadic<TP_Tensor>:$results);
  let regions = (region SizedRegion<1>:$body);
  let assemblyFormat = "$kind (`->` type($results)^)? attr-dict-with-keyword $body";
  let hasVerifier = 1;
  let extraClassDeclaration = [{
    ::mlir::Block &getBlock() { return getBody().front(); }
    /// The ops of the unit, in order (all but the tp.yield).
    auto getMembers() { return getBlock().without_terminator(); }
  }];
}

def TP_YieldOp : TP_Op<"yield", [Pure, Terminator, ReturnLike, HasParent<"FusedOp">]> {
  let summary = "The values a tp.fused unit stores";
  let arguments = (ins Variadic<TP_Tensor>:$values);
  let assemblyFormat = "($values^ `:` type($values))? attr-dict";
}

#endif // TPC_TP_OPS_TD
