// What tpc run and tpc serve share: a checkpoint's binary, compiled or taken from tpc run's
// cache (Run.h), launched on local ranks with what each command passes it.
#ifndef TPC_DRIVER_CHECKPOINT_H
#define TPC_DRIVER_CHECKPOINT_H

#include "tpc/Driver/Compile.h"
#include "tpc/Driver/Run.h"

#include <string>
#include <vector>

namespace tpc::driver {

/// The checkpoint of `o` compiled (or taken from the cache) and launched as `launch` says,
/// `command` being the binary's arguments after it; the exit code. `name` ("tpc run")
/// names the command in errors.
int launchCheckpoint(const char *name, const RunBuild &o, LaunchOptions launch,
                     const std::vector<std::string> &command);

} // namespace tpc::driver

#endif // TPC_DRIVER_CHECKPOINT_H
