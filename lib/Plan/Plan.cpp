// Applying a tp_plan to a tp module, with transformers' semantics (docs/plans.md):
// a parameter key places that parameter only and beats its module's key; a module key places
// the module's parameters and constrains its input and output layouts.
#include "tpc/Plan/Plan.h"

#include "tpc/Dialect/TP/RepeatedDiagnostics.h"
#include "tpc/Plan/DefaultPlans.h"
#include "tpc/Plan/Json.h"
#include "tpc/Plan/Matcher.h"
#include "tpc/Plan/Strategy.h"

#include "llvm/ADT/MapVector.h"
#include "llvm/ADT/StringMap.h"
#include "llvm/ADT/StringExtras.h"
#include "llvm/Support/Format.h"

using namespace mlir;
using namespace tpc;
using namespace tpc::plan;

//===----------------------------------------------------------------------===//
// Reading
//===----------------------------------------------------------------------===//

FailureOr<std::vector<PlanRule>> tpc::plan::readPlan(StringRef path, MLIRContext *context) {
  FailureOr<JsonDocument> doc = JsonDocument::read(path, context);
  if (failed(doc))
    return failure();
  const nlohmann::ordered_json &root = doc->value();
  if (!root.is_object()) {
    emitError(doc->locAt(0)) << "a plan must be a JSON object of {pattern: strategy}, got "
                             << describeJsonType(root);
    return failure();
  }

  // A config.json carries its plan under base_model_tp_plan, relative to the base model.
  const nlohmann::ordered_json *entries = &root;
  std::vector<std::string> keyPath;
  std::string prefix;
  if (root.contains("base_model_tp_plan")) {
    entries = &root["base_model_tp_plan"];
    keyPath = {"base_model_tp_plan"};
    prefix = "model.";
    if (!entries->is_object()) {
      emitError(doc->keyLoc(keyPath)) << "base_model_tp_plan must be an object of "
                                         "{pattern: strategy}, got "
                                      << describeJsonType(*entries);
      return failure();
    }
  } else if (root.contains("model_type") || root.contains("architectures")) {
    emitError(doc->locAt(0))
        << path << " is a model config without base_model_tp_plan: transformers keeps its "
        << "default plans on the model classes, not in config.json; pass a plan.json";
    return failure();
  }

  std::vector<PlanRule> rules;
  bool ok = true;
  for (const auto &[key, value] : entries->items()) {
    std::vector<std::string> at = keyPath;
    at.push_back(key);
    Location loc = doc->keyLoc(at);
    if (!value.is_string()) {
      emitError(loc) << "the strategy for '" << key << "' must be a string, got "
                     << describeJsonType(value);
      ok = false;
      continue;
    }
    rules.push_back({prefix + key, value.get<std::string>(), loc});
  }
  if (!ok)
    return failure();
  if (rules.empty())
    emitWarning(doc->locAt(0)) << "the plan has no rules: every parameter is replicated";
  return rules;
}

//===----------------------------------------------------------------------===//
// Applying
//===----------------------------------------------------------------------===//

bool tpc::plan::namesSequenceParallel(ModuleOp planned) {
  bool names = false;
  planned.walk([&](Operation *op) {
    if (auto s = op->getAttrOfType<tp::StrategyAttr>(tp::kStrategyAttrName))
      names |= s.getName() == "sequence_parallel";
  });
  return names;
}

int64_t tpc::plan::chunkSize(int64_t size, int64_t tp, int64_t rank) {
  int64_t chunk = (size + tp - 1) / tp;
  return std::clamp<int64_t>(size - rank * chunk, 0, chunk);
}

namespace {

/// The IR facts the plan is matched against.
struct ModelIndex {
  SmallVector<tp::ParamOp> params;
  /// HF module name -> the ops that model it, in program order.
  llvm::MapVector<StringRef, SmallVector<Operation *>> moduleOps;
  /// Every module name: those with ops, and the parents of parameters.
  llvm::SetVector<StringRef> modules;
  /// Parameter name -> the ops that read it (through tp.weight) and the operand they use.
  llvm::StringMap<SmallVector<OpOperand *>> uses;

