// Placements (DTensor's, on the tp mesh axis), the mesh, and module strategies.
#ifndef TPC_TP_ATTRS_TD
#define TPC_TP_ATTRS_TD

include "TPDialect.td"
include "mlir/IR/EnumAttr.td"

def TP_ReduceKind : I32EnumAttr<"ReduceKind", "the reduction a Partial is waiting for", [
    I32EnumAttrCase<"sum", 0>
  ]> {
  let cppNamespace = "::tpc::tp";
  let genSpecializedAttr = 0;
}
def TP_ReduceKindAttr : EnumAttr<TP_Dialect, TP_ReduceKind, "reduce_kind">;

// What a tp.fused unit is (TPOps.td says what each holds); an enum, so that the verifier,
// the passes that make units and the lowering switch over it and a misspelled kind is a parse
// error.
def TP_FusedKind : I32EnumAttr<"FusedKind", "what a tp.fused unit holds", [
    I32EnumAttrCase<"elementwise", 0>,
    I32EnumAttrCase<"norm", 1>,
    I32EnumAttrCase<"rotary", 2>,
    I32EnumAttrCase<"linears", 3>
  ]> {
  let cppNamespace = "::tpc::tp";
  let genSpecializedAttr = 0;
}
// Spelled bare in the op: `tp.fused norm -> ...`.
def TP_FusedKindAttr : EnumAttr<TP_Dialect, TP_FusedKind, "fused_kind"> {
  let assemblyFormat = "$value";
}

