// The tpc subcommands: each registers its CLI11 options and returns the exit code to use.
#ifndef TPC_TOOLS_TPC_COMMANDS_H
#define TPC_TOOLS_TPC_COMMANDS_H

#include <CLI/CLI.hpp>

#include <functional>
#include <string>
#include <vector>

namespace tpc {

/// Adds a subcommand; `run` is set to what runs it once CLI11 has parsed the options.
using CommandRunner = std::function<int()>;

/// What every command that applies a plan takes: the model, --plan, --tp, --strategies.
struct PlanArgs {
  std::string model, plan, strategies;
  int64_t tp = 0;
};
void addPlanArgs(CLI::App *cmd, PlanArgs &args);
/// Reports a --tp below 1 (a usage error); true when the value is fine.
bool checkTpArg(const PlanArgs &args);

/// What `tpc launch` takes: how many ranks, where they meet, the binary and its arguments.
struct LaunchOptions {
  int ranks = 0;
  std::string rendezvous;
  std::vector<std::string> command;
  /// Rank 0's output as it comes, unprefixed (tpc run's streamed text); the others' prefixed.
  bool rankZeroRaw = false;
};
/// Runs the ranks, each's output prefixed "[rank R] " line by line; the first failure stops
/// them all. The exit code.
int launchRanks(const LaunchOptions &options);

void addCheckCommand(CLI::App &app, CommandRunner &run);
void addAnalyzeCommand(CLI::App &app, CommandRunner &run);
void addCompileCommand(CLI::App &app, CommandRunner &run);
void addLaunchCommand(CLI::App &app, CommandRunner &run);
void addInitWeightsCommand(CLI::App &app, CommandRunner &run);
void addImportCommand(CLI::App &app, CommandRunner &run);
void addRunCommand(CLI::App &app, CommandRunner &run);

} // namespace tpc

#endif // TPC_TOOLS_TPC_COMMANDS_H
