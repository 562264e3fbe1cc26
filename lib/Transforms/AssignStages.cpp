// tp-assign-stages: which pipeline stage runs each op of a forward. The decoder layers go to
// the stages in consecutive runs, balanced by the bytes a decode step reads (CPU decode is
// bound by memory, and a dense layer's multiply-adds grow with the same weights); what is
// outside the layers follows the layer before it, so the embedding runs first and the final
// norm and lm_head last.
#include "tpc/Analysis/Report.h"
#include "tpc/Transforms/Passes.h"
#include "tpc/Transforms/Pipeline.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/Builders.h"

#include <map>
#include <set>

namespace tpc::tp {
#define GEN_PASS_DEF_TPASSIGNSTAGES
#include "TP/TPPasses.h.inc"
} // namespace tpc::tp

using namespace mlir;
using namespace tpc::tp;

namespace {

/// The decoder layer an op belongs to, where it names one.
std::optional<int64_t> layerOfOp(Operation *op) { return layerIndexOf(getModuleName(op)); }

/// Bytes a decode step of one token reads through one use of a weight: one row of a table an
/// embedding looks up, the routed share of an expert bank, all of it otherwise.
uint64_t bytesRead(OpOperand &use, ParamOp param) {
  double bytes = tpc::paramBytes(param);
  RankedTensorType type = param.getTensorType();
  Operation *user = use.getOwner();
  if (auto embedding = dyn_cast<EmbeddingOp>(user);
      embedding && use.get() == embedding.getTable() && type.getRank() == 2)
    return uint64_t(bytes / double(type.getDimSize(0)));
  if (auto experts = dyn_cast<ExpertsOp>(user); experts && use.get() != experts.getInput()) {
    int64_t banks = type.getRank() >= 1 ? type.getDimSize(0) : 1;
    if (auto router = experts.getRouting().getDefiningOp<RouterOp>(); router && banks > 0)
      return uint64_t(bytes * double(std::min(router.getTopK(), banks)) / double(banks));
  }
  return uint64_t(bytes);
}

/// KV bytes one attention reads a decode step at `tokens` of context.
uint64_t kvBytes(AttentionOp attention, int64_t tokens) {
  if (std::optional<int64_t> window = attention.getSlidingWindow())
    tokens = std::min(tokens, *window);
  int64_t valueDim = attention.getValueHeadDim().value_or(attention.getHeadDim());
  int64_t width = attention.getNumKvHeads() * (attention.getHeadDim() + valueDim);
  int64_t element = typeOf(attention.getKey()).getElementTypeBitWidth() / 8;
  return uint64_t(width * element * tokens);
}

/// The split of `costs` into `stages` consecutive runs, each of one or more, whose largest sum
/// is least; the first such split in scan order on ties, so the choice never depends on
/// rounding. `head` and `tail` are what the first and the last stage carry besides layers.
std::vector<int64_t> balance(ArrayRef<uint64_t> costs, int64_t stages, uint64_t head,
                             uint64_t tail) {
  int64_t layers = costs.size();
  std::vector<uint64_t> prefix(layers + 1, 0);
  for (int64_t i = 0; i < layers; ++i)
    prefix[i + 1] = prefix[i] + costs[i];
  auto cost = [&](int64_t stage, int64_t begin, int64_t end) {
    return prefix[end] - prefix[begin] + (stage == 0 ? head : 0) +
           (stage == stages - 1 ? tail : 0);
  };
  const uint64_t none = UINT64_MAX;
  // best[s][i]: the least largest stage over splits of the first i layers into s + 1 stages.
  std::vector<std::vector<uint64_t>> best(stages, std::vector<uint64_t>(layers + 1, none));
  std::vector<std::vector<int64_t>> cut(stages, std::vector<int64_t>(layers + 1, 0));
  for (int64_t i = 1; i <= layers; ++i)
    best[0][i] = cost(0, 0, i);
  for (int64_t s = 1; s < stages; ++s)
    for (int64_t i = s + 1; i <= layers; ++i)
      for (int64_t j = s; j < i; ++j) {
        if (best[s - 1][j] == none)
          continue;
        uint64_t largest = std::max(best[s - 1][j], cost(s, j, i));
        if (largest < best[s][i]) {
          best[s][i] = largest;
          cut[s][i] = j;
        }
      }
  std::vector<int64_t> split(stages);
  for (int64_t s = stages - 1, end = layers; s >= 0; --s) {
    int64_t begin = s == 0 ? 0 : cut[s][end];
    split[s] = end - begin;
    end = begin;
  }
  return split;
}

std::string joinSplit(ArrayRef<int64_t> split) {
  std::string text;
  for (int64_t n : split)
    text += (text.empty() ? "" : ",") + std::to_string(n);
  return text;
}

struct StageAssigner {
  ModuleOp module;
  int64_t stages;
  ArrayRef<int64_t> requested;
  int64_t kvTokens;

