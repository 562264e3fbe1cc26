// What a target is, in one place per target (lib/Target/Cpu, lib/Target/Cuda), as Triton's
// TargetInfoBase is: the facts the passes read (its #tp.target, which buildProgram puts on
// the module), how its program is spelled (its Spelling), and how that program becomes a
// binary (the compiler command, the source's extension, the runtime it links). Everything
// else (passes, the lowering, analyze, the build driver) asks the module's #tp.target or
// this interface, never a target's name.
#ifndef TPC_TARGET_TARGETINFO_H
#define TPC_TARGET_TARGETINFO_H

#include "tpc/Dialect/TP/TPDialect.h"
#include "tpc/Target/Target.h"

#include "llvm/ADT/ArrayRef.h"
#include "llvm/ADT/SmallVector.h"

#include <memory>
#include <string>
#include <vector>

namespace tpc::target {

class TargetInfo {
public:
  virtual ~TargetInfo() = default;

  /// The target as `--target` spells it, and as #tp.target names it.
  virtual llvm::StringRef name() const = 0;
  /// One line for --help: what the target's binary runs on and with.
  virtual llvm::StringRef summary() const = 0;
  /// The facts the passes read: set on a built module as `tp.target`.
  virtual tp::TargetAttr describe(mlir::MLIRContext *ctx) const = 0;
  /// How the lowering spells this target's program.
  virtual std::unique_ptr<Spelling> spelling() const = 0;
  /// With pipeline stages: whether its runtime keeps a step in every stage at once (its
  /// backend holds the sends between stages: BackendCapabilities::pipelined), so that `tpc
  /// analyze` prices up to a step per stage in flight; else one step at a time.
  virtual bool pipelinesStages() const = 0;
  /// The sequences its runtime runs in one step (BackendCapabilities::stepSequences), which
  /// bounds a step `tpc suggest` prices; 0: as many as --max-num-seqs.
  virtual int64_t stepSequences() const { return 0; }

  /// The generated source's extension (".cpp", ".cu").
  virtual llvm::StringRef sourceExtension() const = 0;
  /// Whether this tpc can build binaries for the target; if not, `why` says what is missing
  /// and what to do.
  virtual bool canBuild(std::string &why) const = 0;
  /// The runtime libraries its binaries link, as this tpc was configured: what, beside the
  /// program's source, makes the binary (tpc run keys its cache on them).
  virtual std::vector<std::string> runtimeLibraries() const = 0;
  /// The command line, compiler first, that builds `source` into `output`; empty with
  /// `error` set when it cannot be built here.
  virtual llvm::SmallVector<std::string> buildCommand(llvm::StringRef source,
                                                      llvm::StringRef output,
                                                      std::string &error) const = 0;
};

/// Every target this tpc knows, in the order --help lists them.
llvm::ArrayRef<const TargetInfo *> allTargets();
/// The target of that name; null for a name no target has.
const TargetInfo *findTarget(llvm::StringRef name);
/// The names of allTargets(), for an option's check and for messages ("cpu, cuda").
std::vector<std::string> targetNames();
/// The target a #tp.target describes.
const TargetInfo *targetOf(tp::TargetAttr attr);

const TargetInfo &cpuTarget();
const TargetInfo &cudaTarget();

/// The runtime's libraries every program links after its backend, from the driver down to
/// the base, in link order (runtime/CMakeLists.txt's TPC_PROGRAM_LIBRARIES), as files.
std::vector<std::string> programLibraries();
/// The system libraries those need beyond Gloo (MPI's for the mpirun path, PCRE2's and ICU's
/// for the tokenizers), as this tpc was configured: every target
/// links them.
llvm::SmallVector<llvm::StringRef> systemLibraries();

} // namespace tpc::target

#endif // TPC_TARGET_TARGETINFO_H
