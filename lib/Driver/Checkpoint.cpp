// A checkpoint's binary launched for tpc run and tpc serve (include/tpc/Driver/Checkpoint.h).
#include "tpc/Driver/Checkpoint.h"

#include "llvm/Support/FileSystem.h"

namespace tpc::driver {

int launchCheckpoint(const char *name, const RunBuild &o, LaunchOptions launch,
                     const std::vector<std::string> &command) {
  if (!checkpointExists(name, o.checkpoint))
    return 2;
  std::optional<CheckpointConfig> config = readCheckpointConfig(o.checkpoint);
  if (!config)
    return 1;
  std::string scratch;
  std::optional<std::string> binary = binaryFor(o, *config, scratch);
  int status = 1;
  if (binary) {
    launch.ranks = int(o.tp * o.pp);
    launch.command = {*binary};
    launch.command.insert(launch.command.end(), command.begin(), command.end());
    status = launchRanks(launch);
  }
  if (!scratch.empty())
    llvm::sys::fs::remove_directories(scratch);
  return status;
}

} // namespace tpc::driver
