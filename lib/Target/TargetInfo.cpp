// The targets this tpc knows (include/tpc/Target/TargetInfo.h): the one list that the
// command line, the build driver and #tp.target's readers look a target up in.
#include "tpc/Target/TargetInfo.h"

using namespace tpc;
using namespace tpc::target;

llvm::ArrayRef<const TargetInfo *> tpc::target::allTargets() {
  static const TargetInfo *const targets[] = {&cpuTarget(), &cudaTarget()};
  return targets;
}

const TargetInfo *tpc::target::findTarget(llvm::StringRef name) {
  for (const TargetInfo *target : allTargets())
    if (target->name() == name)
      return target;
  return nullptr;
}

std::vector<std::string> tpc::target::targetNames() {
  std::vector<std::string> names;
  for (const TargetInfo *target : allTargets())
    names.push_back(target->name().str());
  return names;
}

llvm::SmallVector<llvm::StringRef> tpc::target::systemLibraries() {
  llvm::SmallVector<llvm::StringRef> libraries;
  llvm::StringRef(TPC_SYSTEM_LIBRARIES).split(libraries, ',', -1, /*KeepEmpty=*/false);
  return libraries;
}

std::vector<std::string> tpc::target::programLibraries() {
  llvm::SmallVector<llvm::StringRef> libraries;
  llvm::StringRef(TPC_PROGRAM_LIBRARIES).split(libraries, ',', -1, /*KeepEmpty=*/false);
  return std::vector<std::string>(libraries.begin(), libraries.end());
}

const TargetInfo *tpc::target::targetOf(tp::TargetAttr attr) {
  return attr ? findTarget(attr.getName()) : nullptr;
}
