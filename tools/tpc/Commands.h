// The tpc subcommands: each registers its CLI11 options and returns the exit code to use.
// What they run lives in lib/Driver and lib/Analysis; here are options and printing only.
#ifndef TPC_TOOLS_TPC_COMMANDS_H
#define TPC_TOOLS_TPC_COMMANDS_H

#include "tpc/Driver/Checkpoint.h"
#include "tpc/Driver/Compile.h"
#include "tpc/Driver/Run.h"

#include <CLI/CLI.hpp>

#include <functional>
#include <string>

namespace tpc {

/// Adds a subcommand; `run` is set to what runs it once CLI11 has parsed the options.
using CommandRunner = std::function<int()>;

/// --plan, --tp, --strategies and the model: what every command that applies a plan takes.
void addPlanArgs(CLI::App *cmd, driver::PlanArgs &args);
/// addPlanArgs, and --target, --sequence-parallel, --no-fold, --fuse and --weights-dtype.
void addProgramArgs(CLI::App *cmd, driver::ProgramArgs &args);
/// --weights-dtype: the type the binary holds its matrices in (tp-weight-storage's option).
void addWeightsDtype(CLI::App *cmd, std::string &weights);

/// What tpc run and tpc serve take alike: the checkpoint, --tp, --target, --plan,
/// --sequence-parallel, --weights-dtype and --no-cache.
void addCheckpointArgs(CLI::App *cmd, driver::RunBuild &o);

/// --nnodes, --node-rank, --master-addr, --master-port and --nproc-per-node: the machines a
/// job spans, as torchrun takes them (tpc launch, run and serve).
void addNodeArgs(CLI::App *cmd, driver::NodeOptions &nodes);

void addCheckCommand(CLI::App &app, CommandRunner &run);
void addAnalyzeCommand(CLI::App &app, CommandRunner &run);
void addCompileCommand(CLI::App &app, CommandRunner &run);
void addLaunchCommand(CLI::App &app, CommandRunner &run);
void addInitWeightsCommand(CLI::App &app, CommandRunner &run);
void addImportCommand(CLI::App &app, CommandRunner &run);
void addRunCommand(CLI::App &app, CommandRunner &run);
void addBenchCommand(CLI::App &app, CommandRunner &run);
void addServeCommand(CLI::App &app, CommandRunner &run);
void addSuggestCommand(CLI::App &app, CommandRunner &run);

} // namespace tpc

#endif // TPC_TOOLS_TPC_COMMANDS_H
