// Passes of the tpc pipeline (docs/architecture.md), each runnable alone in tpc-opt.
#ifndef TPC_TP_PASSES_TD
#define TPC_TP_PASSES_TD

include "mlir/Pass/PassBase.td"

def TPApplyPlan : Pass<"tp-apply-plan", "::mlir::ModuleOp"> {
  let summary = "Match a tp_plan's rules, place parameters and attach module strategies";
  let description = [{
    Reads a transformers-style plan (`{pattern: strategy}`, or a config.json carrying
    `base_model_tp_plan`), matches its rules against the module's parameters and HF modules
    with transformers' rules, and records the outcome in the IR: each `tp.param` gets its
    `placement` and `strategy`, each layer op of a planned module a `tp.strategy` attribute
    with the layouts the strategy imposes, and the module its `tp.mesh`. Unknown strategies,
    impossible placements and a tp size below 1 are errors; rules that match nothing and
    parameters no rule covers are warnings.
  }];
  let dependentDialects = ["::tpc::tp::TPDialect"];
  let options = [
    Option<"planPath", "plan", "std::string", /*default=*/"\"\"",
           "plan.json, or a config.json with base_model_tp_plan">,
    Option<"strategiesPath", "strategies", "std::string", /*default=*/"\"\"",
           "a JSON file of custom strategies">,
    Option<"tpSize", "tp-size", "int64_t", /*default=*/"0",
           "ranks on the tp axis (0: keep the module's tp.mesh)">,
    Option<"ppSize", "pp-size", "int64_t", /*default=*/"0",
           "pipeline stages (0: keep the module's tp.mesh, else 1)">,
  ];
}

