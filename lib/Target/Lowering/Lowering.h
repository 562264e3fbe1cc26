// What the patterns of tp-lower-to-emitc share: the state of one forward's lowering (where
// each value lives, the rows it has, the arena slot of each result) and the runtime call
// builder checked against tpcrt/calls.def. Each op family's patterns live in a file of their
// own (Layers.cpp, Communication.cpp, Fused.cpp), main() in Main.cpp; LowerToEmitC.cpp walks
// the forwards and hands each op to its family.
#ifndef TPC_LIB_TARGET_LOWERING_LOWERING_H
#define TPC_LIB_TARGET_LOWERING_LOWERING_H

#include "tpc/Dialect/TP/TPDialect.h"
#include "tpc/Target/Target.h"

#include "mlir/Dialect/EmitC/IR/EmitC.h"
#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/Builders.h"

#include <map>
#include <optional>
#include <vector>

namespace tpc::target::lowering {

// The dialect's own helpers, so that the lowering keeps calling them unqualified.
using tp::columns;
using tp::typeOf;
tp::PlacementAttr placementOf(mlir::Value v);
/// `s` as a C++ string literal.
std::string quoted(llvm::StringRef s);
/// `{1, 2, 3}`.
std::string braced(llvm::ArrayRef<int64_t> values);
/// Global block sizes of a feature dim placed as `p`, whose global size is `global`.
std::string blocksOf(tp::PlacementAttr p, int64_t global);

/// Who makes a call of tpcrt/calls.def, and so where it lives and what comes before its
/// arguments.
enum class CallKind {
  forward, // TPC_CALL, TPC_CPU_CALL: in the target's namespace, the rank's context first
  model,   // TPC_SPEC_CALL: main()'s, in tpcrt, every argument listed
  program, // TPC_TARGET_SPEC_CALL, TPC_CUDA_SPEC_CALL: main()'s, in the target's namespace
};

/// How one runtime call of tpcrt/calls.def is spelled: its arguments (a forward's after the
/// context).
struct CallArg {
  llvm::StringRef type, name;
  std::optional<llvm::StringRef> fallback; // the value of an optional argument left out
};
struct CallSpec {
  llvm::StringRef name;
  std::vector<CallArg> args;
  CallKind kind = CallKind::forward;
};
/// The entry of calls.def named `name`; null for a name it does not describe.
const CallSpec *lookupCall(llvm::StringRef name);
/// Every entry of calls.def, in its order.
llvm::ArrayRef<CallSpec> allCalls();

/// One emitc.call_opaque's arguments in order: values (operands) and literals.
class Args {
public:
  explicit Args(mlir::MLIRContext *ctx) : ctx(ctx) {}
  Args &value(mlir::Value v);
  Args &integer(int64_t v);
  Args &real(double v);
  Args &boolean(bool v) { return text(v ? "true" : "false"); }
  Args &string(llvm::StringRef s) { return text(quoted(s)); }
  /// A literal as C++ text: nullptr, a braced list, a function's name.
  Args &text(llvm::StringRef code);

  llvm::SmallVector<mlir::Value> operands;
  llvm::SmallVector<mlir::Attribute> args;

private:
  mlir::MLIRContext *ctx;
};

/// `callee(args)` at `loc`, of type `result` if any.
mlir::Value emitCall(mlir::OpBuilder &b, mlir::Location loc, llvm::StringRef callee, Args &args,
                     mlir::Type result = {});

/// The rows a value has on this rank: a count known at compile time (after tp.last_token),
/// the forward's token count n, or n / tp where the tokens are split.
struct Rows {
  mlir::Value count; // n or n / tp, or the sampled rows, when not static
  int64_t fixed = 0; // when static
};

class FunctionLowering;

/// A call into the runtime being built, argument by argument, each named as calls.def names
/// it: an argument out of calls.def's order is an error at the op when the call is emitted,
/// and an optional argument left out before one given is spelled with calls.def's value.
class Call {
public:
  /// A forward's call `name` at `op`, the rank's context first.
  Call(FunctionLowering &l, mlir::Operation *op, llvm::StringRef name);
  /// main()'s call `name` (the model's description), built with `b` and emitted at `op`;
  /// a mismatch sets `failed`. Only the arguments the caller passes: the spec among them.
  Call(mlir::OpBuilder &b, const Spelling &spelling, mlir::Operation *op, llvm::StringRef name,
       bool &failed);

