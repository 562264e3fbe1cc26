// tpc check: compile's front half (tpc/Driver/Compile.h), without writing or building
// anything: it refuses what compile would, with the same messages, and says what it found.
#include "Commands.h"

#include "tpc/Dialect/TP/TPDialect.h"

#include "llvm/ADT/StringExtras.h"
#include "llvm/Support/raw_ostream.h"

#include <algorithm>
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

/// The shape each rank of `tp` holds of `param`, padding left out, from its shard
/// descriptor; empty for a parameter every rank holds whole.
std::vector<llvm::SmallVector<int64_t>> heldShapes(tp::ParamOp param, int64_t tp) {
  tp::ShardDescAttr shard = param.getShardAttr();
  if (!shard)
    return {};
  llvm::ArrayRef<int64_t> hf = shard.getHfShape();
  int64_t others = 1;
  for (size_t i = 0; i < hf.size(); ++i)
    if (int64_t(i) != shard.getDim())
      others *= hf[i];
  std::vector<llvm::SmallVector<int64_t>> shapes;
  for (int64_t r = 0; r < tp; ++r) {
    llvm::SmallVector<int64_t> shape(hf);
    shape[shard.getDim()] = shard.heldElements(r, tp) / others;
    shapes.push_back(shape);
  }
  return shapes;
}

/// Each rank's shape of the parameters whose ranks hold different amounts (whole heads where
/// tp does not divide them, torch.chunk's short last pieces), one line for each run of
/// layers alike.
void printUnevenShapes(mlir::ModuleOp program, llvm::raw_ostream &os) {
  int64_t tp = tp::getMeshSize(program).value_or(1);
  // (parameter name with its layer as *, what each rank holds), and the layers it covers.
  std::vector<std::pair<std::string, std::string>> lines;
  std::vector<std::vector<std::string>> layers;
  for (tp::ParamOp param : program.getOps<tp::ParamOp>()) {
    std::vector<llvm::SmallVector<int64_t>> shapes = heldShapes(param, tp);
    if (shapes.empty() || llvm::all_equal(shapes))
      continue;
    std::string held;
    for (int64_t r = 0; r < tp; ++r)
      held += fmt::format("{}rank {} {}", r ? ", " : "", r, shapeString(shapes[r]));
    held += fmt::format(" (each stored as {})", shapeString(param.getTensorType().getShape()));
    llvm::StringRef name = param.getSymName(), layer;
    std::string pattern = name.str();
    if (name.consume_front("model.layers.")) {
      layer = name.take_while([](char c) { return llvm::isDigit(c); });
      pattern = "model.layers.*" + name.drop_front(layer.size()).str();
    }
    auto seen = std::find(lines.begin(), lines.end(), std::pair{pattern, held});
    if (seen != lines.end()) {
      layers[seen - lines.begin()].push_back(layer.str());
      continue;
    }
    lines.push_back({pattern, held});
    layers.push_back({layer.str()});
  }
  if (lines.empty())
    return;
  os << "each rank's shape, where ranks hold different amounts (padding left out):\n";
  for (size_t i = 0; i < lines.size(); ++i) {
    const std::vector<std::string> &in = layers[i];
    std::string where = in.size() > 1 || (!in.empty() && !in[0].empty())
                            ? fmt::format(" (in {} layer{})", in.size(), in.size() == 1 ? "" : "s")
                            : "";
    os << "  " << lines[i].first << where << ": " << lines[i].second << "\n";
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
      bool ok = runFrontHalf(session, o, *program, front,
                             [](llvm::StringRef, llvm::function_ref<bool()> step) {
                               return step();
                             });
      if (front.plan && front.program) // what the program holds, where it is built
        for (plan::PlanReport::Param &p : front.plan->params)
          if (auto param = front.program->lookupSymbol<tp::ParamOp>(p.name))
            p.held = heldShapes(param, o.tp);
      if (front.plan && o.printPlan)
        front.plan->print(llvm::outs());
      if (front.program && o.printPlan)
        printUnevenShapes(*front.program, llvm::outs());
      llvm::outs() << fmt::format("{}: plan {} at tp {}: {} error{}, {} warning{}\n", o.model,
                                  o.plan, o.tp, session.errors(),
                                  session.errors() == 1 ? "" : "s", session.warnings(),
                                  session.warnings() == 1 ? "" : "s");
      return ok && !session.errors() ? 0 : 1;
    };
  });
}

} // namespace tpc
