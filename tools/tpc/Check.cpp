// tpc check: validate a plan against a model without compiling anything.
#include "Commands.h"
#include "Session.h"

#include "tpc/Plan/Plan.h"

#include "llvm/Support/raw_ostream.h"

#include <fmt/core.h>

namespace tpc {

namespace {
struct CheckOptions {
  std::string model, plan, strategies;
  int64_t tp = 0;
  bool printPlan = false;
};
} // namespace

void addCheckCommand(CLI::App &app, CommandRunner &run) {
  auto opts = std::make_shared<CheckOptions>();
  CLI::App *cmd = app.add_subcommand(
      "check", "Validate a tp_plan against a model: errors, warnings, the effective plan");
  cmd->add_option("model", opts->model, "the model graph (tp dialect)")->required();
  cmd->add_option("--plan", opts->plan, "plan.json, or a config.json with base_model_tp_plan")
      ->required();
  cmd->add_option("--tp", opts->tp, "ranks on the tp axis")->required();
  cmd->add_option("--strategies", opts->strategies, "a JSON file of custom strategies");
  cmd->add_flag("--print-plan", opts->printPlan,
                "print the effective plan, rule by rule and parameter by parameter");
  cmd->callback([opts, &run] {
    run = [opts] {
      if (opts->tp < 1) {
        reportError(fmt::format("--tp must be at least 1, got {}", opts->tp));
        return 1;
      }
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
