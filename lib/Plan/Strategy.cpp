// The strategy registry and the placement-spec parser shared by built-in and custom strategies.
#include "tpc/Plan/Strategy.h"

#include "tpc/Plan/Json.h"

#include "llvm/ADT/StringExtras.h"

#include <limits>

using namespace mlir;
using namespace tpc;
using namespace tpc::plan;

//===----------------------------------------------------------------------===//
// PlacementSpec
//===----------------------------------------------------------------------===//

namespace {

/// A cursor over a spec's text: `Name(arg, [a, b])`.
struct SpecLexer {
  StringRef rest;

  void skipSpace() { rest = rest.ltrim(); }
  bool consume(char c) {
    skipSpace();
    if (rest.empty() || rest.front() != c)
      return false;
    rest = rest.drop_front();
    return true;
  }
  std::optional<int64_t> integer() {
    skipSpace();
    size_t n = 0;
    if (n < rest.size() && (rest[n] == '-' || rest[n] == '+'))
      ++n;
    while (n < rest.size() && llvm::isDigit(rest[n]))
      ++n;
    int64_t value;
    if (rest.take_front(n).getAsInteger(10, value))
      return std::nullopt;
    rest = rest.drop_front(n);
    return value;
  }
  StringRef identifier() {
    skipSpace();
    size_t n = 0;
    while (n < rest.size() && (llvm::isAlnum(rest[n]) || rest[n] == '_'))
      ++n;
    StringRef id = rest.take_front(n);
    rest = rest.drop_front(n);
    return id;
  }
};

} // namespace

std::optional<PlacementSpec> PlacementSpec::parse(StringRef text, std::string &error) {
  SpecLexer lex{text};
  std::string name = lex.identifier().lower();
  llvm::erase(name, '_');
  PlacementSpec spec;
  auto fail = [&](const std::string &why) -> std::optional<PlacementSpec> {
    error = "'" + text.str() + "' is not a placement: " + why +
            " (expected Replicate(), Shard(d), StridedShard(d, n), "
            "StridedShard(d, [sizes]) or Partial())";
    return std::nullopt;
  };
  bool hasParens = lex.consume('(');
  if (name == "replicate") {
    spec.kind = Kind::Replicate;
  } else if (name == "partial") {
    spec.kind = Kind::Partial;
    if (hasParens) {
      StringRef reduce = lex.identifier();
      if (!reduce.empty() && reduce != "sum")
        return fail("only Partial(sum) is supported");
    }
  } else if (name == "shard" || name == "stridedshard") {
    if (!hasParens)
      return fail("a shard needs its dim in parentheses");
    std::optional<int64_t> dim = lex.integer();
    if (!dim)
      return fail("the dim must be an integer");
    spec.dim = *dim;
    spec.kind = name == "shard" ? Kind::Shard : Kind::StridedShard;
    if (spec.kind == Kind::StridedShard) {
      if (!lex.consume(','))
        return fail("a strided shard needs its blocks: a count or a list of sizes");
      if (lex.consume('[')) {
        do {
          std::optional<int64_t> size = lex.integer();
          if (!size || *size <= 0)
            return fail("block sizes must be positive integers");
          spec.blockSizes.push_back(*size);
        } while (lex.consume(','));
        if (!lex.consume(']'))
          return fail("the block list is not closed");
        if (spec.blockSizes.size() < 2)
          return fail("a strided shard needs at least two blocks");
      } else {
        std::optional<int64_t> count = lex.integer();
        if (!count || *count < 2)
          return fail("the block count must be an integer of at least 2");
        spec.equalBlocks = *count;
      }
    }
  } else {
    return fail("unknown placement name");
  }
  if (hasParens && !lex.consume(')'))
    return fail("missing ')'");
  lex.skipSpace();
  if (!lex.rest.empty())
    return fail("unexpected '" + lex.rest.str() + "'");
  return spec;
}

