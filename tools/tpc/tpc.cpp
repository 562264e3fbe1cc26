// tpc: the command-line driver. Each subcommand lives in its own file (see Commands.h).
#include "Commands.h"
#include "tpc/Driver/Session.h"

#include "llvm/Support/InitLLVM.h"

int main(int argc, char **argv) {
  llvm::InitLLVM init(argc, argv);
  CLI::App app{"tpc: an ahead-of-time compiler for tensor-parallel inference"};
  app.require_subcommand(1);
  app.set_version_flag("--version", "tpc 0.1.0");
  // An option of tpc itself, so it goes before the subcommand (`tpc
  // --print-op-on-diagnostic compile ...`), as git's -C does.
  bool printOps = false;
  app.add_flag("--print-op-on-diagnostic", printOps,
               "with each diagnostic at an op, print the op in MLIR's generic form (for "
               "debugging tpc)");
  tpc::CommandRunner run;
  tpc::addImportCommand(app, run);
  tpc::addCheckCommand(app, run);
  tpc::addAnalyzeCommand(app, run);
  tpc::addSuggestCommand(app, run);
  tpc::addCompileCommand(app, run);
  tpc::addLaunchCommand(app, run);
  tpc::addInitWeightsCommand(app, run);
  tpc::addRunCommand(app, run);
  tpc::addBenchCommand(app, run);
  tpc::addServeCommand(app, run);
  CLI11_PARSE(app, argc, argv);
  tpc::setPrintOpOnDiagnostic(printOps);
  return run ? run() : 0;
}