  // The argument `name`, as Args spells it.
  Call &value(llvm::StringRef name, mlir::Value v) { return next(name).add(&Args::value, v); }
  Call &integer(llvm::StringRef name, int64_t v) { return next(name).add(&Args::integer, v); }
  Call &real(llvm::StringRef name, double v) { return next(name).add(&Args::real, v); }
  Call &boolean(llvm::StringRef name, bool v) { return next(name).add(&Args::boolean, v); }
  Call &string(llvm::StringRef name, llvm::StringRef s) { return next(name).add(&Args::string, s); }
  Call &text(llvm::StringRef name, llvm::StringRef code) {
    return next(name).add(&Args::text, code);
  }
  /// A pointer that may be absent: null is spelled nullptr.
  Call &pointer(llvm::StringRef name, mlir::Value v);
  /// The rows `v` has on this rank (a forward's calls only).
  Call &rows(llvm::StringRef name, mlir::Value v);
  /// A [rows, cols] input: its pointer as `name`, then its rows and columns (a forward's
  /// calls only).
  Call &input(mlir::Value v, llvm::StringRef name = "x");

  /// The call, with the result type `result` if any. Where it does not match calls.def, an
  /// error at the op instead, and the lowering fails once the op is done.
  mlir::Value emit(mlir::Type result = {});

private:
  Call(mlir::OpBuilder &b, mlir::Operation *op, llvm::StringRef name, bool forward,
       bool &failed);
  Call &next(llvm::StringRef name);
  template <typename T> Call &add(Args &(Args::*spell)(T), T v) {
    (args.*spell)(v);
    return *this;
  }
  void fillOptional(const CallArg &arg);

  FunctionLowering *l = nullptr; // a forward's; null for main()'s
  mlir::OpBuilder &builder;
  mlir::Operation *op;
  std::string name, callee;
  const CallSpec *spec;
  size_t at = 0;
  std::string mismatch;
  bool &failed;
  Args args;
};

/// One forward (a func.func of the decided program) becoming an emitc.func.
class FunctionLowering {
public:
  /// `stage`: the pipeline stage whose ops it lowers, as `forward_stage<k>`, where the
  /// program has stages; none: every op, under the func's own name.
  FunctionLowering(mlir::func::FuncOp func, const Spelling &spelling,
                   llvm::DenseMap<mlir::StringAttr, int64_t> &paramIndex, int64_t tp,
                   mlir::OpBuilder &moduleBuilder, std::optional<int64_t> stage = std::nullopt);

  /// The emitted function's name.
  const std::string &name() const { return emittedName; }
  /// The pipeline stage it lowers, if the program has stages.
  std::optional<int64_t> loweredStage() const { return stage; }

  mlir::LogicalResult lower();

  // Types of the generated program.
  mlir::Type opaque(llvm::StringRef s) { return mlir::emitc::OpaqueType::get(ctx, s); }
  mlir::Type contextType() { return opaque(spelling.context()); }
  mlir::Type idsType();
  mlir::Type actPtr();
  mlir::Type constActPtr();
  mlir::Type i64() { return builder.getI64Type(); }
  std::string callee(llvm::StringRef name) { return (spelling.ns() + "::" + name).str(); }

  /// A call whose arguments are `args` as they stand (a generated kernel's).
  mlir::Value callOpaque(mlir::Location loc, llvm::StringRef name, Args &args) {
    return emitCall(builder, loc, name, args);
  }
  /// The runtime call `name` of calls.def at `op`.
  Call call(mlir::Operation *op, llvm::StringRef name) { return Call(*this, op, name); }
  /// The common shape of a pattern: `op`'s result gets its arena slot, `fill` adds the call's
  /// arguments (the slot as `out`, where calls.def puts it), and the call is emitted.
  mlir::LogicalResult lowerInto(mlir::Operation *op, llvm::StringRef name,
                                llvm::function_ref<void(Call &, mlir::Value out)> fill);

