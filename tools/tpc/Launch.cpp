// tpc launch's options (the launcher is lib/Driver/Launch.cpp).
#include "Commands.h"

#include <fmt/core.h>

namespace tpc {

using namespace driver;

void addNodeArgs(CLI::App *cmd, NodeOptions &nodes) {
  cmd->add_option("--nnodes", nodes.nnodes,
                  "how many machines (nodes) the job spans; each runs this command with its "
                  "own --node-rank (default 1)");
  cmd->add_option("--node-rank", nodes.nodeRank, "this machine's node, 0 to nnodes-1 (default 0)");
  cmd->add_option("--master-addr", nodes.masterAddr,
                  "the address of node 0, where rank 0 serves the rendezvous (needed with "
                  "--nnodes above 1)");
  cmd->add_option("--master-port", nodes.masterPort,
                  "the port of rank 0's rendezvous store (default 29500)");
  cmd->add_option("--nproc-per-node", nodes.nprocPerNode,
                  "ranks on each node: one count, or one per node (\"2,1\"); default: the "
                  "ranks divided by the nodes")
      ->type_name("N[,N...]");
}

void addLaunchCommand(CLI::App &app, CommandRunner &run) {
  auto opts = std::make_shared<LaunchOptions>();
  CLI::App *cmd = app.add_subcommand(
      "launch", "Run the ranks of a compiled binary, on this machine or on several (RANK, "
                "WORLD_SIZE, LOCAL_RANK set as torchrun does)");
  CLI::Option *nproc = cmd->add_option("-n,--nproc", opts->ranks,
                  "how many ranks in all (with --nnodes, every node's; optional where "
                  "--nproc-per-node says)");
  addNodeArgs(cmd, opts->nodes);
  cmd->add_option("--rendezvous-dir", opts->rendezvous,
                  "where the ranks meet (default: a fresh directory under /tmp)");
  // Everything from the binary on is the rank's command line, untouched.
  cmd->prefix_command();
  cmd->footer("  BINARY ARGS...              the binary each rank runs, and its arguments");
  cmd->callback([opts, cmd, nproc, &run] {
    opts->command = cmd->remaining();
    bool given = nproc->count() > 0;
    run = [opts, given]() -> int {
      if (opts->command.empty()) {
        reportError("tpc launch needs the binary to run: tpc launch -n N BINARY ARGS...");
        return 1;
      }
      if (given && opts->ranks < 1) {
        reportError(fmt::format("-n must be at least 1, got {}", opts->ranks));
        return 1;
      }
      if (!given && !(opts->nodes.spansHosts() && !opts->nodes.nprocPerNode.empty())) {
        reportError("tpc launch needs -n N (or, across nodes, --nproc-per-node)");
        return 1;
      }
      return launchRanks(*opts);
    };
  });
}

} // namespace tpc
