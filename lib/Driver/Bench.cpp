// tpc bench (include/tpc/Driver/Bench.h): one requests file, run through the binary at each
// concurrency on the same ranks' launcher tpc run uses, and the runs' per-request metrics read
// back.
#include "tpc/Driver/Bench.h"

#include "tpc/Driver/Compile.h"

#include "llvm/Support/FileSystem.h"

#include <fmt/core.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <cmath>
#include <fstream>
#include <optional>
#include <random>
#include <sstream>

namespace tpc::driver {

namespace {

/// --concurrency's numbers; none, with a usage error reported, when one is not from 1 to 1024.
std::optional<std::vector<int64_t>> parseConcurrencies(const std::string &given) {
  std::vector<int64_t> concurrencies;
  std::stringstream list(given);
  std::string item;
  while (std::getline(list, item, ',')) {
    char *end = nullptr;
    long long value = std::strtoll(item.c_str(), &end, 10);
    if (item.empty() || *end || value < 1 || value > 1024) {
      reportError(fmt::format("tpc bench: --concurrency takes numbers from 1 to 1024, "
                              "comma-separated, not '{}'",
                              given));
      return std::nullopt;
    }
    concurrencies.push_back(value);
  }
  return concurrencies;
}

/// The vocabulary the prompts are drawn from, once the requests are known to fit the
/// model's positions; 0, with the exit code in `status` and the error reported, when not.
int64_t promptVocab(const BenchOptions &o, const CheckpointConfig &config, int &status) {
  nlohmann::json parsed = nlohmann::json::parse(config.text, nullptr, false);
  int64_t vocab = parsed.is_object() && parsed.contains("vocab_size") &&
                          parsed["vocab_size"].is_number_integer()
                      ? parsed["vocab_size"].get<int64_t>()
                      : 0;
  if (vocab < 1) {
    reportError("tpc bench: the checkpoint's config gives no vocab_size to draw prompts from");
    status = 1;
    return 0;
  }
  if (parsed.contains("max_position_embeddings") &&
      parsed["max_position_embeddings"].is_number_integer()) {
    int64_t positions = parsed["max_position_embeddings"].get<int64_t>();
    if (o.promptLen > positions || o.outputLen > positions - o.promptLen) {
      reportError(fmt::format("tpc bench: --prompt-len {} and --output-len {} are more than the "
                              "model's {} positions (max_position_embeddings)",
                              o.promptLen, o.outputLen, positions));
      status = 2;
      return 0;
    }
  }
  return vocab;
}

/// `count` requests of random prompt ids, one JSON line each, into `path`: the same ones for
/// every concurrency, since they come from o.seed.
void writeRequests(const std::string &path, int64_t count, int64_t vocab,
                   const BenchOptions &o) {
  std::mt19937_64 rng(o.seed);
  std::ofstream file(path);
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

/// Each concurrency's run of `requests` through `binary`, its outputs in `dir`, into
/// `report`; the exit code of the first run that fails.
int runConcurrencies(const BenchOptions &o, const std::vector<int64_t> &concurrencies,
                     const std::string &binary, const std::string &dir,
                     const std::string &requests, BenchReport &report) {
  for (int64_t c : concurrencies) {
    std::string out = dir + "/out-" + std::to_string(c) + ".jsonl";
    LaunchOptions launch;
    launch.name = "tpc bench";
    launch.ranks = int(o.tp * o.pp);
    launch.ranksToStderr = true;
    launch.command = {binary, "--weights", o.checkpoint, "--requests", requests, "--output",
                      out, "--request-metrics", "--max-new-tokens", std::to_string(o.outputLen),
                      "--max-num-seqs", std::to_string(c),
                      "--max-model-len", std::to_string(o.promptLen + o.outputLen)};
    if (int status = launchRanks(launch))
      return status;
    BenchResult result;
    result.concurrency = c;
    if (!readBenchResults(out, report.requests, o.outputLen, result))
      return 1;
    report.results.push_back(std::move(result));
  }
  return 0;
}

} // namespace

double BenchResult::tokensPerSecond() const {
  return seconds > 0 ? double(tokens) / seconds : 0;
}

double quantile(std::vector<double> values, double q) {
  if (values.empty())
    return 0;
  std::sort(values.begin(), values.end());
  size_t at = size_t(std::max(0.0, std::ceil(q * double(values.size())) - 1));
  return values[std::min(at, values.size() - 1)];
}

bool readBenchResults(const std::string &path, int64_t expected, int64_t outputLen,
                      BenchResult &result) {
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

int runBench(const BenchOptions &o, BenchReport &report) {
  std::optional<std::vector<int64_t>> concurrencies = parseConcurrencies(o.concurrency);
  if (!concurrencies)
    return 2;
  if (o.promptLen < 1 || o.outputLen < 1 || o.numPrompts < 0 || o.tp < 1 || o.pp < 1) {
    reportError("tpc bench: --prompt-len, --output-len, --tp and --pp must be at least 1");
    return 2;
  }
  if (!checkpointExists("tpc bench", o.checkpoint))
    return 2;
  std::optional<CheckpointConfig> config = readCheckpointConfig(o.checkpoint);
  if (!config)
    return 1;
  int status = 0;
  int64_t vocab = promptVocab(o, *config, status);
  if (!vocab)
    return status;
  std::string scratch;
  std::optional<std::string> binary = binaryFor(o, *config, scratch);
  if (!binary)
    return 1;
  llvm::SmallString<128> dir;
  if (llvm::sys::fs::createUniqueDirectory("tpc-bench", dir)) {
    reportError("tpc bench: cannot make a temporary directory");
    return 1;
  }
  // The same requests at every concurrency: twice the largest concurrency unless given.
  report.requests =
      o.numPrompts ? o.numPrompts
                   : 2 * *std::max_element(concurrencies->begin(), concurrencies->end());
  std::string requests = (dir + "/requests.jsonl").str();
  writeRequests(requests, report.requests, vocab, o);
  status = runConcurrencies(o, *concurrencies, *binary, dir.str().str(), requests, report);
  llvm::sys::fs::remove_directories(dir);
  if (!scratch.empty())
    llvm::sys::fs::remove_directories(scratch);
  return status;
}

} // namespace tpc::driver