  explicit ModelIndex(ModuleOp module) {
    for (tp::ParamOp param : module.getOps<tp::ParamOp>()) {
      params.push_back(param);
      if (!parentModule(param.getSymName()).empty())
        modules.insert(parentModule(param.getSymName()));
    }
    module.walk([&](Operation *op) {
      StringRef name = tp::getModuleName(op);
      if (!name.empty()) {
        moduleOps[name].push_back(op);
        modules.insert(name);
      }
      if (auto weight = dyn_cast<tp::WeightOp>(op))
        for (OpOperand &use : weight->getUses())
          uses[weight.getParam()].push_back(&use);
    });
  }

  bool isEmbeddingTable(StringRef param) const {
    auto it = uses.find(param);
    if (it == uses.end())
      return false;
    return llvm::any_of(it->second, [](OpOperand *use) {
      auto embedding = dyn_cast<tp::EmbeddingOp>(use->getOwner());
      return embedding && use->get() == embedding.getTable();
    });
  }
};

/// What kind of HF module a set of ops models, for checking a strategy's target.
enum class ModuleKind { Linear, Embedding, Other };

ModuleKind kindOf(ArrayRef<Operation *> ops) {
  if (llvm::any_of(ops, [](Operation *op) { return isa<tp::EmbeddingOp>(op); }))
    return ModuleKind::Embedding;
  if (llvm::any_of(ops, [](Operation *op) { return isa<tp::LinearOp>(op); }))
    return ModuleKind::Linear;
  return ModuleKind::Other;
}

bool targetAccepts(StrategyTarget target, ModuleKind kind) {
  switch (target) {
  case StrategyTarget::Any: return true;
  case StrategyTarget::LinearOrEmbedding: return kind != ModuleKind::Other;
  case StrategyTarget::Linear: return kind == ModuleKind::Linear;
  case StrategyTarget::Embedding: return kind == ModuleKind::Embedding;
  }
  llvm_unreachable("unknown target");
}

StringRef describeTarget(StrategyTarget target) {
  switch (target) {
  case StrategyTarget::Any: return "any module";
  case StrategyTarget::LinearOrEmbedding: return "an nn.Linear or nn.Embedding module";
  case StrategyTarget::Linear: return "an nn.Linear module";
  case StrategyTarget::Embedding: return "an nn.Embedding module";
  }
  llvm_unreachable("unknown target");
}

class PlanApplier {
public:
  PlanApplier(ModuleOp module, const PlanOptions &options)
      : module(module), context(module.getContext()), options(options), index(module),
        registry(StrategyRegistry::builtin()) {}

  FailureOr<PlanReport> run();

private:
  InFlightDiagnostic error(Location loc) {
    failedAny = true;
    return emitError(loc);
  }
  /// The most specific rule (fewest `*`, then earliest) that matches `name` among those
  /// whose matches are in `matched`; -1 if none.
  int ruleFor(StringRef name, bool asModule) const;
  /// Whether `name` is an attention's sinks whose heads the plan splits.
  bool sinksSplitWithHeads(StringRef name) const;
  void checkStrategyNames();
  void matchRules();
  void placeModules();
  void placeParams();

