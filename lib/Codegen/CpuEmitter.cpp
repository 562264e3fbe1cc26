// The CPU emitter. Each tp op becomes one call into libtpcrt whose arguments spell out the
// placement (which rank adds a rowwise bias, which vocab rows an embedding holds, how a
// gather puts pieces back); every activation gets an offset in one arena, planned by
// lifetime in floats per token, so a forward over n tokens needs no allocation.
#include "tpc/Codegen/CpuEmitter.h"

#include "tpc/Analysis/Redistribute.h"
#include "tpc/Dialect/TP/TPDialect.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "llvm/ADT/MapVector.h"
#include "llvm/ADT/SetVector.h"
#include "llvm/ADT/StringExtras.h"
#include "llvm/Support/FormatVariadic.h"

#include <cmath>
#include <cstdio>
#include <functional>

using namespace mlir;
using namespace tpc;
using namespace tpc::tp;

namespace {

RankedTensorType typeOf(Value v) { return cast<RankedTensorType>(v.getType()); }

PlacementAttr placementOf(Value v) {
  PlacementAttr p = getPlacement(v);
  return p ? normalizePlacement(p, rankOf(v)) : ReplicateAttr::get(v.getContext());
}

bool splitByTokens(Value v) {
  auto shard = dyn_cast<ShardAttr>(placementOf(v));
  return shard && shard.getDim() == 0 && typeOf(v).getRank() == 2;
}

/// Columns of a [tokens, features] value (1 for a vector of tokens).
int64_t columns(Value v) { return typeOf(v).getRank() == 2 ? typeOf(v).getDimSize(1) : 1; }

std::string cString(StringRef s) {
  std::string out = "\"";
  for (char c : s) {
    if (c == '"' || c == '\\')
      out += '\\';
    out += c;
  }
  return out + "\"";
}

std::string intList(ArrayRef<int64_t> values) {
  std::string s = "{";
  llvm::ListSeparator sep(", ");
  for (int64_t v : values)
    s += StringRef(sep).str() + std::to_string(v);
  return s + "}";
}

bool isElementwise(Operation *op) {
  return isa<SiluOp, GeluOp, ScaleOp, SoftcapOp, AddOp, MulOp>(op);
}

/// Parameters the CUDA device must place one after the other in memory (by index), so that
/// linears reading one input can run as one GEMM. Shared by a model's forwards: a parameter
/// sits in one group at most, the same in each.
struct WeightLayout {
  std::vector<SmallVector<int>> groups;

  bool fits(ArrayRef<int> group) const {
    for (const SmallVector<int> &g : groups) {
      if (ArrayRef<int>(g) == group)
        return true;
      for (int p : group)
        if (llvm::is_contained(g, p))
          return false;
    }
    return true;
  }
  void add(ArrayRef<int> group) {
    if (!llvm::is_contained(groups, SmallVector<int>(group)))
      groups.emplace_back(group);
  }
};

class FunctionEmitter {
public:
  FunctionEmitter(func::FuncOp func, llvm::DenseMap<Operation *, int> &paramIndex,
                  Target target, WeightLayout &layout, raw_ostream &out)
      : func(func), paramIndex(paramIndex), target(target), layout(layout), out(out) {}

  /// Emits `static const float *NAME(Context &cx, ...)`, preceded by the kernels it
  /// generates (CUDA); returns floats per token used.
  FailureOr<int64_t> emit(StringRef name) {
    functionName = name.str();
    if (target == Target::Cuda)
      planFusion();
    if (failed(planArena()))
      return failure();
    os << "static const act *" << name << "(" << (target == Target::Cuda ? "Device" : "Context")
       << " &cx, const int64_t *ids, const int64_t *positions, int64_t n) {\n"
       << "  (void)ids; (void)positions;\n"
       << "  const int64_t ns = n / cx.tp; // tokens per rank where they are split\n"
       << "  (void)ns;\n";
    int attentionIndex = 0;
    for (Operation &op : func.getBody().front()) {
      if (emittedWith.count(&op))
        continue; // in the kernel of the op it is fused with
      if (failed(isFusionRoot(&op) ? emitFused(&op) : emitOp(&op, attentionIndex)))
        return failure();
    }
    os << "}\n\n";
    out << kernels << body;
    return floatsPerToken;
  }

private:
  /// CUDA: which ops become one generated kernel. An elementwise op whose one user is an
  /// elementwise op of its shape is computed inside that user's kernel, never stored; an
  /// rms_norm right after an elementwise chain (pre-norm's residual add + RMSNorm) is
  /// computed by the chain's kernel, which stores both; and the rotary embeddings of one
  /// attention's query and key are one kernel.
  void planFusion() {
    Block &block = func.getBody().front();
    for (Operation &op : block) {
      if (!isElementwise(&op) || !op.getResult(0).hasOneUse())
        continue;
      Operation *user = *op.getResult(0).getUsers().begin();
      if (isElementwise(user) && typeOf(user->getResult(0)) == typeOf(op.getResult(0)) &&
          rows(user->getResult(0)) == rows(op.getResult(0)))
        emittedWith[&op] = user;
    }
    for (RMSNormOp norm : block.getOps<RMSNormOp>()) {
      Operation *chain = norm.getInput().getDefiningOp();
      if (!chain || !isElementwise(chain) || emittedWith.count(chain) ||
          !norm.getWeight().getDefiningOp<WeightOp>())
        continue;
      // Only weights in between: the norm's output may take its slot as early as the chain.
      bool adjacent = true;
      for (Operation *op = chain->getNextNode(); op != norm; op = op->getNextNode())
        adjacent &= isa<WeightOp>(op);
      if (!adjacent)
        continue;
      fusedNorm[chain] = norm;
      emittedWith[norm] = chain;
    }
    // Linears that read the same input (q, k and v; gate and up) get adjacent weights and
    // adjacent outputs, so one token's outputs are one row and a decode step is one GEMM.
    llvm::MapVector<Value, SmallVector<LinearOp>> byInput;
    for (LinearOp linear : block.getOps<LinearOp>())
      if (linear.getWeight().getDefiningOp<WeightOp>())
        byInput[linear.getInput()].push_back(linear);
    for (auto &[input, members] : byInput) {
      if (members.size() < 2)
        continue;
      bool biased = bool(members.front().getBias()), fits = true;
      SmallVector<int> weights, biases;
      for (LinearOp linear : members) {
        fits &= bool(linear.getBias()) == biased;
        // A Partial result adds its bias on rank 0 only: not one GEMM's epilogue.
        fits &= !biased || (!isa<PartialAttr>(placementOf(linear.getResult())) &&
                            linear.getBias().getDefiningOp<WeightOp>());
        if (!fits)
          break;
        weights.push_back(paramIndex.lookup(paramOf(linear.getWeight())));
        if (biased)
          biases.push_back(paramIndex.lookup(paramOf(linear.getBias())));
      }
      if (!fits || !layout.fits(weights) || (biased && !layout.fits(biases)))
        continue;
      layout.add(weights);
      if (biased)
        layout.add(biases);
      for (LinearOp linear : members)
        if (linear != members.front())
          emittedWith[linear] = members.front();
      linearGroups[members.front()] = members;
    }
    for (AttentionOp attention : block.getOps<AttentionOp>()) {
      auto q = attention.getQuery().getDefiningOp<RotaryOp>();
      auto k = attention.getKey().getDefiningOp<RotaryOp>();
      if (!q || !k || q == k || !q->hasOneUse() || !k->hasOneUse() ||
          q.getHeadDim() != k.getHeadDim() || q.getTheta() != k.getTheta() ||
          q.getInvFreq() != k.getInvFreq() || rows(q.getInput()) != rows(k.getInput()) ||
          splitByTokens(q.getInput()) != splitByTokens(k.getInput()))
        continue;
      auto [first, second] = q->isBeforeInBlock(k) ? std::pair(q, k) : std::pair(k, q);
      emittedWith[first] = second;
      rotaryPartner[second] = first;
    }
  }

