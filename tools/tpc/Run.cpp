// tpc run: a checkpoint directory in, generated output out, in one command: import its
// config.json, apply the plan, compile (or take the binary from the cache), and launch the
// ranks with the checkpoint's weights, rank 0's output streamed as it comes.
#include "Commands.h"
#include "FrontHalf.h"
#include "Session.h"

#include "tpc/Driver/Build.h"
#include "tpc/Target/TargetInfo.h"
#include "tpc/Import/Importer.h"

#include "llvm/ADT/StringExtras.h"
#include "llvm/Support/FileSystem.h"
#include "llvm/Support/MemoryBuffer.h"
#include "llvm/Support/Path.h"
#include "llvm/Support/Process.h"
#include "llvm/Support/SHA256.h"
#include "llvm/Support/raw_ostream.h"

#include <fmt/core.h>


namespace tpc {

namespace {

struct RunOptions {
  std::string checkpoint, plan = "auto", target = "cpu";
  std::string prompt, promptFile, promptIds, system;
  int64_t tp = 1, maxNewTokens = 64;
  bool chat = false, noCache = false, sequenceParallel = false;
};

/// Where compiled binaries are kept: TPC_CACHE_DIR, else $XDG_CACHE_HOME/tpc, else
/// ~/.cache/tpc.
std::string cacheRoot() {
  if (std::optional<std::string> dir = llvm::sys::Process::GetEnv("TPC_CACHE_DIR"))
    if (!dir->empty())
      return *dir;
  llvm::SmallString<256> root;
  if (std::optional<std::string> xdg = llvm::sys::Process::GetEnv("XDG_CACHE_HOME");
      xdg && !xdg->empty())
    root = *xdg;
  else if (std::optional<std::string> home = llvm::sys::Process::GetEnv("HOME"))
    llvm::sys::path::append(root, *home, ".cache");
  else
    root = "/tmp";
  llvm::sys::path::append(root, "tpc");
  return root.str().str();
}

/// "path size mtime" of a file that makes the binary, or "path missing".
std::string stamp(const std::string &path) {
  llvm::sys::fs::file_status status;
  if (llvm::sys::fs::status(path, status))
    return path + " missing";
  return fmt::format("{} {} {}", path, status.getSize(),
                     status.getLastModificationTime().time_since_epoch().count());
}

/// Everything that decides the compiled binary, one fact per line: tpc itself and the
/// runtime it links (by size and time, so a rebuilt tpc compiles again), the checkpoint's
/// config.json, the plan, tp, target and sequence parallelism.
std::string cacheKey(const RunOptions &o, llvm::StringRef config, llvm::StringRef plan) {
  std::string key = "tpc 0.1.0\n";
  key += stamp(llvm::sys::fs::getMainExecutable(nullptr, nullptr)) + "\n";
  for (const std::string &input : target::findTarget(o.target)->runtimeLibraries())
    key += stamp(input) + "\n";
  key += fmt::format("tp {}\ntarget {}\nsequence parallel {}\n", o.tp, o.target,
                     o.sequenceParallel ? "on" : "off");
  key += "plan " + o.plan + "\n" + plan.str() + "\n";
  key += "config.json\n" + config.str();
  return key;
}

std::optional<std::string> readFile(const std::string &path, const char *what) {
  llvm::ErrorOr<std::unique_ptr<llvm::MemoryBuffer>> buffer =
      llvm::MemoryBuffer::getFile(path, /*IsText=*/true);
  if (!buffer) {
    reportError(fmt::format("cannot read {} {}: {}", what, path, buffer.getError().message()));
    return std::nullopt;
  }
  return (*buffer)->getBuffer().str();
}

/// Imports the checkpoint and compiles it into `dir`; the binary's path, or none (errors
/// reported).
std::optional<std::string> compileInto(const RunOptions &o, const std::string &configPath,
                                       const std::string &dir) {
  std::string modelPath;
  {
    Session session;
    mlir::FailureOr<std::string> text = import::importConfig(configPath, &session.context());
    if (mlir::failed(text))
      return std::nullopt;
    llvm::SmallString<256> path(dir);
    llvm::sys::path::append(path, "model.mlir");
    modelPath = path.str().str();
    if (!writeAtomically(modelPath, *text))
      return std::nullopt;
  }
  CompileArgs args;
  args.model = modelPath;
  args.plan = o.plan;
  args.tp = o.tp;
  args.target = o.target;
  args.sequenceParallel = o.sequenceParallel;
  args.output = dir;
  if (compileModel(args, llvm::errs()) != 0)
    return std::nullopt;
  return args.binary;
}

/// The binary for `o`: from the cache when an identical run compiled it before, else
/// compiled now (into the cache, or a temporary directory with --no-cache, removed by the
/// caller through `scratch`).
std::optional<std::string> binaryFor(const RunOptions &o, const std::string &configPath,
                                     std::string &scratch) {
  std::optional<std::string> config = readFile(configPath, "the checkpoint's config");
  if (!config)
    return std::nullopt;
  std::string planText;
  if (o.plan != "auto") {
    std::optional<std::string> text = readFile(o.plan, "the plan");
    if (!text)
      return std::nullopt;
    planText = *text;
  }
  if (o.noCache) {
    llvm::SmallString<128> dir;
    if (std::error_code ec = llvm::sys::fs::createUniqueDirectory("tpc-run", dir)) {
      reportError("cannot create a directory to compile into: " + ec.message());
      return std::nullopt;
    }
    scratch = dir.str().str();
    llvm::errs() << "tpc run: compiling (--no-cache)\n";
    return compileInto(o, configPath, scratch);
  }
  std::string key = cacheKey(o, *config, planText);
  std::string digest = llvm::toHex(llvm::SHA256::hash(llvm::arrayRefFromStringRef(key)),
                                   /*LowerCase=*/true);
  llvm::SmallString<256> entry(cacheRoot());
  llvm::sys::path::append(entry, "run", digest.substr(0, 24));
  llvm::SmallString<256> done(entry);
  llvm::sys::path::append(done, "binary");
  // An entry is complete once its "binary" file names the binary built inside it: it is the
  // last thing written, atomically.
  if (std::optional<std::string> binary = [&]() -> std::optional<std::string> {
        auto buffer = llvm::MemoryBuffer::getFile(done);
        if (!buffer)
          return std::nullopt;
        std::string path = llvm::StringRef((*buffer)->getBuffer()).trim().str();
        return llvm::sys::fs::can_execute(path) ? std::optional<std::string>(path)
                                                : std::nullopt;
      }()) {
    llvm::errs() << fmt::format("tpc run: compiled before, taken from the cache ({}); nothing "
                                "to compile\n",
                                entry.str());
    return binary;
  }
  if (std::error_code ec = llvm::sys::fs::create_directories(entry)) {
    reportError(fmt::format("cannot create the cache directory {}: {} (TPC_CACHE_DIR moves "
                            "it; --no-cache compiles without it)",
                            entry.str(), ec.message()));
    return std::nullopt;
  }
  llvm::errs() << fmt::format("tpc run: compiling into the cache ({})\n", entry.str());
  llvm::SmallString<256> keyPath(entry);
  llvm::sys::path::append(keyPath, "key.txt");
  if (!writeAtomically(keyPath.str().str(), key))
    return std::nullopt;
  std::optional<std::string> binary = compileInto(o, configPath, entry.str().str());
  if (!binary || !writeAtomically(done.str().str(), *binary + "\n"))
    return std::nullopt;
  return binary;
}

int run(const RunOptions &o) {
  int given = !o.prompt.empty() + !o.promptFile.empty() + !o.promptIds.empty();
  if (given != 1) {
    reportError("tpc run: give exactly one of --prompt, --prompt-file and --prompt-ids");
    return 2;
  }
  if (o.tp < 1) {
    reportError(fmt::format("--tp must be at least 1, got {}", o.tp));
    return 2;
  }
  if (o.maxNewTokens < 1) {
    reportError(fmt::format("--max-new-tokens must be at least 1, got {}", o.maxNewTokens));
    return 2;
  }
  if (!o.promptIds.empty() && (o.chat || !o.system.empty())) {
    reportError("tpc run: --chat and --system render text through the chat template; "
                "--prompt-ids are tokens already");
    return 2;
  }
  if (!o.system.empty() && !o.chat) {
    reportError("tpc run: --system is the system message of a --chat conversation");
    return 2;
  }
  if (!llvm::sys::fs::is_directory(o.checkpoint)) {
    reportError(fmt::format("tpc run: {} is not a checkpoint directory (config.json and "
                            "*.safetensors)",
                            o.checkpoint));
    return 2;
  }
  llvm::SmallString<256> configPath(o.checkpoint);
  llvm::sys::path::append(configPath, "config.json");
  std::string scratch;
  std::optional<std::string> binary = binaryFor(o, configPath.str().str(), scratch);
  int status = 1;
  if (binary) {
    LaunchOptions launch;
    launch.ranks = int(o.tp);
    launch.rankZeroRaw = true;
    launch.command = {*binary, "--weights", o.checkpoint, "--max-new-tokens",
                      std::to_string(o.maxNewTokens)};
    auto add = [&](const char *flag, const std::string &value) {
      if (!value.empty())
        launch.command.insert(launch.command.end(), {flag, value});
    };
    add("--prompt", o.prompt);
    add("--prompt-file", o.promptFile);
    add("--prompt-ids", o.promptIds);
    add("--system", o.system);
    if (o.chat)
      launch.command.push_back("--chat");
    status = launchRanks(launch);
  }
  if (!scratch.empty())
    llvm::sys::fs::remove_directories(scratch);
  return status;
}

} // namespace

void addRunCommand(CLI::App &app, CommandRunner &runner) {
  auto opts = std::make_shared<RunOptions>();
  CLI::App *cmd = app.add_subcommand(
      "run", "Import, compile (once; cached) and run a checkpoint directory on local ranks: "
             "a prompt in, generated text out");
  cmd->add_option("checkpoint", opts->checkpoint,
                  "the checkpoint directory: config.json, *.safetensors, tokenizer.json")
      ->required();
  cmd->add_option("--tp", opts->tp, "tensor-parallel size: how many local ranks (default 1)");
  cmd->add_option("--target", opts->target, "cpu (default) or cuda")
      ->check(CLI::IsMember(target::targetNames()));
  cmd->add_option("--plan", opts->plan,
                  "a tp_plan JSON file, or auto for transformers' own plan (default)");
  cmd->add_flag("--sequence-parallel", opts->sequenceParallel,
                "split norms and residuals by tokens between the collectives");
  cmd->add_option("--prompt", opts->prompt, "the prompt, as text");
  cmd->add_option("--prompt-file", opts->promptFile, "a file holding the prompt text");
  cmd->add_option("--prompt-ids", opts->promptIds,
                  "the prompt as token ids, comma-separated (prints ids back)");
  cmd->add_option("--max-new-tokens", opts->maxNewTokens,
                  "the most tokens to generate, not counting the prompt (default 64); "
                  "generation stops earlier at an end-of-sequence token, as generate does");
  cmd->add_flag("--chat", opts->chat,
                "render the prompt as a user message through the checkpoint's chat template, "
                "with the generation prompt (apply_chat_template)");
  cmd->add_option("--system", opts->system, "with --chat: a system message first");
  cmd->add_flag("--no-cache", opts->noCache,
                "compile into a temporary directory, removed afterwards, instead of the "
                "cache (TPC_CACHE_DIR, else $XDG_CACHE_HOME/tpc, else ~/.cache/tpc)");
  cmd->footer("Decoding is greedy (do_sample=False). The binary compiled for a checkpoint's "
              "config, plan, tp and target is kept in the cache: the same command again "
              "compiles nothing.");
  cmd->callback([opts, &runner] { runner = [opts] { return run(*opts); }; });
}

} // namespace tpc
