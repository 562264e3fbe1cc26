// --target cpu: partitioned tp IR to a C++ program that calls libtpcrt.
#ifndef TPC_CODEGEN_CPUEMITTER_H
#define TPC_CODEGEN_CPUEMITTER_H

#include "mlir/IR/BuiltinOps.h"
#include "llvm/Support/raw_ostream.h"

namespace tpc {

/// Writes the program for `partitioned` (after tp-partition); `sequenceParallel`, when
/// given, is the same model partitioned with the residual stream split by tokens, used for
/// token counts tp divides. Activations live in one arena planned by lifetime. Fails, with
/// an error at the op, for what the CPU target cannot run yet.
mlir::LogicalResult emitCpuProgram(mlir::ModuleOp partitioned, mlir::ModuleOp sequenceParallel,
                                   llvm::raw_ostream &os);

} // namespace tpc

#endif // TPC_CODEGEN_CPUEMITTER_H
