// tpc check: validate a plan against a model without compiling anything.
#include "Commands.h"
#include "Session.h"

#include "tpc/Plan/Plan.h"

#include "llvm/Support/raw_ostream.h"

#include <fmt/core.h>

namespace tpc {

namespace {
struct CheckOptions : PlanArgs {
  bool printPlan = false;
};
} // namespace

void addCheckCommand(CLI::App &app, CommandRunner &run) {
  auto opts = std::make_shared<CheckOptions>();
  CLI::App *cmd = app.add_subcommand(
      "check", "Validate a tp_plan against a model: errors, warnings, the effective plan");
  addPlanArgs(cmd, *opts);
  cmd->add_flag("--print-plan", opts->printPlan,
                "print the effective plan, rule by rule and parameter by parameter");
  cmd->callback([opts, &run] {
    run = [opts] {
      if (!checkTpArg(*opts))
        return 1;
      Session session;
      mlir::OwningOpRef<mlir::ModuleOp> module = session.loadModel(opts->model);
      if (!module)
        return 1;
      plan::PlanOptions planOptions{opts->plan, opts->strategies, opts->tp};
      mlir::FailureOr<plan::PlanReport> report = plan::applyPlan(*module, planOptions);
      if (succeeded(report) && opts->printPlan)
        report->print(llvm::outs());
      llvm::outs() << fmt::format("{}: plan {} at tp {}: {} error{}, {} warning{}\n",
                                  opts->model, opts->plan, opts->tp, session.errors(),
                                  session.errors() == 1 ? "" : "s", session.warnings(),
                                  session.warnings() == 1 ? "" : "s");
      return failed(report) || session.errors() ? 1 : 0;
    };
  });
}

} // namespace tpc