  /// The op whose code computes `op`'s result.
  Operation *unitOf(Operation *op) {
    for (auto it = emittedWith.find(op); it != emittedWith.end(); it = emittedWith.find(op))
      op = it->second;
    return op;
  }

  Operation *paramOf(Value weight) {
    return lookupParam(weight.getDefiningOp<WeightOp>());
  }

  bool isFusionRoot(Operation *op) {
    if (fusedNorm.count(op) || rotaryPartner.count(op) || linearGroups.count(op))
      return true;
    return isElementwise(op) && llvm::any_of(op->getOperands(), [&](Value v) {
             Operation *def = v.getDefiningOp();
             return def && emittedWith.lookup(def) == op;
           });
  }

  /// A value's slot in the arena while it lives: [offset, offset + size) floats per token.
  struct Live {
    int64_t offset, size;
    size_t end; // the position of its last reader
  };

  /// The lowest offset where `size` fits between the live slots.
  static int64_t firstFit(std::vector<Live> &live, int64_t size) {
    llvm::sort(live, [](const Live &a, const Live &b) { return a.offset < b.offset; });
    int64_t offset = 0;
    for (const Live &l : live) {
      if (offset + size <= l.offset)
        break;
      offset = std::max(offset, l.offset + l.size);
    }
    return offset;
  }

  LogicalResult planArena() {
    // First fit over lifetimes, in floats per token. A fused kernel is one step: what it
    // reads lives until it runs, and what it stores is placed when it runs.
    SmallVector<Operation *> ops;
    llvm::DenseMap<Operation *, size_t> position;
    for (Operation &op : func.getBody().front()) {
      position[&op] = ops.size();
      ops.push_back(&op);
    }
    std::vector<Live> live;
    for (size_t i = 0; i < ops.size(); ++i) {
      Operation *op = ops[i];
      if (isa<WeightOp, func::ReturnOp>(op) || emittedWith.count(op))
        continue;
      llvm::erase_if(live, [&](const Live &l) { return l.end < i; });
      if (auto group = linearGroups.find(op); group != linearGroups.end()) {
        // One slot holding each member's [n, columns] block after the other.
        int64_t size = 0;
        size_t end = i;
        for (LinearOp linear : group->second) {
          size += columns(linear.getResult());
          for (Operation *user : linear.getResult().getUsers())
            end = std::max(end, position.lookup(unitOf(user)));
        }
        int64_t offset = firstFit(live, size);
        live.push_back({offset, size, end});
        for (LinearOp linear : group->second) {
          arenaOffset[linear.getResult()] = offset;
          offset += columns(linear.getResult());
        }
        floatsPerToken = std::max(floatsPerToken, offset);
        continue;
      }
      SmallVector<Value> stored(op->getResults());
      if (RMSNormOp norm = fusedNorm.lookup(op))
        stored.push_back(norm.getResult());
      if (RotaryOp partner = rotaryPartner.lookup(op))
        stored.push_back(partner.getResult());
      for (Value v : stored) {
        int64_t size = columns(v);
        size_t end = i;
        for (Operation *user : v.getUsers())
          end = std::max(end, position.lookup(unitOf(user)));
        int64_t offset = firstFit(live, size);
        live.push_back({offset, size, end});
        arenaOffset[v] = offset;
        floatsPerToken = std::max(floatsPerToken, offset + size);
      }
    }
    return success();
  }

