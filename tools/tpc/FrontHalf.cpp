// compile's steps up to code generation (FrontHalf.h).
#include "FrontHalf.h"

#include "tpc/Target/Target.h"
#include "tpc/Target/TargetInfo.h"

using namespace mlir;

namespace tpc {

void addProgramArgs(CLI::App *cmd, ProgramArgs &args) {
  addPlanArgs(cmd, args);
  std::string targets;
  for (const target::TargetInfo *target : target::allTargets())
    targets += (targets.empty() ? "" : " or ") + target->name().str() + " (" +
               target->summary().str() + ")";
  cmd->add_option("--target", args.target, targets)
      ->check(CLI::IsMember(target::targetNames()));
  cmd->add_flag("--sequence-parallel", args.sequenceParallel,
                "split the residual stream by tokens where the token count divides by tp");
  cmd->add_flag("--no-fold", args.noFold,
                "leave out tp-fold-redistribute (to run what folding would remove)");
  cmd->add_option("--fuse", args.fuse,
                  "what the decision passes fuse, instead of the target's choice: none, or a "
                  "list of elementwise, norm, rotary and linears (cuda's default is all, "
                  "cpu's none)");
}

std::optional<ProgramOptions> programOptions(const ProgramArgs &args, MLIRContext &ctx) {
  ProgramOptions options;
  options.sequenceParallel = args.sequenceParallel;
  options.fold = !args.noFold;
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
                                       elementwise, norm, rotary, linears, target.getGather());
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
             [&] { return bool(out.lowered = target::lowerToEmitC(*out.program)); });
}

} // namespace tpc
