// The build driver (include/tpc/Driver/Build.h): the compiler, its flags and the runtime
// libraries a generated program links, as this tpc was configured.
#include "tpc/Driver/Build.h"

#include "llvm/ADT/SmallString.h"
#include "llvm/ADT/SmallVector.h"
#include "llvm/Support/FileSystem.h"
#include "llvm/Support/Program.h"

#include <cstdlib>

using namespace llvm;

bool tpc::driver::hasCudaCompiler() {
#ifdef TPC_NVCC
  return true;
#else
  return false;
#endif
}

std::vector<std::string> tpc::driver::buildInputs(StringRef target) {
#ifdef TPC_NVCC
  if (target == "cuda")
    return {TPC_CUDA_RUNTIME_LIBRARY, TPC_CORE_RUNTIME_LIBRARY};
#endif
  return {TPC_RUNTIME_LIBRARY, TPC_CORE_RUNTIME_LIBRARY};
}

namespace {

/// The system libraries libtpcrt's core needs beyond Gloo: MPI's (the mpirun path) and
/// PCRE2's and ICU's (the tokenizers), ','-separated.
SmallVector<StringRef> systemLibraries() {
  SmallVector<StringRef> libraries;
  StringRef(TPC_SYSTEM_LIBRARIES).split(libraries, ',', -1, /*KeepEmpty=*/false);
  return libraries;
}

/// The command line that builds `source` into `output`, with its compiler first.
SmallVector<std::string> commandFor(StringRef source, StringRef output, bool cuda,
                                    std::string &error) {
  std::string include = "-I" TPC_RUNTIME_INCLUDE_DIR;
#ifdef TPC_NVCC
  if (cuda) {
    // sm_90a, not -arch=sm_90a: that shorthand can add a plain sm_90 pass, which rejects
    // Hopper-only instructions. Libraries go to the linker as they are (nvcc only knows
    // .a/.so by name): the CUDA backend, the core, no CPU backend and no BLAS.
    SmallVector<std::string> args = {
        TPC_NVCC, "-std=c++17", "-O2", "-gencode=arch=compute_90a,code=sm_90a", include,
        source.str(), "-Xlinker", TPC_CUDA_RUNTIME_LIBRARY, "-Xlinker", TPC_CORE_RUNTIME_LIBRARY,
        "-Xlinker", TPC_GLOO_LIBRARY};
    for (StringRef library : systemLibraries())
      args.append({"-Xlinker", library.str()});
    args.append({"-L" TPC_CUDA_LIB_DIR, "-lcublasLt", "-lnccl", "-lpthread", "-Xlinker",
                 "-rpath=" TPC_CUDA_LIB_DIR, "-o", output.str()});
    return args;
  }
#endif
  if (cuda) {
    error = "--target cuda: this tpc was built without nvcc (none was found at configure "
            "time); rebuild with CUDA installed in /usr/local/cuda, or pass --emit-only to "
            "write the source alone";
    return {};
  }
  const char *cxxEnv = std::getenv("TPC_CXX");
  ErrorOr<std::string> cxx = sys::findProgramByName(cxxEnv && *cxxEnv ? cxxEnv : "c++");
  if (!cxx) {
    error = "no C++ compiler found (c++, or TPC_CXX)";
    return {};
  }
  SmallVector<std::string> args = {*cxx, "-std=c++17", "-O2"};
  // A sanitizer build's runtime needs its programs built the same way.
  SmallVector<StringRef> sanitize;
  StringRef(TPC_SANITIZE_FLAGS).split(sanitize, ' ', -1, /*KeepEmpty=*/false);
  for (StringRef flag : sanitize)
    args.push_back(flag.str());
  // The CPU backend, the core, and what they need.
  args.append({include, source.str(), TPC_RUNTIME_LIBRARY, TPC_CORE_RUNTIME_LIBRARY,
               TPC_GLOO_LIBRARY, TPC_OPENBLAS_LIBRARY});
  for (StringRef library : systemLibraries())
    args.push_back(library.str());
  args.append({"-lpthread", "-o", output.str()});
  return args;
}

} // namespace

bool tpc::driver::buildBinary(StringRef source, StringRef binary, StringRef target,
                              BuildFailure &failure) {
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
  SmallVector<std::string> args = commandFor(source, partial, target == "cuda", error);
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
