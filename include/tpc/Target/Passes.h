// The lowering passes of lib/Target, declared from dialects/TP/TargetPasses.td.
#ifndef TPC_TARGET_PASSES_H
#define TPC_TARGET_PASSES_H

#include "mlir/Dialect/EmitC/IR/EmitC.h"
#include "mlir/Pass/Pass.h"

namespace tpc::target {

#define GEN_PASS_DECL
#include "TP/TargetPasses.h.inc"

#define GEN_PASS_REGISTRATION
#include "TP/TargetPasses.h.inc"

} // namespace tpc::target

#endif // TPC_TARGET_PASSES_H