  ModuleOp module;
  MLIRContext *context;
  const PlanOptions &options;
  ModelIndex index;
  StrategyRegistry registry;
  std::vector<PlanRule> rules;
  std::vector<const Strategy *> strategies; // per rule; null when unknown
  PlanReport report;
  bool failedAny = false;
};

int PlanApplier::ruleFor(StringRef name, bool asModule) const {
  int best = -1;
  for (size_t i = 0; i < rules.size(); ++i) {
    const PlanReport::Rule &r = report.rules[i];
    const std::vector<std::string> &matched = asModule ? r.modules : r.params;
    if (!llvm::is_contained(matched, name))
      continue;
    if (best < 0 || wildcardCount(rules[i].pattern) < wildcardCount(rules[best].pattern))
      best = i;
  }
  return best;
}

void PlanApplier::checkStrategyNames() {
  for (const PlanRule &rule : rules) {
    const Strategy *strategy = registry.lookup(rule.strategy);
    strategies.push_back(strategy);
    if (strategy)
      continue;
    std::string reason = StrategyRegistry::unsupportedReason(rule.strategy);
    if (!reason.empty()) {
      error(rule.loc) << "strategy '" << rule.strategy << "' (for '" << rule.pattern
                      << "') is not supported by tpc: " << reason;
      continue;
    }
    InFlightDiagnostic diag = error(rule.loc);
    diag << "unknown strategy '" << rule.strategy << "' for '" << rule.pattern
         << "'; did you mean '" << registry.closest(rule.strategy) << "'?";
    std::string known;
    llvm::ListSeparator sep(", ");
    for (const std::string &name : registry.names())
      known += StringRef(sep).str() + name;
    diag.attachNote(rule.loc) << "the strategies a plan may use are: " << known;
  }
}

void PlanApplier::matchRules() {
  for (const PlanRule &rule : rules) {
    PlanReport::Rule &r = report.rules.emplace_back();
    r.pattern = rule.pattern;
    r.strategy = rule.strategy;
    for (tp::ParamOp param : index.params)
      if (matchesPattern(rule.pattern, param.getSymName()))
        r.params.push_back(param.getSymName().str());
    for (StringRef name : index.modules)
      if (matchesPattern(rule.pattern, name))
        r.modules.push_back(name.str());
    if (r.params.empty() && r.modules.empty() && !rule.fromTable)
      emitWarning(rule.loc) << "plan rule '" << rule.pattern
                            << "' matches no parameter or module of the model";
  }
}

void PlanApplier::placeModules() {
  // A rule on the wrong kind of module is reported once, at its first module.
  std::vector<SmallVector<StringRef>> misfits(rules.size());
  for (auto &entry : index.moduleOps) {
    StringRef name = entry.first; // (a structured binding: lambdas below could not capture it)
    auto &ops = entry.second;
    int r = ruleFor(name, /*asModule=*/true);
    if (r < 0 || !strategies[r])
      continue;
    const Strategy &strategy = *strategies[r];
    if (!targetAccepts(strategy.target, kindOf(ops))) {
      misfits[r].push_back(name);
      continue;
    }
    for (Operation *op : ops) {
      auto resolve = [&](const std::optional<PlacementSpec> &spec,
                         Value v) -> FailureOr<tp::PlacementAttr> {
        if (!spec)
          return tp::PlacementAttr();
        return spec->resolve(cast<RankedTensorType>(v.getType()).getShape(), context, [&] {
          return error(op->getLoc()) << name << ": strategy '" << strategy.name << "' (rule '"
                                     << rules[r].pattern << "'): ";
        });
      };
      FailureOr<tp::PlacementAttr> input = resolve(strategy.input, op->getOperand(0));
      FailureOr<tp::PlacementAttr> output = resolve(strategy.output, op->getResult(0));
      if (failed(input) || failed(output))
        continue;
      op->setAttr(tp::kStrategyAttrName,
                  tp::StrategyAttr::get(context, StringAttr::get(context, strategy.name),
                                        *input, *output));
    }
  }
  for (size_t r = 0; r < rules.size(); ++r) {
    if (misfits[r].empty())
      continue;
    Operation *first = index.moduleOps.find(misfits[r].front())->second.front();
    InFlightDiagnostic diag = error(rules[r].loc);
    diag << "'" << strategies[r]->name << "' (for '" << rules[r].pattern << "') needs "
         << describeTarget(strategies[r]->target) << ", but " << misfits[r].front();
    if (misfits[r].size() > 1)
      diag << " (and " << misfits[r].size() - 1 << " more)";
    diag << " is modelled by " << first->getName();
    diag.attachNote(first->getLoc()) << misfits[r].front() << " is here";
  }
}

bool PlanApplier::sinksSplitWithHeads(StringRef name) const {
  // local_params leaves a parameter to its own rule: attention sinks, one per query head,
  // follow the heads, which are split where the query's projection keeps its output split
  // (colwise), through the per-head ops between it and the attention.
  for (OpOperand *use : index.uses.lookup(name)) {
    auto attention = dyn_cast<tp::AttentionOp>(use->getOwner());
    if (!attention || use->get() != attention.getSinks())
      continue;
    Value q = attention.getQuery();
    while (Operation *def = q.getDefiningOp()) {
      if (!isa<tp::RotaryOp, tp::RMSNormOp, tp::L2NormOp>(def))
        break;
      q = def->getOperand(0);
    }
    auto linear = q.getDefiningOp<tp::LinearOp>();
    auto weight = linear ? linear.getWeight().getDefiningOp<tp::WeightOp>() : tp::WeightOp();
    if (!weight)
      return false;
    StringRef projection = weight.getParam();
    int r = ruleFor(projection, /*asModule=*/false);
    if (r < 0)
      r = ruleFor(parentModule(projection), /*asModule=*/true);
    if (r < 0 || !strategies[r] || !strategies[r]->output)
      return false;
    const PlacementSpec &out = *strategies[r]->output;
    return out.kind != PlacementSpec::Kind::Replicate && out.kind != PlacementSpec::Kind::Partial &&
           out.dim == -1;
  }
  return false;
}

void PlanApplier::placeParams() {
  // Uncovered parameters are reported once per generic name (all layers together).
  struct Uncovered {
    Location loc;
    std::string first;
    unsigned count;
  };
  llvm::MapVector<StringRef, Uncovered> uncovered;
  std::vector<std::string> genericNames;
  genericNames.reserve(index.params.size());

  for (tp::ParamOp param : index.params) {
    StringRef name = param.getSymName();
    ArrayRef<int64_t> shape = param.getTensorType().getShape();
    StringRef owner = parentModule(name);

    // The placement rule `r` gives this parameter when read as `use` (null: as its owner
    // reads it): 1-D parameters, embedding tables and other weights each have their own.
    auto placementFor = [&](int r, OpOperand *use) -> FailureOr<tp::PlacementAttr> {
      const Strategy &s = *strategies[r];
      bool isTable = false;
      if (use) {
        auto embedding = dyn_cast<tp::EmbeddingOp>(use->getOwner());
        isTable = embedding && use->get() == embedding.getTable();
      } else {
        isTable = index.isEmbeddingTable(name);
      }
      const std::optional<PlacementSpec> &spec =
          shape.size() == 1 ? s.vector : isTable ? s.embeddingWeight : s.weight;
      if (!spec && sinksSplitWithHeads(name))
        return tp::PlacementAttr(tp::ShardAttr::get(context, 0));
      if (!spec)
        return tp::PlacementAttr(tp::ReplicateAttr::get(context));
      return spec->resolve(shape, context, [&] {
        return error(param.getLoc()) << "parameter " << name << " ('" << s.name
                                     << "' from rule '" << rules[r].pattern << "'): ";
      });
    };

    // A parameter key, else the owning module's key, else the key of a module that reads
    // it (a tied lm_head reads the embedding table).
    int r = ruleFor(name, /*asModule=*/false);
    std::string via = "parameter key";
    OpOperand *decidingUse = nullptr;
    if (r < 0) {
      r = ruleFor(owner, /*asModule=*/true);
      via = "module key";
    }
    SmallVector<OpOperand *> foreignUses;
    for (OpOperand *use : index.uses.lookup(name))
      if (tp::getModuleName(use->getOwner()) != owner)
        foreignUses.push_back(use);
    for (OpOperand *use : foreignUses) {
      StringRef user = tp::getModuleName(use->getOwner());
      int ur = user.empty() ? -1 : ruleFor(user, /*asModule=*/true);
      if (r < 0 && ur >= 0) {
        r = ur;
        via = ("read by " + user).str();
        decidingUse = use;
      }
    }

    PlanReport::Param &entry = report.params.emplace_back();
    entry.name = name.str();
    entry.type = param.getTensorType();
    if (r < 0) {
      genericNames.push_back(genericName(name));
      auto [it, inserted] =
          uncovered.try_emplace(genericNames.back(), Uncovered{param.getLoc(), name.str(), 0});
      ++it->second.count;
      entry.placement = tp::ReplicateAttr::get(context);
      param.setPlacementAttr(entry.placement);
      continue;
    }
    entry.rule = rules[r].pattern;
    entry.via = via;
    if (!strategies[r])
      continue; // already reported as unknown
    entry.strategy = strategies[r]->name;
    FailureOr<tp::PlacementAttr> placement = placementFor(r, decidingUse);
    if (failed(placement))
      continue;
    entry.placement = *placement;
    param.setPlacementAttr(*placement);
    param.setStrategy(strategies[r]->name);

    // Every other module that reads the parameter must expect the same layout.
    for (OpOperand *use : foreignUses) {
      StringRef user = tp::getModuleName(use->getOwner());
      int ur = user.empty() ? -1 : ruleFor(user, /*asModule=*/true);
      if (ur < 0 || !strategies[ur] || use == decidingUse)
        continue;
      FailureOr<tp::PlacementAttr> expected = placementFor(ur, use);
      if (succeeded(expected) && !tp::samePlacement(*expected, *placement, shape.size())) {
        InFlightDiagnostic diag = error(param.getLoc());
        diag << "parameter " << name << " is placed " << placement->str() << " by '"
             << rules[r].pattern << "' (" << strategies[r]->name << "), but " << user
             << " also reads it and '" << rules[ur].pattern << "' (" << strategies[ur]->name
             << ") needs " << expected->str();
        diag.attachNote(use->getOwner()->getLoc()) << user << " reads it here";
      }
    }
  }

  for (auto &[generic, u] : uncovered) {
    if (u.count == 1)
      emitWarning(u.loc) << "parameter " << u.first
                         << " is covered by no plan rule; it is replicated";
    else
      emitWarning(u.loc) << u.count << " parameters " << generic
                         << " are covered by no plan rule; they are replicated";
  }
}

FailureOr<PlanReport> PlanApplier::run() {
  int64_t tp = options.tpSize;
  if (tp < 0) {
    emitError(module.getLoc()) << "the tp size must be at least 1, got " << tp;
    return failure();
  }
  if (tp == 0) {
    std::optional<int64_t> mesh = tp::getMeshSize(module);
    if (!mesh) {
      emitError(module.getLoc()) << "no tp size: give one (tpc --tp N, tp-apply-plan "
                                    "tp-size=N) or a tp.mesh on the module";
      return failure();
    }
    tp = *mesh;
  }
  report.tpSize = tp;
  report.planPath = options.planPath;
  int64_t pp = options.ppSize;
  if (pp < 0) {
    emitError(module.getLoc()) << "the pp size must be at least 1, got " << pp;
    return failure();
  }
  if (pp == 0)
    pp = tp::getPipelineStages(module);

  if (!options.strategiesPath.empty() &&
      failed(registry.loadCustom(options.strategiesPath, context)))
    failedAny = true;
  if (options.planPath.empty()) {
    emitError(module.getLoc()) << "no plan given";
    return failure();
  }
  std::string autoSource;
  FailureOr<std::vector<PlanRule>> read =
      options.planPath == "auto" || options.planPath == "auto-ep"
          ? autoPlan(module, options.planPath == "auto-ep", &autoSource)
          : readPlan(options.planPath, context);
  if (!autoSource.empty())
    report.planPath += " (" + autoSource + ")";
  if (failed(read))
    return failure();
  rules = std::move(*read);

  checkStrategyNames();
  matchRules();
  placeModules();
  placeParams();
  module->setAttr(tp::kMeshAttrName, tp::MeshAttr::get(context, pp, tp));
  if (failedAny)
    return failure();
  return std::move(report);
}

} // namespace

