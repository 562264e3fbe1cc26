// tpc check past compile's front half (Compile.h): what each rank of the built program holds
// of each parameter. Only the program's shard descriptors know it (whole heads per rank where
// tp does not divide them), so the plan's report alone would show torch.chunk's pieces.
#ifndef TPC_DRIVER_CHECK_H
#define TPC_DRIVER_CHECK_H

#include "tpc/Driver/Compile.h"

#include "llvm/ADT/SmallVector.h"

#include <string>
#include <vector>

namespace tpc::driver {

/// Compile's front half for `args`, untimed, and where it built the program, the shapes each
/// rank holds in the plan's report; whether every step worked (errors reported).
bool checkProgram(Session &session, const ProgramArgs &args, const ProgramOptions &options,
                  FrontHalf &front);

/// A parameter whose ranks hold different amounts (padding left out), with the layers whose
/// copies of it are split alike.
struct UnevenShape {
  std::string pattern;                          // its name, its layer as *
  std::vector<llvm::SmallVector<int64_t>> held; // each rank's shape
  llvm::SmallVector<int64_t> stored;            // what each rank stores, padded
  std::vector<std::string> layers;              // one "" for a parameter outside the layers
};

/// The parameters of `program` whose ranks hold different amounts, one for each name
/// pattern and split, in the program's order.
std::vector<UnevenShape> unevenShapes(mlir::ModuleOp program);

} // namespace tpc::driver

#endif // TPC_DRIVER_CHECK_H
