// The numbers behind `tpc analyze`, read off the IR the pipeline produced.
#include "tpc/Analysis/Report.h"

#include "tpc/Analysis/Redistribute.h"
#include "tpc/Dialect/TP/Sums.h"
#include "tpc/Dialect/TP/TPDialect.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "llvm/ADT/StringExtras.h"
#include "llvm/ADT/StringSet.h"

#include "tpcrt/kv_groups.h"

#include <cmath>
#include <map>

using namespace mlir;
using namespace tpc;
using namespace tpc::tp;

namespace {

int64_t elementBytes(RankedTensorType type) {
  return std::max<int64_t>(1, type.getElementTypeBitWidth() / 8);
}

/// Bytes of a tensor with `tokens` for each dynamic dim.
double tensorBytes(Type t, int64_t tokens) {
  auto type = cast<RankedTensorType>(t);
  double elements = 1;
  for (int64_t d : type.getShape())
    elements *= ShapedType::isDynamic(d) ? tokens : d;
  return elements * elementBytes(type);
}

int64_t collectiveDim(Operation *op) {
  if (auto gather = dyn_cast<AllGatherOp>(op))
    return normalizeDim(gather.getDim(), gather.getType().getRank());
  if (auto scatter = dyn_cast<ReduceScatterOp>(op))
    return normalizeDim(scatter.getDim(), scatter.getType().getRank());
  if (auto a2a = dyn_cast<AllToAllOp>(op))
    return normalizeDim(a2a.getSplitDim(), a2a.getType().getRank());
  return -1;
}

} // namespace

std::string tpc::layerOf(StringRef module) {
  if (!module.starts_with("model.layers."))
    return module.str();
  StringRef rest = module.drop_front(strlen("model.layers."));
  return ("model.layers." + rest.take_while([](char c) { return llvm::isDigit(c); })).str();
}

