// tpc compile: the whole pipeline, the program for the target, then the build driver.
#include "Commands.h"
#include "Session.h"

#include "tpc/Driver/Build.h"
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
      if (cuda && !o.emitOnly && !driver::hasCudaCompiler()) {
        reportError("--target cuda: this tpc was built without nvcc (none was found at "
                    "configure time); rebuild with CUDA installed in /usr/local/cuda, or "
                    "pass --emit-only to write the source alone");
        return 1;
      }
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
            os << fmt::format("// Generated by tpc compile from {} (--tp {} --target {}). Do not "
                              "edit: compile the model again instead.\n",
                              name, o.tp, o.target);
            if (failed(target::emitSource(*decided, o.target, os)))
              return false;
            return writeAtomically(source.str().str(), code);
          }))
        return 1;
      if (o.emitOnly) {
        llvm::outs() << fmt::format("wrote {}\n", source.str());
        return session.errors() ? 1 : 0;
      }
      driver::BuildFailure failure;
      if (!stages.run("build", [&] {
            return driver::buildBinary(source, binary, o.target, failure);
          })) {
        reportError(failure.error);
        if (!failure.note.empty())
          llvm::errs() << "tpc: " << failure.note << "\n";
        return 1;
      }
      llvm::outs() << fmt::format("wrote {} and {}\n", source.str(), binary.str());
      return session.errors() ? 1 : 0;
    };
  });
}

} // namespace tpc
