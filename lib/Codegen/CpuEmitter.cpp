// The CPU emitter. Each tp op becomes one call into libtpcrt whose arguments spell out the
// placement (which rank adds a rowwise bias, which vocab rows an embedding holds, how a
// gather puts pieces back); every activation gets an offset in one arena, planned by
// lifetime in floats per token, so a forward over n tokens needs no allocation.
#include "tpc/Codegen/CpuEmitter.h"

#include "tpc/Analysis/Redistribute.h"
#include "tpc/Dialect/TP/TPDialect.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "llvm/ADT/StringExtras.h"
#include "llvm/Support/FormatVariadic.h"

#include <cmath>

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

class FunctionEmitter {
public:
  FunctionEmitter(func::FuncOp func, llvm::DenseMap<Operation *, int> &paramIndex,
                  Target target, raw_ostream &os)
      : func(func), paramIndex(paramIndex), target(target), os(os) {}

  /// Emits `static const float *NAME(Context &cx, ...)`; returns floats per token used.
  FailureOr<int64_t> emit(StringRef name) {
    if (failed(planArena()))
      return failure();
    os << "static const act *" << name << "(" << (target == Target::Cuda ? "Device" : "Context")
       << " &cx, const int64_t *ids, const int64_t *positions, int64_t n) {\n"
       << "  (void)ids; (void)positions;\n"
       << "  const int64_t ns = n / cx.tp; // tokens per rank where they are split\n"
       << "  (void)ns;\n";
    int attentionIndex = 0;
    for (Operation &op : func.getBody().front())
      if (failed(emitOp(&op, attentionIndex)))
        return failure();
    os << "}\n\n";
    return floatsPerToken;
  }

private:
  LogicalResult planArena() {
    // First fit over lifetimes, in floats per token.
    SmallVector<Operation *> ops;
    llvm::DenseMap<Operation *, size_t> position;
    for (Operation &op : func.getBody().front()) {
      position[&op] = ops.size();
      ops.push_back(&op);
    }
    struct Live {
      int64_t offset, size;
      size_t end;
    };
    std::vector<Live> live;
    for (auto [i, op] : llvm::enumerate(ops)) {
      if (isa<WeightOp, func::ReturnOp>(op))
        continue;
      llvm::erase_if(live, [&](const Live &l) { return l.end < i; });
      for (Value v : op->getResults()) {
        int64_t size = columns(v);
        size_t end = i;
        for (Operation *user : v.getUsers())
          end = std::max(end, position.lookup(user));
        llvm::sort(live, [](const Live &a, const Live &b) { return a.offset < b.offset; });
        int64_t offset = 0;
        for (const Live &l : live) {
          if (offset + size <= l.offset)
            break;
          offset = std::max(offset, l.offset + l.size);
        }
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

  func::FuncOp func;
  llvm::DenseMap<Operation *, int> &paramIndex;
  Target target;
  raw_ostream &os;
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
  partitioned.walk([&](AttentionOp attention) {
    kvWidths.push_back(attention.getNumKvHeads() * attention.getHeadDim());
  });
  Value logits = forward.getBody().front().getTerminator()->getOperand(0);
  int64_t vocab = columns(logits);
  bool lastTokenOnly = typeOf(logits).getDimSize(0) == 1;

  os << "// Generated by tpc from " << name << " for tp " << tp << " (--target "
     << (cuda ? "cuda" : "cpu") << ").\n"
     << "// Do not edit: compile the model again instead.\n";
  if (cuda) // the same calls, on the device: bf16 activations, kernels of tpcrt::cuda
    os << "#include <tpcrt/cuda/device.h>\n\n#include <algorithm>\n\n"
       << "namespace {\nusing namespace tpcrt::cuda;\n\n";
  else
    os << "#include <tpcrt/model.h>\n\n#include <algorithm>\n\n"
       << "namespace {\nusing namespace tpcrt;\nusing act = float;\n\n";
  FailureOr<int64_t> floats = FunctionEmitter(forward, paramIndex, target, os).emit("forward");
  if (failed(floats))
    return failure();
  int64_t floatsPerToken = *floats;
  if (sequenceParallel) {
    func::FuncOp split = forwardOf(sequenceParallel);
    FailureOr<int64_t> splitFloats =
        FunctionEmitter(split, sequenceParamIndex, target, os).emit("forwardSequenceParallel");
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
       << "  device = new Device(cx, spec);\n}\n\n"
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
  os << (cuda ? ", &prepare" : "") << "};\n  return tpcrt::runModel(spec, argc, argv);\n}\n";
  return success();
}