std::vector<CollectiveEntry> tpc::programCollectives(func::FuncOp forward, int64_t tokens,
                                                     int64_t tp, int64_t elementBytes,
                                                     bool variableGather, int64_t sampled,
                                                     bool greedy, std::optional<int64_t> stage) {
  // A value's bytes on one rank: its local shape, with tokens / tp rows where it is split by
  // tokens and `tokens` for any other dynamic dim; after tp.last_token, whose one static row
  // stands for each sampled sequence's (the lowering's rule), `sampled` rows.
  bool lastToken = false;
  forward.walk([&](LastTokenOp) { lastToken = true; });
  auto localBytes = [&](Value v) {
    double elements = 1;
    ArrayRef<int64_t> shape = typeOf(v).getShape();
    for (auto [i, d] : llvm::enumerate(shape))
      elements *= ShapedType::isDynamic(d)        ? (isSplitByTokens(v) ? tokens / tp : tokens)
                  : i == 0 && d == 1 && lastToken ? sampled
                                                  : d;
    return elements * double(elementBytes);
  };
  std::vector<CollectiveEntry> entries;
  Block &body = forward.getBody().front();
  forward.walk([&](Operation *op) {
    // What the collective layer hands its communicator (runtime/core/collectives.cpp): the
    // larger of one rank's buffers, padded pieces and all.
    std::optional<CollectiveKind> kind;
    double bytes = 0, padded = 0;
    bool argmax = false;
    Operation *top = body.findAncestorOpInBlock(*op);
    int64_t runs = top ? stageOf(top) : 0, peer = -1;
    if (auto transfer = dyn_cast<TransferOp>(op)) {
      // Each rank's piece as it is, sent by the stage it leaves, received where it arrives
      // (the lowering's sendToStage and recvFromStage: rows x columns of the local type).
      bool receives = stage && *stage == transfer.getTo();
      if (stage && !receives && *stage != transfer.getFrom())
        return;
      kind = receives ? CollectiveKind::Recv : CollectiveKind::Send;
      runs = receives ? transfer.getTo() : transfer.getFrom();
      peer = receives ? transfer.getFrom() : transfer.getTo();
      bytes = localBytes(transfer.getInput());
      if (greedy && transfer.getArgmaxIfGreedy()) { // sendLogitsToStage: an id a row
        argmax = true;
        bytes /= double(columns(transfer.getInput()));
      }
    } else if (stage && runs != *stage) {
      return;
    } else if (auto gather = dyn_cast<AllGatherOp>(op);
               gather && greedy && gather.getArgmaxIfGreedy()) {
      // Context::argmaxColumns: a (logit, id) pair of elements a row from every rank.
      kind = CollectiveKind::AllGather;
      argmax = true;
      bytes = double(tp) * localBytes(gather.getInput()) / double(columns(gather.getInput())) * 2;
    } else if (auto reduce = dyn_cast<AllReduceOp>(op)) {
      kind = CollectiveKind::AllReduce;
      bytes = localBytes(reduce.getInput()) / double(elementBytes) *
              double(elementBytesOf(reduce.getInput(), elementBytes));
    } else if (auto gather = dyn_cast<AllGatherOp>(op)) {
      kind = CollectiveKind::AllGather;
      bytes = double(tp) * localBytes(gather.getInput());
      padded = bytes - localBytes(gather.getResult()); // tp pieces against the whole
      if (variableGather && padded > 0) { // allgatherv: the real pieces only
        bytes -= padded;
        padded = 0;
      }
    } else if (auto scatter = dyn_cast<ReduceScatterOp>(op)) {
      kind = CollectiveKind::ReduceScatter;
      bytes = double(tp) * localBytes(scatter.getResult());
      padded = bytes - localBytes(scatter.getInput());
    } else if (auto a2a = dyn_cast<AllToAllOp>(op)) {
      // A part for each rank, [tokens / tp, local features]: the side split by features.
      kind = CollectiveKind::AllToAll;
      bytes = isSplitByTokens(a2a.getInput()) ? localBytes(a2a.getResult())
                                               : localBytes(a2a.getInput());
    }
    if (!kind)
      return;
    CollectiveEntry entry;
    entry.module = getModuleName(op).str();
    entry.layer = layerOf(entry.module);
    entry.kind = *kind;
    entry.dim = collectiveDim(op);
    entry.bytes = bytes;
    entry.sentBytes = sentBytes(*kind, entry.bytes, tp);
    entry.paddedBytes = std::max(0.0, padded);
    entry.argmax = argmax;
    entry.stage = runs;
    entry.peer = peer;
    entries.push_back(std::move(entry));
  });
  return entries;
}

std::vector<CollectiveEntry> tpc::transformersCollectives(ModuleOp planned, int64_t tokens) {
  int64_t tp = getMeshSize(planned).value_or(1);
  std::vector<CollectiveEntry> entries;
  // On one rank transformers does no tensor parallelism (transformers 5.17's
  // distributed/mixin.py applies the plan only when tp_size > 1): no hook, no collective.
  if (tp == 1)
    return entries;
  llvm::StringSet<> seen;
  // generate runs the ops that end the forward (lm_head) on the last token only
  // (logits_to_keep=1), as tpc does.
  llvm::DenseSet<Operation *> lastOnly;
  for (auto func : planned.getOps<func::FuncOp>())
    for (Operation *op : lastTokenChain(func))
      lastOnly.insert(op);
  planned.walk([&](Operation *op) {
    auto strategy = op->getAttrOfType<StrategyAttr>(kStrategyAttrName);
    StringRef module = getModuleName(op);
    if (!strategy || op->getNumResults() != 1 || seen.contains(module))
      return;
    // The hook runs where the module's output leaves it.
    Value result = op->getResult(0);
    if (llvm::none_of(result.getUsers(),
                      [&](Operation *user) { return getModuleName(user) != module; }))
      return;
    StringRef name = strategy.getName();
    std::optional<CollectiveKind> kind;
    if (llvm::is_contained({"colwise_gather_output", "colwise_rep", "embedding_colwise"}, name))
      kind = CollectiveKind::AllGather;
    else if (llvm::is_contained({"rowwise", "rowwise_split_input", "rowwise_rep",
                                 "embedding_rowwise", "all_reduce", "moe_tp_experts"},
                                name))
      kind = CollectiveKind::AllReduce;
    if (!kind)
      return;
    seen.insert(module);
    CollectiveEntry entry;
    entry.module = module.str();
    entry.layer = layerOf(module);
    entry.kind = *kind;
    entry.dim = *kind == CollectiveKind::AllGather
                    ? typeOf(result).getRank() - 1
                    : -1;
    entry.bytes = tensorBytes(result.getType(), lastOnly.contains(op) ? 1 : tokens);
    // Llama4TextExperts returns every expert's output for every token, [experts x tokens,
    // hidden] (Llama4TextMoe sums them after): its moe_tp_experts hook reduces all of that.
    if (auto experts = dyn_cast<ExpertsOp>(op); experts && experts.getScaleInput())
      entry.bytes *= double(typeOf(experts.getRouting()).getDimSize(1));
    entry.sentBytes = sentBytes(*kind, entry.bytes, tp);
    entries.push_back(std::move(entry));
  });
  return entries;
}

