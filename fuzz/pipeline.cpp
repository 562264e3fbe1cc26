// Fuzzes parsing, verifying and sharding a model: the input is a model.mlir (seeds: the
// example and the tests' models). What parses and verifies gets the example plan at tp 2, the
// collectives pipeline, tp-partition, the decision passes and both targets' lowerings, as
// `tpc compile` runs them (less the C++ compiler). Every stage may reject the input with a diagnostic; none may crash.
#include "Fuzz.h"

#include "tpc/Plan/Plan.h"
#include "tpc/Target/Target.h"
#include "tpc/Target/TargetInfo.h"
#include "tpc/Transforms/Pipeline.h"

#include "mlir/IR/BuiltinOps.h"
#include "mlir/Parser/Parser.h"
#include "llvm/Support/raw_ostream.h"

using namespace mlir;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  MLIRContext &ctx = tpc::fuzz::context();
  ParserConfig config(&ctx);
  // MLIR's lexer reads up to the NUL after a buffer, as a file read gives it: a copy has one.
  std::string text(reinterpret_cast<const char *>(data), size);
  OwningOpRef<ModuleOp> module = parseSourceString<ModuleOp>(text, config);
  if (!module)
    return 0;
  tpc::plan::PlanOptions options;
  options.planPath = TPC_FUZZ_PLAN;
  options.tpSize = 2;
  if (failed(tpc::plan::applyPlan(*module, options)))
    return 0;
  for (const tpc::target::TargetInfo *target : tpc::target::allTargets()) {
    tpc::ProgramOptions program;
    program.target = target->describe(&ctx);
    OwningOpRef<ModuleOp> decided = tpc::buildProgram(*module, program);
    if (!decided)
      continue;
    llvm::raw_null_ostream sink;
    (void)tpc::target::emitSource(*decided, sink);
  }
  return 0;
}