FailureOr<tp::PlacementAttr>
PlacementSpec::resolve(ArrayRef<int64_t> shape, MLIRContext *context,
                       llvm::function_ref<InFlightDiagnostic()> emitError) const {
  tp::PlacementAttr placement;
  switch (kind) {
  case Kind::Replicate:
    placement = tp::ReplicateAttr::get(context);
    break;
  case Kind::Partial:
    placement = tp::PartialAttr::get(context, tp::ReduceKind::sum);
    break;
  case Kind::Shard:
    placement = tp::ShardAttr::get(context, dim);
    break;
  case Kind::StridedShard: {
    std::vector<int64_t> blocks = blockSizes;
    if (equalBlocks) {
      int64_t d = tp::normalizeDim(dim, shape.size());
      if (d < 0) {
        emitError() << str() << " needs dim " << dim << ", but the tensor has rank "
                    << shape.size();
        return failure();
      }
      int64_t size = shape[d];
      if (ShapedType::isDynamic(size) || size % equalBlocks != 0) {
        emitError() << str() << " splits dim " << dim << " into " << equalBlocks
                    << " equal blocks, but its size "
                    << (ShapedType::isDynamic(size) ? std::string("?") : std::to_string(size))
                    << " does not divide by " << equalBlocks;
        return failure();
      }
      blocks.assign(equalBlocks, size / equalBlocks);
    }
    placement = tp::StridedShardAttr::get(context, dim, blocks);
    break;
  }
  }
  if (failed(placement.verifyFor(shape, emitError)))
    return failure();
  return placement;
}

std::string PlacementSpec::str() const {
  switch (kind) {
  case Kind::Replicate: return "Replicate()";
  case Kind::Partial: return "Partial(sum)";
  case Kind::Shard: return "Shard(" + std::to_string(dim) + ")";
  case Kind::StridedShard: {
    std::string s = "StridedShard(" + std::to_string(dim) + ", ";
    if (equalBlocks)
      return s + std::to_string(equalBlocks) + ")";
    s += "[";
    llvm::ListSeparator sep(", ");
    for (int64_t b : blockSizes)
      s += StringRef(sep).str() + std::to_string(b);
    return s + "])";
  }
  }
  llvm_unreachable("unknown placement kind");
}

//===----------------------------------------------------------------------===//
// The registry
//===----------------------------------------------------------------------===//

static std::optional<PlacementSpec> spec(StringRef text) {
  if (text.empty())
    return std::nullopt;
  std::string error;
  std::optional<PlacementSpec> parsed = PlacementSpec::parse(text, error);
  assert(parsed && "a built-in strategy has a malformed placement");
  return parsed;
}

namespace {
/// One row of docs/plans.md's strategy table, in DTensor spelling; "" means "none".
struct BuiltinRow {
  const char *name, *weight, *embeddingWeight, *vector, *input, *output;
  StrategyTarget target;
  const char *summary;
};
} // namespace

