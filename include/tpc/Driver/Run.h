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
  int64_t pp = 1;                 // --pp: pipeline stages (pp x tp ranks)
  std::vector<int64_t> ppSplit;   // --pp-split: decoder layers per stage
  std::string weights = "stored"; // --weights-dtype
  bool noCache = false, sequenceParallel = false;
  /// -v, --verbose: the compiler's stages, warnings and notes too (and the binary's account of
  /// how rank 0 computes); without it, one line says whether it compiles or takes the cache.
  bool verbose = false;
};

/// A checkpoint's config.json and how it stores its tensors, from the path a user gives.
struct CheckpointConfig {
  std::string name;           // what diagnostics call the config: its path, or the GGUF's
  std::string text;           // config.json
  import::StoredTypes stored; // each tensor's type, where not f32
};

/// Whether the checkpoint PATH exists; when not, reports it, naming what `command` (tpc run,
/// tpc bench) takes.
bool checkpointExists(const std::string &command, const std::string &path);

/// The config of PATH: a config.json (the checkpoint beside it says the types), a checkpoint
/// directory (its config.json), or a GGUF file or a directory holding one (its metadata as
/// transformers' GGUF loader reads it, GgufModel). None, with the error reported, when it
/// cannot be read.
std::optional<CheckpointConfig> readCheckpointConfig(const std::string &path);

/// The binary for `o`, whose checkpoint's config is `config`: from the cache when an
/// identical run compiled it before, else compiled now (into the cache, or with --no-cache
/// into a temporary directory that the caller removes: `scratch` names it). None, with the
/// error reported, when it cannot be had.
std::optional<std::string> binaryFor(const RunBuild &o, const CheckpointConfig &config,
                                     std::string &scratch);

} // namespace tpc::driver

#endif // TPC_DRIVER_RUN_H
