// tpc compile: the whole pipeline, then C++ for libtpcrt, then the system compiler.
#include "Commands.h"
#include "Session.h"

#include "tpc/Plan/Plan.h"
#include "tpc/Target/Target.h"
#include "tpc/Transforms/Pipeline.h"

#include "mlir/Pass/PassManager.h"
#include "llvm/Support/FileSystem.h"
#include "llvm/Support/Path.h"
#include "llvm/Support/Program.h"
#include "llvm/Support/raw_ostream.h"

#include <chrono>
#include <fmt/core.h>

using namespace mlir;

namespace tpc {

namespace {

struct CompileOptions : PlanArgs {
  std::string target = "cpu", output, fuse;
  bool sequenceParallel = false, noFold = false, emitOnly = false;
};

/// --fuse: the target's own choice unless given; "none", or a list of elementwise, norm,
/// rotary and linears.
bool parseFuse(const std::string &list, TargetDecisions &d) {
  if (list.empty())
    return true;
  d = TargetDecisions();
  if (list == "none")
    return true;
  llvm::SmallVector<llvm::StringRef> names;
  llvm::StringRef(list).split(names, ',');
  for (llvm::StringRef name : names) {
    if (name == "elementwise")
      d.fuseElementwise = true;
    else if (name == "norm")
      d.fuseNorm = true;
    else if (name == "rotary")
      d.fuseRotary = true;
    else if (name == "linears")
      d.groupLinears = true;
    else {
      reportError("--fuse: unknown '" + name +
                  "'; give none, or a list of elementwise, norm, rotary and linears");
      return false;
    }
  }
  return true;
}

/// Prints each stage and how long it took.
class Stages {
public:
  template <typename Fn> bool run(const char *name, Fn fn) {
    auto start = std::chrono::steady_clock::now();
    bool ok = fn();
    double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() -
                                                          start)
                    .count();
    llvm::outs() << fmt::format("  {:<10} {:>9.1f} ms{}\n", name, ms, ok ? "" : "  (failed)");
    llvm::outs().flush();
    return ok;
  }
};

} // namespace

