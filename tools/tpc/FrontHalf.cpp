// compile's steps up to code generation (FrontHalf.h).
#include "FrontHalf.h"

#include "tpc/Target/Target.h"

using namespace mlir;

namespace tpc {

void addProgramArgs(CLI::App *cmd, ProgramArgs &args) {
  addPlanArgs(cmd, args);
  cmd->add_option("--target", args.target,
                  "cpu (C++, OpenBLAS, Gloo) or cuda (CUDA C++ for Hopper, cuBLASLt, NCCL)")
      ->check(CLI::IsMember({"cpu", "cuda"}));
  cmd->add_flag("--sequence-parallel", args.sequenceParallel,
                "split the residual stream by tokens where the token count divides by tp");
  cmd->add_flag("--no-fold", args.noFold,
                "leave out tp-fold-redistribute (to run what folding would remove)");
  cmd->add_option("--fuse", args.fuse,
                  "what the decision passes fuse, instead of the target's choice: none, or a "
                  "list of elementwise, norm, rotary and linears (cuda's default is all, "
                  "cpu's none)");
}

std::optional<ProgramOptions> programOptions(const ProgramArgs &args) {
  ProgramOptions options;
  options.sequenceParallel = args.sequenceParallel;
  options.fold = !args.noFold;
  options.decisions = TargetDecisions::forTarget(args.target);
  if (args.fuse.empty())
    return options;
  TargetDecisions &d = options.decisions = TargetDecisions();
  if (args.fuse == "none")
    return options;
  llvm::SmallVector<llvm::StringRef> names;
  llvm::StringRef(args.fuse).split(names, ',');
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
      return std::nullopt;
    }
  }
  return options;
}

bool runFrontHalf(Session &session, const ProgramArgs &args, const ProgramOptions &options,
                  FrontHalf &out, StepRunner run) {
  if (!run("parse", [&] { return bool(out.model = session.loadModel(args.model)); }))
    return false;
  if (!run("plan", [&] {
        FailureOr<plan::PlanReport> report =
            plan::applyPlan(*out.model, {args.plan, args.strategies, args.tp});
        if (failed(report))
          return false;
        out.plan = std::move(*report);
        return true;
      }))
    return false;
  if (!run("shard", [&] { return bool(out.program = buildProgram(*out.model, options)); }))
    return false;
  return run("lower",
             [&] { return bool(out.lowered = target::lowerToEmitC(*out.program, args.target)); });
}

} // namespace tpc
