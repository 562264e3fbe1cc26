// tpc serve: a checkpoint behind an OpenAI-compatible HTTP server. Compiles as tpc run does
// (through the same cache), launches the ranks with --serve, and stays in front of them: a
// SIGTERM or Ctrl-C goes to rank 0, which drains and stops its peers; a rank that fails gives
// rank 0 its --timeout to answer its clients before the group is stopped.
#include "Commands.h"

#include <fmt/core.h>

namespace tpc {

namespace {

struct ServeOptions : driver::RunBuild {
  std::string host = "127.0.0.1", servedModelName;
  int port = 8000;
  int64_t timeout = 30, drainSeconds = 30;
  // The engine's limits, passed on as given (the binary checks them).
  std::string maxNumSeqs, maxBatchTokens, maxModelLen, kvCacheTokens, kvCacheMemory, maxQueue;
};

int serve(const ServeOptions &o) {
  if (o.tp < 1) {
    reportError(fmt::format("--tp must be at least 1, got {}", o.tp));
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
  launch.rankZeroRaw = true; // "listening on HOST:PORT" as it comes
  launch.forwardSignals = true;
  launch.failureGraceSeconds = int(o.timeout) + 5;
  std::string host = o.host.find(':') != std::string::npos ? "[" + o.host + "]" : o.host;
  std::vector<std::string> command = {"--weights", o.checkpoint,
                                      "--serve", host + ":" + std::to_string(o.port),
                                      "--timeout", std::to_string(o.timeout),
                                      "--drain-seconds", std::to_string(o.drainSeconds)};
  auto add = [&](const char *flag, const std::string &value) {
    if (!value.empty())
      command.insert(command.end(), {flag, value});
  };
  add("--served-model-name", o.servedModelName);
  add("--max-num-seqs", o.maxNumSeqs);
  add("--max-batch-tokens", o.maxBatchTokens);
  add("--max-seq-len", o.maxModelLen);
  add("--kv-cache-tokens", o.kvCacheTokens);
  add("--kv-cache-memory", o.kvCacheMemory);
  add("--max-queue", o.maxQueue);
  if (o.verbose)
    command.push_back("--verbose");
  return launchCheckpoint("tpc serve", o, launch, command);
}

} // namespace

void addServeCommand(CLI::App &app, CommandRunner &runner) {
  auto opts = std::make_shared<ServeOptions>();
  CLI::App *cmd = app.add_subcommand(
      "serve", "Import, compile (once; cached) and serve a checkpoint on local ranks through "
               "an OpenAI-compatible HTTP API (/v1/completions, /v1/chat/completions)");
  addCheckpointArgs(cmd, *opts);
  cmd->add_option("--host", opts->host, "the address to listen on (default 127.0.0.1)");
  cmd->add_option("--port", opts->port,
                  "the port to listen on (default 8000; 0: any free one, printed as "
                  "'listening on HOST:PORT')");
  cmd->add_option("--served-model-name", opts->servedModelName,
                  "the model's name in the API (default: the checkpoint's directory name)");
  cmd->add_option("--max-num-seqs", opts->maxNumSeqs,
                  "run up to N requests in one step (default 8)")
      ->type_name("N");
  cmd->add_option("--max-batch-tokens", opts->maxBatchTokens,
                  "the most tokens one step computes; longer prompts are prefilled in chunks "
                  "(default --max-model-len)")
      ->type_name("N");
  cmd->add_option("--max-model-len", opts->maxModelLen,
                  "the longest request, prompt and completion (default 2048, or the model's "
                  "max_position_embeddings where fewer)")
      ->type_name("N");
  cmd->add_option("--kv-cache-tokens", opts->kvCacheTokens,
                  "the KV cache's size in tokens, shared by the requests (default "
                  "--max-num-seqs x --max-model-len)")
      ->type_name("N");
  cmd->add_option("--kv-cache-memory", opts->kvCacheMemory,
                  "the KV cache's size in bytes on each rank, instead of --kv-cache-tokens")
      ->type_name("BYTES");
  cmd->add_option("--max-queue", opts->maxQueue,
                  "requests that may wait beyond the running ones; more get 503 with "
                  "Retry-After (default 64)")
      ->type_name("N");
  cmd->add_option("--timeout", opts->timeout,
                  "seconds a rank waits for a lost peer before the server fails (and exits "
                  "non-zero, for a supervisor to restart it; default 30)");
  cmd->add_option("--drain-seconds", opts->drainSeconds,
                  "on SIGTERM or Ctrl-C, how long requests in flight may finish before they "
                  "are aborted (default 30)");
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
