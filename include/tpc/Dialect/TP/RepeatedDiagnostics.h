// One diagnostic per cause. A fault in a model's layers is found once per layer: 30 errors
// that differ only in model.layers.N. The steps tpc runs in-process (plan::applyPlan, which
// tp-apply-plan runs too, buildProgram, target::lowerToEmitC) say it once, with the count;
// the sharding and lowering passes run alone in tpc-opt still report each op, which is what
// -verify-diagnostics tests.
#ifndef TPC_DIALECT_TP_REPEATEDDIAGNOSTICS_H
#define TPC_DIALECT_TP_REPEATEDDIAGNOSTICS_H

#include "mlir/IR/Diagnostics.h"
#include "mlir/IR/MLIRContext.h"

#include <string>
#include <vector>

namespace tpc::tp {

/// A diagnostic message with the layer indices of the HF module names in it replaced by `*`:
/// each numbered component of a dotted name ("model.layers.3.mlp" -> "model.layers.*.mlp").
/// Numbers that are not a name's component (sizes, "Shard(1)", "1.5") stay.
struct LayerGeneric {
  std::string message;
  /// The first such name up to its number ("model.layers.3"); empty when there is none.
  std::string layer;
};
LayerGeneric layerGeneric(llvm::StringRef message);

/// Holds back the diagnostics emitted while it lives and emits them when it dies, in the order
/// they came, each cause once. Diagnostics whose messages differ only in layer indices
/// (layerGeneric) become one, at the first one's location and with its notes, that says how
/// many layers share it:
///   in 30 layers (model.layers.0 first): model.layers.*.self_attn: ...
/// A diagnostic repeated word for word at one location (a pass run once for each forward) is
/// said once. Like mlir's ParallelDiagnosticHandler it delays what it holds, so it wraps a
/// whole step, not an op.
class RepeatedDiagnosticHandler {
public:
  explicit RepeatedDiagnosticHandler(mlir::MLIRContext *context);
  ~RepeatedDiagnosticHandler();
  RepeatedDiagnosticHandler(const RepeatedDiagnosticHandler &) = delete;
  RepeatedDiagnosticHandler &operator=(const RepeatedDiagnosticHandler &) = delete;

private:
  /// A diagnostic as text: what it referred to (an op's name, a module being built) may be
  /// gone by the time it is emitted.
  struct Held {
    mlir::DiagnosticSeverity severity;
    mlir::Location loc;
    std::string message;
    std::vector<std::pair<mlir::Location, std::string>> notes;
  };
  mlir::MLIRContext *context;
  mlir::DiagnosticEngine::HandlerID id;
  std::vector<Held> held;
};

} // namespace tpc::tp

#endif // TPC_DIALECT_TP_REPEATEDDIAGNOSTICS_H
