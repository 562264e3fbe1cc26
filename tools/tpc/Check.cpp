// tpc check's options and output (lib/Driver/Check.cpp runs compile's front half), without
// writing or building anything: it refuses what compile would, with the same messages, and
// says what it found.
#include "Commands.h"

#include "tpc/Analysis/Report.h"
#include "tpc/Driver/Check.h"

#include "llvm/ADT/StringExtras.h"
#include "llvm/Support/raw_ostream.h"

#include <fmt/core.h>

namespace tpc {

using namespace driver;

namespace {
struct CheckOptions : ProgramArgs {
  bool printPlan = false;
};

std::string shapeString(llvm::ArrayRef<int64_t> shape) {
  std::string s = "[";
  llvm::ListSeparator sep(", ");
  for (int64_t d : shape)
    s += llvm::StringRef(sep).str() + std::to_string(d);
  return s + "]";
}

/// Each rank's shape of the parameters whose ranks hold different amounts, one line for each
/// run of layers alike.
void printUnevenShapes(mlir::ModuleOp program, llvm::raw_ostream &os) {
  std::vector<UnevenShape> uneven = unevenShapes(program);
  if (uneven.empty())
    return;
  os << "each rank's shape, where ranks hold different amounts (padding left out):\n";
  for (const UnevenShape &u : uneven) {
    std::string held;
    for (size_t r = 0; r < u.held.size(); ++r)
      held += fmt::format("{}rank {} {}", r ? ", " : "", r, shapeString(u.held[r]));
    const std::vector<std::string> &in = u.layers;
    std::string where = in.size() > 1 || (!in.empty() && !in[0].empty())
                            ? fmt::format(" (in {} layer{})", in.size(), in.size() == 1 ? "" : "s")
                            : "";
    os << "  " << u.pattern << where << ": " << held
       << fmt::format(" (each stored as {})", shapeString(u.stored)) << "\n";
  }
}
/// The pipeline's stages, where the program has several: each stage's ranks, its layers (as
/// tp-assign-stages placed them) and the weight bytes each of its ranks holds.
void printStages(mlir::ModuleOp program, llvm::raw_ostream &os) {
  auto layers = program->getAttrOfType<mlir::DenseI64ArrayAttr>(tp::kStageLayersAttrName);
  if (!layers)
    return;
  int64_t tp = tp::getMeshSize(program).value_or(1), stages = layers.size(), first = 0;
  os << fmt::format("pipeline stages (pp {} x tp {}, {} ranks):\n", stages, tp, stages * tp);
  for (int64_t stage = 0; stage < stages; ++stage) {
    double bytes = 0;
    for (tp::ParamOp param : program.getOps<tp::ParamOp>())
      if (tp::inStage(param, stage))
        bytes += paramBytes(param);
    int64_t count = layers[stage];
    os << fmt::format("  stage {}: ranks {}-{}, layers {}-{} ({}), {:.0f} weight bytes a rank\n",
                      stage, stage * tp, stage * tp + tp - 1, first, first + count - 1, count,
                      bytes);
    first += count;
  }
}
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
      Session session;
      std::optional<ProgramOptions> program = programOptions(o, session.context());
      if (!program)
        return 1;
      FrontHalf front;
      bool ok = checkProgram(session, o, *program, front);
      if (front.plan && o.printPlan)
        front.plan->print(llvm::outs());
      if (front.program && o.printPlan)
        printUnevenShapes(*front.program, llvm::outs());
      if (front.program)
        printStages(*front.program, llvm::outs());
      std::string mesh = (o.pp > 1 ? fmt::format("pp {} x ", o.pp) : "") + fmt::format("tp {}", o.tp);
      llvm::outs() << fmt::format("{}: plan {} at {}: {} error{}, {} warning{}\n", o.model,
                                  o.plan, mesh, session.errors(),
                                  session.errors() == 1 ? "" : "s", session.warnings(),
                                  session.warnings() == 1 ? "" : "s");
      return ok && !session.errors() ? 0 : 1;
    };
  });
}

} // namespace tpc