  std::string rows(Value v) {
    int64_t tokens = typeOf(v).getDimSize(0);
    if (!ShapedType::isDynamic(tokens))
      return std::to_string(tokens); // after tp.last_token
    return splitByTokens(v) ? "ns" : "n";
  }

  std::string ref(Value v) {
    if (auto arg = dyn_cast<BlockArgument>(v))
      return arg.getArgNumber() == 0 ? "ids" : "positions";
    if (auto weight = v.getDefiningOp<WeightOp>())
      return "cx.weight(" + std::to_string(paramIndex.lookup(lookupParam(weight))) + ")";
    return "v" + std::to_string(idOf(v));
  }

  int idOf(Value v) {
    auto [it, inserted] = ids.try_emplace(v, ids.size());
    return it->second;
  }

  Operation *lookupParam(WeightOp weight) {
    return SymbolTable::lookupNearestSymbolFrom(weight, weight.getParamAttr());
  }

  /// Declares the result's arena pointer and returns its name.
  std::string define(Value v) {
    std::string name = "v" + std::to_string(idOf(v));
    os << "  act *" << name << " = cx.arena + " << arenaOffset.lookup(v) << " * n;\n";
    return name;
  }

  std::string module(Operation *op) {
    StringRef m = getModuleName(op);
    return m.empty() ? "nullptr" : cString(m);
  }

  /// Global block sizes of a feature dim placed as `p`, whose global size is `global`.
  std::string blocksOf(PlacementAttr p, int64_t global) {
    if (auto strided = dyn_cast<StridedShardAttr>(p))
      return "std::vector<int64_t>" + intList(strided.getBlocks());
    return "std::vector<int64_t>{" + std::to_string(global) + "}";
  }

  LogicalResult unsupported(Operation *op, const Twine &what) {
    return op->emitError() << "the " << (target == Target::Cuda ? "CUDA" : "CPU")
                           << " target cannot run " << what << " yet";
  }

