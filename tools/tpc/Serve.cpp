// tpc serve: a checkpoint behind an OpenAI-compatible HTTP server. Compiles as tpc run does
// (through the same cache), launches the ranks with --serve, and stays in front of them: a
// SIGTERM or Ctrl-C goes to rank 0, which drains and stops its peers; a rank that fails gives
// rank 0 its --timeout to answer its clients before the group is stopped.
#include "Commands.h"
#include "Forwarded.h"

#include <fmt/core.h>

#include <cstdlib>

namespace tpc {

namespace {

struct ServeOptions : driver::RunBuild {
  driver::NodeOptions nodes;
  std::string host = "127.0.0.1";
  int port = 8000;
  int64_t timeout = 30;
  std::vector<std::string> apiKeys;
  /// The binary's flags tpc serve passes on as given (the binary checks them): the engine's
  /// limits, the model's name, the queue and the drain.
  ForwardedFlags flags;
};

int serve(const ServeOptions &o) {
  if (o.tp < 1 || o.pp < 1) {
    reportError(o.tp < 1 ? fmt::format("--tp must be at least 1, got {}", o.tp)
                         : fmt::format("--pp must be at least 1, got {}", o.pp));
    return 2;
  }
  if (o.port < 0 || o.port > 65535) {
    reportError(fmt::format("--port must be from 0 to 65535, got {}", o.port));
    return 2;
  }
  if (o.timeout < 1) {
    reportError(fmt::format("--timeout must be at least 1 second, got {}", o.timeout));
    return 2;
  }
  driver::LaunchOptions launch;
  launch.name = "tpc serve";
  launch.nodes = o.nodes;
  launch.rankZeroRaw = true; // "listening on HOST:PORT" as it comes
  launch.forwardSignals = true;
  launch.failureGraceSeconds = int(o.timeout) + 5;
  std::string host = o.host.find(':') != std::string::npos ? "[" + o.host + "]" : o.host;
  std::vector<std::string> command = {"--weights", o.checkpoint,
                                      "--serve", host + ":" + std::to_string(o.port),
                                      "--timeout", std::to_string(o.timeout)};
  for (std::string &argument : o.flags.arguments())
    command.push_back(std::move(argument));
  if (o.verbose)
    command.push_back("--verbose");
  // The keys reach the ranks through their environment (TPC_API_KEY, with any the caller's
  // has), never their command lines, which every user of the machine can list.
  if (!o.apiKeys.empty()) {
    std::string keys = std::getenv("TPC_API_KEY") ? std::getenv("TPC_API_KEY") : "";
    for (const std::string &key : o.apiKeys)
      keys += (keys.empty() ? "" : ",") + key;
    setenv("TPC_API_KEY", keys.c_str(), 1);
  }
  return launchCheckpoint("tpc serve", o, launch, command);
}

} // namespace

void addServeCommand(CLI::App &app, CommandRunner &runner) {
  auto opts = std::make_shared<ServeOptions>();
  CLI::App *cmd = app.add_subcommand(
      "serve", "Import, compile (once; cached) and serve a checkpoint on local ranks through "
               "an OpenAI-compatible HTTP API (/v1/completions, /v1/chat/completions)");
  addCheckpointArgs(cmd, *opts);
  addNodeArgs(cmd, opts->nodes);
  cmd->add_option("--host", opts->host, "the address to listen on (default 127.0.0.1)");
  cmd->add_option("--port", opts->port,
                  "the port to listen on (default 8000; 0: any free one, printed as "
                  "'listening on HOST:PORT')");
  opts->flags.addTo(cmd, tpcrt::flag_use::Serve);
  cmd->add_option("--api-key", opts->apiKeys,
                  "require 'Authorization: Bearer KEY' on /v1/* and /metrics (repeatable: any "
                  "of them; TPC_API_KEY adds comma-separated ones); passed to the ranks in "
                  "their environment, not their command lines")
      ->type_name("KEY")
      ->allow_extra_args(false);
  cmd->add_option("--timeout", opts->timeout,
                  "seconds a rank waits for a lost peer before the server fails (and exits "
                  "non-zero, for a supervisor to restart it; default 30)");
  cmd->add_flag("-v,--verbose", opts->verbose,
                "show the compiler's stages, warnings and notes, and say how rank 0 computes: "
                "its kernels, BLAS core and weight types");
  cmd->footer("Endpoints: POST /v1/completions, POST /v1/chat/completions (streamed with "
              "\"stream\": true), GET /v1/models, GET /health, GET /metrics (Prometheus). "
              "Sampling defaults come from the checkpoint's generation_config.json (greedy "
              "unless it sets do_sample). See docs/serve.md.");
  cmd->callback([opts, &runner] { runner = [opts] { return serve(*opts); }; });
}

} // namespace tpc
