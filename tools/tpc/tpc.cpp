// tpc: the command-line driver. Each subcommand lives in its own file (see Commands.h).
#include "Commands.h"

#include "llvm/Support/InitLLVM.h"

int main(int argc, char **argv) {
  llvm::InitLLVM init(argc, argv);
  CLI::App app{"tpc: an ahead-of-time compiler for tensor-parallel inference"};
  app.require_subcommand(1);
  app.set_version_flag("--version", "tpc 0.1.0");
  tpc::CommandRunner run;
  tpc::addImportCommand(app, run);
  tpc::addCheckCommand(app, run);
  tpc::addAnalyzeCommand(app, run);
  tpc::addCompileCommand(app, run);
  tpc::addLaunchCommand(app, run);
  tpc::addInitWeightsCommand(app, run);
  CLI11_PARSE(app, argc, argv);
  return run ? run() : 0;
}
