// Fuzzes the plan and strategies readers and the matcher: the input is a plan.json, and when
// it holds a NUL byte, a strategies file after it; both are applied to the example model at
// tp 2, as `tpc check --plan P --strategies S --tp 2` would.
#include "Fuzz.h"

#include "tpc/Plan/Plan.h"

#include "mlir/IR/BuiltinOps.h"
#include "mlir/Parser/Parser.h"

#include <cstring>

using namespace mlir;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  MLIRContext &ctx = tpc::fuzz::context();
  static OwningOpRef<ModuleOp> model = parseSourceFile<ModuleOp>(TPC_FUZZ_MODEL, &ctx);
  if (!model)
    __builtin_trap(); // the example must parse
  const uint8_t *nul = static_cast<const uint8_t *>(std::memchr(data, 0, size));
  size_t planSize = nul ? size_t(nul - data) : size;
  tpc::plan::PlanOptions options;
  options.planPath = tpc::fuzz::writeInput(data, planSize, "plan.json");
  if (nul)
    options.strategiesPath =
        tpc::fuzz::writeInput(nul + 1, size - planSize - 1, "strategies.json");
  options.tpSize = 2;
  OwningOpRef<ModuleOp> copy = cast<ModuleOp>((*model)->clone());
  (void)tpc::plan::applyPlan(*copy, options);
  return 0;
}
