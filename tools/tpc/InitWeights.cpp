// tpc init-weights' options and output (lib/Driver/InitWeights.cpp writes the weights): a
// safetensors checkpoint of seeded random weights under the model's HF names, the same values
// the binaries' --random-weights generate.
#include "Commands.h"

#include "tpc/Driver/InitWeights.h"

#include "llvm/Support/raw_ostream.h"

#include <fmt/core.h>

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
      std::optional<size_t> tensors = driver::writeRandomWeights(
          opts->model, opts->output, opts->seed, opts->dtype == "bf16");
      if (!tensors)
        return 1;
      llvm::outs() << fmt::format("wrote {} tensors to {} ({}, seed {})\n", *tensors,
                                  opts->output, opts->dtype, opts->seed);
      return 0;
    };
  });
}

} // namespace tpc