def TP_PlacementAttr : AttrInterface<"PlacementAttr"> {
  let cppNamespace = "::tpc::tp";
  let description = [{
    How a tensor is laid out across the ranks of the tp axis (DTensor's Placement).
  }];
  let methods = [
    InterfaceMethod<"The DTensor spelling, e.g. `Shard(-1)`.", "std::string", "str">,
    InterfaceMethod<[{
        Checks that the placement can apply to a tensor of this shape (a sharded dim exists,
        strided blocks add up); `what` names the tensor in the message.
      }], "::llvm::LogicalResult", "verifyFor",
      (ins "::llvm::ArrayRef<int64_t>":$shape,
           "::llvm::function_ref<::mlir::InFlightDiagnostic()>":$emitError)>,
  ];
}

class TP_Attr<string name, string attrMnemonic, list<Trait> traits = []>
    : AttrDef<TP_Dialect, name, traits> {
  let mnemonic = attrMnemonic;
}

def TP_ReplicateAttr : TP_Attr<"Replicate", "replicate",
    [DeclareAttrInterfaceMethods<TP_PlacementAttr>]> {
  let summary = "Replicate(): every rank holds the whole tensor";
}

def TP_ShardAttr : TP_Attr<"Shard", "shard",
    [DeclareAttrInterfaceMethods<TP_PlacementAttr>]> {
  let summary = "Shard(d): torch.chunk of dim d, rank r holds chunk r";
  let description = [{
    Chunks have ceil(n / tp) elements; trailing ranks may hold fewer or none. `dim` may be
    negative and counts from the last dimension, as in PyTorch.
  }];
  let parameters = (ins "int64_t":$dim);
  let assemblyFormat = "`<` $dim `>`";
}

def TP_StridedShardAttr : TP_Attr<"StridedShard", "strided_shard",
    [DeclareAttrInterfaceMethods<TP_PlacementAttr>]> {
  let summary = "StridedShard(d, blocks): dim d is a concatenation of blocks, each chunked";
  let description = [{
    Dim `dim` is the concatenation of blocks of the given sizes (`[gate | up]`: two equal
    blocks; a fused GQA `[q | k | v]`: three unequal ones). Rank r holds the r-th chunk of every
    block, concatenated, so slicing the blocks apart locally still lines up.
  }];
  let parameters = (ins "int64_t":$dim, ArrayRefParameter<"int64_t">:$blocks);
  let assemblyFormat = "`<` $dim `,` `[` $blocks `]` `>`";
  let genVerifyDecl = 1;
}

def TP_PartialAttr : TP_Attr<"Partial", "partial",
    [DeclareAttrInterfaceMethods<TP_PlacementAttr>]> {
  let summary = "Partial(sum): every rank holds a summand of the true value";
  let parameters = (ins EnumParameter<TP_ReduceKind>:$kind);
  let assemblyFormat = "`<` $kind `>`";
}

def TP_MeshAttr : TP_Attr<"Mesh", "mesh"> {
  let summary = "The module's mesh: pp pipeline stages, each of tp ranks sharing its layers";
  let description = [{
    Two named axes, as upstream `shard.grid` has numbered ones: `pp` pipeline stages, each
    holding some of the layers (`tp.stage` on the ops), and `size` ranks on the tp axis, which
    split every layer of a stage (the placements). Ranks are numbered stage-major: stage k's
    tp group is ranks k * size to k * size + size - 1. `pp` is left out where it is 1.
  }];
  let parameters = (ins DefaultValuedParameter<"int64_t", "1">:$pp, "int64_t":$size);
  let assemblyFormat = "`<` (`pp` `=` $pp^ `,` ` `)? `tp` `=` $size `>`";
  let builders = [AttrBuilder<(ins "int64_t":$size), [{ return $_get($_ctxt, 1, size); }]>];
  let genVerifyDecl = 1;
}

def TP_StrategyAttr : TP_Attr<"Strategy", "strategy"> {
  let summary = "The plan strategy attached to a module, with the layouts it imposes";
  let description = [{
    `name` is the plan's strategy name (a built-in one or a custom one); `input` and `output`
    are the layouts the strategy's module hooks impose, absent where it has none.
  }];
  let parameters = (ins "::mlir::StringAttr":$name,
                        OptionalParameter<"::tpc::tp::PlacementAttr">:$input,
                        OptionalParameter<"::tpc::tp::PlacementAttr">:$output);
  let assemblyFormat = "`<` $name (`,` `input` `=` $input^)? (`,` `output` `=` $output^)? `>`";
}

def TP_ShardDescAttr : TP_Attr<"ShardDesc", "shard_desc"> {
  let summary = "Which part of the Hugging Face tensor each rank loads";
  let description = [{
    `dim` of the HF tensor (shape `hf_shape`) is read as blocks `[offsets[i], offsets[i] +
    sizes[i])`. Each block is cut into `chunks` torch.chunk pieces of ceil(size / chunks)
    rows; rank r loads piece `r * chunks / tp` of every block, concatenated, padded with zeros
    to the piece size. `chunks` is tp, or the number of real KV heads when they are repeated
    into virtual ones (then several ranks load the same head).

    `ranks`, where present, states each rank's extent instead (whole heads where tp does not
    divide them): rank r reads `ranks[2r + 1]` elements of `dim` from `ranks[2r]` and pads
    them with zeros to its local size, the largest rank's.
  }];
  let parameters = (ins "int64_t":$dim, ArrayRefParameter<"int64_t">:$hf_shape,
                        ArrayRefParameter<"int64_t">:$offsets,
                        ArrayRefParameter<"int64_t">:$sizes, "int64_t":$chunks,
                        OptionalArrayRefParameter<"int64_t">:$ranks);
  let assemblyFormat = [{
    `<` `dim` `=` $dim `,` `hf_shape` `=` `[` $hf_shape `]` `,` `offsets` `=` `[` $offsets `]`
    `,` `sizes` `=` `[` $sizes `]` `,` `chunks` `=` $chunks (`,` `ranks` `=` `[` $ranks^ `]`)? `>`
  }];
  let genVerifyDecl = 1;
  let extraClassDeclaration = [{
    /// The elements of the HF tensor rank `rank` of `tp` holds, padding left out.
    int64_t heldElements(int64_t rank, int64_t tp) const;
  }];
}