StrategyRegistry StrategyRegistry::builtin() {
  using T = StrategyTarget;
  static const BuiltinRow rows[] = {
      {"colwise", "Shard(-2)", "Shard(1)", "Shard(-1)", "Replicate()", "Shard(-1)",
       T::LinearOrEmbedding, "shard output features; output stays Shard(-1)"},
      {"colwise_gather_output", "Shard(-2)", "Shard(1)", "Shard(-1)", "Replicate()",
       "Replicate()", T::LinearOrEmbedding, "shard output features, all_gather the output"},
      {"colwise_rep", "Shard(-2)", "Shard(1)", "Shard(-1)", "Replicate()", "Replicate()",
       T::LinearOrEmbedding, "alias of colwise_gather_output"},
      {"rowwise", "Shard(-1)", "Shard(0)", "Replicate()", "Shard(-1)", "Replicate()",
       T::LinearOrEmbedding, "shard input features, all_reduce the output; bias added once"},
      {"rowwise_split_input", "Shard(-1)", "Shard(0)", "Replicate()", "Replicate()",
       "Replicate()", T::LinearOrEmbedding,
       "slice a replicated input locally, all_reduce the output"},
      {"rowwise_rep", "Shard(-1)", "Shard(0)", "Replicate()", "Replicate()", "Replicate()",
       T::LinearOrEmbedding, "alias of rowwise_split_input"},
      {"embedding_rowwise", "Shard(0)", "Shard(0)", "", "Replicate()", "Replicate()",
       T::Embedding, "shard the vocabulary; out-of-chunk ids give zeros; all_reduce"},
      {"embedding_colwise", "Shard(1)", "Shard(1)", "", "Replicate()", "Replicate()",
       T::Embedding, "shard the embedding dim, all_gather the output"},
      {"packed_colwise", "StridedShard(-2, 2)", "", "StridedShard(-1, 2)", "Replicate()",
       "StridedShard(-1, 2)", T::Linear, "colwise for fused [gate | up] weights"},
      {"packed_rowwise", "StridedShard(-1, 2)", "", "Replicate()", "", "", T::Any,
       "rowwise for packed weights; parameter placement only"},
      {"sequence_parallel", "Replicate()", "Replicate()", "Replicate()", "Shard(-2)",
       "Shard(-2)", T::Any, "run a norm on a sequence shard"},
      {"replicated_with_grad_allreduce", "Replicate()", "Replicate()", "Replicate()", "", "",
       T::Any, "replicated; its gradient all-reduce does not exist at inference"},
      {"mla_kv_a_proj", "Replicate()", "Replicate()", "Replicate()", "", "", T::Any,
       "MLA kv_a_proj_with_mqa output split"},
      {"all_reduce", "Replicate()", "Replicate()", "Replicate()", "", "Replicate()", T::Any,
       "all_reduce the module's Partial output"},
      {"moe_tp_experts", "Replicate()", "Replicate()", "Replicate()", "Replicate()",
       "Replicate()", T::Any, "tensor-parallel experts: one all_reduce of their summed output"},
      {"moe_identity_expert", "Replicate()", "Replicate()", "Replicate()", "Replicate()",
       "Partial()", T::Any,
       "divide the input by tp to offset the parent's all_reduce"},
      {"local_params", "", "", "", "", "", T::Any,
       "forward on local shards placed by the parameters' own rules"},
      {"grouped_gemm", "Shard(0)", "Shard(0)", "Shard(0)", "", "", T::Any,
       "shard experts on the expert dim"},
      {"ep_router", "Replicate()", "Replicate()", "Replicate()", "Replicate()", "Shard(-1)",
       T::Any,
       "mask non-local experts' scores, remap ids to local experts"},
  };
  StrategyRegistry registry;
  for (const BuiltinRow &row : rows)
    registry.strategies.push_back({row.name, spec(row.weight), spec(row.embeddingWeight),
                                   spec(row.vector), spec(row.input), spec(row.output),
                                   row.target, row.summary, /*builtin=*/true});
  return registry;
}

const Strategy *StrategyRegistry::lookup(StringRef name) const {
  for (const Strategy &s : strategies)
    if (s.name == name)
      return &s;
  return nullptr;
}

std::vector<std::string> StrategyRegistry::names() const {
  std::vector<std::string> result;
  for (const Strategy &s : strategies)
    result.push_back(s.name);
  return result;
}

std::string StrategyRegistry::closest(StringRef name) const {
  // A name that contains a registered one, or is part of one, is most likely that one
  // (`local_colwise` -> `colwise`, `gather` -> `colwise_gather_output`); otherwise the
  // nearest by edit distance (`colwize` -> `colwise`).
  std::string best;
  unsigned bestDistance = std::numeric_limits<unsigned>::max();
  bool bestContains = false;
  for (const Strategy &s : strategies) {
    bool contains = name.contains(s.name) || StringRef(s.name).contains(name);
    unsigned distance = name.edit_distance(s.name, /*AllowReplacements=*/true);
    if ((contains && !bestContains) || (contains == bestContains && distance < bestDistance)) {
      best = s.name;
      bestDistance = distance;
      bestContains = contains;
    }
  }
  return best;
}

