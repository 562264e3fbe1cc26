// The tpc subcommands: each registers its CLI11 options and returns the exit code to use.
#ifndef TPC_TOOLS_TPC_COMMANDS_H
#define TPC_TOOLS_TPC_COMMANDS_H

#include <CLI/CLI.hpp>

#include <functional>

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

void addCheckCommand(CLI::App &app, CommandRunner &run);
void addAnalyzeCommand(CLI::App &app, CommandRunner &run);
void addCompileCommand(CLI::App &app, CommandRunner &run);
void addLaunchCommand(CLI::App &app, CommandRunner &run);
void addInitWeightsCommand(CLI::App &app, CommandRunner &run);
void addImportCommand(CLI::App &app, CommandRunner &run);

} // namespace tpc

#endif // TPC_TOOLS_TPC_COMMANDS_H