  std::string modelName() {
    auto type = module->getAttrOfType<StringAttr>(kHfModelTypeAttrName);
    return type ? type.getValue().str() : std::string("the model");
  }

  InFlightDiagnostic error() { return module.emitError(); }

  LogicalResult run() {
    SmallVector<func::FuncOp> forwards(module.getOps<func::FuncOp>());
    if (forwards.size() != 1) {
      error() << "--pp " << stages << " needs one forward, the module has "
              << forwards.size();
      return failure();
    }
    func::FuncOp forward = forwards.front();
    Block &body = forward.getBody().front();

    int64_t layers = 0;
    std::string prefix;
    for (Operation &op : body)
      if (std::optional<int64_t> layer = layerOfOp(&op)) {
        layers = std::max(layers, *layer + 1);
        if (prefix.empty()) {
          StringRef name = getModuleName(&op);
          prefix = name.substr(0, name.rfind("layers.")).str();
        }
      }
    if (layers == 0) {
      error() << "the model has no decoder layers (no module named ...layers.N) to split into "
                 "--pp "
              << stages << " stages";
      return failure();
    }
    if (stages > layers) {
      error() << "--pp " << stages << " is more stages than the " << layers
              << " decoder layers of " << modelName() << " (" << prefix << "layers.0 to "
              << prefix << "layers." << layers - 1 << "); give --pp " << layers << " or less";
      return failure();
    }

    // What each layer reads a decode step, and what the stages carry beside layers.
    std::vector<uint64_t> costs(layers, 0);
    // An op outside the layers runs with the layer before it (below): it counts there, or in
    // the last stage's tail after the last layer.
    uint64_t head = 0, tail = 0;
    std::optional<int64_t> before; // the layer of the latest layer op
    for (Operation &op : body) {
      std::optional<int64_t> layer = layerOfOp(&op);
      if (layer) {
        if (before && *layer != *before) { // what followed the layer before is its own
          costs[*before] += tail;
          tail = 0;
        }
        before = layer;
      }
      uint64_t bytes = 0;
      for (OpOperand &use : op.getOpOperands())
        if (ParamOp param = paramOf(use.get()))
          bytes += bytesRead(use, param);
      if (auto attention = dyn_cast<AttentionOp>(op))
        bytes += kvBytes(attention, kvTokens);
      if (layer)
        costs[*layer] += bytes;
      else if (!before)
        head += bytes;
      else
        tail += bytes; // after a layer: its own if another layer follows, else the tail's
    }

    std::vector<int64_t> split(requested.begin(), requested.end());
    if (split.empty()) {
      split = balance(costs, stages, head, tail);
    } else {
      int64_t placed = 0;
      for (int64_t n : split)
        placed += n;
      if (int64_t(split.size()) != stages) {
        error() << "--pp-split has " << split.size() << " stage"
                << (split.size() == 1 ? "" : "s") << ", --pp is " << stages;
        return failure();
      }
      for (auto [stage, n] : llvm::enumerate(split))
        if (n < 1) {
          error() << "--pp-split " << joinSplit(split) << ": stage " << stage
                  << " has no layer; every stage needs one";
          return failure();
        }
      if (placed != layers) {
        error() << "--pp-split " << joinSplit(split) << " places " << placed
                << " layers, " << modelName() << " has " << layers;
        return failure();
      }
    }
    std::vector<int64_t> stageOfLayer;
    for (auto [stage, n] : llvm::enumerate(split))
      stageOfLayer.insert(stageOfLayer.end(), n, int64_t(stage));

    // Every op with operands: its layer's stage, else the stage of the layer before it.
    MLIRContext *context = module.getContext();
    int64_t current = 0;
    for (Operation &op : body) {
      if (std::optional<int64_t> layer = layerOfOp(&op))
        current = stageOfLayer[*layer];
      if (op.getNumOperands() > 0 || op.getNumResults() == 0)
        setStage(&op, current);
    }
    // The return is where its value is made; what has no operand (a weight) is where it is
    // read, once per stage that reads it.
    for (Operation &op : llvm::make_early_inc_range(body)) {
      if (auto ret = dyn_cast<func::ReturnOp>(op)) {
        if (ret.getNumOperands() == 1)
          if (Operation *producer = ret.getOperand(0).getDefiningOp())
            setStage(ret, stageOf(producer));
        continue;
      }
      if (op.getNumOperands() == 0 && op.getNumResults() == 1)
        placeWhereRead(&op);
    }

    if (failed(checkCuts(body)))
      return failure();

    // The parameters: the stages whose weights read them.
    std::map<StringRef, std::set<int64_t>> readers;
    forward.walk([&](WeightOp weight) {
      readers[weight.getParamAttr().getValue()].insert(stageOf(weight));
    });
    for (ParamOp param : module.getOps<ParamOp>()) {
      auto found = readers.find(param.getSymName());
      if (found == readers.end())
        continue;
      param.setStagesAttr(DenseI64ArrayAttr::get(
          context, SmallVector<int64_t>(found->second.begin(), found->second.end())));
    }
    module->setAttr(kStageLayersAttrName, DenseI64ArrayAttr::get(context, split));
    return success();
  }

