//===- Sums.h - Values held in fp32 on every target -------------------------------------===//
//
// A row's sum of squares (tp.sum_squares, the first half of a norm whose row is split by
// features) and the all_reduce that totals it over the ranks are held in fp32 on every target,
// whatever its activation type: summed over thousands of columns in bf16 a total keeps 8 bits
// and the norm's scale would move by up to 2^-9 before the all_reduce added its own rounding.
// The arena (tp-plan-arena) gives such a value 4 bytes an element, the lowering calls the
// fp32 all-reduce for it (allReduceSums), and tpc analyze counts its 4 bytes: this is the one
// place that says which values they are.
//
//===----------------------------------------------------------------------------------------===//
#ifndef TPC_DIALECT_TP_SUMS_H
#define TPC_DIALECT_TP_SUMS_H

#include "tpc/Dialect/TP/TPDialect.h"

namespace tpc::tp {

/// Whether `value` is a sum of squares, or the all_reduce of one: held in fp32 on every
/// target.
inline bool holdsSums(mlir::Value value) {
  mlir::Operation *op = value.getDefiningOp();
  if (!op)
    return false;
  if (llvm::isa<SumSquaresOp>(op))
    return true;
  if (auto reduce = llvm::dyn_cast<AllReduceOp>(op))
    return holdsSums(reduce.getInput());
  return false;
}

/// Bytes of one element of `value` on a target whose activations take `activationBytes`.
inline int64_t elementBytesOf(mlir::Value value, int64_t activationBytes) {
  return holdsSums(value) ? int64_t(sizeof(float)) : activationBytes;
}

} // namespace tpc::tp

#endif // TPC_DIALECT_TP_SUMS_H
