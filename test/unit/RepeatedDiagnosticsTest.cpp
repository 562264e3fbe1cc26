// One diagnostic per cause: which numbers are layer indices, and what the handler emits.
#include "tpc/Dialect/TP/RepeatedDiagnostics.h"

#include "mlir/IR/Location.h"

#include <gtest/gtest.h>

using namespace mlir;
using namespace tpc::tp;

TEST(LayerGeneric, NumberedComponentsOfDottedNames) {
  LayerGeneric g = layerGeneric("model.layers.12.mlp.experts.3: parameter model.layers.12.x");
  EXPECT_EQ(g.message, "model.layers.*.mlp.experts.*: parameter model.layers.*.x");
  EXPECT_EQ(g.layer, "model.layers.12");
  EXPECT_EQ(layerGeneric("ends in transformer.h.7").layer, "transformer.h.7");
}

TEST(LayerGeneric, OtherNumbersStay) {
  for (const char *message :
       {"dim 1 of size 576 split as Shard(1) over tp 2", "epsilon 1.5 and 0x1.4p-17",
        "model.h2o.weight", "StridedShard(-1, [128, 128])", "at tp 2."}) {
    LayerGeneric g = layerGeneric(message);
    EXPECT_EQ(g.message, message);
    EXPECT_EQ(g.layer, "");
  }
}

namespace {
/// What reaches the handlers behind a RepeatedDiagnosticHandler, as "severity: message" lines
/// (notes indented).
std::vector<std::string> emitted(MLIRContext &ctx,
                                 llvm::function_ref<void(Location, Location)> emit) {
  std::vector<std::string> lines;
  ScopedDiagnosticHandler collect(&ctx, [&](Diagnostic &d) {
    lines.push_back((d.getSeverity() == DiagnosticSeverity::Error ? "error: " : "warning: ") +
                    d.str());
    for (Diagnostic &note : d.getNotes())
      lines.push_back("  note: " + note.str());
    return success();
  });
  {
    RepeatedDiagnosticHandler onePerCause(&ctx);
    emit(FileLineColLoc::get(&ctx, "m.mlir", 1, 1), FileLineColLoc::get(&ctx, "m.mlir", 2, 1));
  }
  return lines;
}
} // namespace

TEST(RepeatedDiagnosticHandler, OneErrorForAllLayers) {
  MLIRContext ctx;
  auto lines = emitted(ctx, [](Location a, Location b) {
    emitError(a) << "model.layers.0.attn: 9 heads";
    emitWarning(a) << "model.layers.0.attn: a warning";
    emitError(b) << "model.layers.1.attn: 9 heads";
    InFlightDiagnostic other = emitError(b) << "unrelated";
    other.attachNote(a) << "its note";
    emitError(a) << "model.layers.2.attn: 9 heads";
  });
  ASSERT_EQ(lines.size(), 4u);
  EXPECT_EQ(lines[0], "error: in 3 layers (model.layers.0 first): model.layers.*.attn: 9 heads");
  EXPECT_EQ(lines[1], "warning: model.layers.0.attn: a warning"); // one layer: as it was
  EXPECT_EQ(lines[2], "error: unrelated");
  EXPECT_EQ(lines[3], "  note: its note");
}

TEST(RepeatedDiagnosticHandler, ExactRepeatsAtOnePlace) {
  MLIRContext ctx;
  auto lines = emitted(ctx, [](Location a, Location b) {
    emitWarning(a) << "model.layers.0.o_proj: gathered"; // two forwards, one cause
    emitWarning(a) << "model.layers.0.o_proj: gathered";
    emitError(a) << "no forward";
    emitError(a) << "no forward";
    emitError(b) << "no forward"; // somewhere else: its own
  });
  EXPECT_EQ(lines, (std::vector<std::string>{"warning: model.layers.0.o_proj: gathered",
                                             "error: no forward", "error: no forward"}));
}