  LogicalResult emitOp(Operation *op, int &attentionIndex) {
    if (isa<WeightOp>(op))
      return success();
    if (auto ret = dyn_cast<func::ReturnOp>(op)) {
      if (ret.getNumOperands() != 1 || !isa<ReplicateAttr>(placementOf(ret.getOperand(0))))
        return unsupported(op, "a forward that does not return one replicated logits tensor");
      os << "  return " << ref(ret.getOperand(0)) << ";\n";
      return success();
    }
    for (Value operand : op->getOperands())
      if (auto arg = dyn_cast<BlockArgument>(operand); arg && arg.getArgNumber() > 1)
        return unsupported(op, "a forward with more than ids and positions");
    if (auto e = dyn_cast<EmbeddingOp>(op)) {
      auto table = e.getTable().getDefiningOp<WeightOp>();
      auto param = table ? cast<ParamOp>(lookupParam(table)) : ParamOp();
      if (!param)
        return unsupported(op, "an embedding whose table is not a parameter");
      int64_t vocab = param.getShardAttr() ? param.getShardAttr().getHfShape()[0]
                                           : param.getTensorType().getDimSize(0);
      int64_t localRows = typeOf(e.getTable()).getDimSize(0);
      int64_t width = typeOf(e.getTable()).getDimSize(1);
      bool byVocab = placementOf(e.getTable()) == ShardAttr::get(op->getContext(), 0);
      std::string out = define(e.getResult());
      std::string offset = byVocab ? "cx.rank * " + std::to_string(localRows) : "0";
      os << "  if (!embedding(ids, n, " << ref(e.getTable()) << ", " << offset
         << ", std::min<int64_t>(" << localRows << ", " << vocab << " - (" << offset << ")), "
         << vocab << ", " << width << ", " << out << "))\n"
         << "    cx.fail(\"a token id is outside the vocabulary of " << vocab << "\");\n";
      return success();
    }
    if (auto norm = dyn_cast<RMSNormOp>(op)) {
      std::string out = define(norm.getResult());
      // Per-head norms are row norms of the [rows * heads, head_dim] view.
      int64_t width = norm.getHeadDim() ? *norm.getHeadDim() : columns(norm.getInput());
      os << "  rmsNorm(" << ref(norm.getInput()) << ", " << rows(norm.getInput()) << " * "
         << columns(norm.getInput()) / width << ", " << width << ", " << ref(norm.getWeight())
         << ", "
         << llvm::formatv("{0:e}", norm.getEpsilon().convertToDouble()) << ", "
         << llvm::formatv("{0:e}", norm.getWeightOffset().convertToDouble()) << ", " << out
         << ");\n";
      return success();
    }
    if (auto linear = dyn_cast<LinearOp>(op)) {
      std::string out = define(linear.getResult());
      std::string bias = "nullptr";
      if (Value b = linear.getBias()) // a Partial result: the bias counts once, on rank 0
        bias = isa<PartialAttr>(placementOf(linear.getResult()))
                   ? "(cx.rank == 0 ? " + ref(b) + " : nullptr)"
                   : ref(b);
      os << "  linear(" << ref(linear.getInput()) << ", " << rows(linear.getInput()) << ", "
         << columns(linear.getInput()) << ", " << ref(linear.getWeight()) << ", "
         << typeOf(linear.getWeight()).getDimSize(0) << ", " << bias << ", " << out << ");\n";
      return success();
    }
    if (auto rotary = dyn_cast<RotaryOp>(op)) {
      std::string out = define(rotary.getResult());
      std::string positions =
          splitByTokens(rotary.getInput()) ? "positions + cx.rank * ns" : "positions";
      std::string invFreq = "nullptr";
      if (std::optional<ArrayRef<double>> given = rotary.getInvFreq()) {
        invFreq = "inv_freq_" + std::to_string(idOf(rotary.getResult()));
        os << "  static const double " << invFreq << "[] = {";
        llvm::interleaveComma(*given, os, [&](double f) { os << llvm::formatv("{0:e17}", f); });
        os << "};\n";
      }
      os << "  rotary(" << ref(rotary.getInput()) << ", " << rows(rotary.getInput()) << ", "
         << columns(rotary.getInput()) << ", " << rotary.getHeadDim() << ", "
         << llvm::formatv("{0:e}", rotary.getTheta().convertToDouble()) << ", " << invFreq
         << ", " << positions << ", " << out << ");\n";
      return success();
    }
    if (auto attention = dyn_cast<AttentionOp>(op)) {
      std::string out = define(attention.getResult());
      double scale = attention.getScale() ? attention.getScale()->convertToDouble()
                                          : 1.0 / std::sqrt(double(attention.getHeadDim()));
      os << "  attention(" << ref(attention.getQuery()) << ", " << ref(attention.getKey())
         << ", " << ref(attention.getValue()) << ", n, " << attention.getNumHeads() << ", "
         << attention.getNumKvHeads() << ", " << attention.getHeadDim() << ", "
         << llvm::formatv("{0:e17}", scale) << ", " << attention.getSlidingWindow().value_or(0)
         << ", " << llvm::formatv("{0:e17}", attention.getSoftcap() ? attention.getSoftcap()->convertToDouble() : 0.0)
         << ", cx.caches[" << attentionIndex++ << "], " << out << ");\n";
      return success();
    }
    if (target == Target::Cuda && isa<RouterOp, ExpertsOp>(op))
      return op->emitError() << "the CUDA target cannot run mixture-of-experts layers yet";
    if (auto router = dyn_cast<RouterOp>(op)) {
      std::string out = define(router.getResult());
      os << "  router(" << ref(router.getInput()) << ", " << rows(router.getInput()) << ", "
         << columns(router.getInput()) << ", " << ref(router.getWeight()) << ", "
         << typeOf(router.getWeight()).getDimSize(0) << ", " << router.getTopK() << ", "
         << (router.getNormalize() ? "true" : "false") << ", " << out << ");\n";
      return success();
    }
    if (auto moe = dyn_cast<ExpertsOp>(op)) {
      std::string out = define(moe.getResult());
      os << "  experts(" << ref(moe.getInput()) << ", " << rows(moe.getInput()) << ", "
         << columns(moe.getInput()) << ", " << ref(moe.getRouting()) << ", "
         << typeOf(moe.getGateUp()).getDimSize(0) << ", " << ref(moe.getGateUp()) << ", "
         << ref(moe.getDown()) << ", " << typeOf(moe.getDown()).getDimSize(2) << ", "
         << (moe.getActivation() == "gelu_tanh" ? "true" : "false") << ", " << out << ");\n";
      return success();
    }
    if (isa<SiluOp, GeluOp, ScaleOp, SoftcapOp, IdentityOp, AddOp, MulOp>(op)) {
      Value result = op->getResult(0);
      std::string out = define(result);
      std::string count = rows(result) + " * " + std::to_string(columns(result));
      if (auto scale = dyn_cast<ScaleOp>(op))
        os << "  scale(" << ref(scale.getInput()) << ", " << count << ", "
           << llvm::formatv("{0:e17}", scale.getFactor().convertToDouble()) << ", " << out
           << ");\n";
      else if (auto cap = dyn_cast<SoftcapOp>(op))
        os << "  softcap(" << ref(cap.getInput()) << ", " << count << ", "
           << llvm::formatv("{0:e17}", cap.getCap().convertToDouble()) << ", " << out << ");\n";
      else if (isa<IdentityOp>(op))
        os << "  copyRows(" << out << ", 0, " << ref(op->getOperand(0)) << ", 0, 1, " << count
           << ");\n";
      else if (auto gelu = dyn_cast<GeluOp>(op))
        os << "  gelu(" << ref(gelu.getInput()) << ", " << count << ", "
           << (gelu.getApproximate() == "tanh" ? "true" : "false") << ", " << out << ");\n";
      else if (isa<SiluOp>(op))
        os << "  silu(" << ref(op->getOperand(0)) << ", " << count << ", " << out << ");\n";
      else
        os << "  " << (isa<AddOp>(op) ? "add" : "mul") << "(" << ref(op->getOperand(0)) << ", "
           << ref(op->getOperand(1)) << ", " << count << ", " << out << ");\n";
      return success();
    }
    if (auto last = dyn_cast<LastTokenOp>(op)) {
      std::string out = define(last.getResult());
      int64_t width = columns(last.getInput());
      os << "  copyRows(" << out << ", " << width << ", " << ref(last.getInput()) << " + ("
         << rows(last.getInput()) << " - 1) * " << width << ", " << width << ", 1, " << width
         << ");\n";
      return success();
    }
    if (auto slice = dyn_cast<SliceOp>(op)) {
      if (normalizeDim(slice.getDim(), 2) != 1)
        return unsupported(op, "a slice of the token dim");
      std::string out = define(slice.getResult());
      os << "  sliceColumns(" << ref(slice.getInput()) << ", " << rows(slice.getInput()) << ", "
         << columns(slice.getInput()) << ", " << slice.getOffset() << ", " << slice.getSize()
         << ", " << out << ");\n";
      return success();
    }
    if (auto concat = dyn_cast<ConcatOp>(op)) {
      if (normalizeDim(concat.getDim(), 2) != 1)
        return unsupported(op, "a concat of the token dim");
      std::string out = define(concat.getResult());
      int64_t at = 0, width = columns(concat.getResult());
      for (Value in : concat.getInputs()) {
        os << "  copyRows(" << out << " + " << at << ", " << width << ", " << ref(in) << ", "
           << columns(in) << ", " << rows(in) << ", " << columns(in) << ");\n";
        at += columns(in);
      }
      return success();
    }
    if (auto reduce = dyn_cast<AllReduceOp>(op)) {
      std::string out = define(reduce.getResult());
      os << "  cx.allReduce(" << ref(reduce.getInput()) << ", " << rows(reduce.getInput()) << ", "
         << columns(reduce.getInput()) << ", " << out << ", " << module(op) << ");\n";
      return success();
    }
    if (auto gather = dyn_cast<AllGatherOp>(op)) {
      std::string out = define(gather.getResult());
      if (normalizeDim(gather.getDim(), 2) == 0)
        os << "  cx.allGatherRows(" << ref(gather.getInput()) << ", ns, "
           << columns(gather.getInput()) << ", " << out << ", " << module(op) << ");\n";
      else
        os << "  cx.allGatherColumns(" << ref(gather.getInput()) << ", "
           << rows(gather.getInput()) << ", "
           << blocksOf(placementOf(gather.getInput()), columns(gather.getResult())) << ", "
           << out << ", " << module(op) << ");\n";
      return success();
    }
    if (auto scatter = dyn_cast<ReduceScatterOp>(op)) {
      std::string out = define(scatter.getResult());
      if (normalizeDim(scatter.getDim(), 2) == 0)
        os << "  cx.reduceScatterRows(" << ref(scatter.getInput()) << ", n, "
           << columns(scatter.getInput()) << ", " << out << ", " << module(op) << ");\n";
      else
        os << "  cx.reduceScatterColumns(" << ref(scatter.getInput()) << ", "
           << rows(scatter.getInput()) << ", "
           << blocksOf(placementOf(scatter.getResult()), columns(scatter.getInput())) << ", "
           << out << ", " << module(op) << ");\n";
      return success();
    }
    if (auto a2a = dyn_cast<AllToAllOp>(op)) {
      bool rowsToColumns = normalizeDim(a2a.getSplitDim(), 2) == 1;
      Value sharded = rowsToColumns ? a2a.getResult() : a2a.getInput();
      // The feature dim's global size: what the token-split side holds whole.
      int64_t global = columns(rowsToColumns ? a2a.getInput() : a2a.getResult());
      std::string out = define(a2a.getResult());
      os << "  cx.allToAll(" << ref(a2a.getInput()) << ", n, "
         << blocksOf(placementOf(sharded), global) << ", " << (rowsToColumns ? "true" : "false")
         << ", " << out << ", " << module(op) << ");\n";
      return success();
    }
    if (auto reshard = dyn_cast<LocalReshardOp>(op)) {
      PlacementAttr src = placementOf(reshard.getInput()), dst = placementOf(reshard.getResult());
      Value in = reshard.getInput();
      std::string out = define(reshard.getResult());
      if (isa<ReplicateAttr>(src) && isa<PartialAttr>(dst)) {
        os << "  cx.partialFromReplicate(" << ref(in) << ", " << rows(in) << " * " << columns(in)
           << ", " << out << ");\n";
      } else if (isa<ReplicateAttr>(src) && splitByTokens(reshard.getResult())) {
        os << "  cx.takeRows(" << ref(in) << ", n, " << columns(in) << ", " << out << ");\n";
      } else if (isa<ReplicateAttr>(src)) {
        os << "  cx.takeColumns(" << ref(in) << ", " << rows(in) << ", "
           << blocksOf(dst, columns(in)) << ", " << out << ");\n";
      } else if (isa<PartialAttr>(dst) && splitByTokens(in)) {
        os << "  cx.partialFromRows(" << ref(in) << ", n, " << columns(in) << ", " << out
           << ");\n";
      } else if (isa<PartialAttr>(dst)) {
        os << "  cx.partialFromColumns(" << ref(in) << ", " << rows(in) << ", "
           << blocksOf(src, columns(reshard.getResult())) << ", " << out << ");\n";
      } else {
        return unsupported(op, "a reshard from " + src.str() + " to " + dst.str());
      }
      return success();
    }
    return unsupported(op, op->getName().getStringRef().str());
  }