void addCompileCommand(CLI::App &app, CommandRunner &run) {
  auto opts = std::make_shared<CompileOptions>();
  CLI::App *cmd = app.add_subcommand(
      "compile", "Compile a model and plan into a per-rank binary (out/<model>)");
  addPlanArgs(cmd, *opts);
  cmd->add_option("--target", opts->target,
                  "cpu (C++, OpenBLAS, Gloo) or cuda (CUDA C++ for Hopper, cuBLASLt, NCCL)")
      ->check(CLI::IsMember({"cpu", "cuda"}));
  cmd->add_option("-o,--output", opts->output, "the output directory")->required();
  cmd->add_flag("--sequence-parallel", opts->sequenceParallel,
                "split the residual stream by tokens where the token count divides by tp");
  cmd->add_flag("--no-fold", opts->noFold,
                "leave out tp-fold-redistribute (to run what folding would remove)");
  cmd->add_flag("--emit-only", opts->emitOnly,
                "write the generated source and stop: no compiler is run");
  cmd->add_option("--fuse", opts->fuse,
                  "what the decision passes fuse, instead of the target's choice: none, or a "
                  "list of elementwise, norm, rotary and linears (cuda's default is all, "
                  "cpu's none)");
  cmd->callback([opts, &run] {
    run = [opts]() -> int {
      const CompileOptions &o = *opts;
      if (!checkTpArg(o))
        return 1;
      bool cuda = o.target == "cuda";
#ifndef TPC_NVCC
      if (cuda && !o.emitOnly) {
        reportError("--target cuda: this tpc was built without nvcc (none was found at "
                    "configure time); rebuild with CUDA installed in /usr/local/cuda, or "
                    "pass --emit-only to write the source alone");
        return 1;
      }
#endif
      Session session;
      Stages stages;
      llvm::outs() << fmt::format("tpc compile {} --plan {} --tp {} --target {}\n", o.model,
                                  o.plan, o.tp, o.target);
      OwningOpRef<ModuleOp> module;
      if (!stages.run("parse", [&] { return bool(module = session.loadModel(o.model)); }))
        return 1;
      if (!stages.run("plan", [&] {
            return succeeded(plan::applyPlan(*module, {o.plan, o.strategies, o.tp}));
          }))
        return 1;
      ProgramOptions program;
      program.sequenceParallel = o.sequenceParallel;
      program.fold = !o.noFold;
      program.decisions = TargetDecisions::forTarget(o.target);
      if (!parseFuse(o.fuse, program.decisions))
        return 1;
      OwningOpRef<ModuleOp> decided;
      if (!stages.run("shard", [&] { return bool(decided = buildProgram(*module, program)); }))
        return 1;

      std::string name = module->getSymName() ? module->getSymName()->str() : "model";
      if (std::error_code ec = llvm::sys::fs::create_directories(o.output)) {
        reportError("cannot create " + o.output + ": " + ec.message());
        return 1;
      }
      llvm::SmallString<256> source(o.output), binary(o.output);
      llvm::sys::path::append(source, name + (cuda ? ".cu" : ".cpp"));
      llvm::sys::path::append(binary, name);
      if (!stages.run("emit", [&] {
            std::string code;
            llvm::raw_string_ostream os(code);
            if (failed(target::emitSource(*decided, o.target, os)))
              return false;
            return writeAtomically(source.str().str(), code);
          }))
        return 1;
      if (o.emitOnly) {
        llvm::outs() << fmt::format("wrote {}\n", source.str());
        return session.errors() ? 1 : 0;
      }
      // The binary is linked under a temporary name beside its own and renamed once complete:
      // a compiler or disk that fails midway leaves no half-written binary that looks built.
      llvm::SmallString<256> partial;
      int partialFd = -1;
      if (std::error_code ec =
              llvm::sys::fs::createUniqueFile(binary + ".partial-%%%%%%", partialFd, partial)) {
        reportError("cannot write " + binary + ": " + ec.message());
        return 1;
      }
      llvm::sys::fs::closeFile(partialFd);
      if (!stages.run("build", [&] {
            const char *cxxEnv = std::getenv("TPC_CXX");
            llvm::ErrorOr<std::string> cxx =
                llvm::sys::findProgramByName(cxxEnv && *cxxEnv ? cxxEnv : "c++");
            std::string include = "-I" TPC_RUNTIME_INCLUDE_DIR;
            llvm::SmallVector<std::string> args;
#ifdef TPC_NVCC
            if (cuda) {
              // sm_90a, not -arch=sm_90a: that shorthand can add a plain sm_90 pass, which
              // rejects Hopper-only instructions.
              cxx = std::string(TPC_NVCC);
              // Libraries go to the linker as they are (nvcc only knows .a/.so by name).
              args = {*cxx, "-std=c++17", "-O2", "-gencode=arch=compute_90a,code=sm_90a",
                      include, source.str().str(),
                      "-Xlinker", TPC_CUDA_RUNTIME_LIBRARY, "-Xlinker", TPC_RUNTIME_LIBRARY,
                      "-Xlinker", TPC_GLOO_LIBRARY, "-Xlinker", TPC_OPENBLAS_LIBRARY,
                      "-L" TPC_CUDA_LIB_DIR, "-lcublasLt", "-lnccl", "-lpthread",
                      "-Xlinker", "-rpath=" TPC_CUDA_LIB_DIR, "-o", partial.str().str()};
            }
#endif
            if (!cxx) {
              reportError("no C++ compiler found (c++, or TPC_CXX)");
              return false;
            }
            if (args.empty())
              args = {*cxx, "-std=c++17", "-O2", include, source.str().str(),
                      TPC_RUNTIME_LIBRARY, TPC_GLOO_LIBRARY, TPC_OPENBLAS_LIBRARY,
                      "-lpthread", "-o", partial.str().str()};
            // A sanitizer build's runtime needs its programs built the same way.
            llvm::SmallVector<StringRef> sanitize;
            StringRef(TPC_SANITIZE_FLAGS).split(sanitize, ' ', -1, /*KeepEmpty=*/false);
            if (!cuda)
              for (StringRef flag : sanitize)
                args.insert(args.begin() + 1, flag.str());
            llvm::SmallVector<StringRef> argRefs(args.begin(), args.end());
            std::string message;
            int code = llvm::sys::ExecuteAndWait(*cxx, argRefs, std::nullopt, {}, 0, 0, &message);
            if (code != 0) {
              reportError(fmt::format("the C++ compiler failed on {} (exit {}){}", source.str(),
                                      code, message.empty() ? "" : ": " + message));
              return false;
            }
            if (std::error_code ec = llvm::sys::fs::rename(partial, binary)) {
              reportError("cannot write " + binary + ": " + ec.message());
              return false;
            }
            return true;
          })) {
        llvm::sys::fs::remove(partial);
        // An earlier build of that name was not built from the source now beside it.
        if (llvm::sys::fs::exists(binary) && !llvm::sys::fs::remove(binary))
          llvm::errs() << fmt::format(
              "tpc: removed the earlier {}, which was not built from {}\n", binary.str(),
              source.str());
        return 1;
      }
      llvm::outs() << fmt::format("wrote {} and {}\n", source.str(), binary.str());
      return session.errors() ? 1 : 0;
    };
  });
}

} // namespace tpc