/// Bytes of a parameter's `elements` in the type it is stored in.
static double storedBytes(ParamOp param, double elements) {
  return elements * bytesPerElement(param.getWeightType());
}

double tpc::paramBytes(ParamOp param) {
  return storedBytes(param, double(param.getTensorType().getNumElements()));
}

/// The parameters the ranks of `stage` hold: every one without stages.
static auto heldParams(ModuleOp module, std::optional<int64_t> stage) {
  return llvm::make_filter_range(module.getOps<ParamOp>(), [stage](ParamOp param) {
    return !stage || inStage(param, *stage);
  });
}

/// Whether `op` of a forward runs in `stage`: every op without stages.
static bool runsIn(Operation *op, std::optional<int64_t> stage) {
  return !stage || stageOf(op) == *stage;
}

double tpc::parameterBytes(ModuleOp module, std::optional<int64_t> stage) {
  double bytes = 0;
  for (ParamOp param : heldParams(module, stage))
    bytes += storedBytes(param, double(param.getTensorType().getNumElements()));
  return bytes;
}

double tpc::unshardedParameterBytes(ModuleOp partitioned) {
  double bytes = 0;
  for (ParamOp param : partitioned.getOps<ParamOp>()) {
    double elements = 1;
    if (ShardDescAttr shard = param.getShardAttr())
      for (int64_t d : shard.getHfShape())
        elements *= double(d);
    else
      elements = double(param.getTensorType().getNumElements());
    bytes += storedBytes(param, elements);
  }
  return bytes;
}

llvm::DenseMap<StringAttr, double> tpc::routedShares(ModuleOp module) {
  llvm::DenseMap<StringAttr, double> shares;
  module.walk([&](WeightOp weight) {
    for (OpOperand &use : weight->getUses()) {
      auto experts = dyn_cast<ExpertsOp>(use.getOwner());
      if (!experts || use.get() == experts.getInput())
        continue;
      // The router, through what reshards its weights (expert parallelism splits them by
      // expert: a local reshard, or a redistribute, between the two).
      Operation *source = experts.getRouting().getDefiningOp();
      for (int steps = 0; source && !isa<RouterOp>(source) && source->getNumOperands() > 0 &&
                          steps < 8;
           ++steps)
        source = source->getOperand(0).getDefiningOp();
      auto router = dyn_cast_or_null<RouterOp>(source);
      auto type = dyn_cast<RankedTensorType>(weight.getType());
      if (!router || !type || type.getRank() < 1)
        continue;
      // The bank's experts: its leading dim, whole (the param's, before any split).
      auto param = SymbolTable::lookupNearestSymbolFrom<ParamOp>(weight, weight.getParamAttr());
      int64_t banks = param && param.getShardAttr() && param.getShardAttr().getDim() == 0
                          ? param.getShardAttr().getHfShape()[0]
                          : type.getDimSize(0);
      if (banks > 0)
        shares[weight.getParamAttr().getAttr()] =
            double(std::min(router.getTopK(), banks)) / double(banks);
    }
  });
  return shares;
}

