// DTensor's sharding rules for the tp ops: given the placements an op's operands have, the
// placements it needs them in and the placement it then computes. tp-propagate-layouts and
// tp-fold-redistribute both ask these rules, so they agree on what every op can take.
#ifndef TPC_TRANSFORMS_LAYOUTRULES_H
#define TPC_TRANSFORMS_LAYOUTRULES_H

#include "tpc/Dialect/TP/TPDialect.h"

namespace tpc::tp {

struct OpLayout {
  /// The placement each operand must have (equal to what it has when nothing is needed).
  llvm::SmallVector<PlacementAttr> operands;
  /// The placement of the op's result; null for ops without one.
  PlacementAttr result;
};

class LayoutRules {
public:
  LayoutRules(mlir::MLIRContext *context, int64_t tp) : context(context), tp(tp) {}

  /// The rule for `op` when its operands have `operands` (normalized: dims counted from the
  /// front). Fails with an error naming the module when the op cannot work on any
  /// placement of them (heads split mid-head, a head count tp does not divide).
  mlir::FailureOr<OpLayout> infer(mlir::Operation *op, llvm::ArrayRef<PlacementAttr> operands);

  PlacementAttr replicate() const;
  PlacementAttr partial() const;
  PlacementAttr shard(int64_t dim) const;

  int64_t tpSize() const { return tp; }

  /// An RMSNorm given its rows' totals (sum_squares) with its input placed as `x`: operands
  /// (input, weight, totals) and result. Public for tp-fold-redistribute, which tries this
  /// form on whole-row norms before it writes it.
  OpLayout normWithTotals(PlacementAttr x) const;

private:
  mlir::FailureOr<OpLayout> linear(mlir::Operation *op, llvm::ArrayRef<PlacementAttr> in);
  mlir::FailureOr<OpLayout> embedding(mlir::Operation *op, llvm::ArrayRef<PlacementAttr> in);
  mlir::FailureOr<OpLayout> rotary(mlir::Operation *op, llvm::ArrayRef<PlacementAttr> in);
  mlir::FailureOr<OpLayout> attention(mlir::Operation *op, llvm::ArrayRef<PlacementAttr> in);
  mlir::FailureOr<OpLayout> headNorm(mlir::Operation *op, llvm::ArrayRef<PlacementAttr> in);
  OpLayout sumSquares(llvm::ArrayRef<PlacementAttr> in);
  mlir::FailureOr<OpLayout> router(mlir::Operation *op, llvm::ArrayRef<PlacementAttr> in);
  mlir::FailureOr<OpLayout> experts(mlir::Operation *op, llvm::ArrayRef<PlacementAttr> in);
  OpLayout elementwise(mlir::Operation *op, llvm::ArrayRef<PlacementAttr> in);
  OpLayout slice(mlir::Operation *op, llvm::ArrayRef<PlacementAttr> in);
  OpLayout concat(mlir::Operation *op, llvm::ArrayRef<PlacementAttr> in);
  mlir::FailureOr<OpLayout> perHead(mlir::Operation *op, llvm::ArrayRef<PlacementAttr> in);
  /// Whether a feature dim of `features` split as `placement` gives every rank whole heads.
  bool wholeHeads(PlacementAttr placement, int64_t features, int64_t headDim) const;

  mlir::MLIRContext *context;
  int64_t tp;
};

} // namespace tpc::tp

#endif // TPC_TRANSFORMS_LAYOUTRULES_H
