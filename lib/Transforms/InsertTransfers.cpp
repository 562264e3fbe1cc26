// tp-insert-transfers: the values that cross pipeline stages, sent. Runs after tp-partition,
// where a value's type is what one rank holds: every stage has the same tp size, so tp rank r
// of one stage sends its piece, whatever its placement, to tp rank r of the next. The ops the
// passes after tp-assign-stages made (collectives, reshards, tp.last_token) run where their
// operands are made.
#include "tpc/Transforms/Passes.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/Builders.h"

#include <map>

namespace tpc::tp {
#define GEN_PASS_DEF_TPINSERTTRANSFERS
#include "TP/TPPasses.h.inc"
} // namespace tpc::tp

using namespace mlir;
using namespace tpc::tp;

namespace {

/// Gives a stage to the ops a pass made after tp-assign-stages: the latest of its operands'
/// stages, so a collective runs where its operand is made; an op of no such operand (a
/// weight) where it is read, a copy for each stage that reads it.
void completeStages(Block &body) {
  for (Operation &op : body) {
    if (op.hasAttr(kStageAttrName) || op.getNumOperands() == 0)
      continue;
    int64_t stage = 0;
    for (Value operand : op.getOperands())
      if (Operation *producer = operand.getDefiningOp())
        stage = std::max(stage, stageOf(producer));
    setStage(&op, stage);
  }
  for (Operation &op : llvm::make_early_inc_range(body))
    if (!op.hasAttr(kStageAttrName) && op.getNumOperands() == 0 && op.getNumResults() == 1)
      placeWhereRead(&op);
}

struct TPInsertTransfersPass : tpc::tp::impl::TPInsertTransfersBase<TPInsertTransfersPass> {
  void runOnOperation() override {
    ModuleOp module = getOperation();
    if (getPipelineStages(module) == 1)
      return;
    for (auto forward : module.getOps<func::FuncOp>()) {
      Block &body = forward.getBody().front();
      completeStages(body);
      // Rank 0 samples: the forward's result goes back to the first stage.
      setStage(body.getTerminator(), 0);
      for (Operation &op : llvm::make_early_inc_range(body))
        if (!isa<TransferOp>(op) && failed(send(op)))
          return signalPassFailure();
    }
  }

  /// The transfers of `op`'s results to the stages that read them, right after it.
  LogicalResult send(Operation &op) {
    int64_t from = stageOf(&op);
    OpBuilder builder(op.getContext());
    builder.setInsertionPointAfter(&op);
    auto module = op.getAttrOfType<StringAttr>("module");
    for (Value result : op.getResults()) {
      std::map<int64_t, SmallVector<OpOperand *>> readers;
      for (OpOperand &use : result.getUses())
        if (int64_t to = stageOf(use.getOwner()); to != from)
          readers[to].push_back(&use);
      if (readers.empty())
        continue;
      // Back to an earlier stage: only the forward's result, to the first stage.
      if (readers.begin()->first < from) {
        auto [to, uses] = *readers.begin();
        if (to != 0 || uses.size() != 1 || !isa<func::ReturnOp>(uses.front()->getOwner()))
          return op.emitError() << "a value of pipeline stage " << from
                                << " is read in the earlier stage " << to;
        auto back = TransferOp::create(builder, op.getLoc(), result, from, 0, module);
        setStage(back, 0);
        uses.front()->set(back.getResult());
        readers.erase(readers.begin());
      }
      // Forward, one stage at a time: a value read two stages on passes through the stage
      // between. Each stage then sends only to the next, each pair of ranks meets its
      // messages in block order, and a stage that holds its sends until its forward is done
      // never waits on a later stage that waits on it.
      Value at = result;
      int64_t last = readers.empty() ? from : readers.rbegin()->first;
      for (int64_t to = from + 1; to <= last; ++to) {
        auto hop = TransferOp::create(builder, op.getLoc(), at, to - 1, to, module);
        setStage(hop, to);
        at = hop.getResult();
        for (OpOperand *use : readers[to])
          use->set(at);
      }
    }
    return success();
  }
};

} // namespace
