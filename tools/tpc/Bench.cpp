// tpc bench: offline throughput of a checkpoint through the engine, at several concurrencies.
// For each concurrency C it runs the same requests (random prompt ids of --prompt-len from a
// seed, --output-len new tokens each, ignore_eos) with --max-num-seqs C, all arriving at the
// start, and reports output tokens per second, time to first token and time per output token
// (median and p99, from each request's metrics), and the throughput against concurrency 1.
#include "Commands.h"

#include "tpc/Driver/Run.h"

#include "llvm/Support/FileSystem.h"
#include "llvm/Support/MemoryBuffer.h"
#include "llvm/Support/Path.h"
#include "llvm/Support/raw_ostream.h"

#include <fmt/core.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <fstream>
#include <random>
#include <sstream>

namespace tpc {

using namespace driver;

namespace {

struct BenchOptions : driver::RunBuild {
  std::string concurrency = "1,8";
  int64_t promptLen = 32, outputLen = 128, numPrompts = 0;
  uint64_t seed = 0;
};

/// The q-th quantile (0 to 1) of `values`, nearest rank.
double quantile(std::vector<double> values, double q) {
  if (values.empty())
    return 0;
  std::sort(values.begin(), values.end());
  size_t at = size_t(std::max(0.0, std::ceil(q * double(values.size())) - 1));
  return values[std::min(at, values.size() - 1)];
}

struct Result {
  int64_t concurrency = 0, requests = 0, tokens = 0;
  double seconds = 0;
  std::vector<double> ttft, tpot;
};

/// The requests' lines `path` holds, into `result`; false, saying why, when one is missing,
/// an error, or shorter than --output-len.
bool readResults(const std::string &path, int64_t expected, int64_t outputLen, Result &result) {
  std::ifstream in(path);
  std::string line;
  int64_t lines = 0;
  while (std::getline(in, line)) {
    nlohmann::json j = nlohmann::json::parse(line, nullptr, false);
    const nlohmann::json *completionTokens = nullptr, *first = nullptr, *finished = nullptr;
    if (j.is_object() && j.contains("usage") && j["usage"].is_object() &&
        j.contains("metrics") && j["metrics"].is_object()) {
      completionTokens = j["usage"].contains("completion_tokens")
                             ? &j["usage"]["completion_tokens"]
                             : nullptr;
      first = j["metrics"].contains("first_token_ms") ? &j["metrics"]["first_token_ms"] : nullptr;
      finished = j["metrics"].contains("finished_ms") ? &j["metrics"]["finished_ms"] : nullptr;
    }
    if (!completionTokens || !completionTokens->is_number_integer() || !first ||
        !first->is_number() || !finished || !finished->is_number()) {
      reportError(fmt::format("tpc bench: {} holds a line that is no result: {}", path, line));
      return false;
    }
    ++lines;
    int64_t completion = completionTokens->get<int64_t>();
    if (completion != outputLen) { // ignore_eos: only the length ends a request
      reportError(fmt::format("tpc bench: a request ended after {} tokens, not {}: {}",
                              completion, outputLen, line));
      return false;
    }
    double firstMs = first->get<double>(), finishedMs = finished->get<double>();
    result.tokens += completion;
    result.seconds = std::max(result.seconds, finishedMs / 1e3);
    result.ttft.push_back(firstMs);
    if (completion > 1)
      result.tpot.push_back((finishedMs - firstMs) / double(completion - 1));
  }
  if (lines != expected) {
    reportError(fmt::format("tpc bench: {} has {} results of {} requests", path, lines, expected));
    return false;
  }
  result.requests = lines;
  return true;
}

int bench(const BenchOptions &o) {
  std::vector<int64_t> concurrencies;
  {
    std::stringstream list(o.concurrency);
    std::string item;
    while (std::getline(list, item, ',')) {
      char *end = nullptr;
      long long value = std::strtoll(item.c_str(), &end, 10);
      if (item.empty() || *end || value < 1 || value > 1024) {
        reportError(fmt::format("tpc bench: --concurrency takes numbers from 1 to 1024, "
                                "comma-separated, not '{}'",
                                o.concurrency));
        return 2;
      }
      concurrencies.push_back(value);
    }
  }
  if (o.promptLen < 1 || o.outputLen < 1 || o.numPrompts < 0 || o.tp < 1) {
    reportError("tpc bench: --prompt-len, --output-len and --tp must be at least 1");
    return 2;
  }
  if (!driver::checkpointExists("tpc bench", o.checkpoint))
    return 2;
  std::optional<driver::CheckpointConfig> config = driver::readCheckpointConfig(o.checkpoint);
  if (!config)
    return 1;
  nlohmann::json parsed = nlohmann::json::parse(config->text, nullptr, false);
  int64_t vocab = parsed.is_object() && parsed.contains("vocab_size") &&
                          parsed["vocab_size"].is_number_integer()
                      ? parsed["vocab_size"].get<int64_t>()
                      : 0;
  if (vocab < 1) {
    reportError("tpc bench: the checkpoint's config gives no vocab_size to draw prompts from");
    return 1;
  }
  if (parsed.contains("max_position_embeddings") &&
      parsed["max_position_embeddings"].is_number_integer()) {
    int64_t positions = parsed["max_position_embeddings"].get<int64_t>();
    if (o.promptLen > positions || o.outputLen > positions - o.promptLen) {
      reportError(fmt::format("tpc bench: --prompt-len {} and --output-len {} are more than the "
                              "model's {} positions (max_position_embeddings)",
                              o.promptLen, o.outputLen, positions));
      return 2;
    }
  }
  std::string scratch;
  std::optional<std::string> binary = driver::binaryFor(o, *config, scratch);
  if (!binary)
    return 1;
  llvm::SmallString<128> dir;
  if (llvm::sys::fs::createUniqueDirectory("tpc-bench", dir)) {
    reportError("tpc bench: cannot make a temporary directory");
    return 1;
  }
  // The same requests at every concurrency: twice the largest concurrency unless given.
  int64_t count = o.numPrompts ? o.numPrompts
                               : 2 * *std::max_element(concurrencies.begin(), concurrencies.end());
  std::string requests = (dir + "/requests.jsonl").str();
  {
    std::mt19937_64 rng(o.seed);
    std::ofstream file(requests);
    for (int64_t i = 0; i < count; ++i) {
      nlohmann::json ids = nlohmann::json::array();
      for (int64_t t = 0; t < o.promptLen; ++t)
        ids.push_back(int64_t(rng() % uint64_t(vocab)));
      file << nlohmann::json{{"id", i},
                             {"prompt_token_ids", ids},
                             {"max_tokens", o.outputLen},
                             {"ignore_eos", true}}
                  .dump()
           << "\n";
    }
  }
  std::vector<Result> results;
  int status = 0;
  for (int64_t c : concurrencies) {
    std::string out = (dir + "/out-" + std::to_string(c) + ".jsonl").str();
    driver::LaunchOptions launch;
    launch.ranks = int(o.tp);
    launch.ranksToStderr = true;
    launch.command = {*binary, "--weights", o.checkpoint, "--requests", requests, "--output",
                      out, "--request-metrics", "--max-new-tokens", std::to_string(o.outputLen),
                      "--max-num-seqs", std::to_string(c),
                      "--max-seq-len", std::to_string(o.promptLen + o.outputLen)};
    if ((status = driver::launchRanks(launch)) != 0)
      break;
    Result result;
    result.concurrency = c;
    if (!readResults(out, count, o.outputLen, result)) {
      status = 1;
      break;
    }
    results.push_back(std::move(result));
  }
  llvm::sys::fs::remove_directories(dir);
  if (!scratch.empty())
    llvm::sys::fs::remove_directories(scratch);
  if (status != 0)
    return status;
  llvm::outs() << fmt::format("tpc bench {}: tp {}, {} requests of {} prompt tokens and {} new "
                              "tokens each, all arriving at the start\n",
                              o.checkpoint, o.tp, count, o.promptLen, o.outputLen);
  llvm::outs() << fmt::format("{:>11} {:>13} {:>8} {:>11} {:>11} {:>11} {:>11}\n", "concurrency",
                              "output tok/s", "vs c1", "TTFT p50", "TTFT p99", "TPOT p50",
                              "TPOT p99");
  double first = 0;
  for (const Result &r : results) {
    double rate = r.seconds > 0 ? double(r.tokens) / r.seconds : 0;
    if (r.concurrency == 1)
      first = rate;
    llvm::outs() << fmt::format(
        "{:>11} {:>13.1f} {:>8} {:>9.1f}ms {:>9.1f}ms {:>9.2f}ms {:>9.2f}ms\n", r.concurrency,
        rate, first > 0 ? fmt::format("{:.2f}x", rate / first) : std::string("-"),
        quantile(r.ttft, 0.5), quantile(r.ttft, 0.99), quantile(r.tpot, 0.5),
        quantile(r.tpot, 0.99));
  }
  return 0;
}

} // namespace

void addBenchCommand(CLI::App &app, CommandRunner &runner) {
  auto opts = std::make_shared<BenchOptions>();
  CLI::App *cmd = app.add_subcommand(
      "bench", "Offline throughput of a checkpoint through the engine at several "
               "concurrencies: output tokens/s, time to first token, time per output token");
  cmd->add_option("checkpoint", opts->checkpoint,
                  "the checkpoint: a directory (config.json, *.safetensors) or a .gguf file")
      ->required();
  cmd->add_option("--tp", opts->tp, "tensor-parallel size: how many local ranks (default 1)");
  cmd->add_option("--plan", opts->plan,
                  "a tp_plan JSON file, or auto for transformers' own plan (default)");
  addWeightsDtype(cmd, opts->weights);
  cmd->add_option("--concurrency", opts->concurrency,
                  "the sequences in one step to measure, comma-separated (default 1,8); "
                  "each runs the same requests with --max-num-seqs set to it");
  cmd->add_option("--prompt-len", opts->promptLen,
                  "prompt tokens of each request, random ids (default 32)");
  cmd->add_option("--output-len", opts->outputLen,
                  "new tokens of each request, end-of-sequence ignored (default 128)");
  cmd->add_option("--num-prompts", opts->numPrompts,
                  "how many requests (default: twice the largest concurrency)");
  cmd->add_option("--seed", opts->seed, "the seed the prompts are drawn from (default 0)");
  cmd->add_flag("--no-cache", opts->noCache,
                "compile into a temporary directory instead of the cache");
  cmd->callback([opts, &runner] { runner = [opts] { return bench(*opts); }; });
}

} // namespace tpc
