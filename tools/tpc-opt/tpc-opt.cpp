// tpc-opt: mlir-opt with the tp dialect and every tpc pass, for lit tests and debugging.
#include "tpc/Dialect/TP/TPDialect.h"
#include "tpc/Target/Passes.h"
#include "tpc/Transforms/Passes.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/DialectRegistry.h"
#include "mlir/Tools/mlir-opt/MlirOptMain.h"
#include "mlir/Transforms/Passes.h"

int main(int argc, char **argv) {
  mlir::DialectRegistry registry;
  registry.insert<tpc::tp::TPDialect, mlir::func::FuncDialect, mlir::emitc::EmitCDialect>();
  tpc::tp::registerTPPasses();
  tpc::target::registerTargetPasses();
  mlir::registerCanonicalizerPass();
  mlir::registerCSEPass();
  return mlir::asMainReturnCode(
      mlir::MlirOptMain(argc, argv, "tpc optimizer driver\n", registry));
}