/// The largest-reading rank's decode reads (decodeWeightReads), and of them its expert banks'.
static std::pair<double, double> decodeReads(ModuleOp partitioned,
                                             std::optional<int64_t> stage);

double tpc::decodeWeightReads(ModuleOp partitioned, std::optional<int64_t> stage) {
  return decodeReads(partitioned, stage).first;
}

double tpc::decodeExpertReads(ModuleOp partitioned, std::optional<int64_t> stage) {
  return decodeReads(partitioned, stage).second;
}

static std::pair<double, double> decodeReads(ModuleOp partitioned,
                                             std::optional<int64_t> stage) {
  int64_t tp = getMeshSize(partitioned).value_or(1);
  llvm::DenseMap<StringAttr, double> routed = routedShares(partitioned);
  // Tables that only embeddings read (in the stage: a tied table is lm_head's in the last):
  // a token reads one row of them.
  llvm::DenseMap<StringAttr, bool> lookupOnly;
  partitioned.walk([&](WeightOp weight) {
    if (!runsIn(weight, stage))
      return;
    StringAttr name = weight.getParamAttr().getAttr();
    bool lookup = llvm::all_of(weight->getUses(), [&](OpOperand &use) {
      auto embedding = dyn_cast<EmbeddingOp>(use.getOwner());
      return embedding && use.get() == embedding.getTable();
    });
    auto [it, inserted] = lookupOnly.try_emplace(name, lookup);
    if (!inserted)
      it->second = it->second && lookup;
  });
  std::pair<double, double> largest{0, 0};
  for (int64_t r = 0; r < tp; ++r) {
    double bytes = 0, expert = 0;
    for (ParamOp param : heldParams(partitioned, stage)) {
      RankedTensorType type = param.getTensorType();
      ShardDescAttr shard = param.getShardAttr();
      double held = shard ? double(shard.heldElements(r, tp)) : double(type.getNumElements());
      if (lookupOnly.lookup(param.getSymNameAttr()) && type.getRank() == 2)
        held = std::min(held, double(type.getDimSize(1)));
      bytes += storedBytes(param, held);
      if (routed.contains(param.getSymNameAttr()))
        expert += storedBytes(param, held);
    }
    if (bytes > largest.first)
      largest = {bytes, expert};
  }
  return largest;
}

std::string tpc::heldTypes(ModuleOp module, std::optional<int64_t> stage) {
  std::map<std::string, int64_t> counts;
  for (ParamOp param : heldParams(module, stage))
    ++counts[stringifyWeightType(param.getWeightType()).str()];
  std::string out;
  for (const auto &[type, count] : counts)
    out += (out.empty() ? "" : ", ") + type + ": " + std::to_string(count) +
           (out.empty() ? (count == 1 ? " parameter" : " parameters") : "");
  return out;
}

