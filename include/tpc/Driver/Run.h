// tpc run's compile cache: the binary for a checkpoint, compiled once for everything that
// decides it (tpc and its runtime, config.json, the plan, tp, target, sequence parallelism)
// and kept in TPC_CACHE_DIR, else $XDG_CACHE_HOME/tpc, else ~/.cache/tpc.
#ifndef TPC_DRIVER_RUN_H
#define TPC_DRIVER_RUN_H

#include <cstdint>
#include <optional>
#include <string>

namespace tpc::driver {

/// What decides the binary `tpc run` runs.
struct RunBuild {
  std::string checkpoint, plan = "auto", target = "cpu";
  int64_t tp = 1;
  bool noCache = false, sequenceParallel = false;
};

/// The binary for `o`, whose checkpoint's config.json is `configPath`: from the cache when an
/// identical run compiled it before, else compiled now (into the cache, or with --no-cache
/// into a temporary directory that the caller removes: `scratch` names it). None, with the
/// error reported, when it cannot be had.
std::optional<std::string> binaryFor(const RunBuild &o, const std::string &configPath,
                                     std::string &scratch);

} // namespace tpc::driver

#endif // TPC_DRIVER_RUN_H
