// tpc import's options and output: a Hugging Face config.json -> model.mlir, parsed and
// verified before it is written (lib/Driver/Import.cpp). `--auto-plans` prints the table
// `--plan auto` uses instead.
#include "Commands.h"

#include "tpc/Dialect/TP/TPDialect.h"
#include "tpc/Driver/Import.h"
#include "tpc/Plan/DefaultPlans.h"

#include "llvm/Support/raw_ostream.h"

#include <fmt/core.h>

using namespace mlir;

namespace tpc {

namespace {
struct ImportOptions {
  std::string config, output;
  bool autoPlans = false;
};

} // namespace

void addImportCommand(CLI::App &app, CommandRunner &run) {
  auto opts = std::make_shared<ImportOptions>();
  CLI::App *cmd = app.add_subcommand(
      "import", "Turn a Hugging Face config.json, or a GGUF file's metadata, into a model "
                "graph (model.mlir)");
  cmd->add_option("config", opts->config,
                  "the checkpoint's config.json (or its directory), or a .gguf file");
  cmd->add_option("-o,--output", opts->output, "the model.mlir to write (default: stdout)");
  cmd->add_flag("--auto-plans", opts->autoPlans,
                "print transformers 5.17's default plans that --plan auto uses, as JSON");
  cmd->callback([opts, &run] {
    run = [opts]() -> int {
      if (opts->autoPlans) {
        llvm::outs() << plan::defaultPlanTable().dump(2) << "\n";
        return 0;
      }
      if (opts->config.empty()) {
        reportError("tpc import: give the config.json or .gguf file to import");
        return 2;
      }
      Session session;
      std::string text;
      OwningOpRef<ModuleOp> module = driver::importCheckpoint(session, opts->config, text);
      if (!module)
        return 1;
      if (opts->output.empty()) {
        llvm::outs() << text;
        return 0;
      }
      if (!writeAtomically(opts->output, text))
        return 1;
      size_t params = llvm::range_size(module->getOps<tp::ParamOp>());
      llvm::outs() << fmt::format("wrote {} ({} parameters, {} warning{})\n", opts->output,
                                  params, session.warnings(),
                                  session.warnings() == 1 ? "" : "s");
      return 0;
    };
  });
}

} // namespace tpc
