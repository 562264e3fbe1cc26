// What the CPU and the CUDA target spell differently. The lowering of a decided tp program to
// EmitC (lib/Target/LowerToEmitC.cpp) is one; each target (lib/Target/Cpu, lib/Target/Cuda)
// says where its calls live, what an activation is, what it cannot run, and how a fused unit's
// generated code is wrapped: a loop on the CPU, a kernel and its launch on the GPU.
#ifndef TPC_TARGET_TARGET_H
#define TPC_TARGET_TARGET_H

#include "mlir/IR/BuiltinOps.h"
#include "mlir/IR/OwningOpRef.h"
#include "llvm/Support/raw_ostream.h"

#include <memory>
#include <string>
#include <vector>

namespace tpc::target {

/// The straight-line code of a fused chain for element `i`: each line defines one `acc`
/// (the target's arithmetic type) from loads of its inputs (`in0`, `in1`, ...) or from the
/// lines before, with the math helpers of the target's fused.h; `result` names the chain's
/// value.
struct ChainCode {
  std::vector<std::string> lines;
  std::string result;
  unsigned inputs = 0;
  std::string what; // "silu, mul": the ops, for the kernel's comment
};

/// The straight-line code of a fused rotary pair for element `i` (one frequency of one head of
/// one row, of the query `a` or the key `b`): the same on every target. The heads of the
/// first value come first; `frequencies` names the table of headDim / 2 inverse frequencies.
std::vector<std::string> rotaryPairCode(int64_t headDim, int64_t aHeads, int64_t bHeads,
                                        llvm::StringRef frequencies, llvm::StringRef scaling = "");

/// The generated kernel of a tp.fused unit: its definition, placed before the function
/// that calls it, and its signature, which every target shares:
///   elementwise: NAME(cx, rows, in0.., out)
///   norm:        NAME(cx, rows, in0.., weight, stored, out)
///   rotary:      NAME(cx, rows, a, aOut, b, bOut, positions)
class Spelling {
public:
  /// The names a target's program uses: facts, not behaviour.
  struct Names {
    llvm::StringRef name;    // for messages: "CPU", "CUDA"
    llvm::StringRef include; // the runtime header the program includes
    llvm::StringRef ns;      // where the program's calls live
    llvm::StringRef context; // the C++ type of the forward's first argument
    llvm::StringRef element; // the C++ type of an activation
    /// Whether the runtime can lay a "linears" unit's weights one after the other, so that
    /// a one-row input is one GEMM over them (the module's #tp.target says whether it does).
    bool groupsLinears;
  };

  explicit Spelling(Names names) : names(names) {}
  virtual ~Spelling() = default;

  llvm::StringRef name() const { return names.name; }
  llvm::StringRef include() const { return names.include; }
  llvm::StringRef ns() const { return names.ns; }
  llvm::StringRef context() const { return names.context; }
  llvm::StringRef element() const { return names.element; }
  bool groupsLinears() const { return names.groupsLinears; }
  /// An error at `op` when the target cannot run it.
  virtual mlir::LogicalResult supports(mlir::Operation *op) const = 0;

  /// `width` columns per row: an elementwise unit computes rows * width elements.
  virtual std::string elementwiseKernel(llvm::StringRef name, const ChainCode &chain,
                                        int64_t width) const = 0;
  /// The chain's value is stored, then normalized over rows of `normWidth` (a per-head norm
  /// has width / normWidth of them per token).
  virtual std::string normKernel(llvm::StringRef name, const ChainCode &chain, int64_t width,
                                 int64_t normWidth, double epsilon,
                                 double weightOffset) const = 0;
  /// Rotates heads of `headDim` of a [rows, aHeads * headDim] and a [rows, bHeads * headDim]
  /// value at `positions`, with `frequencies` (headDim / 2 of them).
  virtual std::string rotaryKernel(llvm::StringRef name, int64_t headDim, int64_t aHeads,
                                   int64_t bHeads, llvm::ArrayRef<double> frequencies,
                                   double scaling) const = 0;

private:
  Names names;
};

std::unique_ptr<Spelling> makeCpuSpelling();
std::unique_ptr<Spelling> makeCudaSpelling();

/// A float literal that is exactly float(v), in hexadecimal (for generated kernels).
std::string floatLiteral(double v);
/// A double literal that is exactly v, in hexadecimal.
std::string doubleLiteral(double v);
/// The values as a comma-separated list of `literal`'s (an array's initializer).
std::string literalList(llvm::ArrayRef<double> values, std::string (*literal)(double));
/// The lines, each after `prefix` and ending in a newline (a kernel body's indentation).
std::string indentLines(const std::vector<std::string> &lines, llvm::StringRef prefix);

/// A copy of a decided module (tpc::buildProgram's output) lowered by tp-lower-to-emitc for
/// the target its #tp.target names: what upstream's C++ translator prints. Null, with an
/// error at the op (one per cause, as RepeatedDiagnosticHandler says them), for what the
/// target cannot run.
mlir::OwningOpRef<mlir::ModuleOp> lowerToEmitC(mlir::ModuleOp program);

/// The source of the program for a decided module: lowerToEmitC, printed by upstream's C++
/// translator.
mlir::LogicalResult emitSource(mlir::ModuleOp program, llvm::raw_ostream &os);

} // namespace tpc::target

#endif // TPC_TARGET_TARGET_H
