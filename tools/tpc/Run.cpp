// tpc run: a checkpoint directory in, generated output out, in one command: import its
// config.json, apply the plan, compile (or take the binary from the cache), and launch the
// ranks with the checkpoint's weights, rank 0's output streamed as it comes.
#include "Commands.h"
#include "Forwarded.h"

#include "tpc/Driver/Run.h"
#include "tpc/Target/TargetInfo.h"

#include <fmt/core.h>

namespace tpc {

using namespace driver;
using tpcrt::FlagId;

namespace {

struct RunOptions : driver::RunBuild {
  driver::NodeOptions nodes;
  /// The binary's flags tpc run passes on as given (the binary checks their values and fills
  /// in generation_config.json's defaults).
  ForwardedFlags flags;
};

/// What a longer answer than the binary's default suits: tpc run is the command people read.
constexpr const char *kRunMaxNewTokens = "64";

/// The mistakes that need no compile to find, refused before one starts (the binary would
/// refuse them too, later).
std::string misuse(const RunOptions &o) {
  const ForwardedFlags &f = o.flags;
  int prompts = f.given(FlagId::Prompt) + f.given(FlagId::PromptFile) +
                f.given(FlagId::PromptIds) + f.given(FlagId::Requests);
  if (prompts != 1)
    return "tpc run: give exactly one of --prompt, --prompt-file, --prompt-ids and --requests";
  if (f.given(FlagId::Requests) != f.given(FlagId::Output))
    return "tpc run: --requests IN.jsonl and --output OUT.jsonl go together";
  if (o.tp < 1)
    return fmt::format("--tp must be at least 1, got {}", o.tp);
  if (o.pp < 1)
    return fmt::format("--pp must be at least 1, got {}", o.pp);
  // The binary takes 0 (a prefill alone); a person asking for an answer wants one.
  if (const std::string *tokens = f.value(FlagId::MaxNewTokens)) {
    long long count = 0;
    if (llvm::StringRef(*tokens).getAsInteger(10, count) == false && count < 1)
      return fmt::format("--max-new-tokens must be at least 1, got {}", *tokens);
  }
  if (f.given(FlagId::PromptIds) && (f.given(FlagId::Chat) || f.given(FlagId::System)))
    return "tpc run: --chat and --system render text through the chat template; "
           "--prompt-ids are tokens already";
  if (f.given(FlagId::System) && !f.given(FlagId::Chat))
    return "tpc run: --system is the system message of a --chat conversation";
  return "";
}

int run(const RunOptions &o) {
  if (std::string why = misuse(o); !why.empty()) {
    reportError(why);
    return 2;
  }
  std::vector<std::string> command = {"--weights", o.checkpoint};
  for (std::string &argument : o.flags.arguments())
    command.push_back(std::move(argument));
  if (o.verbose)
    command.push_back("--verbose");
  driver::LaunchOptions launch;
  launch.name = "tpc run";
  launch.nodes = o.nodes;
  launch.rankZeroRaw = true;
  return launchCheckpoint("tpc run", o, launch, command);
}

} // namespace

void addCheckpointArgs(CLI::App *cmd, driver::RunBuild &o) {
  cmd->add_option("checkpoint", o.checkpoint,
                  "the checkpoint: a directory (config.json, *.safetensors, tokenizer.json), "
                  "or a .gguf file (or a directory holding one)")
      ->required();
  cmd->add_option("--tp", o.tp, "tensor-parallel size: ranks sharing each layer (default 1)");
  cmd->add_option("--pp", o.pp,
                  "pipeline stages, each of --tp ranks: pp x tp ranks over every node "
                  "(default 1)");
  cmd->add_option("--pp-split", o.ppSplit,
                  "decoder layers per stage, N0,N1,... (default: balanced by the cost model)")
      ->delimiter(',');
  cmd->add_option("--target", o.target, "cpu (default) or cuda")
      ->check(CLI::IsMember(target::targetNames()));
  cmd->add_option("--plan", o.plan,
                  "a tp_plan JSON file, or auto for transformers' own plan (default)");
  cmd->add_flag("--sequence-parallel", o.sequenceParallel,
                "split norms and residuals by tokens between the collectives");
  addWeightsDtype(cmd, o.weights);
  cmd->add_flag("--no-cache", o.noCache,
                "compile into a temporary directory, removed afterwards, instead of the "
                "cache (TPC_CACHE_DIR, else $XDG_CACHE_HOME/tpc, else ~/.cache/tpc)");
}

void addRunCommand(CLI::App &app, CommandRunner &runner) {
  auto opts = std::make_shared<RunOptions>();
  CLI::App *cmd = app.add_subcommand(
      "run", "Import, compile (once; cached) and run a checkpoint on local ranks: a prompt "
             "in, generated text out");
  addCheckpointArgs(cmd, *opts);
  addNodeArgs(cmd, opts->nodes);
  opts->flags.addTo(cmd, tpcrt::flag_use::Run, {{FlagId::MaxNewTokens, kRunMaxNewTokens}});
  cmd->add_flag("-v,--verbose", opts->verbose,
                "show the compiler's stages, warnings and notes, and say how rank 0 computes: "
                "its kernels, BLAS core and weight types");
  cmd->footer("Decoding is greedy unless --temperature (or the checkpoint's "
              "generation_config.json, with do_sample) asks for sampling: vLLM's parameters, "
              "on rank 0, which sends every rank its choice. The binary compiled for a "
              "checkpoint's "
              "config, plan, tp and target is kept in the cache: the same command again "
              "compiles nothing.");
  cmd->callback([opts, &runner] { runner = [opts] { return run(*opts); }; });
}

} // namespace tpc