  /// The pointer an op reads for `v`: a function argument, a weight, or an arena slot.
  mlir::Value ref(mlir::Value v);
  void bind(mlir::Value v, mlir::Value lowered) { values[v] = lowered; }
  /// Declares the arena pointer of `op`'s result `i`, at the offset tp-plan-arena recorded.
  mlir::FailureOr<mlir::Value> define(mlir::Operation *op, mlir::Value result, unsigned i);
  mlir::FailureOr<mlir::Value> define(mlir::Operation *op) {
    return define(op, op->getResult(0), 0);
  }
  /// The arena pointers of all of `op`'s results.
  mlir::FailureOr<llvm::SmallVector<mlir::Value>> defineAll(mlir::Operation *op);
  Rows rowsOf(mlir::Value v);
  Args &addRows(Args &a, mlir::Value v);

  mlir::LogicalResult unsupported(mlir::Operation *op, const llvm::Twine &what);

  /// A linear's bias; a Partial result adds it on one rank only, so that it counts once in
  /// the sum.
  mlir::Value biasOf(tp::LinearOp linear);
  /// The positions of a value's rows: this rank's slice of them where tokens are split.
  mlir::Value positionsOf(mlir::Operation *op, mlir::Value input);
  /// A rotary's inverse frequencies (RotaryOp::getFrequencies), as a static array.
  mlir::Value invFreqOf(tp::RotaryOp rotary);
  /// A generated kernel's definition, before the function.
  void addKernel(const std::string &text);
  /// The name of the next fused unit's kernel.
  std::string kernelName();

  const Spelling &spelling;
  mlir::MLIRContext *ctx;
  mlir::OpBuilder builder;
  mlir::Value cx, ids, positions, n, ns;
  /// The rows after tp.last_token: one per sequence the step samples (lastRows' count), once
  /// the forward has lowered its tp.last_token.
  mlir::Value sampled;
  int attentionIndex = 0;
  /// A call that did not match calls.def was made (Call::emit said where).
  bool mismatchedCall = false;

private:
  mlir::LogicalResult lowerOp(mlir::Operation *op);

  /// Whether `op` runs in this function: every op, or those of its stage (a transfer in
  /// both of the stages it joins, but the result's, which the engine receives).
  bool runsHere(mlir::Operation *op);
  bool returned(tp::TransferOp transfer);

  mlir::func::FuncOp func;
  std::optional<int64_t> stage;
  std::string emittedName;
  llvm::DenseMap<mlir::StringAttr, int64_t> &paramIndex;
  int64_t tp;
  mlir::OpBuilder &moduleBuilder;
  mlir::Operation *kernelPoint = nullptr;
  llvm::DenseMap<mlir::Value, mlir::Value> values;
  int kernels = 0;
  /// The frequency tables emitted so far, by their values: rotaries of the same frequencies
  /// (q and k, every layer) share one.
  std::map<std::vector<double>, std::string> frequencyTables;
};

/// With pipeline stages: the transfer of the forward's result to the first stage, which the
/// engine receives (setLogitsFrom); null where the forward does not end with one.
tp::TransferOp returnedTransfer(mlir::func::FuncOp func);

// The patterns, by family: each lowers `op` if it is one of its family's, and says nothing
// (std::nullopt) otherwise.
std::optional<mlir::LogicalResult> lowerLayer(FunctionLowering &l, mlir::Operation *op);
std::optional<mlir::LogicalResult> lowerCommunication(FunctionLowering &l, mlir::Operation *op);
mlir::LogicalResult lowerFused(FunctionLowering &l, tp::FusedOp fused);

/// main(): the model's description for the runtime, then the runtime's driver. `stages`: the
/// names of the stages' functions where the program has pipeline stages (the first is
/// `plain`'s), else empty.
mlir::LogicalResult lowerMain(mlir::ModuleOp module, const Spelling &spelling, llvm::StringRef name,
                              int64_t tp, llvm::ArrayRef<tp::ParamOp> params,
                              mlir::func::FuncOp plain, mlir::func::FuncOp split,
                              llvm::ArrayRef<std::string> stages, mlir::OpBuilder &mb);

} // namespace tpc::target::lowering

#endif // TPC_LIB_TARGET_LOWERING_LOWERING_H