  /// Emits the kernel for the fused unit whose last op is `root`, and its launch.
  LogicalResult emitFused(Operation *root) {
    if (auto group = linearGroups.find(root); group != linearGroups.end())
      return emitLinearGroup(group->second);
    std::string kernel = functionName + "_fused_" + std::to_string(idOf(root->getResult(0)));
    if (RotaryOp second = dyn_cast<RotaryOp>(root))
      return emitRotaryPair(kernel, rotaryPartner.lookup(root), second);
    // The chain as straight-line fp32 code over the loads of its inputs.
    llvm::SetVector<Value> inputs;
    SmallVector<std::string> lines;
    std::string names;
    llvm::DenseMap<Value, std::string> computed;
    std::function<std::string(Value)> valueOf = [&](Value v) -> std::string {
      if (auto it = computed.find(v); it != computed.end())
        return it->second;
      Operation *def = v.getDefiningOp();
      std::string line;
      llvm::raw_string_ostream c(line);
      if (def && (def == root || (isElementwise(def) && unitOf(def) == root))) {
        SmallVector<std::string> a;
        for (Value operand : def->getOperands())
          a.push_back(valueOf(operand));
        c << "const float x" << lines.size() << " = ";
        if (isa<SiluOp>(def))
          c << "silu(" << a[0] << ")";
        else if (auto gelu = dyn_cast<GeluOp>(def))
          c << (gelu.getApproximate() == "tanh" ? "geluTanh(" : "gelu(") << a[0] << ")";
        else if (auto scale = dyn_cast<ScaleOp>(def))
          c << a[0] << " * " << floatLiteral(scale.getFactor().convertToDouble());
        else if (auto cap = dyn_cast<SoftcapOp>(def))
          c << "softcap(" << a[0] << ", " << floatLiteral(cap.getCap().convertToDouble()) << ")";
        else
          c << a[0] << (isa<AddOp>(def) ? " + " : " * ") << a[1];
        names += StringRef(names.empty() ? "" : ", ").str() +
                 def->getName().stripDialect().str();
      } else {
        inputs.insert(v);
        c << "const float x" << lines.size() << " = load(in" << inputs.size() - 1 << ", i);";
      }
      std::string name = "x" + std::to_string(lines.size());
      lines.push_back(line + (line.back() == ';' ? "" : ";"));
      computed[v] = name;
      return name;
    };
    std::string result = valueOf(root->getResult(0));
    auto code = [&](StringRef indent) {
      std::string text;
      for (const std::string &line : lines)
        text += indent.str() + line + "\n";
      return text;
    };
    std::string what = names + (fusedNorm.count(root) ? ", rms_norm" : "");

    llvm::raw_string_ostream k(kernels);
    k << "// " << what << (getModuleName(root).empty() ? "" : " in " + getModuleName(root).str())
      << ", as one kernel.\n__global__ void " << kernel << "(";
    for (size_t i = 0; i < inputs.size(); ++i)
      k << "const act *in" << i << ", ";
    std::string launchArgs;
    for (Value in : inputs)
      launchArgs += ref(in) + ", ";
    Value out = root->getResult(0);
    std::string outName = define(out);
    if (RMSNormOp norm = fusedNorm.lookup(root)) {
      // One block per row: the chain's value is stored (the residual stream) and squared
      // into the row's sum, then the stored row is normalized.
      int64_t width = norm.getHeadDim() ? *norm.getHeadDim() : columns(out);
      std::string normName = define(norm.getResult());
      k << "const act *weight, act *stored, act *out) {\n"
        << "  __shared__ float partial[kThreads];\n"
        << "  const int64_t width = " << width << ", base = int64_t(blockIdx.x) * width;\n"
        << "  float total = 0;\n"
        << "  for (int64_t c = threadIdx.x; c < width; c += blockDim.x) {\n"
        << "    const int64_t i = base + c;\n"
        << code("    ") << "    stored[i] = __float2bfloat16(" << result << ");\n"
        << "    const float y = load(stored, i);\n"
        << "    total += y * y;\n  }\n"
        << "  const float scale = rsqrtf(blockSum(total, partial) / float(width) + "
        << floatLiteral(norm.getEpsilon().convertToDouble()) << ");\n"
        << "  for (int64_t c = threadIdx.x; c < width; c += blockDim.x)\n"
        << "    out[base + c] = __float2bfloat16(load(stored, base + c) * scale * (load(weight, c) + "
        << floatLiteral(norm.getWeightOffset().convertToDouble()) << "));\n}\n\n";
      std::string blocks =
          rows(out) + " * " + std::to_string(columns(out) / width);
      os << "  if (" << rows(out) << " > 0) {\n"
         << "    " << kernel << "<<<unsigned(" << blocks << "), kThreads, 0, cx.stream()>>>("
         << launchArgs << ref(norm.getWeight()) << ", " << outName << ", " << normName << ");\n"
         << "    cx.launched(\"" << what << "\");\n  }\n";
      return success();
    }
    std::string count = rows(out) + " * " + std::to_string(columns(out));
    k << "int64_t count, act *out) {\n"
      << "  const int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;\n"
      << "  if (i >= count)\n    return;\n"
      << code("  ") << "  out[i] = __float2bfloat16(" << result << ");\n}\n\n";
    os << "  if (" << rows(out) << " > 0) {\n"
       << "    " << kernel << "<<<blocksFor(" << count << "), kThreads, 0, cx.stream()>>>("
       << launchArgs << count << ", " << outName << ");\n"
       << "    cx.launched(\"" << what << "\");\n  }\n";
    return success();
  }