def TPAssignStages : Pass<"tp-assign-stages", "::mlir::ModuleOp"> {
  let summary = "Place the decoder layers on the mesh's pipeline stages";
  let description = [{
    On a module whose mesh has pp > 1, gives every op of each forward a `tp.stage`: the
    decoder layers in consecutive runs, `split` of them per stage where given, else balanced
    by the cost model (weight bytes each decode step reads, KV bytes at `kv-tokens` of
    context, and multiply-adds), the embedding on the first stage, the final norm and lm_head
    on the last. Parameters get the `stages` that read them (a tied embedding both ends), the
    module `tp.stage_layers`. Refuses, naming the model, more stages than layers, a split
    that does not match, and a forward where a value of a layer is read in another stage by
    anything but its last op (a split that would cut a layer's internals). Does nothing at
    pp 1.
  }];
  let options = [
    ListOption<"split", "split", "int64_t",
               "decoder layers per stage (default: balanced by the cost model)">,
    Option<"kvTokens", "kv-tokens", "int64_t", /*default=*/"2048",
           "the context the balance prices each layer's KV reads at">,
  ];
}

def TPInsertTransfers : Pass<"tp-insert-transfers", "::mlir::ModuleOp"> {
  let summary = "Send the values that cross pipeline stages";
  let description = [{
    After tp-partition, on a module with stages: where a value defined in one stage is read
    in a later one, `tp.transfer`s right after its producer carry it there one stage at a
    time (each rank's local piece to the rank of the same tp index in the next stage; a stage
    between passes it on), and the forward's result goes back to stage 0, which samples.
    Does nothing at pp 1.
  }];
}

def TPLastToken : Pass<"tp-last-token", "::mlir::ModuleOp"> {
  let summary = "Compute the forward's output for the last token only";
  let description = [{
    Generation needs the logits of the last token. Walking back from what the forward
    returns through ops that treat each token on its own (lm_head, the final norm,
    activations), this inserts a `tp.last_token` where that chain begins, so those ops, and
    any collective they need, run on one row instead of the whole prompt.
  }];
  let dependentDialects = ["::tpc::tp::TPDialect"];
}

def TPPropagateLayouts : Pass<"tp-propagate-layouts", "::mlir::ModuleOp"> {
  let summary = "Give every value a placement, from the plan's hooks and each op's rule";
  let description = [{
    Walks the graph in order. Parameters keep the plan's placements; each op's sharding rule
    (DTensor's) says what placement it needs of its operands and what it computes, after a
    module's input hook has applied; a module's output hook gives its result the strategy's
    output layout. Results get their placement as the type's encoding; ops record the
    placements their operands must have (`tp.operand_layouts`) and any output hook
    (`tp.output_layout`) for tp-insert-redistribute. Before that, k/v projections of
    attention with fewer KV heads than tp (tp a multiple of them) are rewritten to tp virtual
    KV heads. Splits that cannot work (heads, KV heads, experts, a dim smaller than tp) are
    errors naming the module, dim, size and tp.

    With sequence parallelism the residual stream is split by tokens: the embedding's output
    and the outputs of modules that reduce a Partial become Shard(0), so those all_reduces
    become reduce_scatters and the next colwise input an all_gather. `auto` turns it on when
    the plan names sequence_parallel; `off` also ignores those entries, as the fallback for
    token counts tp does not divide (decode steps, short prompts).
  }];
  let dependentDialects = ["::tpc::tp::TPDialect"];
  let options = [
    Option<"sequenceParallel", "sequence-parallel", "std::string", /*default=*/"\"auto\"",
           "auto, on or off: split the residual stream by tokens (Shard(0))">,
  ];
}

def TPInsertRedistribute : Pass<"tp-insert-redistribute", "::mlir::ModuleOp"> {
  let summary = "Materialize tp.redistribute wherever a producer's placement is not what a consumer needs";
  let description = [{
    Reads what tp-propagate-layouts recorded: after each op with an output hook, a
    redistribution to the hooked layout; before each operand whose placement differs from
    the one required, a redistribution (shared by consumers that need the same one).
  }];
  let dependentDialects = ["::tpc::tp::TPDialect"];
}

def TPFoldRedistribute : Pass<"tp-fold-redistribute", "::mlir::ModuleOp"> {
  let summary = "Compose, cancel and merge redistributions";
  let description = [{
    - a chain of two redistributions becomes one when the cost model says it is cheaper:
      (P->R)(R->S(d)) is a reduce_scatter, (S(d)->R)(R->S(d)) nothing;
    - Partials joined by a sum share one reduce: (P->X) a + (P->X) b = (P->X)(a + b);
    - a redistribution whose consumers all take its source placement as well disappears;
    - a gather after a colwise linear whose data only reaches split-input rowwise linears
      through head- or block-aligned ops is removed by sharding the colwise weight as a
      strided shard of those blocks (transformers' Phi3 plan: fused qkv and gate_up).
  }];
  let dependentDialects = ["::tpc::tp::TPDialect"];
}

def TPLowerRedistribute : Pass<"tp-lower-redistribute", "::mlir::ModuleOp"> {
  let summary = "Lower tp.redistribute to collectives and local reshards";
  let description = [{
    Each redistribution becomes the planner's cheapest sequence of tp.all_reduce,
    tp.all_gather, tp.reduce_scatter, tp.all_to_all and tp.local_reshard.
  }];
  let dependentDialects = ["::tpc::tp::TPDialect"];
}

def TPPartition : Pass<"tp-partition", "::mlir::ModuleOp"> {
  let summary = "Global shapes to per-rank local shapes; shard descriptors for the loader";
  let description = [{
    Every sharded dim becomes its torch.chunk piece (ceil(n / tp), padded on trailing ranks),
    head counts are divided by tp, slices of strided shards move to local offsets, and every
    sharded parameter records in `shard` which rows, columns or blocks of the HF tensor this
    rank loads.
  }];
  let dependentDialects = ["::tpc::tp::TPDialect"];
}

//===----------------------------------------------------------------------===//
// Decisions of code generation: each pass writes what it decides into the IR, where the
// lowering of every target and `tpc analyze` read it.
//===----------------------------------------------------------------------===//

def TPElideCollectives : Pass<"tp-elide-collectives", "::mlir::ModuleOp"> {
  let summary = "On a mesh of one rank, remove every collective and local reshard";
  let description = [{
    A collective over one rank moves nothing, and is not a copy either: each collective and
    local reshard is replaced by its input. A placement on one rank says nothing, so value
    types lose their encodings. On a larger mesh the pass does nothing.
  }];
  let dependentDialects = ["::tpc::tp::TPDialect"];
}

def TPGreedyArgmax : Pass<"tp-greedy-argmax", "::mlir::ModuleOp"> {
  let summary = "Mark the gather of the logits that a greedy step can skip";
  let description = [{
    A forward that ends in the logits split by vocabulary (lm_head colwise, its
    `colwise_gather_output` gather) gathers every rank's columns of every row, which for a
    large vocabulary is most of a decode step's traffic (Gemma 3's 262k logits). A greedy step
    needs only each row's argmax: every rank's largest logit and its id are enough. Where the
    module's target can do that (`#tp.target`'s `greedy_argmax`), the pass sets
    `argmax_if_greedy` on a forward's returned 2-D all_gather of columns; the program then
    gathers the (logit, id) pairs on a step whose sampled rows are all greedy (no penalty, no
    logprobs, no dumped logits) and the rows on any other step. `tpc analyze` prices the pairs
    unless told the steps sample (`--sampled`).
  }];
  let dependentDialects = ["::tpc::tp::TPDialect"];
}

def TPFuse : Pass<"tp-fuse", "::mlir::ModuleOp"> {
  let summary = "Group ops that a target computes as one generated kernel into tp.fused";
  let description = [{
    Which chains fuse is the target's choice, read from the module's `#tp.target` (the CUDA
    target takes all three; the CPU target none, its runtime calls being BLAS and vectorized
    loops); the options can only leave kinds out, and alone decide on a module without a
    target:
    - `elementwise`: an elementwise op whose one user is an elementwise op of the same shape
      is computed inside that user's kernel, never stored;
    - `norm`: an rms_norm right after an elementwise chain (with only tp.weight ops in
      between) is computed by the chain's kernel, which stores both;
    - `rotary`: the rotary embeddings of one attention's query and key, with the same
      frequencies and rows, are one kernel.
  }];
  let dependentDialects = ["::tpc::tp::TPDialect"];
  let options = [
    Option<"elementwise", "elementwise", "bool", /*default=*/"true",
           "fuse chains of elementwise ops">,
    Option<"norm", "norm", "bool", /*default=*/"true",
           "fuse an rms_norm into the elementwise chain before it">,
    Option<"rotary", "rotary", "bool", /*default=*/"true",
           "fuse the query and key rotaries of an attention">,
  ];
}

def TPGroupLinears : Pass<"tp-group-linears", "::mlir::ModuleOp"> {
  let summary = "Group linears that read one input into a tp.fused linears unit";
  let description = [{
    Linears of one input (q, k and v; gate and up) whose weights are parameters, with biases
    on all or none (and none added on rank 0 only, as a Partial result's is), become one
    unit: the target places their weights one after the other and their outputs one after
    the other, so a one-row input is one GEMM. A parameter belongs to one group at most, the
    same in every function of the module. Inputs split by tokens are left alone: their rows
    are not the arena's row stride. A module whose `#tp.target` does not group linears (the
    CPU's: each weight has its own buffer) is left alone.
  }];
  let dependentDialects = ["::tpc::tp::TPDialect"];
}

def TPWeightStorage : Pass<"tp-weight-storage", "::mlir::ModuleOp"> {
  let summary = "Decide the type each weight is held in by the target's binary";
  let description = [{
    Sets every parameter's `storage` to what the binary holds, from its stored type (the
    checkpoint's, which `tpc import` recorded) and the module's `#tp.target`:
    - a target whose activations are not f32 (the GPU's bf16) holds every weight in the
      activation type;
    - the CPU target keeps a matrix in its stored type (f32, bf16, f16, and ggml's q8_0,
      q4_0, q4_1, q5_0, q5_1, q4_k, q5_k, q6_k and mxfp4 blocks) where every use of it is a
      `tp.linear` weight or a `tp.embedding` table, the kernels that read those types and
      widen or decode them to fp32 in registers; every other parameter (norms, biases,
      routers, experts) is held in f32. A block matrix whose split along its input
      dimension would cut its blocks at this tp size is held in bf16 instead, with a warning
      that names the weights, the memory it costs, and the tp sizes that would keep the
      blocks whole.
    `weights` asks for a type instead of the stored one (`f32`: today's fp32 weights;
    `bf16`, `f16`: rounded to nearest even at load), for the matrices the target can hold so.
    The attribute is left off where the held type is the tensor's element type.
  }];
  let dependentDialects = ["::tpc::tp::TPDialect"];
  let options = [
    Option<"weights", "weights", "std::string", /*default=*/"\"stored\"",
           "the type of the matrices: stored (the checkpoint's), f32, bf16 or f16">,
  ];
}

def TPPlanArena : Pass<"tp-plan-arena", "::mlir::ModuleOp"> {
  let summary = "Give every stored value an offset in the activation arena, by lifetime";
  let description = [{
    First fit over lifetimes, in elements per token (a value of [n, c] takes c per token, so
    the arena for n tokens is its size times n). A tp.fused unit is one step: what it reads
    lives until it runs; its results are placed when it runs, a `linears` unit's one after
    the other. Every offset is a multiple of the module's `#tp.target` `arena_align` (8 on
    the CUDA target: each slot starts at 16 bytes for any token count, as cuBLASLt's fastest
    kernels ask; 1 without a target). Records `tp.arena = array<i64: ...>` (one offset per
    result) on every op whose results live in the arena, and `tp.arena_size` on each
    function.

    The other memory a forward touches, the KV cache, is paged: a module with attention gets
    `tp.kv_block_size` (tokens per block of every layer's cache), which the runtime's cache
    and its scheduler's block tables use.
  }];
  let options = [
    Option<"kvBlockSize", "kv-block-size", "int64_t", /*default=*/"16",
           "tokens per block of the paged KV cache (vLLM's default)">,
  ];
  let dependentDialects = ["::tpc::tp::TPDialect"];
}

#endif // TPC_TP_PASSES_TD
