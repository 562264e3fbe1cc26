// tpc bench: offline throughput of a checkpoint through the engine, at several concurrencies.
// The same requests (random prompt ids from a seed, --output-len new tokens each, ignore_eos)
// run once per concurrency C with --max-num-seqs C, all arriving at the start, so the runs
// differ in nothing but C; each request's own metrics give its time to first token and time
// per output token.
#ifndef TPC_DRIVER_BENCH_H
#define TPC_DRIVER_BENCH_H

#include "tpc/Driver/Run.h"

#include <cstdint>
#include <string>
#include <vector>

namespace tpc::driver {

/// What `tpc bench` takes besides what decides the binary.
struct BenchOptions : RunBuild {
  std::string concurrency = "1,8"; // comma-separated
  int64_t promptLen = 32, outputLen = 128;
  int64_t numPrompts = 0; // 0: twice the largest concurrency
  uint64_t seed = 0;
};

/// What one concurrency's run measured.
struct BenchResult {
  int64_t concurrency = 0, requests = 0, tokens = 0;
  double seconds = 0;             // until the last request finished
  std::vector<double> ttft, tpot; // milliseconds, one per request (tpot: of those past one token)

  /// Output tokens per second over the run; 0 for a run that took no time.
  double tokensPerSecond() const;
};

/// What a bench measured: the requests each run had, and a result per concurrency in
/// --concurrency's order.
struct BenchReport {
  int64_t requests = 0;
  std::vector<BenchResult> results;
};

/// Compiles the checkpoint (or takes it from tpc run's cache) and runs the requests at each
/// concurrency. The exit code: 2 for a usage error, else 1 for a failure (each reported);
/// `report` is complete when it is 0.
int runBench(const BenchOptions &o, BenchReport &report);

/// The per-request lines --request-metrics wrote to `path`, into `result`; false, saying
/// why, when a line is no result, a request stopped short of `outputLen` (ignore_eos: only
/// the length may end one), or the lines are not `expected` many.
bool readBenchResults(const std::string &path, int64_t expected, int64_t outputLen,
                      BenchResult &result);

/// The q-th quantile (0 to 1) of `values`, nearest rank; 0 for none.
double quantile(std::vector<double> values, double q);

} // namespace tpc::driver

#endif // TPC_DRIVER_BENCH_H