  /// Linears of one input: adjacent weights (Device places them so) and adjacent outputs,
  /// so for one row (a decode step) they are a single GEMM; more rows, one GEMM each.
  LogicalResult emitLinearGroup(SmallVector<LinearOp> members) {
    Value input = members.front().getInput();
    std::string names, all;
    int64_t total = 0;
    for (LinearOp linear : members) {
      std::string out = define(linear.getResult());
      std::string bias = linear.getBias() ? ref(linear.getBias()) : "nullptr";
      all += "    linear(" + ref(input) + ", " + rows(input) + ", " +
             std::to_string(columns(input)) + ", " + ref(linear.getWeight()) + ", " +
             std::to_string(columns(linear.getResult())) + ", " + bias + ", " + out + ");\n";
      total += columns(linear.getResult());
      names += StringRef(names.empty() ? "" : ", ").str() + getModuleName(linear).str();
    }
    LinearOp first = members.front();
    std::string bias = first.getBias() ? ref(first.getBias()) : "nullptr";
    os << "  if (" << rows(input) << " == 1) // " << names << ": one row, one GEMM\n"
       << "    linear(" << ref(input) << ", 1, " << columns(input) << ", "
       << ref(first.getWeight()) << ", " << total << ", " << bias << ", "
       << ref(first.getResult()) << ");\n"
       << "  else {\n" << all << "  }\n";
    return success();
  }

