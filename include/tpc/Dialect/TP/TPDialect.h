// The tp dialect: its attributes (placements, mesh, strategies) and ops.
#ifndef TPC_DIALECT_TP_TPDIALECT_H
#define TPC_DIALECT_TP_TPDIALECT_H

#include "mlir/Bytecode/BytecodeOpInterface.h"
#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/BuiltinOps.h"
#include "mlir/IR/Dialect.h"
#include "mlir/IR/OpDefinition.h"
#include "mlir/IR/SymbolTable.h"
#include "mlir/Interfaces/InferTypeOpInterface.h"
#include "mlir/Interfaces/SideEffectInterfaces.h"

#include "TP/TPDialect.h.inc"
#include "TP/TPEnums.h.inc"
#include "TP/TPAttrInterfaces.h.inc"

#define GET_ATTRDEF_CLASSES
#include "TP/TPAttrs.h.inc"

#define GET_OP_CLASSES
#include "TP/TPOps.h.inc"

namespace tpc::tp {

/// Name of the module attribute that holds the mesh (#tp.mesh<tp = N>).
inline constexpr llvm::StringLiteral kMeshAttrName = "tp.mesh";
/// Name of the discardable attribute that attaches a module strategy to a layer op.
inline constexpr llvm::StringLiteral kStrategyAttrName = "tp.strategy";
/// What tp-propagate-layouts leaves for tp-insert-redistribute: the placement each operand
/// must have, and the placement a module hook gives the op's result.
inline constexpr llvm::StringLiteral kOperandLayoutsAttrName = "tp.operand_layouts";
inline constexpr llvm::StringLiteral kOutputLayoutAttrName = "tp.output_layout";
// What `tpc import` records of config.json on the module: the architecture and whether its
// embeddings are tied (for --plan auto), config.json's own base_model_tp_plan (JSON text),
// and the end-of-sequence ids generation stops at.
inline constexpr llvm::StringLiteral kHfModelTypeAttrName = "tp.hf_model_type";
inline constexpr llvm::StringLiteral kHfTiedAttrName = "tp.hf_tied";
inline constexpr llvm::StringLiteral kHfTpPlanAttrName = "tp.hf_tp_plan";
inline constexpr llvm::StringLiteral kEosTokenIdsAttrName = "tp.eos_token_ids";
/// Where a multimodal wrapper keeps its language model ("model.language_model."): the prefix
/// of the module names --plan auto writes; absent, "model.".
inline constexpr llvm::StringLiteral kHfBasePrefixAttrName = "tp.hf_base_prefix";
/// config.json's max_position_embeddings (an i64): the longest context the model was made
/// for, which bounds the default --max-model-len of analyze and of the binary.
inline constexpr llvm::StringLiteral kMaxPositionEmbeddingsAttrName =
    "tp.max_position_embeddings";
/// What tp-plan-arena decides: each stored result's offset in the activation arena
/// (`tp.arena`, one per result, in elements per token) and each function's arena size
/// (`tp.arena_size`, elements per token).
inline constexpr llvm::StringLiteral kArenaAttrName = "tp.arena";
inline constexpr llvm::StringLiteral kArenaSizeAttrName = "tp.arena_size";
/// What tp-plan-arena decides of the KV cache (an i64 on the module): tokens per block of the
/// paged cache, the unit its block tables and the runtime's allocator count in.
inline constexpr llvm::StringLiteral kKvBlockSizeAttrName = "tp.kv_block_size";
/// Marks the forward that splits the residual stream by tokens (sequence parallelism); a
/// module holds it beside the plain @forward. Its value (an i64, the mesh size) is the
/// dispatch rule, decided here once: that forward runs the token counts it divides evenly
/// (and not zero); the plain forward runs every other count. forwardFor, `tpc analyze` and
/// the runtime, which the lowering hands the number, all obey it.
inline constexpr llvm::StringLiteral kSequenceParallelAttrName = "tp.sequence_parallel";
/// The module's target (#tp.target), which buildProgram sets from the target's description.
inline constexpr llvm::StringLiteral kTargetAttrName = "tp.target";
/// What tp-assign-stages decides on a module with pipeline stages: the stage each op of a
/// forward runs in (`tp.stage`, an i64; a tp.transfer's is its `to`), and the decoder layers
/// of each stage, in order (`tp.stage_layers` on the module).
inline constexpr llvm::StringLiteral kStageAttrName = "tp.stage";
inline constexpr llvm::StringLiteral kStageLayersAttrName = "tp.stage_layers";

/// The placement a value's type carries as its encoding; null when it has none.
PlacementAttr getPlacement(mlir::Type type);
inline PlacementAttr getPlacement(mlir::Value value) { return getPlacement(value.getType()); }
/// The same tensor type with `placement` as its encoding.
mlir::RankedTensorType withPlacement(mlir::Type type, PlacementAttr placement);

/// Normalizes a possibly negative dim against a rank; -1 when out of range.
int64_t normalizeDim(int64_t dim, int64_t rank);

/// True when two placements lay out a tensor of this rank the same way (Shard(-2) and
/// Shard(0) are one placement of a matrix).
bool samePlacement(PlacementAttr a, PlacementAttr b, int64_t rank);

/// The HF module name an op models (its `module` attribute), or "" when it has none.
llvm::StringRef getModuleName(mlir::Operation *op);

/// The target recorded on a module; null when it has none.
TargetAttr getTarget(mlir::ModuleOp module);
/// The target a pass that depends on one needs; an error on the module naming `pass` when
/// none is set.
mlir::FailureOr<TargetAttr> requireTarget(mlir::ModuleOp module, llvm::StringRef pass);

/// The token counts a sequence-parallel forward runs: the positive multiples of this
/// number; none for a plain forward.
std::optional<int64_t> sequenceParallelTokens(mlir::func::FuncOp forward);
/// The forward of a decided program that runs a step of `tokens` tokens of `sequences`
/// sequences: the sequence-parallel one where the step is one sequence's and its rule accepts
/// the count, else the plain one.
mlir::func::FuncOp forwardFor(mlir::ModuleOp program, int64_t tokens, int64_t sequences = 1);

/// Whether every read of `param`, each use of each tp.weight op of it, satisfies `pred`;
/// false where something other than a tp.weight uses the parameter.
bool allReadsOf(ParamOp param, llvm::function_ref<bool(mlir::OpOperand &)> pred);

/// The storage type of a float element type (f32, bf16, f16); none for others.
std::optional<WeightType> weightTypeOf(mlir::Type elementType);
/// Bytes per element a weight of `type` takes (fractional for block types, scales included).
double bytesPerElement(WeightType type);
/// Elements per block: 1 for the float types, 32 or 256 for ggml's block types.
int64_t blockElements(WeightType type);
bool isQuantized(WeightType type);
/// Whether the CPU target holds weights of `type` as stored, its kernels reading them: a held
/// type of tpcrt/types.def (TPC_HELD_TYPE).
bool isHeldByCpu(WeightType type);

/// The size of the tp axis of the mesh recorded on a module, if any.
std::optional<int64_t> getMeshSize(mlir::ModuleOp module);
/// The pipeline stages of the module's mesh: its pp axis, 1 where it has none.
int64_t getPipelineStages(mlir::ModuleOp module);
/// The stage an op of a forward runs in: its tp.stage (a tp.fused's, its first member's);
/// 0 where it has none.
int64_t stageOf(mlir::Operation *op);
/// Whether stage `stage`'s ranks hold `param` (it lists the stage, or lists none).
bool inStage(ParamOp param, int64_t stage);
/// Sets `op`'s tp.stage.
void setStage(mlir::Operation *op, int64_t stage);
/// An op of no operand and one result (a tp.weight) placed where it is read: in the stage of
/// its readers, copied for each further stage that reads it; stage 0 where nothing does.
void placeWhereRead(mlir::Operation *op);
/// The decoder layer a module name is in: N in "...layers.N" or "...layers.N.anything".
std::optional<int64_t> layerIndexOf(llvm::StringRef module);
/// The mesh size the sharding passes need; an error on the module when tp-apply-plan has
/// not set one.
mlir::FailureOr<int64_t> requireMeshSize(mlir::ModuleOp module);

/// The per-token ops that end a forward (lm_head, the final norm, ...), from the returned
/// value back, each the only user of the one before: what generation needs for the last
/// token only. Empty when the forward does not end that way.
llvm::SmallVector<mlir::Operation *> lastTokenChain(mlir::func::FuncOp forward);

/// The linear that projects an attention operand (q, k or v), through the per-head ops
/// between them (rotary, Qwen3's q_norm/k_norm, Llama 4's L2 norm), which act on each head as they find it;
/// those ops go to `between` where given. Null where another op makes the operand.
LinearOp headProjection(mlir::Value operand,
                        llvm::SmallVectorImpl<mlir::Operation *> *between = nullptr);

/// The type of a ranked tensor value (every value of the tp ops is one).
inline mlir::RankedTensorType typeOf(mlir::Value value) {
  return llvm::cast<mlir::RankedTensorType>(value.getType());
}
/// The rank of a ranked tensor value.
inline int64_t rankOf(mlir::Value value) { return typeOf(value).getRank(); }
/// Columns of a [tokens, features] value (1 for a vector of tokens).
inline int64_t columns(mlir::Value value) {
  return rankOf(value) == 2 ? typeOf(value).getDimSize(1) : 1;
}

/// The dim a Shard or a StridedShard splits, as written (normalize the placement first for
/// a dim counted from the front); -1 for a placement that splits none.
int64_t splitDim(PlacementAttr placement);

/// The parameter a value is the tp.weight of; null where another op makes it.
ParamOp paramOf(mlir::Value value);

/// Whether a value is split by tokens: sharded on its first (token) dim, so that each rank
/// holds tokens / tp rows of it (sequence parallelism).
bool isSplitByTokens(mlir::Value value);

} // namespace tpc::tp

#endif // TPC_DIALECT_TP_TPDIALECT_H
