// The passes of the tpc pipeline, declared from dialects/TP/TPPasses.td.
#ifndef TPC_TRANSFORMS_PASSES_H
#define TPC_TRANSFORMS_PASSES_H

#include "tpc/Dialect/TP/TPDialect.h"

#include "mlir/Pass/Pass.h"

namespace tpc::tp {

/// Sets each function's result types to what its return now returns (after a pass has
/// changed the placements of returned values).
void updateFunctionTypes(mlir::ModuleOp module);

#define GEN_PASS_DECL
#include "TP/TPPasses.h.inc"

#define GEN_PASS_REGISTRATION
#include "TP/TPPasses.h.inc"

} // namespace tpc::tp

#endif // TPC_TRANSFORMS_PASSES_H