FailureOr<std::vector<PlanRule>> tpc::plan::autoPlan(ModuleOp module, bool expertParallel,
                                                     std::string *description) {
  auto modelType = module->getAttrOfType<StringAttr>(tp::kHfModelTypeAttrName);
  if (!modelType) {
    emitError(module.getLoc()) << "--plan auto needs a model imported by `tpc import` (it "
                                  "names the architecture); this one does not say which it is";
    return failure();
  }
  const char *option = expertParallel ? "--plan auto-ep" : "--plan auto";
  std::string prefix = "model."; // where the language model's modules are
  if (auto given = module->getAttrOfType<StringAttr>(tp::kHfBasePrefixAttrName))
    prefix = given.getValue().str();
  // config.json's own base_model_tp_plan wins over transformers' class default.
  nlohmann::ordered_json plan;
  std::string source;
  bool fromTable = false;
  if (auto own = module->getAttrOfType<StringAttr>(tp::kHfTpPlanAttrName); own && !expertParallel) {
    nlohmann::ordered_json base = nlohmann::ordered_json::parse(own.getValue().str(), nullptr,
                                                                /*allow_exceptions=*/false);
    if (!base.is_object()) {
      emitError(module.getLoc()) << "tp.hf_tp_plan is not a JSON object of {pattern: strategy}";
      return failure();
    }
    // Checked before it is copied: copying a value nested without bound recurses without
    // bound (the attribute may come from a hand-written model.mlir).
    for (const auto &[key, value] : base.items()) {
      if (!value.is_string()) {
        emitError(module.getLoc())
            << "tp.hf_tp_plan: the strategy for '" << key << "' must be a string";
        return failure();
      }
      plan[prefix + key] = value;
    }
    if (const nlohmann::ordered_json *table = defaultPlan(modelType.getValue(), false))
      if (table->contains("lm_head"))
        plan["lm_head"] = (*table)["lm_head"];
    source = "config.json's base_model_tp_plan";
  } else if (const nlohmann::ordered_json *table =
                 defaultPlan(modelType.getValue(), expertParallel)) {
    // A plan of the head alone (GPT-OSS: no base_model_tp_plan) would run every layer
    // replicated: not what a user asking for tensor parallelism means.
    bool headOnly = !expertParallel && llvm::all_of(table->items(), [&](const auto &item) {
      return !llvm::StringRef(item.key()).starts_with(prefix);
    });
    if (headOnly) {
      InFlightDiagnostic diag = emitError(module.getLoc());
      diag << option << ": transformers 5.17 has no tensor-parallel plan for model_type '"
           << modelType.getValue() << "' (its config class has no base_model_tp_plan; only "
           << "lm_head has one)";
      if (defaultPlan(modelType.getValue(), true))
        diag << "; use --plan auto-ep (its expert-parallel plan, as transformers runs it), or "
                "a plan file";
      else
        diag << "; use a plan file";
      return failure();
    }
    plan = *table;
    fromTable = true;
    source = "transformers 5.17's " + modelType.getValue().str() +
             (expertParallel ? " expert-parallel plan" : " plan");
  } else {
    emitError(module.getLoc()) << option << ": transformers 5.17 has no "
                               << (expertParallel ? "expert-parallel plan" : "plan")
                               << " for model_type '" << modelType.getValue() << "'";
    return failure();
  }
  // transformers adds this to the base plan of tied models (PreTrainedConfig.__init__).
  auto tied = module->getAttrOfType<BoolAttr>(tp::kHfTiedAttrName);
  if (tied && tied.getValue() && !expertParallel) {
    plan[prefix + "embed_tokens"] = "embedding_rowwise";
    source += " + embed_tokens for tied embeddings";
  }
  if (description)
    *description = source;
  std::vector<PlanRule> rules;
  Location loc = NameLoc::get(StringAttr::get(module.getContext(), source));
  for (const auto &[key, value] : plan.items()) {
    if (!value.is_string()) {
      emitError(loc) << "the strategy for '" << key << "' must be a string";
      return failure();
    }
    rules.push_back({key, value.get<std::string>(), loc, fromTable});
  }
  return rules;
}