  /// One kernel rotating both the query and the key of an attention; the frequencies are
  /// constants of the kernel, rounded to float as the runtime's rotary rounds them.
  LogicalResult emitRotaryPair(StringRef kernel, RotaryOp first, RotaryOp second) {
    RotaryOp q = first;
    int64_t headDim = q.getHeadDim(), half = headDim / 2;
    SmallVector<double> frequencies;
    if (std::optional<ArrayRef<double>> given = q.getInvFreq())
      frequencies.assign(given->begin(), given->end());
    else
      for (int64_t i = 0; i < half; ++i)
        frequencies.push_back(
            std::pow(q.getTheta().convertToDouble(), -2.0 * double(i) / double(headDim)));
    if (int64_t(frequencies.size()) != half)
      return q.emitError() << "rotary inv_freq has " << frequencies.size()
                           << " values for a head_dim of " << headDim;
    int64_t firstHeads = columns(first.getInput()) / headDim;
    int64_t heads = firstHeads + columns(second.getInput()) / headDim;
    llvm::raw_string_ostream o(kernels);
    o << "// The rotary embedding of an attention's query and key, as one kernel.\n"
      << "__constant__ float " << kernel << "_frequencies[" << half << "] = {";
    llvm::interleaveComma(frequencies, o, [&](double f) { o << floatLiteral(f); });
    o << "};\n__global__ void " << kernel
      << "(const act *a, act *aOut, const act *b, act *bOut, const int64_t *positions, "
         "int64_t rows) {\n"
      << "  const int64_t half = " << half << ", headDim = " << headDim
      << ", aHeads = " << firstHeads << ", heads = " << heads << ";\n"
      << "  const int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;\n"
      << "  if (i >= rows * heads * half)\n    return;\n"
      << "  const int64_t f = i % half, head = i / half % heads, r = i / half / heads;\n"
      << "  const bool inA = head < aHeads;\n"
      << "  const int64_t at = inA ? (r * aHeads + head) * headDim\n"
      << "                         : (r * (heads - aHeads) + head - aHeads) * headDim;\n"
      << "  const act *x = (inA ? a : b) + at;\n"
      << "  act *y = (inA ? aOut : bOut) + at;\n"
      << "  const float angle = float(positions[r]) * " << kernel << "_frequencies[f];\n"
      << "  const float c = cosf(angle), s = sinf(angle), u = load(x, f), v = load(x, f + half);\n"
      << "  y[f] = __float2bfloat16(u * c - v * s);\n"
      << "  y[f + half] = __float2bfloat16(v * c + u * s);\n}\n\n";
    std::string aOut = define(first.getResult()), bOut = define(second.getResult());
    std::string positions =
        splitByTokens(first.getInput()) ? "positions + cx.rank * ns" : "positions";
    std::string pairs = rows(first.getInput()) + " * " + std::to_string(heads * half);
    os << "  if (" << rows(first.getInput()) << " > 0) {\n"
       << "    " << kernel << "<<<blocksFor(" << pairs << "), kThreads, 0, cx.stream()>>>("
       << ref(first.getInput()) << ", " << aOut << ", " << ref(second.getInput()) << ", " << bOut
       << ", " << positions << ", " << rows(first.getInput()) << ");\n"
       << "    cx.launched(\"rotary (query and key)\");\n  }\n";
    return success();
  }

  /// A float literal that is exactly float(v), in hexadecimal.
  static std::string floatLiteral(double v) {
    char buffer[64];
    std::snprintf(buffer, sizeof(buffer), "%af", double(float(v)));
    return buffer;
  }

  func::FuncOp func;
  llvm::DenseMap<Operation *, int> &paramIndex;
  Target target;
  WeightLayout &layout;
  raw_ostream &out;
  std::string functionName;
  std::string body, kernels; // the function, and the kernels it launches (written first)
  llvm::raw_string_ostream os{body};
  llvm::DenseMap<Operation *, Operation *> emittedWith; // fused into that op's kernel
  llvm::DenseMap<Operation *, RMSNormOp> fusedNorm;     // chain -> the norm it computes
  llvm::DenseMap<Operation *, RotaryOp> rotaryPartner;  // second rotary -> first
  llvm::DenseMap<Operation *, SmallVector<LinearOp>> linearGroups; // first -> all, in order
  llvm::DenseMap<Value, int64_t> arenaOffset;
  llvm::DenseMap<Value, int> ids;
  int64_t floatsPerToken = 0;
};

func::FuncOp forwardOf(ModuleOp module) {
  auto funcs = module.getOps<func::FuncOp>();
  return std::distance(funcs.begin(), funcs.end()) == 1 ? *funcs.begin() : func::FuncOp();
}

} // namespace

