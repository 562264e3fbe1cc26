// tpc compile and check as a library (include/tpc/Driver/Compile.h): the front half, the
// program's source for the target, and the build.
#include "tpc/Driver/Compile.h"

#include "tpc/Driver/Build.h"

#include "tpc/Target/Target.h"
#include "tpc/Target/TargetInfo.h"

#include "mlir/Target/Cpp/CppEmitter.h"
#include "llvm/Support/FileSystem.h"
#include "llvm/Support/Path.h"
#include "llvm/Support/raw_ostream.h"

#include <chrono>
#include <fmt/core.h>

using namespace mlir;

namespace tpc::driver {

bool checkTpArg(const PlanArgs &args) {
  if (args.tp < 1) {
    reportError("--tp must be at least 1, got " + llvm::Twine(args.tp));
    return false;
  }
  if (args.pp < 1) {
    reportError("--pp must be at least 1, got " + llvm::Twine(args.pp));
    return false;
  }
  return true;
}

std::optional<ProgramOptions> programOptions(const ProgramArgs &args, MLIRContext &ctx) {
  ProgramOptions options;
  options.sequenceParallel = args.sequenceParallel;
  options.fold = !args.noFold;
  options.weights = args.weights;
  tp::TargetAttr target = target::findTarget(args.target)->describe(&ctx);
  options.target = target;
  if (args.fuse.empty())
    return options;
  // --fuse replaces the target's choices, and the module's #tp.target says so.
  bool elementwise = false, norm = false, rotary = false, linears = false;
  llvm::SmallVector<llvm::StringRef> names;
  if (args.fuse != "none")
    llvm::StringRef(args.fuse).split(names, ',');
  for (llvm::StringRef name : names) {
    bool *kind = name == "elementwise" ? &elementwise
                 : name == "norm"      ? &norm
                 : name == "rotary"    ? &rotary
                 : name == "linears"   ? &linears
                                       : nullptr;
    if (!kind) {
      reportError("--fuse: unknown '" + name +
                  "'; give none, or a list of elementwise, norm, rotary and linears");
      return std::nullopt;
    }
    *kind = true;
  }
  options.target = tp::TargetAttr::get(&ctx, target.getName(), target.getActivation(),
                                       elementwise, norm, rotary, linears, target.getGather(),
                                       target.getGreedyArgmax(), target.getArenaAlign());
  return options;
}

bool runFrontHalf(Session &session, const ProgramArgs &args, const ProgramOptions &options,
                  FrontHalf &out, StepRunner run) {
  if (!run("parse", [&] { return bool(out.model = session.loadModel(args.model)); }))
    return false;
  if (!run("plan", [&] {
        FailureOr<plan::PlanReport> report =
            plan::applyPlan(*out.model, {args.plan, args.strategies, args.tp, args.pp});
        if (failed(report) || failed(assignStages(*out.model, args.ppSplit)))
          return false;
        out.plan = std::move(*report);
        return true;
      }))
    return false;
  if (!run("shard", [&] { return bool(out.program = buildProgram(*out.model, options)); }))
    return false;
  return run("lower",
             [&] { return bool(out.lowered = target::lowerToEmitC(*out.program)); });
}

namespace {

/// Prints each stage and how long it took.
class Stages {
public:
  explicit Stages(llvm::raw_ostream &log) : log(log) {}
  bool run(llvm::StringRef name, llvm::function_ref<bool()> step) {
    auto start = std::chrono::steady_clock::now();
    bool ok = step();
    double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() -
                                                          start)
                    .count();
    log << fmt::format("  {:<10} {:>9.1f} ms{}\n", name, ms, ok ? "" : "  (failed)");
    log.flush();
    return ok;
  }

private:
  llvm::raw_ostream &log;
};

} // namespace

int compileModel(CompileArgs &o, llvm::raw_ostream &log) {
  if (!checkTpArg(o))
    return 1;
  const target::TargetInfo &target = *target::findTarget(o.target);
  if (std::string why; !o.emitOnly && !target.canBuild(why)) {
    reportError(why);
    return 1;
  }
  Session session(o.quiet);
  std::optional<ProgramOptions> program = programOptions(o, session.context());
  if (!program)
    return 1;
  Stages stages(log);
  // The mesh as given: --pp only where there are stages, so one-stage output stays as it was.
  std::string mesh = (o.pp > 1 ? fmt::format("--pp {} ", o.pp) : "") + fmt::format("--tp {}", o.tp);
  log << fmt::format("tpc compile {} --plan {} {} --target {}\n", o.model, o.plan, mesh,
                     o.target);
  FrontHalf front;
  if (!runFrontHalf(session, o, *program, front,
                    [&](llvm::StringRef name, llvm::function_ref<bool()> step) {
                      return stages.run(name, step);
                    }))
    return 1;

  ModuleOp module = *front.model;
  std::string name = module.getSymName() ? module.getSymName()->str() : "model";
  if (std::error_code ec = llvm::sys::fs::create_directories(o.output)) {
    reportError("cannot create " + o.output + ": " + ec.message());
    return 1;
  }
  llvm::SmallString<256> source(o.output), binary(o.output);
  llvm::sys::path::append(source, name + target.sourceExtension());
  llvm::sys::path::append(binary, name);
  if (!stages.run("emit", [&] {
        std::string code;
        llvm::raw_string_ostream os(code);
        os << fmt::format("// Generated by tpc compile from {} ({} --target {}). Do not "
                          "edit: compile the model again instead.\n",
                          name, mesh, o.target);
        if (failed(emitc::translateToCpp(*front.lowered, os)))
          return false;
        return writeAtomically(source.str().str(), code);
      }))
    return 1;
  if (o.emitOnly) {
    log << fmt::format("wrote {}\n", source.str());
    return session.errors() ? 1 : 0;
  }
  driver::BuildFailure failure;
  if (!stages.run("build", [&] {
        return driver::buildBinary(source, binary, target, failure);
      })) {
    reportError(failure.error);
    if (!failure.note.empty())
      llvm::errs() << "tpc: " << failure.note << "\n";
    return 1;
  }
  log << fmt::format("wrote {} and {}\n", source.str(), binary.str());
  o.binary = binary.str().str();
  return session.errors() ? 1 : 0;
}

} // namespace tpc::driver
