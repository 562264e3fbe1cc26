// tpc check: compile's front half (FrontHalf.h), without writing or building anything: it
// refuses what compile would, with the same messages, and says what it found.
#include "FrontHalf.h"

#include "llvm/Support/raw_ostream.h"

#include <fmt/core.h>

namespace tpc {

namespace {
struct CheckOptions : ProgramArgs {
  bool printPlan = false;
};
} // namespace

void addCheckCommand(CLI::App &app, CommandRunner &run) {
  auto opts = std::make_shared<CheckOptions>();
  CLI::App *cmd = app.add_subcommand(
      "check", "Validate a tp_plan against a model as compile would, writing nothing: "
               "errors, warnings, the effective plan");
  addProgramArgs(cmd, *opts);
  cmd->add_flag("--print-plan", opts->printPlan,
                "print the effective plan, rule by rule and parameter by parameter");
  cmd->callback([opts, &run] {
    run = [opts] {
      const CheckOptions &o = *opts;
      if (!checkTpArg(o))
        return 1;
      std::optional<ProgramOptions> program = programOptions(o);
      if (!program)
        return 1;
      Session session;
      FrontHalf front;
      bool ok = runFrontHalf(session, o, *program, front,
                             [](llvm::StringRef, llvm::function_ref<bool()> step) {
                               return step();
                             });
      if (front.plan && o.printPlan)
        front.plan->print(llvm::outs());
      llvm::outs() << fmt::format("{}: plan {} at tp {}: {} error{}, {} warning{}\n", o.model,
                                  o.plan, o.tp, session.errors(),
                                  session.errors() == 1 ? "" : "s", session.warnings(),
                                  session.warnings() == 1 ? "" : "s");
      return ok && !session.errors() ? 0 : 1;
    };
  });
}

} // namespace tpc
