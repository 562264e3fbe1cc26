// What tp-fuse and tp-group-linears share: which ops are elementwise, and how a unit of ops
// becomes a tp.fused.
#ifndef TPC_TRANSFORMS_FUSION_H
#define TPC_TRANSFORMS_FUSION_H

#include "tpc/Dialect/TP/TPDialect.h"

namespace tpc::tp {

/// silu, gelu, scale, softcap, add, mul: ops a generated kernel computes element by element.
bool isElementwise(mlir::Operation *op);

/// Moves `members` (in block order) into a new tp.fused of `kind` at the place of the last,
/// yielding `stored`, which the rest of the function then reads from the unit's results.
/// The caller makes sure no use of `stored` lies between the members.
FusedOp makeFused(FusedKind kind, llvm::ArrayRef<mlir::Operation *> members,
                  llvm::ArrayRef<mlir::Value> stored);

} // namespace tpc::tp

#endif // TPC_TRANSFORMS_FUSION_H