RankShares tpc::rankShares(ModuleOp partitioned, std::optional<int64_t> stage) {
  int64_t tp = getMeshSize(partitioned).value_or(1);
  RankShares shares;
  shares.weightBytes.assign(tp, 0);
  shares.matmulElements.assign(tp, 0);
  shares.expertElements.assign(tp, 0);
  shares.queryHeads.assign(tp, 0);
  llvm::DenseMap<StringAttr, double> routed = routedShares(partitioned);
  // Parameters some matmul multiplies by (a linear's weight, the experts', the router's).
  llvm::DenseSet<StringAttr> matmuls;
  partitioned.walk([&](WeightOp weight) {
    if (!runsIn(weight, stage)) // a tied table is a matmul's in the last stage only
      return;
    for (OpOperand &use : weight->getUses()) {
      Operation *user = use.getOwner();
      auto linear = dyn_cast<LinearOp>(user);
      if ((linear && use.get() == linear.getWeight()) || isa<ExpertsOp, RouterOp>(user))
        matmuls.insert(weight.getParamAttr().getAttr());
    }
  });
  for (ParamOp param : heldParams(partitioned, stage)) {
    RankedTensorType type = param.getTensorType();
    ShardDescAttr shard = param.getShardAttr();
    double whole = 1;
    for (int64_t d : type.getShape())
      whole *= d;
    bool matmul = matmuls.contains(param.getSymNameAttr());
    for (int64_t r = 0; r < tp; ++r) {
      double held = shard ? double(shard.heldElements(r, tp)) : whole;
      shares.weightBytes[r] += storedBytes(param, held);
      if (matmul)
        shares.matmulElements[r] += held;
      if (matmul && routed.contains(param.getSymNameAttr()))
        shares.expertElements[r] += held;
    }
  }
  partitioned.walk([&](AttentionOp attention) {
    if (!runsIn(attention, stage))
      return;
    std::optional<ArrayRef<int64_t>> ranks = attention.getRankHeads();
    for (int64_t r = 0; r < tp; ++r)
      shares.queryHeads[r] += ranks ? (*ranks)[3 * r + 1] : attention.getNumHeads();
  });
  return shares;
}

double tpc::imbalance(const std::vector<double> &perRank) {
  double total = 0, largest = 0;
  for (double v : perRank) {
    total += v;
    largest = std::max(largest, v);
  }
  return total > 0 ? largest * double(perRank.size()) / total : 0;
}

double tpc::kvCacheBytes(ModuleOp partitioned, int64_t maxSeqLen,
                         std::optional<int64_t> stage) {
  double bytes = 0;
  partitioned.walk([&](AttentionOp attention) {
    if (!runsIn(attention, stage))
      return;
    int64_t valueHeadDim = attention.getValueHeadDim().value_or(attention.getHeadDim());
    bytes += double(maxSeqLen) * attention.getNumKvHeads() *
             (attention.getHeadDim() + valueHeadDim) *
             elementBytes(typeOf(attention.getKey()));
  });
  return bytes;
}

double tpc::kvCacheAllocated(ModuleOp partitioned, int64_t tokens, int64_t maxSeqLen,
                             int64_t maxNumSeqs, int64_t blockSize,
                             std::optional<int64_t> stage, MemoryReport &memory) {
  // Every layer, as main() describes them (addKvCache: the module's order), with its stage.
  std::vector<tpcrt::KvReach> reaches;
  std::vector<double> bytes;
  std::vector<int64_t> stages;
  partitioned.walk([&](AttentionOp attention) {
    int64_t valueHeadDim = attention.getValueHeadDim().value_or(attention.getHeadDim());
    reaches.push_back({attention.getSlidingWindow().value_or(0),
                       attention.getChunkSize().value_or(0)});
    bytes.push_back(double(attention.getNumKvHeads() * (attention.getHeadDim() + valueHeadDim) *
                           elementBytes(typeOf(attention.getKey()))));
    stages.push_back(stage ? stageOf(attention) : 0);
  });
  tpcrt::KvGroups groups = tpcrt::kvGroups(reaches, maxSeqLen, true);
  std::vector<int64_t> pools = tpcrt::kvPoolBlocks(groups, bytes, stages, tokens, blockSize,
                                                   maxSeqLen, maxNumSeqs);
  memory.kvGroups.assign(groups.size(), {});
  for (size_t g = 0; g < groups.size(); ++g) {
    memory.kvGroups[g].reads = groups.reaches[g].describe();
    memory.kvGroups[g].blocksPerSequence = groups.reaches[g].blocksRead(blockSize, maxSeqLen);
    const tpcrt::KvReach &reach = groups.reaches[g];
    memory.kvGroups[g].keysRead =
        reach.everyKey() ? 0
                         : std::min(reach.window > 0 ? reach.window : reach.chunk,
                                    reach.chunk > 0 ? reach.chunk : reach.window);
  }
  double allocated = 0, perSequence = 0, perToken = 0;
  for (size_t l = 0; l < bytes.size(); ++l) {
    if (stage && stages[l] != *stage)
      continue;
    MemoryReport::KvGroup &group = memory.kvGroups[size_t(groups.layerGroup[l])];
    ++group.layers;
    group.bytesPerToken += bytes[l];
    allocated += double(pools[size_t(groups.layerGroup[l])] * blockSize) * bytes[l];
    perSequence += double(group.blocksPerSequence * blockSize) * bytes[l];
    perToken += bytes[l];
  }
  llvm::erase_if(memory.kvGroups, [](const MemoryReport::KvGroup &g) { return g.layers == 0; });
  double gib = double(int64_t(1) << 30), whole = (maxSeqLen + blockSize - 1) / blockSize;
  memory.kvSequencesPerGiB = perSequence > 0 ? std::floor(gib / perSequence) : 0;
  memory.kvSequencesPerGiBWhole =
      perToken > 0 ? std::floor(gib / (whole * double(blockSize) * perToken)) : 0;
  return allocated;
}

