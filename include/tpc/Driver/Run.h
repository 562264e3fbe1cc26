// tpc run's compile cache: the binary for a checkpoint, compiled once for everything that
// decides it (tpc and its runtime, config.json and the checkpoint's types, the plan, tp,
// target, sequence parallelism, --weights-dtype) and kept in TPC_CACHE_DIR, else
// $XDG_CACHE_HOME/tpc, else ~/.cache/tpc.
#ifndef TPC_DRIVER_RUN_H
#define TPC_DRIVER_RUN_H

#include "tpc/Import/Importer.h"

#include <cstdint>
#include <optional>
#include <string>

namespace tpc::driver {

/// What decides the binary `tpc run` runs.
struct RunBuild {
  std::string checkpoint, plan = "auto", target = "cpu";
  int64_t tp = 1;
  std::string weights = "stored"; // --weights-dtype
  bool noCache = false, sequenceParallel = false;
};

/// How the checkpoint beside `configPath` (its safetensors headers) stores each tensor, where
/// not in f32; empty where there is none or it cannot be read (the loader says why then).
import::StoredTypes storedTypes(const std::string &configPath);

/// The binary for `o`, whose checkpoint's config.json is `configPath`: from the cache when an
/// identical run compiled it before, else compiled now (into the cache, or with --no-cache
/// into a temporary directory that the caller removes: `scratch` names it). None, with the
/// error reported, when it cannot be had.
std::optional<std::string> binaryFor(const RunBuild &o, const std::string &configPath,
                                     std::string &scratch);

} // namespace tpc::driver

#endif // TPC_DRIVER_RUN_H
