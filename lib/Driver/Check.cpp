// What tpc check adds to compile's front half (include/tpc/Driver/Check.h): each rank's
// share of the parameters, read from the built program's shard descriptors.
#include "tpc/Driver/Check.h"

#include "tpc/Dialect/TP/TPDialect.h"

#include "llvm/ADT/STLExtras.h"
#include "llvm/ADT/StringExtras.h"

namespace tpc::driver {

namespace {

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

} // namespace

bool checkProgram(Session &session, const ProgramArgs &args, const ProgramOptions &options,
                  FrontHalf &front) {
  bool ok = runFrontHalf(session, args, options, front,
                         [](llvm::StringRef, llvm::function_ref<bool()> step) { return step(); });
  if (front.plan && front.program)
    for (plan::PlanReport::Param &p : front.plan->params)
      if (auto param = front.program->lookupSymbol<tp::ParamOp>(p.name))
        p.held = heldShapes(param, args.tp);
  return ok;
}

std::vector<UnevenShape> unevenShapes(mlir::ModuleOp program) {
  int64_t tp = tp::getMeshSize(program).value_or(1);
  std::vector<UnevenShape> uneven;
  for (tp::ParamOp param : program.getOps<tp::ParamOp>()) {
    std::vector<llvm::SmallVector<int64_t>> held = heldShapes(param, tp);
    if (held.empty() || llvm::all_equal(held))
      continue;
    llvm::SmallVector<int64_t> stored(param.getTensorType().getShape());
    llvm::StringRef name = param.getSymName(), layer;
    std::string pattern = name.str();
    // Layers that split their copies alike share one line.
    if (name.consume_front("model.layers.")) {
      layer = name.take_while([](char c) { return llvm::isDigit(c); });
      pattern = "model.layers.*" + name.drop_front(layer.size()).str();
    }
    auto alike = llvm::find_if(uneven, [&](const UnevenShape &u) {
      return u.pattern == pattern && u.held == held && u.stored == stored;
    });
    if (alike != uneven.end()) {
      alike->layers.push_back(layer.str());
      continue;
    }
    uneven.push_back({pattern, std::move(held), std::move(stored), {layer.str()}});
  }
  return uneven;
}

} // namespace tpc::driver