// How a parameter's elements are stored: in the checkpoint (tpc import reads it off the
// tensors), and, after tp-weight-storage, in the binary. The q types are ggml's block formats
// (a GGUF file's), which the CPU target holds as they are (tpcrt/types.def's held types: a
// type added here needs its kernels there).
def TP_WeightType : I32EnumAttr<"WeightType", "the element type a weight is stored in", [
    I32EnumAttrCase<"f32", 0>,
    I32EnumAttrCase<"bf16", 1>,
    I32EnumAttrCase<"f16", 2>,
    I32EnumAttrCase<"q8_0", 3>,
    I32EnumAttrCase<"q4_0", 4>,
    I32EnumAttrCase<"q4_1", 5>,
    I32EnumAttrCase<"q4_k", 6>,
    I32EnumAttrCase<"q5_0", 7>,
    I32EnumAttrCase<"q5_1", 8>,
    I32EnumAttrCase<"q5_k", 9>,
    I32EnumAttrCase<"q6_k", 10>,
    I32EnumAttrCase<"mxfp4", 11>
  ]> {
  let cppNamespace = "::tpc::tp";
  let genSpecializedAttr = 0;
}

def TP_StorageAttr : EnumAttr<TP_Dialect, TP_WeightType, "storage"> {
  let assemblyFormat = "`<` $value `>`";
}

def TP_GatherMode : I32EnumAttr<"GatherMode",
    "how a gather of pieces that tp does not split evenly crosses the wire", [
    I32EnumAttrCase<"padded", 0>,
    I32EnumAttrCase<"variable", 1>
  ]> {
  let cppNamespace = "::tpc::tp";
  let genSpecializedAttr = 0;
}

def TP_TargetAttr : TP_Attr<"Target", "target"> {
  let summary = "The target a program is built for, and every fact that follows from it";
  let description = [{
    Set on the module (`tp.target`) by buildProgram from the target's own description
    (lib/Target/Cpu, lib/Target/Cuda), so that what a target decides is read from the IR by
    every pass, by the lowering, by `tpc analyze` and by the build driver, and decoded from a
    name nowhere else.

    - `name`: the target as the command line spells it (`cpu`, `cuda`).
    - `activation`: the element type of activations in the binary (the arena, the
      collectives' payloads): f32 on the CPU, bf16 on the GPU. The IR's tensors stay f32;
      this is what the runtime stores them as.
    - `fuse_elementwise`, `fuse_norm`, `fuse_rotary`: the chains tp-fuse makes into one
      generated kernel.
    - `group_linears`: whether tp-group-linears lays linears of one input one after the
      other, so that their GEMM is one.
    - `gather`: how a gather of pieces tp does not split evenly is sent: `variable` (each
      rank's real columns only) or `padded` (every piece padded to the largest).
    - `greedy_argmax`: whether its runtime can reduce the vocabulary-split logits of a greedy
      step to each row's argmax on the ranks (tp-greedy-argmax marks the gather it may skip).
    - `arena_align`: tp-plan-arena starts every slot at a multiple of this many elements per
      token, so that every slot's address is a multiple of that many elements for any token
      count (the CUDA target: 8 bf16, the 16 bytes cuBLASLt's fastest kernels ask of their
      matrices; the CPU target: 1).
  }];
  let parameters = (ins StringRefParameter<"the target's name">:$name,
                        "::mlir::Type":$activation,
                        "bool":$fuse_elementwise, "bool":$fuse_norm, "bool":$fuse_rotary,
                        "bool":$group_linears,
                        EnumParameter<TP_GatherMode>:$gather, "bool":$greedy_argmax,
                        "int64_t":$arena_align);
  let assemblyFormat = "`<` struct(params) `>`";
  let genVerifyDecl = 1;
  let extraClassDeclaration = [{
    /// Bytes of one activation element.
    int64_t activationBytes() const;
    /// Whether tp-fuse makes any chain into a kernel.
    bool fusesAny() const { return getFuseElementwise() || getFuseNorm() || getFuseRotary(); }
  }];
}

#endif // TPC_TP_ATTRS_TD