FailureOr<PlanReport> tpc::plan::applyPlan(ModuleOp module, const PlanOptions &options) {
  tp::RepeatedDiagnosticHandler onePerCause(module.getContext());
  return PlanApplier(module, options).run();
}

//===----------------------------------------------------------------------===//
// Printing
//===----------------------------------------------------------------------===//

namespace {

std::string shapeString(ArrayRef<int64_t> shape) {
  std::string s;
  llvm::ListSeparator sep("x");
  for (int64_t d : shape)
    s += StringRef(sep).str() + (ShapedType::isDynamic(d) ? "?" : std::to_string(d));
  return s;
}

/// The shape rank `rank` holds under `placement`.
SmallVector<int64_t> localShape(ArrayRef<int64_t> shape, tp::PlacementAttr placement,
                                int64_t tp, int64_t rank) {
  SmallVector<int64_t> local(shape);
  if (auto shard = dyn_cast<tp::ShardAttr>(placement)) {
    int64_t d = tp::normalizeDim(shard.getDim(), shape.size());
    local[d] = chunkSize(shape[d], tp, rank);
  } else if (auto strided = dyn_cast<tp::StridedShardAttr>(placement)) {
    int64_t d = tp::normalizeDim(strided.getDim(), shape.size());
    local[d] = 0;
    for (int64_t block : strided.getBlocks())
      local[d] += chunkSize(block, tp, rank);
  }
  return local;
}

} // namespace