double tpc::mlaLatentCacheBytes(ModuleOp partitioned, int64_t maxSeqLen,
                                std::optional<int64_t> stage) {
  double bytes = 0;
  partitioned.walk([&](AttentionOp attention) {
    if (!runsIn(attention, stage))
      return;
    auto value = attention.getValue().getDefiningOp<HeadSliceOp>();
    auto key = attention.getKey().getDefiningOp<ConcatHeadsOp>();
    auto kvB = value ? value.getInput().getDefiningOp<LinearOp>() : LinearOp();
    if (!attention.getValueHeadDim() || !key || !kvB)
      return;
    int64_t latent = typeOf(kvB.getInput()).getDimSize(1);
    int64_t rope = typeOf(key.getShared()).getDimSize(1);
    bytes += double(maxSeqLen) * (latent + rope) *
             elementBytes(typeOf(attention.getKey()));
  });
  return bytes;
}

int64_t tpc::arenaElementsPerToken(ModuleOp program) {
  int64_t size = 0;
  for (auto func : program.getOps<func::FuncOp>())
    if (auto attr = func->getAttrOfType<IntegerAttr>(kArenaSizeAttrName))
      size = std::max(size, attr.getInt());
  return size;
}

void tpc::writeDot(ModuleOp lowered, raw_ostream &os) {
  os << "digraph tpc {\n  rankdir=TB;\n  node [shape=box, fontname=\"monospace\", fontsize=10];\n"
        "  edge [fontname=\"monospace\", fontsize=9];\n";
  llvm::DenseMap<Operation *, unsigned> ids;
  lowered.walk([&](Operation *op) {
    if (isa<ModuleOp, func::FuncOp, ParamOp, WeightOp>(op))
      return;
    unsigned id = ids.size();
    ids[op] = id;
    bool collective = isa<AllReduceOp, AllGatherOp, ReduceScatterOp, AllToAllOp>(op);
    std::string label = op->getName().getStringRef().str();
    if (StringRef module = getModuleName(op); !module.empty())
      label += "\\n" + module.str();
    os << "  n" << id << " [label=\"" << label << "\""
       << (collective ? ", style=filled, fillcolor=\"#f4b183\"" : "") << "];\n";
    for (Value operand : op->getOperands()) {
      Operation *producer = operand.getDefiningOp();
      if (!producer || !ids.count(producer))
        continue;
      // Values on one rank carry no placement (tp-elide-collectives strips them).
      os << "  n" << ids[producer] << " -> n" << id;
      if (PlacementAttr p = getPlacement(operand))
        os << " [label=\"" << p.str() << "\"]";
      os << ";\n";
    }
  });
  os << "}\n";
}