  /// A layer's values other than its output (the last op of it) stay in its stage: a split
  /// must not separate, say, one layer's attention from a later layer that shares its cache.
  LogicalResult checkCuts(Block &body) {
    llvm::DenseMap<int64_t, Operation *> lastOfLayer;
    for (Operation &op : body)
      if (std::optional<int64_t> layer = layerOfOp(&op))
        lastOfLayer[*layer] = &op;
    for (Operation &op : body)
      for (Value operand : op.getOperands()) {
        Operation *producer = operand.getDefiningOp();
        if (!producer || stageOf(producer) == stageOf(&op))
          continue;
        std::optional<int64_t> layer = layerOfOp(producer);
        if (!layer || lastOfLayer.lookup(*layer) == producer)
          continue;
        InFlightDiagnostic diag = error();
        diag << "the split cuts " << getModuleName(producer) << ": its " << producer->getName()
             << " (stage " << stageOf(producer) << ") is read by " << op.getName();
        if (StringRef user = getModuleName(&op); !user.empty())
          diag << " in " << user;
        diag << " (stage " << stageOf(&op)
             << "); only a layer's output may cross stages: give --pp-split a split between "
                "these layers";
        return failure();
      }
    return success();
  }
};

struct TPAssignStagesPass : tpc::tp::impl::TPAssignStagesBase<TPAssignStagesPass> {
  using Base::Base;

  void runOnOperation() override {
    if (failed(tpc::assignStages(getOperation(), split, kvTokens)))
      signalPassFailure();
  }
};

} // namespace

LogicalResult tpc::assignStages(ModuleOp module, ArrayRef<int64_t> split, int64_t kvTokens) {
  int64_t stages = getPipelineStages(module);
  if (stages == 1) {
    if (!split.empty() && split.size() != 1) {
      module.emitError() << "--pp-split has " << split.size() << " stages, --pp is 1";
      return failure();
    }
    return success();
  }
  return StageAssigner{module, stages, split, kvTokens}.run();
}