LogicalResult tpc::emitProgram(ModuleOp partitioned, ModuleOp sequenceParallel, Target target,
                              raw_ostream &os) {
  bool cuda = target == Target::Cuda;
  func::FuncOp forward = forwardOf(partitioned);
  if (!forward)
    return partitioned.emitError() << "the " << (cuda ? "CUDA" : "CPU")
                                   << " target needs exactly one function, the forward";
  int64_t tp = getMeshSize(partitioned).value_or(1);
  std::string name = partitioned.getSymName() ? partitioned.getSymName()->str() : "model";

  // Parameters: their HF shapes and what this rank loads of them.
  std::string params;
  llvm::DenseMap<Operation *, int> paramIndex, sequenceParamIndex;
  for (ParamOp param : partitioned.getOps<ParamOp>()) {
    paramIndex[param] = paramIndex.size();
    std::string slice = "{}";
    SmallVector<int64_t> hfShape(param.getTensorType().getShape());
    if (ShardDescAttr shard = param.getShardAttr()) {
      hfShape.assign(shard.getHfShape().begin(), shard.getHfShape().end());
      slice = "{" + std::to_string(shard.getDim()) + ", " + intList(shard.getOffsets()) + ", " +
              intList(shard.getSizes()) + ", " + std::to_string(shard.getChunks()) + ", 0}";
    }
    std::string sources = "{";
    if (ArrayAttr names = param.getSourcesAttr())
      for (Attribute source : names)
        sources += cString(cast<StringAttr>(source).getValue()) + ", ";
    sources += "}";
    params += "    {" + cString(param.getSymName()) + ", " + intList(hfShape) + ", " + slice +
              ", " + sources + "},\n";
  }
  if (sequenceParallel) // the same parameters, in the same order
    for (auto [a, b] : llvm::zip(partitioned.getOps<ParamOp>(), sequenceParallel.getOps<ParamOp>()))
      sequenceParamIndex[b] = paramIndex.lookup(a);
  SmallVector<int64_t> kvWidths;
  int64_t maxHeads = 0, maxHeadDim = 0;
  partitioned.walk([&](AttentionOp attention) {
    kvWidths.push_back(attention.getNumKvHeads() * attention.getHeadDim());
    maxHeads = std::max<int64_t>(maxHeads, attention.getNumHeads());
    maxHeadDim = std::max<int64_t>(maxHeadDim, attention.getHeadDim());
  });
  Value logits = forward.getBody().front().getTerminator()->getOperand(0);
  int64_t vocab = columns(logits);
  bool lastTokenOnly = typeOf(logits).getDimSize(0) == 1;

  os << "// Generated by tpc from " << name << " for tp " << tp << " (--target "
     << (cuda ? "cuda" : "cpu") << ").\n"
     << "// Do not edit: compile the model again instead.\n";
  if (cuda) // the same calls, on the device: bf16 activations, kernels of tpcrt::cuda
    os << "#include <tpcrt/cuda/device.h>\n#include <tpcrt/cuda/fused.h>\n\n"
       << "#include <algorithm>\n\n"
       << "namespace {\nusing namespace tpcrt::cuda;\nusing namespace tpcrt::cuda::fused;\n\n";
  else
    os << "#include <tpcrt/model.h>\n\n#include <algorithm>\n\n"
       << "namespace {\nusing namespace tpcrt;\nusing act = float;\n\n";
  WeightLayout layout;
  FailureOr<int64_t> floats =
      FunctionEmitter(forward, paramIndex, target, layout, os).emit("forward");
  if (failed(floats))
    return failure();
  int64_t floatsPerToken = *floats;
  if (sequenceParallel) {
    func::FuncOp split = forwardOf(sequenceParallel);
    FailureOr<int64_t> splitFloats =
        FunctionEmitter(split, sequenceParamIndex, target, layout, os)
            .emit("forwardSequenceParallel");
    if (failed(splitFloats))
      return failure();
    floatsPerToken = std::max(floatsPerToken, *splitFloats);
  }
  std::string hostForward = "&forward",
              hostSplit = sequenceParallel ? "&forwardSequenceParallel" : "nullptr";
  if (cuda) {
    // The driver's view: the Device made once the weights are loaded, each forward run on it
    // with its logits brought back.
    os << "Device *device = nullptr;\n\n"
       << "void prepare(tpcrt::Context &cx, const tpcrt::ModelSpec &spec) {\n"
       << "  device = new Device(cx, spec, " << maxHeads << ", " << maxHeadDim << ", {";
    llvm::interleaveComma(layout.groups, os, [&](ArrayRef<int> g) {
      os << "{";
      llvm::interleaveComma(g, os);
      os << "}";
    });
    os << "});\n}\n\n"
       << "const float *forwardHost(tpcrt::Context &, const int64_t *ids, "
          "const int64_t *positions, int64_t n) {\n"
       << "  return device->run(ids, positions, n, &forward);\n}\n";
    hostForward = "&forwardHost";
    if (sequenceParallel) {
      os << "\nconst float *forwardSequenceParallelHost(tpcrt::Context &, const int64_t *ids, "
            "const int64_t *positions, int64_t n) {\n"
         << "  return device->run(ids, positions, n, &forwardSequenceParallel);\n}\n";
      hostSplit = "&forwardSequenceParallelHost";
    }
  }
  os << "} // namespace\n\nint main(int argc, char **argv) {\n"
     << "  static const tpcrt::ModelSpec spec = {\n"
     << "    " << cString(name) << ", " << tp << ", " << vocab << ", " << floatsPerToken
     << ",\n    {\n" << params << "    },\n    " << intList(kvWidths) << ",\n"
     << "    " << hostForward << ", " << hostSplit << ", " << (lastTokenOnly ? "true" : "false")
     << ", ";
  if (auto eos = partitioned->getAttrOfType<DenseI64ArrayAttr>(kEosTokenIdsAttrName))
    os << intList(eos.asArrayRef());
  else
    os << "{}";
  if (cuda) // every rank is done once runModel returns 0: NCCL is finalized together
    os << ", &prepare};\n  int code = tpcrt::runModel(spec, argc, argv);\n"
       << "  if (code == 0)\n    delete device;\n  return code;\n}\n";
  else
    os << "};\n  return tpcrt::runModel(spec, argc, argv);\n}\n";
  return success();
}
