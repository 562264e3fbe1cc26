// --target cpu and --target cuda: partitioned tp IR to a program that calls libtpcrt.
#ifndef TPC_CODEGEN_CPUEMITTER_H
#define TPC_CODEGEN_CPUEMITTER_H

#include "mlir/IR/BuiltinOps.h"
#include "llvm/Support/raw_ostream.h"

namespace tpc {

/// Where the emitted program runs: C++ over libtpcrt's CPU kernels (fp32, OpenBLAS, Gloo), or
/// CUDA C++ over its CUDA backend (bf16, cuBLASLt, NCCL). Both programs make the same calls,
/// one per op, with the placement spelled out; only the element type and the namespace of
/// the kernels differ.
enum class Target { Cpu, Cuda };

/// Writes the program for `partitioned` (after tp-partition); `sequenceParallel`, when
/// given, is the same model partitioned with the residual stream split by tokens, used for
/// token counts tp divides. Activations live in one arena planned by lifetime. Fails, with
/// an error at the op, for what the target cannot run yet.
mlir::LogicalResult emitProgram(mlir::ModuleOp partitioned, mlir::ModuleOp sequenceParallel,
                                Target target, llvm::raw_ostream &os);

} // namespace tpc

#endif // TPC_CODEGEN_CPUEMITTER_H