std::string StrategyRegistry::unsupportedReason(StringRef name) {
  std::string folded = name.lower();
  llvm::erase(folded, '_');
  if (StringRef(folded).contains("megamoe"))
    return "DeepGEMM Mega-MoE dispatches experts inside its own kernel";
  if (folded == "epdispatchexperts")
    return "expert-parallel token dispatch is not implemented; expert parallelism in tpc is "
           "'grouped_gemm' experts with an 'ep_router'";
  return "";
}

LogicalResult StrategyRegistry::loadCustom(StringRef path, MLIRContext *context) {
  FailureOr<JsonDocument> doc = JsonDocument::read(path, context);
  if (failed(doc))
    return failure();
  const nlohmann::ordered_json &root = doc->value();
  if (!root.is_object())
    return emitError(doc->locAt(0)) << "a strategies file must be a JSON object of "
                                       "{name: {weight, bias, input, output}}, got "
                                    << describeJsonType(root);
  bool ok = true;
  for (const auto &item : root.items()) {
    const std::string &name = item.key(); // not a structured binding: lambdas capture it
    const nlohmann::ordered_json &entry = item.value();
    Location loc = doc->keyLoc({name});
    auto error = [&]() -> InFlightDiagnostic {
      ok = false;
      return emitError(loc) << "custom strategy '" << name << "': ";
    };
    if (name.empty()) {
      error() << "the name is empty";
      continue;
    }
    if (lookup(name)) {
      error() << "redefines a built-in strategy";
      continue;
    }
    if (!unsupportedReason(name).empty()) {
      error() << "the name is one tpc refuses as not supported";
      continue;
    }
    if (!entry.is_object()) {
      error() << "must be an object with weight, embedding_weight, bias, input, output; got "
              << describeJsonType(entry);
      continue;
    }
    Strategy strategy;
    strategy.name = name;
    strategy.builtin = false;
    strategy.weight = strategy.embeddingWeight = strategy.vector = spec("Replicate()");
    bool entryOk = true;
    for (const auto &[field, value] : entry.items()) {
      Location fieldLoc = doc->keyLoc({name, field});
      if (!value.is_string()) {
        emitError(fieldLoc) << "custom strategy '" << name << "': '" << field
                            << "' must be a string, got " << describeJsonType(value);
        entryOk = false;
        continue;
      }
      std::string text = value.get<std::string>();
      if (field == "summary") {
        strategy.summary = text;
        continue;
      }
      std::optional<PlacementSpec> *slot =
          field == "weight"             ? &strategy.weight
          : field == "embedding_weight" ? &strategy.embeddingWeight
          : field == "bias"             ? &strategy.vector
          : field == "input"            ? &strategy.input
          : field == "output"           ? &strategy.output
                                        : nullptr;
      if (!slot) {
        emitError(fieldLoc) << "custom strategy '" << name << "': unknown field '" << field
                            << "' (expected weight, embedding_weight, bias, input, output, "
                               "summary)";
        entryOk = false;
        continue;
      }
      std::string why;
      std::optional<PlacementSpec> parsed = PlacementSpec::parse(text, why);
      if (!parsed) {
        emitError(fieldLoc) << "custom strategy '" << name << "': " << why;
        entryOk = false;
        continue;
      }
      bool isParam = field == "weight" || field == "embedding_weight" || field == "bias";
      if (isParam && parsed->kind == PlacementSpec::Kind::Partial) {
        emitError(fieldLoc) << "custom strategy '" << name << "': a parameter cannot be "
                            << parsed->str() << "; parameters are replicated or sharded";
        entryOk = false;
        continue;
      }
      if (field == "weight" && !entry.contains("embedding_weight"))
        strategy.embeddingWeight = parsed;
      *slot = parsed;
    }
    if (!entryOk) {
      ok = false;
      continue;
    }
    strategies.push_back(std::move(strategy));
  }
  return success(ok);
}