void PlanReport::print(llvm::raw_ostream &os) const {
  os << "plan " << planPath << " at tp " << tpSize << "\n\nrules:\n";
  size_t patternWidth = 0, strategyWidth = 0;
  for (const Rule &r : rules) {
    patternWidth = std::max(patternWidth, r.pattern.size());
    strategyWidth = std::max(strategyWidth, r.strategy.size());
  }
  auto plural = [](size_t n, StringRef word) {
    return std::to_string(n) + " " + word.str() + (n == 1 ? "" : "s");
  };
  for (const Rule &r : rules) {
    os << "  " << llvm::left_justify(r.pattern, patternWidth) << "  "
       << llvm::left_justify(r.strategy, strategyWidth) << "  ";
    size_t placed = llvm::count_if(params, [&](const Param &p) { return p.rule == r.pattern; });
    if (r.modules.empty() && r.params.empty())
      os << "matches nothing\n";
    else
      os << "matches " << plural(r.modules.size(), "module") << " and "
         << plural(r.params.size(), "parameter") << "; places " << plural(placed, "parameter")
         << "\n";
  }

  struct Row {
    std::string name, global, placement, local, decided;
  };
  std::vector<Row> rows;
  for (const Param &p : params) {
    Row row;
    row.name = p.name;
    row.global = shapeString(p.type.getShape());
    row.placement = p.placement ? p.placement.str() : "(invalid)";
    if (p.placement) {
      SmallVector<int64_t> first = p.held.empty()
                                       ? localShape(p.type.getShape(), p.placement, tpSize, 0)
                                       : p.held.front();
      SmallVector<int64_t> last =
          p.held.empty() ? localShape(p.type.getShape(), p.placement, tpSize, tpSize - 1)
                         : p.held.back();
      row.local = shapeString(first);
      if (first != last)
        row.local += " .. " + shapeString(last);
    }
    row.decided = p.rule.empty() ? "no rule: replicated"
                                 : p.strategy + " from '" + p.rule + "' (" + p.via + ")";
    rows.push_back(std::move(row));
  }
  size_t w[4] = {4, 6, 9, 5};
  for (const Row &row : rows) {
    w[0] = std::max(w[0], row.name.size());
    w[1] = std::max(w[1], row.global.size());
    w[2] = std::max(w[2], row.placement.size());
    w[3] = std::max(w[3], row.local.size());
  }
  auto printRow = [&](const Row &row) {
    os << "  " << llvm::left_justify(row.name, w[0]) << "  " << llvm::left_justify(row.global, w[1])
       << "  " << llvm::left_justify(row.placement, w[2]) << "  "
       << llvm::left_justify(row.local, w[3]) << "  " << row.decided << "\n";
  };
  os << "\nparameters (local shape: rank 0 .. rank " << tpSize - 1 << " where they differ):\n";
  printRow({"name", "global", "placement", "local", "decided by"});
  for (const Row &row : rows)
    printRow(row);
}
