// Fuzzes the config.json importer. Oracle: whatever it accepts must be a model.mlir that
// parses and verifies (tpc import's output is the next command's input).
#include "Fuzz.h"

#include "tpc/Import/Importer.h"

#include "mlir/IR/BuiltinOps.h"
#include "mlir/Parser/Parser.h"

using namespace mlir;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  MLIRContext &ctx = tpc::fuzz::context();
  std::string path = tpc::fuzz::writeInput(data, size, "config.json");
  FailureOr<std::string> text = tpc::import::importConfig(path, &ctx);
  if (failed(text))
    return 0;
  ParserConfig config(&ctx);
  OwningOpRef<ModuleOp> module = parseSourceString<ModuleOp>(*text, config);
  if (!module)
    __builtin_trap(); // an import that does not parse
  return 0;
}
