// Where transformers' own tensor parallelism refuses a plan or fails in its forward, for
// `tpc analyze` (transformersFailure in Report.h). Each rule is what transformers 5.17's
// distributed/tensor_parallel.py and modeling files do, as tried on CPU with Gloo.
#include "tpc/Analysis/Report.h"

#include "tpc/Analysis/Redistribute.h"
#include "tpc/Dialect/TP/TPDialect.h"
#include "tpc/Plan/Matcher.h"
#include "tpc/Plan/Plan.h"
#include "tpc/Plan/Strategy.h"

#include "llvm/Support/FormatVariadic.h"

using namespace mlir;
using namespace tpc;
using namespace tpc::tp;

namespace {

/// The strategies transformers 5.17's ParallelInterface registers (tpc's registry without
/// embedding_colwise and local_params, plus the Mega-MoE ones tpc refuses).
constexpr StringLiteral kTransformersStyles[] = {
    "embedding_rowwise",   "colwise_gather_output", "colwise",
    "colwise_rep",         "rowwise",               "rowwise_split_input",
    "rowwise_rep",         "packed_colwise",        "packed_rowwise",
    "sequence_parallel",   "grouped_gemm",          "ep_router",
    "megamoe_router",      "moe_tp_experts",        "megamoe_experts",
    "moe_identity_expert", "mla_kv_a_proj",         "replicated_with_grad_allreduce",
    "all_reduce"};

/// A built-in strategy of tpc that transformers' registry lacks; a custom one is the user's
/// own TensorParallelLayer there, which tpc cannot judge.
bool unknownToTransformers(StringRef name) {
  static const plan::StrategyRegistry builtin = plan::StrategyRegistry::builtin();
  return builtin.lookup(name) && !llvm::is_contained(kTransformersStyles, name);
}

/// The dim a parameter's placement splits, counted from the front; -1 where it splits none.
int64_t splitDim(ParamOp param) {
  PlacementAttr placement = param.getPlacementAttr();
  if (!placement)
    return -1;
  placement = normalizePlacement(placement, param.getTensorType().getRank());
  if (auto shard = dyn_cast<ShardAttr>(placement))
    return shard.getDim();
  return -1;
}

bool gathersColwise(StringRef strategy) {
  return strategy == "colwise_gather_output" || strategy == "colwise_rep";
}

/// At load (apply_tensor_parallelism): the style names, then each parameter's validation.
std::string loadRefusal(ModuleOp planned, int64_t tp) {
  std::string refusal;
  auto refuse = [&](std::string reason) {
    if (refusal.empty())
      refusal = std::move(reason);
  };
  auto gatherRefusal = [&](StringRef name, StringRef strategy, int64_t features) {
    return llvm::formatv("refuses to load it at tp {0}: {1} ({2}) has {3} output features, "
                         "which tp {0} does not divide, and its colwise output is gathered "
                         "from even pieces only (ValueError: ... must be divisible by the "
                         "tensor parallel size ({0}) when gathering a colwise output)",
                         tp, plan::genericName(name), strategy, features)
        .str();
  };
  planned.walk([&](Operation *op) {
    StringRef name;
    if (auto param = dyn_cast<ParamOp>(op))
      name = param.getStrategy().value_or("");
    else if (auto strategy = op->getAttrOfType<StrategyAttr>(kStrategyAttrName))
      name = strategy.getName();
    if (unknownToTransformers(name))
      refuse(llvm::formatv("refuses the plan: '{0}' is not one of its tensor-parallel styles "
                           "(ValueError: Unsupported tensor parallel styles)",
                           name));
  });
  for (ParamOp param : planned.getOps<ParamOp>()) {
    StringRef strategy = param.getStrategy().value_or("");
    int64_t dim = splitDim(param);
    int64_t size = dim < 0 ? 0 : param.getTensorType().getDimSize(dim);
    if (gathersColwise(strategy) && size % tp)
      refuse(gatherRefusal(plan::parentModule(param.getSymName()), strategy, size));
    if (strategy == "grouped_gemm" && dim == 0 && size % tp)
      refuse(llvm::formatv("refuses to load it at tp {0}: {1} (grouped_gemm) holds {2} "
                           "experts, which tp {0} does not divide (ValueError: Cannot evenly "
                           "shard {2} experts across {0} expert-parallel ranks)",
                           tp, plan::genericName(param.getSymName()), size));
  }
  // A tied lm_head validates the embedding table it reads under its own strategy: its
  // output features are the table's rows.
  planned.walk([&](Operation *op) {
    auto strategy = op->getAttrOfType<StrategyAttr>(kStrategyAttrName);
    if (!strategy || !gathersColwise(strategy.getName()) || !isa<LinearOp, EmbeddingOp>(op))
      return;
    auto table = cast<RankedTensorType>(op->getOperand(1).getType());
    int64_t features = table.getDimSize(isa<EmbeddingOp>(op) ? 1 : 0);
    if (features % tp)
      refuse(gatherRefusal(getModuleName(op), strategy.getName(), features));
  });
  return refusal;
}

/// Whether transformers hands the next module only this rank's torch.chunk piece of the
/// linear's output features: weight split on them and a hook that keeps the output local
/// (colwise; colwise_gather_output gathers it whole).
bool outputStaysSplit(LinearOp linear) {
  ParamOp param = paramOf(linear.getWeight());
  auto strategy = linear->getAttrOfType<StrategyAttr>(kStrategyAttrName);
  return param && splitDim(param) == 0 && strategy && strategy.getOutput() &&
         !isa<ReplicateAttr>(strategy.getOutput());
}

/// In the forward: an ep_router over experts tp does not divide, experts split into pieces
/// grouped_mm cannot take, and an attention whose q, k or v arrive as colwise pieces that
/// are not whole heads, or whose heads do not pair up (each modeling file views q, k and v
/// as view(*input_shape, -1, head_dim), so a rank's head count is its piece over head_dim).
std::string forwardFailure(ModuleOp planned, int64_t tp) {
  std::string reason;
  auto fail = [&](const llvm::formatv_object_base &why) {
    reason = llvm::formatv("fails in the forward at tp {0}: {1}", tp, why.str());
    return WalkResult::interrupt();
  };
  planned.walk([&](Operation *op) -> WalkResult {
    if (auto router = dyn_cast<RouterOp>(op)) {
      auto strategy = op->getAttrOfType<StrategyAttr>(kStrategyAttrName);
      int64_t experts = cast<RankedTensorType>(router.getType()).getDimSize(1);
      if (strategy && strategy.getName() == "ep_router" && experts % tp)
        return fail(llvm::formatv("{0} (ep_router) routes over {1} experts, which tp {2} "
                                  "does not divide (ValueError: num_experts must be "
                                  "divisible by ep_size)",
                                  plan::genericName(getModuleName(op)), experts, tp));
      // ep_router's output hook unpacks (logits, scores, indices, ...); Llama4Router returns
      // (scores, logits).
      if (strategy && strategy.getName() == "ep_router" && router.getSigmoid())
        return fail(llvm::formatv("{0} (ep_router) expects the router to return its logits, "
                                  "scores and expert indices, and Llama4Router returns two "
                                  "tensors (ValueError: not enough values to unpack "
                                  "(expected at least 3, got 2))",
                                  plan::genericName(getModuleName(op))));
      return WalkResult::advance();
    }
    if (auto experts = dyn_cast<ExpertsOp>(op)) {
      // Experts split on their intermediate size (packed_colwise gate_up, rowwise down) run
      // through transformers' default experts implementation, grouped_mm, whose torch kernel
      // takes only rows of a multiple of 16 bytes: a rank's piece of the intermediate size
      // must be one, evenly split or not.
      ParamOp down = paramOf(experts.getDown());
      if (!down || splitDim(down) != 2)
        return WalkResult::advance();
      RankedTensorType type = down.getTensorType();
      int64_t inter = type.getDimSize(2), bytes = type.getElementTypeBitWidth() / 8;
      for (int64_t rank = 0; rank < tp; ++rank)
        if (int64_t piece = plan::chunkSize(inter, tp, rank); piece * bytes % 16)
          return fail(llvm::formatv(
              "{0} splits the experts' intermediate size {1} over {2} ranks, so rank {3} "
              "holds {4} of it, rows of {5} bytes in {6}, and transformers' default experts "
              "implementation (grouped_mm) takes only multiples of 16 (RuntimeError: strides "
              "should be multiple of 16 bytes)",
              plan::genericName(getModuleName(op)), inter, tp, rank, piece, piece * bytes,
              type.getElementType()));
      return WalkResult::advance();
    }
    auto attention = dyn_cast<AttentionOp>(op);
    if (!attention)
      return WalkResult::advance();
    int64_t heads = attention.getNumHeads(), kvHeads = attention.getNumKvHeads(),
            headDim = attention.getHeadDim();
    if (attention.getValueHeadDim()) {
      // DeepSeek's MLA: the query heads (q_proj or q_b_proj) and the key/value heads
      // (kv_b_proj, cut per head into the key's nope part and the value) must split whole
      // and alike, or its view(..., -1, head) and the attention's shapes disagree.
      auto slice = attention.getValue().getDefiningOp<HeadSliceOp>();
      LinearOp q = headProjection(attention.getQuery());
      LinearOp kv = slice ? slice.getInput().getDefiningOp<LinearOp>() : LinearOp();
      if (!q || !kv)
        return WalkResult::advance();
      int64_t kvHead = slice.getHeadDim();
      for (int64_t rank = 0; rank < tp; ++rank) {
        int64_t qPiece = outputStaysSplit(q) ? plan::chunkSize(heads * headDim, tp, rank)
                                             : heads * headDim;
        int64_t kvPiece = outputStaysSplit(kv) ? plan::chunkSize(heads * kvHead, tp, rank)
                                               : heads * kvHead;
        if (qPiece % headDim || kvPiece % kvHead || qPiece / headDim != kvPiece / kvHead)
          return fail(llvm::formatv(
              "in {0}, rank {1} holds {2} features of the query heads of {3} and {4} of the "
              "key/value heads of {5}: not the same whole heads, so the attention's view and "
              "shapes disagree",
              plan::genericName(getModuleName(attention)), rank, qPiece, headDim, kvPiece,
              kvHead));
      }
      return WalkResult::advance();
    }
    struct Operand {
      LinearOp projection;
      int64_t heads;
      bool split;
      StringRef what;
    };
    auto operand = [&](Value v, int64_t count, StringRef what) {
      LinearOp projection = headProjection(v);
      return Operand{projection, count, projection && outputStaysSplit(projection), what};
    };
    Operand operands[] = {operand(attention.getQuery(), heads, "query head"),
                          operand(attention.getKey(), kvHeads, "KV head"),
                          operand(attention.getValue(), kvHeads, "KV head")};
    if (llvm::none_of(operands, [](const Operand &o) { return o.split; }))
      return WalkResult::advance();
    auto features = [&](const Operand &o, int64_t rank) {
      int64_t all = o.heads * headDim;
      return o.split ? plan::chunkSize(all, tp, rank) : all;
    };
    for (int64_t rank = 0; rank < tp; ++rank) {
      for (const Operand &o : operands)
        if (int64_t piece = features(o, rank); piece % headDim)
          return fail(llvm::formatv(
              "{0} (colwise) splits {1} {2}{3} of {4} features over {5} ranks, so rank {6} "
              "holds {7} features, not whole heads, and the attention's view(..., -1, {4}) raises "
              "(RuntimeError: shape '[1, L, -1, {4}]' is invalid for input of size {7}L)",
              plan::genericName(getModuleName(o.projection)), o.heads, o.what,
              o.heads == 1 ? "" : "s", headDim, tp, rank, piece));
      // repeat_kv turns each KV head into num_heads / num_kv_heads of them.
      int64_t q = features(operands[0], rank) / headDim,
              k = features(operands[1], rank) / headDim,
              v = features(operands[2], rank) / headDim;
      if (q != k * (heads / kvHeads) || k != v)
        return fail(llvm::formatv(
            "in {0}, rank {1} holds {2} query heads but {3} KV heads of k and {4} of v, where "
            "each KV head serves {5} query heads (num_heads {6} / num_kv_heads {7}), so the "
            "attention's shapes disagree (RuntimeError: Number of heads in key and value must "
            "divide the number of heads in query)",
            plan::genericName(getModuleName(attention)), rank, q, k, v, heads / kvHeads,
            heads, kvHeads));
    }
    return WalkResult::advance();
  });
  return reason;
}

} // namespace

std::string tpc::transformersFailure(ModuleOp planned) {
  int64_t tp = getMeshSize(planned).value_or(1);
  if (tp == 1)
    return "";
  std::string reason = loadRefusal(planned, tp);
  return reason.empty() ? forwardFailure(planned, tp) : reason;
}
