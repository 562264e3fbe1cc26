// tpc launch's options (the launcher is lib/Driver/Launch.cpp).
#include "Commands.h"

#include <fmt/core.h>

namespace tpc {

using namespace driver;

void addLaunchCommand(CLI::App &app, CommandRunner &run) {
  auto opts = std::make_shared<LaunchOptions>();
  CLI::App *cmd = app.add_subcommand(
      "launch", "Run N local ranks of a compiled binary (RANK, WORLD_SIZE, LOCAL_RANK set)");
  cmd->add_option("-n,--nproc", opts->ranks, "how many ranks")->required();
  cmd->add_option("--rendezvous-dir", opts->rendezvous,
                  "where the ranks meet (default: a fresh directory under /tmp)");
  // Everything from the binary on is the rank's command line, untouched.
  cmd->prefix_command();
  cmd->footer("  BINARY ARGS...              the binary each rank runs, and its arguments");
  cmd->callback([opts, cmd, &run] {
    opts->command = cmd->remaining();
    run = [opts]() -> int {
      if (opts->command.empty()) {
        reportError("tpc launch needs the binary to run: tpc launch -n N BINARY ARGS...");
        return 1;
      }
      if (opts->ranks < 1) {
        reportError(fmt::format("-n must be at least 1, got {}", opts->ranks));
        return 1;
      }
      return launchRanks(*opts);
    };
  });
}

} // namespace tpc
