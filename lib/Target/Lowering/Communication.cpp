// The patterns of communication: collectives (tp.all_reduce, tp.all_gather,
// tp.reduce_scatter, tp.all_to_all) and the local reshards between placements. A collective
// names the module it belongs to, for the runtime's trace; a split of features is spelled as
// its global blocks, so uneven pieces go back where they belong.
#include "Lowering.h"

#include "tpc/Dialect/TP/Sums.h"

#include "llvm/ADT/TypeSwitch.h"

using namespace mlir;
using namespace tpc::tp;
using namespace tpc::target::lowering;

namespace {

/// A collective's last argument: the module it belongs to, or null.
void addModule(Call &c, Operation *op) {
  StringRef module = getModuleName(op);
  module.empty() ? c.text("module", "nullptr") : c.string("module", module);
}

/// A collective of rows (dim 0) or of feature blocks (dim 1): `[x, rows, cols|blocks, out,
/// module]`, `blocks` being those of the feature-split side (`sharded`).
LogicalResult lowerRowsOrColumns(FunctionLowering &l, Operation *op, int64_t dim,
                                 StringRef rowsName, StringRef columnsName, Value sharded,
                                 int64_t global) {
  Value in = op->getOperand(0);
  bool rows = normalizeDim(dim, 2) == 0;
  return l.lowerInto(op, rows ? rowsName : columnsName, [&](Call &c, Value out) {
    c.value("x", l.ref(in)).rows("rows", in);
    rows ? c.integer("cols", columns(in))
         : c.text("blocks", blocksOf(placementOf(sharded), global));
    c.value("out", out);
    addModule(c, op);
  });
}

LogicalResult lower(FunctionLowering &l, AllReduceOp reduce) {
  // A sum of squares is all-reduced in fp32 on every target (tpc/Dialect/TP/Sums.h).
  const char *call = holdsSums(reduce.getInput()) ? "allReduceSums" : "allReduce";
  return l.lowerInto(reduce, call, [&](Call &c, Value out) {
    c.input(reduce.getInput()).value("out", out);
    addModule(c, reduce);
  });
}

LogicalResult lower(FunctionLowering &l, AllGatherOp gather) {
  // tp-greedy-argmax's mark: the runtime decides each step between the gather and the argmax.
  return lowerRowsOrColumns(l, gather, gather.getDim(), "allGatherRows",
                            gather.getArgmaxIfGreedy() ? "allGatherLogits" : "allGatherColumns",
                            gather.getInput(), columns(gather.getResult()));
}

LogicalResult lower(FunctionLowering &l, ReduceScatterOp scatter) {
  return lowerRowsOrColumns(l, scatter, scatter.getDim(), "reduceScatterRows",
                            "reduceScatterColumns", scatter.getResult(),
                            columns(scatter.getInput()));
}

LogicalResult lower(FunctionLowering &l, AllToAllOp a2a) {
  bool rowsToColumns = normalizeDim(a2a.getSplitDim(), 2) == 1;
  Value sharded = rowsToColumns ? a2a.getResult() : a2a.getInput();
  // The feature dim's global size: what the token-split side holds whole.
  int64_t global = columns(rowsToColumns ? a2a.getInput() : a2a.getResult());
  return l.lowerInto(a2a, "allToAll", [&](Call &c, Value out) {
    c.value("x", l.ref(a2a.getInput()))
        .value("tokens", l.n)
        .text("blocks", blocksOf(placementOf(sharded), global))
        .boolean("rowsToColumns", rowsToColumns)
        .value("out", out);
    addModule(c, a2a);
  });
}

/// Replicate to Partial, to token-split rows or to feature blocks; token-split rows or
/// feature blocks to Partial.
LogicalResult lower(FunctionLowering &l, LocalReshardOp reshard) {
  Value in = reshard.getInput();
  PlacementAttr src = placementOf(in), dst = placementOf(reshard.getResult());
  bool fromReplicate = isa<ReplicateAttr>(src), toPartial = isa<PartialAttr>(dst);
  // What the call reads after `in`: its rows or the forward's tokens (where one side is
  // split by them), then its columns or the blocks of the side split by features.
  StringRef name;
  bool tokens = false;
  PlacementAttr blocks;
  int64_t global = columns(in);
  if (fromReplicate && toPartial) {
    name = "partialFromReplicate";
  } else if (fromReplicate && isSplitByTokens(reshard.getResult())) {
    name = "takeRows";
    tokens = true;
  } else if (fromReplicate) {
    name = "takeColumns";
    blocks = dst;
  } else if (toPartial && isSplitByTokens(in)) {
    name = "partialFromRows";
    tokens = true;
  } else if (toPartial) {
    name = "partialFromColumns";
    blocks = src;
    global = columns(reshard.getResult());
  } else {
    return l.unsupported(reshard, "a reshard from " + src.str() + " to " + dst.str());
  }
  return l.lowerInto(reshard, name, [&](Call &c, Value out) {
    c.value("x", l.ref(in));
    if (tokens)
      c.value(name == "takeRows" ? "rows" : "tokens", l.n);
    else
      c.rows("rows", in);
    blocks ? c.text("blocks", blocksOf(blocks, global)) : c.integer("cols", columns(in));
    c.value("out", out);
  });
}

/// A transfer between pipeline stages: a send in the stage it leaves, a receive into its
/// arena slot in the stage it reaches.
LogicalResult lower(FunctionLowering &l, TransferOp transfer) {
  Value in = transfer.getInput();
  if (l.loweredStage() == transfer.getFrom()) {
    // tp-greedy-argmax's mark: the runtime sends each row's argmax on a greedy step.
    Call c = l.call(transfer, transfer.getArgmaxIfGreedy() ? "sendLogitsToStage" : "sendToStage");
    c.input(in).integer("stage", transfer.getTo());
    addModule(c, transfer);
    c.emit();
    return success();
  }
  return l.lowerInto(transfer, "recvFromStage", [&](Call &c, Value out) {
    c.value("out", out)
        .rows("rows", transfer.getResult())
        .integer("cols", columns(transfer.getResult()))
        .integer("stage", transfer.getFrom());
    addModule(c, transfer);
  });
}

} // namespace

std::optional<LogicalResult> tpc::target::lowering::lowerCommunication(FunctionLowering &l,
                                                                       Operation *op) {
  return TypeSwitch<Operation *, std::optional<LogicalResult>>(op)
      .Case<AllReduceOp, AllGatherOp, ReduceScatterOp, AllToAllOp, LocalReshardOp, TransferOp>(
          [&](auto op) { return lower(l, op); })
      .Default([](Operation *) { return std::nullopt; });
}
