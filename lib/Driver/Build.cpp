// The build driver (include/tpc/Driver/Build.h): runs the target's compiler command so that
// only a complete binary ever carries the binary's name.
#include "tpc/Driver/Build.h"

#include "tpc/Target/TargetInfo.h"

#include "llvm/ADT/SmallString.h"
#include "llvm/ADT/SmallVector.h"
#include "llvm/ADT/Twine.h"
#include "llvm/Support/FileSystem.h"
#include "llvm/Support/Program.h"

using namespace llvm;

bool tpc::driver::buildBinary(StringRef source, StringRef binary,
                              const target::TargetInfo &target, BuildFailure &failure) {
  SmallString<256> partial;
  int partialFd = -1;
  if (std::error_code ec = sys::fs::createUniqueFile(binary + ".partial-%%%%%%", partialFd,
                                                     partial)) {
    failure.error = ("cannot write " + binary + ": " + ec.message()).str();
    return false;
  }
  sys::fs::closeFile(partialFd);
  auto fail = [&](std::string error) {
    failure.error = std::move(error);
    sys::fs::remove(partial);
    if (sys::fs::exists(binary) && !sys::fs::remove(binary))
      failure.note = ("removed the earlier " + binary + ", which was not built from " + source)
                         .str();
    return false;
  };
  std::string error;
  SmallVector<std::string> args = target.buildCommand(source, partial, error);
  if (args.empty())
    return fail(error);
  SmallVector<StringRef> argRefs(args.begin(), args.end());
  std::string message;
  int code = sys::ExecuteAndWait(args.front(), argRefs, std::nullopt, {}, 0, 0, &message);
  if (code != 0)
    return fail(("the C++ compiler failed on " + source + " (exit " + Twine(code) + ")" +
                 (message.empty() ? "" : ": " + message))
                    .str());
  if (std::error_code ec = sys::fs::rename(partial, binary))
    return fail(("cannot write " + binary + ": " + ec.message()).str());
  return true;
}
