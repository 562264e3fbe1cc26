// tpc compile and tpc check's options (lib/Driver/Compile.cpp does the work).
#include "Commands.h"

#include "tpc/Target/TargetInfo.h"

namespace tpc {

using namespace driver;

void addPlanArgs(CLI::App *cmd, PlanArgs &args) {
  cmd->add_option("model", args.model, "the model graph (tp dialect)")->required();
  cmd->add_option("--plan", args.plan,
                  "plan.json, a config.json with base_model_tp_plan, or auto / auto-ep "
                  "(transformers' plan for an imported model)")
      ->required();
  cmd->add_option("--tp", args.tp, "ranks on the tp axis")->required();
  cmd->add_option("--strategies", args.strategies, "a JSON file of custom strategies");
  cmd->add_option("--pp", args.pp, "pipeline stages, each of --tp ranks (pp x tp ranks in all)");
  cmd->add_option("--pp-split", args.ppSplit,
                  "decoder layers per stage, N0,N1,... (default: balanced by the cost model)")
      ->delimiter(',');
}

void addProgramArgs(CLI::App *cmd, ProgramArgs &args) {
  addPlanArgs(cmd, args);
  std::string targets;
  for (const target::TargetInfo *target : target::allTargets())
    targets += (targets.empty() ? "" : " or ") + target->name().str() + " (" +
               target->summary().str() + ")";
  cmd->add_option("--target", args.target, targets)
      ->check(CLI::IsMember(target::targetNames()));
  cmd->add_flag("--sequence-parallel", args.sequenceParallel,
                "split the residual stream by tokens where the token count divides by tp");
  cmd->add_flag("--no-fold", args.noFold,
                "leave out tp-fold-redistribute (to run what folding would remove)");
  cmd->add_option("--fuse", args.fuse,
                  "what the decision passes fuse, instead of the target's choice: none, or a "
                  "list of elementwise, norm, rotary and linears (cuda's default is all, "
                  "cpu's none)");
  addWeightsDtype(cmd, args.weights);
}

void addWeightsDtype(CLI::App *cmd, std::string &weights) {
  CLI::Option *dtype =
      cmd->add_option("--weights-dtype", weights,
                      "the type the CPU binary holds its weight matrices in: stored (default: "
                      "the checkpoint's: f32, bf16, f16, or a GGUF file's q8_0, q4_0, q4_1, "
                      "q5_0, q5_1, q4_k, q5_k, q6_k or mxfp4 blocks; the arithmetic is fp32 either way), f32, bf16 or f16 "
                      "(rounded at load), q8_0 or q4_0 (quantized at load, as llama.cpp "
                      "does); the GPU holds bf16")
          ->check(CLI::IsMember({"stored", "f32", "fp32", "bf16", "f16", "fp16", "q8_0", "q4_0"}));
  cmd->add_option("--quantize", weights,
                  "q8_0 or q4_0: the same as --weights-dtype q8_0 or q4_0 (weight-only "
                  "quantization at load, equal to llama.cpp's quantizer; activations stay fp32)")
      ->check(CLI::IsMember({"q8_0", "q4_0"}))
      ->excludes(dtype);
}

void addCompileCommand(CLI::App &app, CommandRunner &run) {
  auto opts = std::make_shared<CompileArgs>();
  CLI::App *cmd = app.add_subcommand(
      "compile", "Compile a model and plan into a per-rank binary (out/<model>)");
  addProgramArgs(cmd, *opts);
  cmd->add_option("-o,--output", opts->output, "the output directory")->required();
  cmd->add_flag("--emit-only", opts->emitOnly,
                "write the generated source and stop: no compiler is run");
  cmd->callback([opts, &run] { run = [opts] { return compileModel(*opts, llvm::outs()); }; });
}

} // namespace tpc
