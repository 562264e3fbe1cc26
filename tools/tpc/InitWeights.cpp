// tpc init-weights: a safetensors checkpoint of seeded random weights under the model's HF
// names, the same values the binaries' --random-weights generate.
#include "Commands.h"
#include "tpc/Driver/Session.h"

#include "tpc/Dialect/TP/TPDialect.h"
#include "tpcrt/weights.h"

#include <fmt/core.h>

using namespace mlir;

namespace tpc {

namespace {
struct InitOptions {
  std::string model, output, dtype = "f32";
  uint64_t seed = 0;
};
} // namespace

void addInitWeightsCommand(CLI::App &app, CommandRunner &run) {
  auto opts = std::make_shared<InitOptions>();
  CLI::App *cmd = app.add_subcommand(
      "init-weights", "Write random weights with the model's HF names (for demos and tests)");
  cmd->add_option("model", opts->model, "the model graph (tp dialect)")->required();
  cmd->add_option("-o,--output", opts->output, "the .safetensors file to write")->required();
  cmd->add_option("--seed", opts->seed, "the seed (the binaries' --random-weights SEED)")
      ->required();
  cmd->add_option("--dtype", opts->dtype, "f32 or bf16")->check(CLI::IsMember({"f32", "bf16"}));
  cmd->callback([opts, &run] {
    run = [opts]() -> int {
      Session session;
      OwningOpRef<ModuleOp> module = session.loadModel(opts->model);
      if (!module)
        return 1;
      std::vector<std::pair<std::string, std::vector<int64_t>>> tensors;
      for (auto param : module->getOps<tp::ParamOp>()) {
        auto shape = param.getTensorType().getShape();
        tensors.push_back({param.getSymName().str(), {shape.begin(), shape.end()}});
      }
      std::string error;
      if (!tpcrt::writeRandomCheckpoint(opts->output, opts->seed, tensors,
                                        opts->dtype == "bf16", error)) {
        reportError(error);
        return 1;
      }
      llvm::outs() << fmt::format("wrote {} tensors to {} ({}, seed {})\n", tensors.size(),
                                  opts->output, opts->dtype, opts->seed);
      return 0;
    };
  });
}

} // namespace tpc
