// tpc analyze as a library (include/tpc/Analysis/Analyze.h): the program the binary is
// built from, for the target, read back as collectives per phase, memory per rank and what is
// split unevenly, beside transformers' count for the same plan; and the report's two forms.
#include "tpc/Analysis/Analyze.h"

#include "tpc/Dialect/TP/TPDialect.h"
#include "tpc/Plan/Plan.h"
#include "tpc/Target/TargetInfo.h"
#include "tpc/Transforms/Passes.h"
#include "tpc/Transforms/Pipeline.h"

#include "mlir/Pass/PassManager.h"
#include "tpcrt/model.h"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cassert>
#include <cmath>
#include <fmt/core.h>
#include <map>

using namespace mlir;

namespace tpc::analysis {

static_assert(tpcrt::kDefaultMaxSeqLen == 2048,
              "AnalyzeOptions::maxSeqLen defaults to the binary's --max-model-len");

namespace {

std::string countsOf(const std::vector<CollectiveEntry> &entries) {
  std::map<std::string, int> counts;
  for (const CollectiveEntry &e : entries)
    ++counts[collectiveName(e.kind).str()];
  std::string s;
  for (auto &[name, n] : counts)
    s += (s.empty() ? "" : ", ") + std::to_string(n) + " " + name;
  return s.empty() ? "none" : s;
}

/// A send or receive between pipeline stages, not a collective of a tp group.
bool isTransfer(const CollectiveEntry &e) {
  return e.kind == CollectiveKind::Send || e.kind == CollectiveKind::Recv;
}

double totalBytes(const std::vector<CollectiveEntry> &entries) {
  double total = 0;
  for (const CollectiveEntry &e : entries)
    total += e.bytes;
  return total;
}

std::string describe(const CollectiveEntry &e) {
  std::string s = collectiveName(e.kind).str();
  if (e.argmax)
    return s + " argmax";
  if (e.dim >= 0)
    s += " dim " + std::to_string(e.dim);
  return s;
}

/// "2 all_reduce" when every decoder layer runs the same collectives; "" otherwise.
std::string perLayer(const std::vector<CollectiveEntry> &entries) {
  std::map<std::string, std::vector<CollectiveEntry>> layers;
  for (const CollectiveEntry &e : entries)
    if (llvm::StringRef(e.layer).starts_with("model.layers.") && !isTransfer(e))
      layers[e.layer].push_back(e);
  std::string pattern;
  for (auto &[layer, list] : layers) {
    std::string c = countsOf(list);
    if (!pattern.empty() && c != pattern)
      return "";
    pattern = c;
  }
  return pattern;
}

/// `staged`: the list of a mesh with pipeline stages, which says each entry's stage.
nlohmann::ordered_json toJson(const std::vector<CollectiveEntry> &entries, bool staged = false) {
  nlohmann::ordered_json list = nlohmann::ordered_json::array();
  for (const CollectiveEntry &e : entries) {
    nlohmann::ordered_json j;
    j["layer"] = e.layer;
    j["module"] = e.module;
    j["kind"] = collectiveName(e.kind).str();
    j["dim"] = e.dim >= 0 ? nlohmann::ordered_json(e.dim) : nlohmann::ordered_json();
    j["bytes"] = e.bytes;
    j["sent_bytes_per_rank"] = e.sentBytes;
    if (e.paddedBytes > 0)
      j["padded_bytes"] = e.paddedBytes;
    if (e.argmax)
      j["argmax"] = true;
    if (staged)
      j["stage"] = e.stage;
    if (isTransfer(e))
      j[e.kind == CollectiveKind::Send ? "to" : "from"] = e.peer;
    list.push_back(j);
  }
  return list;
}

nlohmann::ordered_json summaryJson(const std::vector<CollectiveEntry> &entries) {
  std::map<std::string, int> counts;
  for (const CollectiveEntry &e : entries)
    ++counts[collectiveName(e.kind).str()];
  nlohmann::ordered_json j;
  j["count"] = entries.size();
  j["by_kind"] = counts;
  j["bytes"] = totalBytes(entries);
  double padded = 0;
  for (const CollectiveEntry &e : entries)
    padded += e.paddedBytes;
  if (padded > 0)
    j["padded_bytes"] = padded;
  return j;
}

/// `micros`: each collective's predicted time on --hosts machines, where asked (else empty).
void printPhase(const PhaseReport &phase, const std::vector<double> &micros,
                llvm::raw_ostream &os) {
  os << fmt::format("\n{} ({} token{}{}{}):\n", phase.name, phase.tokens,
                    phase.tokens == 1 ? "" : "s",
                    phase.name == "step"
                        ? fmt::format(" of {} sequence{}, each sampled", phase.sequences,
                                      phase.sequences == 1 ? "" : "s")
                    : phase.cachedTokens > 0
                        ? fmt::format(" after {} cached", phase.cachedTokens)
                        : "",
                    phase.sequenceParallel ? ", sequence parallel" : "");
  size_t layerWidth = 5, moduleWidth = 6;
  for (const CollectiveEntry &e : phase.collectives) {
    layerWidth = std::max(layerWidth, e.layer.size());
    moduleWidth = std::max(moduleWidth, e.module.size());
  }
  bool timed = !micros.empty();
  if (!phase.collectives.empty())
    os << fmt::format("  {:<{}}  {:<{}}  {:<22}  {:>12}{}\n", "layer", layerWidth, "module",
                      moduleWidth, "collective", "bytes", timed ? "  predicted us" : "");
  for (size_t i = 0; i < phase.collectives.size(); ++i) {
    const CollectiveEntry &e = phase.collectives[i];
    os << fmt::format("  {:<{}}  {:<{}}  {:<22}  {:>12.0f}{}\n", e.layer, layerWidth, e.module,
                      moduleWidth, describe(e), e.bytes,
                      timed ? fmt::format("  {:>12.1f}", micros[i]) : "");
  }
  std::string layer = perLayer(phase.collectives);
  if (!layer.empty())
    os << "  per decoder layer: " << layer << "\n";
  double padded = 0;
  for (const CollectiveEntry &e : phase.collectives)
    padded += e.paddedBytes;
  os << fmt::format("  tpc:          {} collectives ({}), {:.0f} bytes{}\n",
                    phase.collectives.size(), countsOf(phase.collectives),
                    totalBytes(phase.collectives),
                    padded > 0 ? fmt::format(", {:.0f} of them padding (pieces tp does not "
                                             "divide, padded to equal counts on the wire)",
                                             padded)
                               : "");
  if (timed) {
    double total = 0;
    for (double m : micros)
      total += m;
    os << fmt::format("  predicted:    {:.3f} ms of collectives\n", total / 1e3);
  }
  if (!phase.transformersFails.empty())
    os << "  transformers: " << phase.transformersFails << "\n";
  else
    os << fmt::format("  transformers: {} collectives ({}), {:.0f} bytes\n",
                      phase.transformers.size(), countsOf(phase.transformers),
                      totalBytes(phase.transformers));
}

/// A copy of `module` after the passes `build` adds; null (errors reported) if they fail.
OwningOpRef<ModuleOp> runOnCopy(ModuleOp module,
                                llvm::function_ref<void(OpPassManager &)> build) {
  OwningOpRef<ModuleOp> copy = module.clone();
  PassManager pm(module.getContext());
  build(pm);
  if (failed(pm.run(*copy)))
    return nullptr;
  return copy;
}

/// The largest rank against the even share, for what is split unevenly.
struct Share {
  const char *name, *what;
  const std::vector<double> &perRank;
};
std::vector<Share> sharesOf(const RankShares &shares) {
  return {{"weights_bytes", "weights", shares.weightBytes},
          {"matmul_elements_per_token", "matmul work per token", shares.matmulElements},
          {"query_heads", "attention heads", shares.queryHeads}};
}

/// What gathering the vocabulary's logits costs a decode step, and what a greedy step moves
/// instead: for a large vocabulary (Gemma 3's 262k) the gather is most of the step's bytes,
/// and a greedy step needs only each rank's best logit and its id. `greedy` and `sampled`:
/// the decode step's collectives when it is greedy and when it samples; `target` is whether
/// the binary finds the argmax on the ranks.
void logitsGatherNote(const std::vector<CollectiveEntry> &greedy,
                      const std::vector<CollectiveEntry> &sampled, bool target, bool reported,
                      std::vector<std::string> &notes) {
  auto logits = [](const std::vector<CollectiveEntry> &entries) {
    double bytes = 0;
    for (const CollectiveEntry &c : entries)
      if (llvm::StringRef(c.module).ends_with("lm_head") && c.kind == CollectiveKind::AllGather)
        bytes += c.bytes;
    return bytes;
  };
  double gather = logits(sampled), total = totalBytes(sampled);
  if (gather == 0 || total == 0)
    return;
  std::string share = fmt::format("lm_head's all_gather of the logits is {:.0f} of a sampled "
                                  "decode step's {:.0f} collective bytes ({:.0f}%)",
                                  gather, total, 100 * gather / total);
  bool marked = llvm::any_of(greedy, [](const CollectiveEntry &c) { return c.argmax; });
  if (!marked) {
    notes.push_back(share + (target ? "" : "; a greedy step needs only each rank's largest logit "
                                           "and its id, which the CPU target's binary gathers "
                                           "instead (tp-greedy-argmax), but this target's "
                                           "gathers the logits on every step"));
    return;
  }
  std::string argmax = fmt::format("a greedy step gathers only each rank's largest logit and "
                                   "its id instead ({:.0f} bytes: argmax_if_greedy)",
                                   logits(greedy));
  notes.push_back(reported ? fmt::format("{}; {}, as reported above; a step that samples or "
                                         "reads whole rows (penalties, logprobs, a grammar's "
                                         "mask, dumped logits) gathers the logits (--sampled "
                                         "reports those steps)",
                                         share, argmax)
                           : fmt::format("{}, as reported above; {}", share, argmax));
}

/// An embedding table the plan leaves whole on every rank (Llama 4's: transformers' plan has
/// no rule for it): what splitting it by vocabulary (embedding_rowwise) would save each rank,
/// and the all_reduce of each step's embeddings it would cost.
void replicatedEmbeddingNote(ModuleOp planned, int64_t tp, int64_t elementBytes,
                             std::vector<std::string> &notes) {
  if (tp < 2)
    return;
  planned.walk([&](tp::EmbeddingOp embedding) {
    tp::ParamOp table = tp::paramOf(embedding.getTable());
    if (!table ||
        (table.getPlacementAttr() && !isa<tp::ReplicateAttr>(table.getPlacementAttr())))
      return;
    RankedTensorType type = table.getTensorType();
    double bytes = paramBytes(table);
    double saved = bytes - bytes / double(tp); // the largest rank's share, near enough
    notes.push_back(fmt::format(
        "{} ({}x{}, {:.0f} bytes) is replicated by this plan: split by vocabulary "
        "(embedding_rowwise) it would take about {:.0f} bytes less on each rank, for an "
        "all_reduce of each step's embeddings ({} bytes a token)",
        tp::getModuleName(embedding).str(), type.getDimSize(0), type.getDimSize(1), bytes, saved,
        type.getDimSize(1) * elementBytes));
  });
}

/// The KV cache's length, as the binary would choose it: --max-model-len, or the same
/// default, from the model's positions where import recorded them. Sets where it came from
/// in `a`, and a note where the binary would refuse --max-model-len.
int64_t contextOf(ModuleOp module, const AnalyzeOptions &o, Analysis &a) {
  auto recorded = module->getAttrOfType<IntegerAttr>(tp::kMaxPositionEmbeddingsAttrName);
  int64_t positions = a.positions = recorded ? recorded.getInt() : 0;
  std::string refused;
  if (!tpcrt::chooseMaxSeqLen(o.maxSeqLenGiven ? std::optional(o.maxSeqLen) : std::nullopt,
                              positions, refused))
    a.notes.push_back(refused + ": the binary refuses it");
  int64_t maxSeqLen = o.maxSeqLen;
  std::string &maxSeqLenFrom = a.maxSeqLenFrom, &maxSeqLenWhy = a.maxSeqLenWhy;
  maxSeqLenFrom = maxSeqLenWhy = "--max-model-len";
  if (!o.maxSeqLenGiven) {
    maxSeqLen = tpcrt::defaultMaxSeqLen(positions);
    bool fewer = positions && positions < tpcrt::kDefaultMaxSeqLen;
    maxSeqLenFrom = fewer ? "max_position_embeddings" : "default";
    maxSeqLenWhy = fewer      ? "the default: the model's max_position_embeddings"
                   : positions ? fmt::format("the default; the model's "
                                             "max_position_embeddings is {}",
                                             positions)
                               : "the default; the model records no "
                                 "max_position_embeddings";
  }
  return maxSeqLen;
}

/// The prefill's length; `error` set where it, or --step-tokens, does not fit the KV cache.
FailureOr<int64_t> prefillLength(const AnalyzeOptions &o, int64_t maxSeqLen,
                                 const std::string &maxSeqLenWhy, std::string &error) {
  // A model made for fewer positions than the default prefill is analyzed at its whole
  // context rather than refused.
  int64_t prefillLen = o.prefillLenGiven ? o.prefillLen : std::min(o.prefillLen, maxSeqLen);
  if (prefillLen > maxSeqLen) {
    error = fmt::format("--prefill-len {} exceeds --max-model-len {}{}", prefillLen, maxSeqLen,
                        o.maxSeqLenGiven ? "" : " (" + maxSeqLenWhy + ")");
    return failure();
  }
  if (o.stepTokens > o.stepSequences * maxSeqLen) {
    error = fmt::format("--step-tokens {} is more than --step-seqs {} sequences of --max-model-len "
                        "{} hold",
                        o.stepTokens, o.stepSequences, maxSeqLen);
    return failure();
  }
  return prefillLen;
}

/// Whether the forward the program runs for `tokens` splits them over the ranks. Which
/// forward runs a token count is the program's rule (tp.sequence_parallel), the one the
/// runtime obeys: split by tokens where they split evenly, all_reduce where not.
bool splitsTokens(ModuleOp decided, int64_t tokens) {
  return tp::sequenceParallelTokens(tp::forwardFor(decided, tokens)).has_value();
}

/// Where sequence parallelism falls back to all_reduce, and what every step sends besides
/// the model's collectives.
void sequenceParallelNotes(ModuleOp decided, const AnalyzeOptions &o, int64_t prefillLen,
                           bool sequenceParallel, bool prefillSplits,
                           std::vector<std::string> &notes) {
  if (sequenceParallel && !prefillSplits)
    notes.push_back(fmt::format("sequence parallelism falls back to all_reduce for the "
                                "prefill: {} tokens do not split evenly over tp {}",
                                prefillLen, o.tp));
  if (sequenceParallel && !splitsTokens(decided, 1))
    notes.push_back("sequence parallelism falls back to all_reduce for decode steps "
                    "(1 token does not split over tp " + std::to_string(o.tp) + ")");
  if (o.sequenceParallel && !sequenceParallel)
    notes.push_back("--sequence-parallel does nothing on one rank");
  if (o.tp * o.pp > 1)
    notes.push_back("each step (the prefill, every decode step) begins with rank 0 sending the "
                    "other ranks the step's descriptor (its tokens, and each sequence's counts, "
                    "draw and block tables: 8 x (8 + --max-batch-tokens + --max-num-seqs x (9 + "
                    "the KV groups x --max-model-len / the block size)) bytes, "
                    "runtime/engine/step_codec.h) through the host transport's all-gather, not a "
                    "collective of the model (not listed above, nor in --trace)");
}

/// What the program runs for a step of `tokens` tokens of `sequences` sequences, each
/// sampled, in the forward the program's rule picks for it: one stage's collectives, sends and
/// receives, or (no stage) the whole mesh's collectives and sends.
std::vector<CollectiveEntry> stepCollectives(ModuleOp decided, const AnalyzeOptions &o,
                                             int64_t tokens, int64_t sequences,
                                             std::optional<int64_t> stage = std::nullopt) {
  tp::TargetAttr target = tp::getTarget(decided);
  return programCollectives(tp::forwardFor(decided, tokens, sequences), tokens, o.tp,
                            target.activationBytes(),
                            target.getGather() == tp::GatherMode::variable, sequences,
                            !o.sampled, stage);
}

/// The phase of a prefill after a prefix-cache hit (--cached-prefix).
constexpr const char *kCachedPrefill = "prefill after a cached prefix";

/// --cached-prefix's tokens as the engine finds them for a prompt of `prefillLen`: whole KV
/// blocks (tp.kv_block_size), short of the prompt's last token (always computed).
int64_t cachedPrefixOf(ModuleOp decided, const AnalyzeOptions &o, int64_t prefillLen) {
  auto blockSize = decided->getAttrOfType<IntegerAttr>(tp::kKvBlockSizeAttrName);
  if (o.cachedPrefix <= 0 || !blockSize || blockSize.getInt() <= 0)
    return 0;
  int64_t size = blockSize.getInt();
  return std::min(o.cachedPrefix, prefillLen - 1) / size * size;
}

/// What --cached-prefix saves the prefill: its rows and its collectives' bytes.
void cachedPrefixNote(ModuleOp decided, const AnalyzeOptions &o,
                      const std::vector<PhaseReport> &phases, std::vector<std::string> &notes) {
  if (o.cachedPrefix <= 0)
    return;
  auto blockSize = decided->getAttrOfType<IntegerAttr>(tp::kKvBlockSizeAttrName);
  const PhaseReport &prefill = phases.front();
  auto cached = llvm::find_if(phases, [](const PhaseReport &p) { return p.name == kCachedPrefill; });
  if (cached == phases.end()) {
    notes.push_back(fmt::format(
        "--cached-prefix {}: no whole KV block of {} tokens fits before the last of the "
        "prefill's {} tokens, so a prefix-cache hit saves it nothing",
        o.cachedPrefix, blockSize ? blockSize.getInt() : 0, prefill.tokens));
    return;
  }
  double before = totalBytes(prefill.collectives), after = totalBytes(cached->collectives);
  notes.push_back(fmt::format(
      "a prefix-cache hit of {} of the prefill's {} tokens ({} KV blocks of {}; the engine "
      "takes whole blocks before the prompt's last token) leaves {} rows to compute: the "
      "matmuls and norms run on {:.1f}% of the rows, attention reads the cached keys and "
      "values, and the collectives move {:.0f} of {:.0f} bytes",
      cached->cachedTokens, prefill.tokens, cached->cachedTokens / blockSize.getInt(),
      blockSize.getInt(), cached->tokens, 100.0 * double(cached->tokens) / double(prefill.tokens),
      after, before));
}

/// The phases reported: the prefill, a decode step and, with --step-tokens, a step of the
/// engine's; each beside the collectives transformers' hooks run for it, where its TP runs
/// this at all.
std::vector<PhaseReport> phasesOf(ModuleOp module, ModuleOp decided, const AnalyzeOptions &o,
                                  int64_t prefillLen, bool prefillSplits) {
  std::string transformersFails = transformersFailure(module);
  auto transformersFor = [&](int64_t tokens) {
    return transformersFails.empty() ? transformersCollectives(module, tokens)
                                     : std::vector<CollectiveEntry>();
  };
  std::vector<PhaseReport> phases = {
      {"prefill", prefillLen, 1, prefillSplits, stepCollectives(decided, o, prefillLen, 1),
       transformersFor(prefillLen), transformersFails},
      {"decode step", 1, 1, false, stepCollectives(decided, o, 1, 1), transformersFor(1),
       transformersFails}};
  if (o.stepTokens > 0) {
    // A step of the engine's: the sequences' tokens in one forward, each sequence's last
    // token's row sampled; one sequence's step runs the forward its count picks.
    func::FuncOp forward = tp::forwardFor(decided, o.stepTokens, o.stepSequences);
    bool one = o.stepSequences == 1;
    phases.push_back(
        {"step", o.stepTokens, o.stepSequences,
         tp::sequenceParallelTokens(forward).has_value(),
         stepCollectives(decided, o, o.stepTokens, o.stepSequences),
         one ? transformersFor(o.stepTokens) : std::vector<CollectiveEntry>(),
         one || !transformersFails.empty()
             ? transformersFails
             : "not compared (its tensor parallelism runs one batch shape, not ragged steps)"});
  }
  // (after the step, which predictMesh finds third)
  if (int64_t hit = cachedPrefixOf(decided, o, prefillLen); hit > 0) {
    // The same prompt after a prefix-cache hit: the engine's step computes the rest of it,
    // attending to the cached keys and values; transformers has no such cache.
    int64_t rest = prefillLen - hit;
    PhaseReport cached{kCachedPrefill, rest, 1, splitsTokens(decided, rest),
                       stepCollectives(decided, o, rest, 1), {},
                       "not compared (transformers keeps no prefix cache)"};
    cached.cachedTokens = hit;
    phases.push_back(std::move(cached));
  }
  return phases;
}

/// Each pipeline stage's ranks and layers (tp.stage_layers), and its part of each of
/// `phases`; none at pp 1.
std::vector<StageReport> stagesOf(ModuleOp module, ModuleOp decided, const AnalyzeOptions &o,
                                  const std::vector<PhaseReport> &phases) {
  std::vector<StageReport> stages;
  auto layers = module->getAttrOfType<DenseI64ArrayAttr>(tp::kStageLayersAttrName);
  if (o.pp <= 1 || !layers)
    return stages;
  int64_t first = 0;
  for (auto [index, count] : llvm::enumerate(layers.asArrayRef())) {
    StageReport &stage = stages.emplace_back();
    stage.stage = int64_t(index);
    stage.firstLayer = first;
    stage.lastLayer = first + count - 1;
    first += count;
    for (int64_t r = 0; r < o.tp; ++r)
      stage.ranks.push_back(stage.stage * o.tp + r);
    for (const PhaseReport &phase : phases)
      stage.phases.push_back({phase.name, phase.tokens, phase.sequences, phase.sequenceParallel,
                              stepCollectives(decided, o, phase.tokens, phase.sequences,
                                              stage.stage),
                              {}, "", phase.cachedTokens});
  }
  return stages;
}

/// logitsGatherNote for the program's decode step, greedy and sampled: its collectives, the
/// transfers between stages aside.
void decodeLogitsNote(ModuleOp decided, const AnalyzeOptions &o, std::vector<std::string> &notes) {
  if (o.tp <= 1)
    return;
  auto decodeStep = [&](bool sampled) {
    AnalyzeOptions step = o;
    step.sampled = sampled;
    std::vector<CollectiveEntry> entries = stepCollectives(decided, step, 1, 1);
    llvm::erase_if(entries, isTransfer);
    return entries;
  };
  logitsGatherNote(decodeStep(false), decodeStep(true), tp::getTarget(decided).getGreedyArgmax(),
                   !o.sampled, notes);
}

/// What crosses between the stages of a pipeline besides the residual stream: the logits,
/// back to the first stage, whose rank 0 samples. Without stages, that --concurrency has no
/// bubble to price.
void pipelineNote(const std::vector<PhaseReport> &phases, const AnalyzeOptions &o,
                  std::vector<std::string> &notes) {
  if (o.pp <= 1) {
    if (o.concurrency != 1)
      notes.push_back("--concurrency prices the bubble of pipeline stages, which --pp 1 has "
                      "none of");
    return;
  }
  const PhaseReport &decode = phases[1];
  double logits = 0, sent = 0;
  bool ids = false;
  for (const CollectiveEntry &e : decode.collectives)
    if (e.kind == CollectiveKind::Send) {
      sent += e.bytes;
      if (e.peer == 0) {
        logits += e.bytes;
        ids = ids || e.argmax;
      }
    }
  if (ids)
    notes.push_back(fmt::format(
        "the last stage finds a greedy step's argmax and sends it back to stage 0, whose rank "
        "0 samples, an id a row (tp-greedy-argmax): {:.0f} of the {:.0f} bytes a decode step "
        "sends between stages; a step that samples (--sampled) sends the rows of logits",
        logits, sent));
  else
    notes.push_back(fmt::format(
        "the last stage sends the logits back to stage 0, whose rank 0 samples: {:.0f} of the "
        "{:.0f} bytes a decode step sends between stages{}",
        logits, sent,
        o.sampled ? ""
                  : "; greedy steps send the whole rows too (the " + o.target +
                        " runtime does not find the argmax on the last stage)"));
}

/// `memory`'s weights and KV cache as a rank of `stage` holds them; without a stage, as a
/// rank of a mesh without stages does. The cache's elements are the activations' type, times
/// `kvScale` (--kv-cache-dtype bf16 or f16 on the CPU: 0.5; q8_0: 34 bytes for 32 floats).
void measureHeld(ModuleOp partitioned, std::optional<int64_t> stage, double kvScale,
                 MemoryReport &memory) {
  memory.weights = parameterBytes(partitioned, stage);
  memory.unshardedWeights = unshardedParameterBytes(partitioned);
  memory.decodeReads = decodeWeightReads(partitioned, stage);
  memory.expertReads = decodeExpertReads(partitioned, stage);
  for (auto [name, share] : routedShares(partitioned))
    memory.expertsRouted = std::max(memory.expertsRouted, share);
  memory.heldTypes = heldTypes(partitioned, stage);
  // The binary's cache for one prompt: --kv-cache-tokens --max-model-len, in the groups'
  // pools (where layers read a window or chunks, they keep fewer blocks).
  memory.kvCache = kvScale * kvCacheAllocated(partitioned, memory.maxSeqLen, memory.maxSeqLen,
                                              1, std::max<int64_t>(memory.kvBlockSize, 1),
                                              stage, memory);
  memory.kvCachePerSequence = 0;
  for (MemoryReport::KvGroup &group : memory.kvGroups) {
    group.bytesPerToken *= kvScale;
    int64_t blockSize = std::max<int64_t>(memory.kvBlockSize, 1);
    memory.kvCachePerSequence +=
        group.bytesPerToken * double(group.blocksPerSequence * blockSize);
  }
  memory.kvSequencesPerGiB = std::floor(memory.kvSequencesPerGiB / kvScale);
  memory.kvSequencesPerGiBWhole = std::floor(memory.kvSequencesPerGiBWhole / kvScale);
  memory.kvCachePerToken = kvScale * kvCacheBytes(partitioned, 1, stage);
  memory.mlaLatentCache = mlaLatentCacheBytes(partitioned, memory.maxSeqLen, stage);
}

/// The per-rank weights and KV cache (each stage's, with pipeline stages), and the graph
/// --dot draws, from the prefill's collectives pipeline (its warnings were said once,
/// building the program). Fails, its errors reported, where a pass does.
LogicalResult measurePrefill(ModuleOp module, ModuleOp decided, tp::TargetAttr target,
                             const AnalyzeOptions &o, bool sequenceParallel, bool prefillSplits,
                             Analysis &a) {
  OwningOpRef<ModuleOp> &prefill = a.prefill, partitioned;
  {
    ScopedDiagnosticHandler quiet(module.getContext(), [](Diagnostic &d) {
      return success(d.getSeverity() != DiagnosticSeverity::Error);
    });
    prefill = runOnCopy(module, [&](OpPassManager &pm) {
      buildCollectivesPipeline(pm, prefillSplits ? "on" : sequenceParallel ? "off" : "auto",
                               !o.noFold);
      pm.addPass(tp::createTPElideCollectives());
    });
    // The weights as the binary holds them: the target's types (tp-weight-storage).
    if (prefill) {
      (*prefill)->setAttr(tp::kTargetAttrName, target);
      // tp-insert-transfers gives each op the passes made a stage, as in the program.
      partitioned = runOnCopy(*prefill, [&](OpPassManager &pm) {
        pm.addPass(tp::createTPPartition());
        pm.addPass(tp::createTPInsertTransfers());
        pm.addPass(tp::createTPWeightStorage({o.weights}));
      });
    }
  }
  if (!prefill || !partitioned)
    return failure();
  MemoryReport &memory = a.memory;
  // The cache holds the target's activations (the CUDA device's bf16), or on the CPU
  // --kv-cache-dtype's type (from the one table of types): its bytes against those of the
  // module's keys, which the measures below count in.
  int64_t keyBytes = 4;
  partitioned->walk([&](tp::AttentionOp attention) {
    keyBytes = int64_t(tp::typeOf(attention.getKey()).getElementTypeBitWidth()) / 8;
  });
  double kvScale = double(target.activationBytes()) / double(std::max<int64_t>(1, keyBytes));
  if (!o.kvCacheDtype.empty() && target.activationBytes() == 4)
    if (std::optional<tpcrt::DType> type = tpcrt::parseDType(o.kvCacheDtype))
      kvScale = double(tpcrt::dtypeBlockBytes(*type)) /
                double(tpcrt::dtypeBlockElements(*type) * keyBytes);
  if (auto blockSize = decided->getAttrOfType<IntegerAttr>(tp::kKvBlockSizeAttrName))
    memory.kvBlockSize = blockSize.getInt();
  measureHeld(*partitioned, std::nullopt, kvScale, memory);
  if (a.stages.empty()) {
    a.shares = rankShares(*partitioned);
    return success();
  }
  // Every stage allocates the one arena and as many KV blocks; each holds its own weights
  // and its layers' caches. The report's ranks are those of the stage that holds the most.
  const StageReport *fullest = &a.stages.front();
  RankShares byWorldRank;
  for (StageReport &stage : a.stages) {
    stage.memory = memory;
    measureHeld(*partitioned, stage.stage, kvScale, stage.memory);
    stage.shares = rankShares(*partitioned, stage.stage);
    if (stage.memory.weights + stage.memory.kvCache >
        fullest->memory.weights + fullest->memory.kvCache)
      fullest = &stage;
    llvm::append_range(byWorldRank.weightBytes, stage.shares.weightBytes);
    llvm::append_range(byWorldRank.matmulElements, stage.shares.matmulElements);
    llvm::append_range(byWorldRank.expertElements, stage.shares.expertElements);
    llvm::append_range(byWorldRank.queryHeads, stage.shares.queryHeads);
  }
  a.fullestStage = fullest->stage;
  memory = fullest->memory;
  a.shares = std::move(byWorldRank);
  return success();
}

} // namespace

namespace {

/// Where the launchers put a mesh's ranks on --hosts machines (one host without): numbered
/// stage-major, spread evenly host by host, the first hosts one more where the hosts do not
/// divide them.
struct MeshLayout {
  int64_t pp, tp, hosts;
  explicit MeshLayout(const AnalyzeOptions &o)
      : pp(o.pp), tp(o.tp), hosts(std::max<int64_t>(1, o.hosts)) {}

  int64_t fullestHost() const { return (pp * tp + hosts - 1) / hosts; }
  int64_t hostOf(int64_t rank) const {
    int64_t base = pp * tp / hosts, extra = pp * tp % hosts;
    int64_t onLarger = extra * (base + 1); // the ranks of the hosts with one more
    return rank < onLarger ? rank / (base + 1) : extra + (rank - onLarger) / base;
  }
  /// The hosts a stage's tp group is on, with how many of its ranks each has.
  std::map<int64_t, int64_t> ranksByHost(int64_t stage) const {
    std::map<int64_t, int64_t> ranks;
    for (int64_t r = 0; r < tp; ++r)
      ++ranks[hostOf(stage * tp + r)];
    return ranks;
  }
  /// Whether a transfer, tp rank r of one stage to tp rank r of the other, leaves a host.
  bool acrossHosts(int64_t from, int64_t to) const {
    for (int64_t r = 0; r < tp; ++r)
      if (hostOf(from * tp + r) != hostOf(to * tp + r))
        return true;
    return false;
  }
  /// A collective's time over the hosts its stage's group spans, or a transfer's.
  double micros(const CollectiveEntry &e, const AnalyzeOptions &o) const {
    LinkModel link{hosts, o.linkGbps, o.linkLatencyUs};
    if (isTransfer(e))
      return transferMicros(e.bytes, acrossHosts(e.stage, e.peer), fullestHost(), link);
    link.hosts = int64_t(ranksByHost(e.stage).size());
    return collectiveMicros(e.kind, e.bytes, tp, link);
  }
};

/// The bytes a second one rank reads when `sharing` ranks of its host read at once: its
/// core's rate, or its share of the host's bus, whichever is lower.
double rankReadGBs(const AnalyzeOptions &o, double sharing) {
  return std::min(o.coreGBs, o.hostMemGBs / std::max(1.0, sharing));
}

/// The time of every phase's collectives on --hosts machines, and (without pipeline stages,
/// whose table says it per stage) a decode step at every host count that divides tp.
void predictHosts(Analysis &a) {
  const AnalyzeOptions &o = a.options;
  MeshLayout mesh(o);
  for (const PhaseReport &phase : a.phases) {
    std::vector<double> &micros = a.predictedMicros.emplace_back();
    for (const CollectiveEntry &e : phase.collectives)
      micros.push_back(mesh.micros(e, o));
  }
  const PhaseReport *decode = nullptr;
  for (const PhaseReport &phase : a.phases)
    if (phase.name == "decode step")
      decode = &phase;
  if (!decode || !a.stages.empty())
    return;
  for (int64_t hosts = 1; hosts <= o.tp; ++hosts) {
    if (o.tp % hosts != 0)
      continue;
    HostsRow row{hosts, o.tp / hosts, 0, 0};
    // A host's ranks read their weights at once, through its one memory bus.
    row.computeMicros = a.memory.decodeReads / (rankReadGBs(o, row.ranksPerHost) * 1e3);
    for (const CollectiveEntry &e : decode->collectives)
      row.commMicros +=
          collectiveMicros(e.kind, e.bytes, o.tp, LinkModel{hosts, o.linkGbps, o.linkLatencyUs});
    a.hostsRows.push_back(row);
  }
}

/// What one stage's ranks (or, without stages, the mesh's) hold and run: the analysis' own
/// figures, or those of the stage.
struct StageView {
  int64_t stage = 0;
  const MemoryReport *memory;
  const RankShares *shares;
  const std::vector<PhaseReport> *phases;
};

std::vector<StageView> stageViews(const Analysis &a) {
  std::vector<StageView> views;
  if (a.stages.empty())
    return {{0, &a.memory, &a.shares, &a.phases}};
  for (const StageReport &stage : a.stages)
    views.push_back({stage.stage, &stage.memory, &stage.shares, &stage.phases});
  return views;
}

/// One rank of `view`'s step of `phase` (its tokens, of its sequences at `context` tokens
/// each), as predictMesh prices it. `othersBusy`: the share of the time the other stages'
/// ranks on its hosts read too (steps in flight), whose reads share the bus with its own.
StepTime stepTime(const Analysis &a, const MeshLayout &mesh, const StageView &view,
                  const PhaseReport &phase, int64_t context, double othersBusy = 0) {
  const AnalyzeOptions &o = a.options;
  double sharing = 0;
  for (auto [host, ranks] : mesh.ranksByHost(view.stage)) {
    int64_t others = -ranks; // the mesh's ranks on the host, but the stage's own
    for (int64_t r = 0; r < mesh.pp * mesh.tp; ++r)
      others += mesh.hostOf(r) == host;
    sharing = std::max(sharing, double(ranks) + othersBusy * double(others));
  }
  StepTime t;
  // The experts the step's tokens are routed to, expected where routing is uniform: a share
  // 1 - (1 - top_k / E)^tokens of every bank.
  const MemoryReport &memory = *view.memory;
  double routed = memory.expertsRouted;
  double hit = routed > 0 ? 1 - std::pow(1 - routed, double(phase.tokens)) : 1;
  double reads = memory.decodeReads - memory.expertReads * (1 - hit) +
                 memory.kvReadBytes(context) * double(phase.sequences);
  t.reads = reads / (rankReadGBs(o, sharing) * 1e3);
  double elements = 0; // a token's multiply-adds on the rank with the most
  for (size_t r = 0; r < view.shares->matmulElements.size(); ++r) {
    double expert = view.shares->expertElements[r];
    elements = std::max(elements, view.shares->matmulElements[r] - expert * (1 - routed));
  }
  t.multiplyAdds = 2 * elements * double(phase.tokens) / (o.coreGflops * 1e3);
  for (const CollectiveEntry &e : phase.collectives) {
    if (e.kind == CollectiveKind::Send)
      t.sends += mesh.micros(e, o);
    else if (!isTransfer(e))
      t.collectives += mesh.micros(e, o);
  }
  return t;
}

/// Each stage's decode step, priced as predictMesh prices it, and the pipeline they make at
/// --concurrency C steps in flight: a step's latency L through every stage and its sends; a
/// cycle, in which each stage does one step, as long as the slowest stage's or L / C,
/// whichever is longer; each stage's busy share of it; and the bubble, the share of the
/// mesh's time idle.
void predictPipeline(Analysis &a) {
  const AnalyzeOptions &o = a.options;
  MeshLayout mesh(o);
  int64_t context = a.phases.front().tokens; // a decode step right after the prefill
  double work = 0, slowest = 0, latency = 0;
  for (StageReport &stage : a.stages) {
    for (auto [host, ranks] : mesh.ranksByHost(stage.stage))
      stage.hosts.push_back(host);
    StepTime t = stepTime(a, mesh, {stage.stage, &stage.memory, &stage.shares, &stage.phases},
                          stage.phases[1], context); // the decode step's
    stage.readMicros = t.reads;
    stage.multiplyAddMicros = t.multiplyAdds;
    stage.collectiveMicros = t.collectives;
    stage.sendMicros = t.sends;
    for (const CollectiveEntry &e : stage.phases[1].collectives)
      if (e.kind == CollectiveKind::Send)
        stage.sendsAcrossHosts = stage.sendsAcrossHosts || mesh.acrossHosts(e.stage, e.peer);
    double busy = t.reads + t.multiplyAdds + t.collectives;
    work += busy;
    slowest = std::max(slowest, busy);
    latency += busy + stage.sendMicros;
  }
  PipelineReport &pipeline = a.pipeline;
  // The runtime keeps a step in every stage where it can and sequences allow, each step of
  // ceil(C / P) of the --concurrency sequences, each in one step at a time (Engine).
  int64_t perStep = sequencesPerStep(o);
  pipeline.inFlight = target::findTarget(o.target)->pipelinesStages()
                          ? std::min<int64_t>(int64_t(a.stages.size()),
                                              (o.concurrency + perStep - 1) / perStep)
                          : 1;
  pipeline.stepMicros = latency;
  pipeline.cycleMicros = std::max(slowest, latency / double(pipeline.inFlight));
  for (const StageReport &stage : a.stages)
    pipeline.busy.push_back(
        (stage.readMicros + stage.multiplyAddMicros + stage.collectiveMicros) /
        pipeline.cycleMicros);
  pipeline.bubble = 1 - work / (double(a.stages.size()) * pipeline.cycleMicros);
}

} // namespace

FailureOr<Analysis> analyze(ModuleOp module, const AnalyzeOptions &o, std::string &error) {
  Analysis a;
  a.options = o;
  int64_t maxSeqLen = contextOf(module, o, a);
  FailureOr<int64_t> prefillLen = prefillLength(o, maxSeqLen, a.maxSeqLenWhy, error);
  if (failed(prefillLen))
    return failure();
  MemoryReport &memory = a.memory;
  memory.maxSeqLen = maxSeqLen;
  if (failed(plan::applyPlan(module, {o.plan, o.strategies, o.tp, o.pp})) ||
      failed(assignStages(module, o.ppSplit)))
    return failure();

  // The program the binary is built from, for this target: its forwards' collectives,
  // priced as the runtime's collective layer runs them, and the arena it allocates.
  ProgramOptions program;
  program.sequenceParallel = o.sequenceParallel;
  program.fold = !o.noFold;
  program.weights = o.weights;
  program.target = target::findTarget(o.target)->describe(module.getContext());
  OwningOpRef<ModuleOp> decided = buildProgram(module, program);
  if (!decided)
    return failure();
  bool sequenceParallel = wantsSequenceParallel(module, o.sequenceParallel);
  bool prefillSplits = splitsTokens(*decided, *prefillLen);
  sequenceParallelNotes(*decided, o, *prefillLen, sequenceParallel, prefillSplits, a.notes);
  a.phases = phasesOf(module, *decided, o, *prefillLen, prefillSplits);
  a.stages = stagesOf(module, *decided, o, a.phases);
  decodeLogitsNote(*decided, o, a.notes);
  cachedPrefixNote(*decided, o, a.phases, a.notes);
  pipelineNote(a.phases, o, a.notes);
  int64_t elementBytes = tp::getTarget(*decided).activationBytes();
  replicatedEmbeddingNote(module, o.tp, elementBytes, a.notes);
  memory.arenaElementsPerToken = arenaElementsPerToken(*decided);
  memory.arena =
      double(memory.arenaElementsPerToken) * double(maxSeqLen) * double(elementBytes);
  if (failed(measurePrefill(module, *decided, program.target, o, sequenceParallel,
                            prefillSplits, a)))
    return failure();
  if (o.hosts > 0)
    predictHosts(a);
  if (!a.stages.empty())
    predictPipeline(a);
  return a;
}

int64_t sequencesPerStep(const AnalyzeOptions &o) {
  const target::TargetInfo *target = target::findTarget(o.target);
  int64_t stages = std::max<int64_t>(1, o.pp);
  int64_t perStep =
      target->pipelinesStages() ? (o.concurrency + stages - 1) / stages : o.concurrency;
  if (int64_t most = target->stepSequences(); most > 0)
    perStep = std::min(perStep, most);
  return perStep;
}

MeshPrediction predictMesh(const Analysis &a) {
  const AnalyzeOptions &o = a.options;
  MeshLayout mesh(o);
  MeshPrediction p;
  // The KV cache of --concurrency sequences of --max-model-len tokens (what --max-num-seqs C
  // allocates by default), sized by the stage that holds the most a sequence (its layers
  // that read a window or chunks keep only those blocks).
  double kvPerSequence = a.memory.kvCachePerSequence;
  for (const StageReport &stage : a.stages)
    kvPerSequence = std::max(kvPerSequence, stage.memory.kvCachePerSequence);
  p.memoryPerRank = a.memory.weights + a.memory.arena + kvPerSequence * double(o.concurrency);
  p.stepSequences = sequencesPerStep(o);
  int64_t steps = (o.concurrency + p.stepSequences - 1) / p.stepSequences; // a round's
  int64_t stages = int64_t(std::max<size_t>(1, a.stages.size()));
  p.inFlight = target::findTarget(o.target)->pipelinesStages() ? std::min(stages, steps) : 1;
  assert(a.phases.size() == 3 && a.phases[2].sequences == p.stepSequences &&
         a.phases[2].tokens == p.stepSequences && "analyze with sequencesPerStep's step");
  int64_t context = a.phases.front().tokens;
  // With steps in flight, the other stages read while a stage does, p.inFlight of them at
  // once on average.
  double othersBusy =
      stages > 1 ? double(p.inFlight - 1) / double(stages - 1) : 0;
  double latency = 0, slowest = -1;
  for (const StageView &view : stageViews(a)) {
    const std::vector<PhaseReport> &phases = *view.phases;
    p.prefillMicros += stepTime(a, mesh, view, phases[0], 0).total();
    p.decodeMicros += stepTime(a, mesh, view, phases[1], context).total();
    // A stage's ranks send what they computed before they take the next step.
    StepTime step = stepTime(a, mesh, view, phases[2], context, othersBusy);
    latency += step.total();
    if (step.total() > slowest) {
      slowest = step.total();
      p.slowestStage = view.stage;
      p.slowest = step;
    }
  }
  // Every sequence a token: the steps go through the stages p.inFlight at a time, and each
  // stage does every one of them.
  p.roundMicros = std::max(latency * double((steps + p.inFlight - 1) / p.inFlight),
                           double(steps) * slowest);
  p.tokensPerSecond = double(o.concurrency) * 1e6 / p.roundMicros;
  return p;
}

namespace {

double weightsRatio(const MemoryReport &memory) {
  return memory.unshardedWeights ? memory.weights / memory.unshardedWeights : 0;
}

/// `staged`: a mesh with pipeline stages, whose list says each entry's stage.
nlohmann::ordered_json phaseJson(const PhaseReport &phase, bool staged) {
  nlohmann::ordered_json p;
  p["tokens"] = phase.tokens;
  if (phase.name == "step")
    p["sequences"] = phase.sequences;
  if (phase.cachedTokens > 0)
    p["cached_tokens"] = phase.cachedTokens;
  p["sequence_parallel"] = phase.sequenceParallel;
  p["collectives"] = toJson(phase.collectives, staged);
  p["total"] = summaryJson(phase.collectives);
  if (!phase.transformersFails.empty())
    p["transformers"] = {{"fails", phase.transformersFails}};
  else
    p["transformers"] = {{"collectives", toJson(phase.transformers)},
                         {"total", summaryJson(phase.transformers)}};
  return p;
}

/// A stage's part of a phase: what one of its ranks runs.
nlohmann::ordered_json stagePhaseJson(const PhaseReport &phase) {
  nlohmann::ordered_json p;
  p["tokens"] = phase.tokens;
  if (phase.name == "step")
    p["sequences"] = phase.sequences;
  p["collectives"] = toJson(phase.collectives);
  p["total"] = summaryJson(phase.collectives);
  return p;
}

/// What a rank sends to other stages in `phase`.
double sentToStages(const PhaseReport &phase) {
  double bytes = 0;
  for (const CollectiveEntry &e : phase.collectives)
    if (e.kind == CollectiveKind::Send)
      bytes += e.bytes;
  return bytes;
}

std::string jsonPhaseName(const PhaseReport &phase) {
  return phase.name == "decode step"  ? "decode"
         : phase.name == kCachedPrefill ? "cached_prefill"
                                        : phase.name;
}

nlohmann::ordered_json imbalanceJson(const RankShares &shares) {
  nlohmann::ordered_json imbalanceJson;
  for (const Share &share : sharesOf(shares)) {
    double total = 0;
    for (double v : share.perRank)
      total += v;
    imbalanceJson[share.name] = {
        {"by_rank", share.perRank},
        {"largest", *std::max_element(share.perRank.begin(), share.perRank.end())},
        {"even_share", total / double(share.perRank.size())},
        {"ratio", imbalance(share.perRank)}};
  }
  return imbalanceJson;
}

nlohmann::ordered_json kvGroupsJson(const MemoryReport &memory) {
  nlohmann::ordered_json groups = nlohmann::ordered_json::array();
  for (const MemoryReport::KvGroup &group : memory.kvGroups)
    groups.push_back({{"reads", group.reads},
                      {"layers", group.layers},
                      {"bytes_per_token", group.bytesPerToken},
                      {"blocks_per_sequence", group.blocksPerSequence}});
  return groups;
}

nlohmann::ordered_json memoryJson(const Analysis &a) {
  const MemoryReport &memory = a.memory;
  return {{"weights_bytes", memory.weights},
          {"weights_bytes_by_rank", a.shares.weightBytes},
          {"unsharded_weights_bytes", memory.unshardedWeights},
          {"weights_held_as", memory.heldTypes},
          {"decode_step_weight_bytes_read", memory.decodeReads},
          {"decode_step_expert_bytes_held", memory.expertReads},
          {"experts_routed_share", memory.expertsRouted},
          {"weights_ratio", weightsRatio(memory)},
          {"kv_cache_bytes", memory.kvCache},
          {"kv_cache_bytes_per_token", memory.kvCachePerToken},
          {"kv_block_size", memory.kvBlockSize},
          {"kv_groups", kvGroupsJson(memory)},
          {"kv_sequences_per_gib", memory.kvSequencesPerGiB},
          {"kv_sequences_per_gib_every_key", memory.kvSequencesPerGiBWhole},
          {"mla_latent_cache_bytes", memory.mlaLatentCache},
          {"max_seq_len", memory.maxSeqLen},
          {"max_seq_len_from", a.maxSeqLenFrom},
          {"max_position_embeddings",
           a.positions ? nlohmann::ordered_json(a.positions) : nlohmann::ordered_json()},
          {"target", a.options.target},
          {"activation_arena_bytes", memory.arena},
          {"arena_elements_per_token", memory.arenaElementsPerToken}};
}

/// Each pipeline stage: its ranks and layers, what one of its ranks runs, holds and sends,
/// and its decode step's predicted time.
nlohmann::ordered_json stagesJson(const Analysis &a) {
  nlohmann::ordered_json list = nlohmann::ordered_json::array();
  for (const StageReport &stage : a.stages) {
    const MemoryReport &memory = stage.memory;
    nlohmann::ordered_json j;
    j["stage"] = stage.stage;
    j["ranks"] = stage.ranks;
    j["layers"] = {stage.firstLayer, stage.lastLayer};
    if (a.options.hosts > 0)
      j["hosts"] = stage.hosts;
    nlohmann::ordered_json sent;
    for (const PhaseReport &phase : stage.phases) {
      j[jsonPhaseName(phase)] = stagePhaseJson(phase);
      sent[jsonPhaseName(phase)] = sentToStages(phase);
    }
    j["memory_per_rank"] = {{"weights_bytes", memory.weights},
                            {"weights_bytes_by_rank", stage.shares.weightBytes},
                            {"weights_held_as", memory.heldTypes},
                            {"decode_step_weight_bytes_read", memory.decodeReads},
                            {"kv_cache_bytes", memory.kvCache},
                            {"kv_cache_bytes_per_token", memory.kvCachePerToken},
                            {"mla_latent_cache_bytes", memory.mlaLatentCache},
                            {"activation_arena_bytes", memory.arena}};
    j["imbalance"] = imbalanceJson(stage.shares);
    j["matmul_elements_per_token"] = *std::max_element(stage.shares.matmulElements.begin(),
                                                       stage.shares.matmulElements.end());
    j["sent_bytes"] = sent;
    j["predicted_decode_us"] = {
        {"reads", stage.readMicros},
        {"multiply_adds", stage.multiplyAddMicros},
        {"collectives", stage.collectiveMicros},
        {"total", stage.readMicros + stage.multiplyAddMicros + stage.collectiveMicros},
        {"sends", stage.sendMicros}};
    if (a.options.hosts > 0)
      j["sends_across_hosts"] = stage.sendsAcrossHosts;
    list.push_back(j);
  }
  return list;
}

void renderJson(const Analysis &a, llvm::raw_ostream &os) {
  const AnalyzeOptions &o = a.options;
  nlohmann::ordered_json j;
  j["model"] = o.model;
  j["plan"] = o.plan;
  j["tp"] = o.tp;
  if (!a.stages.empty())
    j["pp"] = o.pp;
  j["bytes"] = "tpc: what goes on the wire, the larger of one rank's buffers of the "
               "communicator call (padding included) in the target's element type; "
               "transformers: the module output's full tensor; sent_bytes_per_rank by "
               "ring algorithms: all_reduce 2(n-1)/n of it, the others (n-1)/n";
  j["transformers_formula"] = "one collective per module whose strategy's forward hook "
                              "communicates, on the module output, before any folding; "
                              "lm_head on the last token (generate's logits_to_keep=1)";
  for (size_t i = 0; i < a.phases.size(); ++i) {
    const PhaseReport &phase = a.phases[i];
    nlohmann::ordered_json p = phaseJson(phase, !a.stages.empty());
    if (i < a.predictedMicros.size()) {
      double total = 0;
      for (size_t c = 0; c < a.predictedMicros[i].size(); ++c) {
        p["collectives"][c]["predicted_us"] = a.predictedMicros[i][c];
        total += a.predictedMicros[i][c];
      }
      p["predicted_us"] = total;
    }
    j[jsonPhaseName(phase)] = p;
  }
  if (o.hosts > 0) {
    j["link"] = {{"hosts", o.hosts}, {"gbps", o.linkGbps}, {"latency_us", o.linkLatencyUs},
                 {"host_memory_gbs", o.hostMemGBs}};
    nlohmann::ordered_json rows = nlohmann::ordered_json::array();
    for (const HostsRow &row : a.hostsRows)
      rows.push_back({{"hosts", row.hosts},
                      {"ranks_per_host", row.ranksPerHost},
                      {"weights_us", row.computeMicros},
                      {"collectives_us", row.commMicros}});
    j["decode_by_hosts"] = rows;
  }
  j["imbalance"] = imbalanceJson(a.shares);
  j["memory_per_rank"] = memoryJson(a);
  if (!a.stages.empty()) {
    j["memory_per_rank"]["stage"] = a.fullestStage;
    j["stages"] = stagesJson(a);
    const PipelineReport &pipeline = a.pipeline;
    j["pipeline"] = {{"concurrency", o.concurrency},
                     {"steps_in_flight", pipeline.inFlight},
                     {"step_us", pipeline.stepMicros},
                     {"cycle_us", pipeline.cycleMicros},
                     {"busy", pipeline.busy},
                     {"bubble", pipeline.bubble}};
  }
  j["notes"] = a.notes;
  os << j.dump(2) << "\n";
}

void printMemory(const Analysis &a, llvm::raw_ostream &os) {
  const MemoryReport &memory = a.memory;
  os << (a.stages.empty() ? std::string("\nmemory per rank:\n")
                          : fmt::format("\nmemory per rank (stage {}'s, which holds the most):\n",
                                        a.fullestStage));
  os << fmt::format("  weights             {:>14.0f} bytes ({:.1f}% of the unsharded "
                    "{:.0f})\n",
                    memory.weights, 100 * weightsRatio(memory), memory.unshardedWeights);
  os << fmt::format("                      held as {}; a decode step reads {:.0f} bytes of "
                    "them (the largest rank's)\n",
                    memory.heldTypes, memory.decodeReads);
  os << fmt::format("  KV cache            {:>14.0f} bytes at {} tokens ({})\n",
                    memory.kvCache, memory.maxSeqLen, a.maxSeqLenWhy);
  if (memory.mlaLatentCache > 0)
    os << fmt::format(
        "                      (MLA: keys and values of this rank's heads, where the latent "
        "and rope key transformers caches would take {:.0f} bytes on every rank; cached "
        "per head, a decode step puts only its own token through kv_b_proj, not the "
        "whole context)\n",
        memory.mlaLatentCache);
  os << fmt::format("                      {:.0f} bytes a token: its keys and values in every "
                    "attention layer, this rank's heads\n",
                    memory.kvCachePerToken);
  if (memory.kvBlockSize > 0 && memory.kvCachePerToken > 0) {
    // --requests' cache is --kv-cache-tokens; a budget of bytes is this many tokens.
    double block = memory.kvCachePerToken * double(memory.kvBlockSize);
    os << fmt::format("                      paged in blocks of {} tokens ({:.0f} bytes); 1 GiB "
                      "holds {:.0f} blocks, {:.0f} tokens (--kv-cache-tokens)\n",
                      memory.kvBlockSize, block, std::floor(double(1 << 30) / block),
                      std::floor(double(1 << 30) / block) * double(memory.kvBlockSize));
  }
  if (memory.kvGroups.size() > 1) { // some layers keep only the blocks they read
    os << "                      by the keys its layers read (the others' blocks given back):\n";
    for (const MemoryReport::KvGroup &group : memory.kvGroups)
      os << fmt::format("                        {}: {} layers, {:.0f} bytes a token, at most "
                        "{} blocks a sequence\n",
                        group.reads, group.layers, group.bytesPerToken,
                        group.blocksPerSequence);
    os << fmt::format("                      1 GiB holds {:.0f} sequences of {} tokens ({:.0f} "
                      "were every layer to keep every key)\n",
                      memory.kvSequencesPerGiB, memory.maxSeqLen,
                      memory.kvSequencesPerGiBWhole);
  }
  os << fmt::format("  activation arena    {:>14.0f} bytes ({} elements per token x {} "
                    "tokens, --target {}: what the binary allocates)\n",
                    memory.arena, memory.arenaElementsPerToken, memory.maxSeqLen,
                    a.options.target);
}

/// Where tp (or, over `stages` > 1, the pipeline's stages) splits something unevenly, the
/// largest rank sets the pace.
void printImbalance(const RankShares &shares, int64_t stages, llvm::raw_ostream &os) {
  std::string uneven;
  auto number = [](double v) { // whole where it is large, a few digits where it is small
    return v >= 100 ? fmt::format("{:.0f}", v) : fmt::format("{:.4g}", v);
  };
  for (const Share &share : sharesOf(shares)) {
    double ratio = imbalance(share.perRank);
    double largest = *std::max_element(share.perRank.begin(), share.perRank.end());
    if (ratio > 1 + 1e-9)
      uneven += fmt::format("  {:<22} largest rank {}, even share {} (+{:.1f}%)\n",
                            share.what, number(largest), number(largest / ratio),
                            100 * (ratio - 1));
  }
  std::string what = stages > 1 ? fmt::format(" across the {} ranks of the stages",
                                               shares.weightBytes.size())
                                 : "";
  os << (uneven.empty() ? "\nimbalance: none, every rank holds and computes an even share\n"
                        : "\nimbalance" + what + " (split unevenly; padding left out):\n" + uneven);
}

/// A decode step at each host count that divides tp, and where adding a host stops paying.
void printHosts(const Analysis &a, llvm::raw_ostream &os) {
  if (a.hostsRows.empty())
    return;
  const AnalyzeOptions &o = a.options;
  os << fmt::format("\ndecode step by hosts (each host's ranks share {:g} GB/s of memory for "
                    "their {:.0f} bytes of weight reads; the link as above):\n",
                    o.hostMemGBs, a.memory.decodeReads);
  os << fmt::format("  {:>5}  {:>10}  {:>11}  {:>15}  {:>8}\n", "hosts", "ranks/host",
                    "weights ms", "collectives ms", "step ms");
  const HostsRow *best = &a.hostsRows.front();
  for (const HostsRow &row : a.hostsRows) {
    double step = row.computeMicros + row.commMicros;
    os << fmt::format("  {:>5}  {:>10}  {:>11.3f}  {:>15.3f}  {:>8.3f}\n", row.hosts,
                      row.ranksPerHost, row.computeMicros / 1e3, row.commMicros / 1e3,
                      step / 1e3);
    if (step < best->computeMicros + best->commMicros)
      best = &row;
  }
  const HostsRow &last = a.hostsRows.back();
  if (best == &last)
    os << fmt::format("  every host added pays, up to {} (one rank a host)\n", last.hosts);
  else
    os << fmt::format("  adding hosts pays up to {}; beyond, the link costs more than the "
                      "memory bandwidth the hosts add\n",
                      best->hosts);
}

/// "3" for one, "0-3" for a run.
std::string range(int64_t first, int64_t last) {
  return first == last ? std::to_string(first) : fmt::format("{}-{}", first, last);
}

/// Each stage's ranks, layers, weights, KV cache and work per rank, what it sends a decode
/// step, and the step's predicted time; then the bubble at --concurrency.
void printPipeline(const Analysis &a, llvm::raw_ostream &os) {
  if (a.stages.empty())
    return;
  const AnalyzeOptions &o = a.options;
  bool hosts = o.hosts > 0;
  os << fmt::format("\npipeline (pp {} x tp {}, {} ranks; a decode step at {} tokens of "
                    "context):\n",
                    o.pp, o.tp, o.pp * o.tp, a.phases.front().tokens);
  os << fmt::format("  {:>5}  {:<7}  {:<7}  {:>14}  {:>14}  {:>12}  {:>10}  {:>9}  {:>7}{}\n",
                    "stage", "ranks", "layers", "weights/rank", "KV bytes/token", "MACs/token",
                    "sent/step", "decode ms", "send ms", hosts ? "  hosts" : "");
  for (const StageReport &stage : a.stages) {
    std::string onHosts;
    for (int64_t host : stage.hosts)
      onHosts += (onHosts.empty() ? "" : ",") + std::to_string(host);
    os << fmt::format(
        "  {:>5}  {:<7}  {:<7}  {:>14.0f}  {:>14.0f}  {:>12.0f}  {:>10.0f}  {:>9.3f}  {:>7.3f}{}\n",
        stage.stage, range(stage.ranks.front(), stage.ranks.back()),
        range(stage.firstLayer, stage.lastLayer), stage.memory.weights,
        stage.memory.kvCachePerToken,
        *std::max_element(stage.shares.matmulElements.begin(),
                          stage.shares.matmulElements.end()),
        sentToStages(stage.phases[1]),
        (stage.readMicros + stage.multiplyAddMicros + stage.collectiveMicros) / 1e3,
        stage.sendMicros / 1e3, hosts ? "  " + onHosts : "");
  }
  if (hosts) {
    std::string across;
    for (const StageReport &stage : a.stages)
      if (stage.sendsAcrossHosts)
        across += (across.empty() ? "" : ", ") + std::to_string(stage.stage);
    os << (across.empty() ? std::string("  no stage sends across hosts\n")
                          : "  stages whose sends leave their host: " + across + "\n");
  }
  const PipelineReport &pipeline = a.pipeline;
  std::string busy;
  for (double b : pipeline.busy)
    busy += fmt::format("{}{:.1f}%", busy.empty() ? "" : ", ", 100 * b);
  os << fmt::format("  a decode step through every stage and its sends takes {:.3f} ms; with {} "
                    "step{} in flight, a stage does one every {:.3f} ms\n",
                    pipeline.stepMicros / 1e3, pipeline.inFlight,
                    pipeline.inFlight == 1 ? "" : "s", pipeline.cycleMicros / 1e3);
  std::string why =
      pipeline.inFlight == int64_t(a.stages.size())
          ? "a step in every stage, each of about 1/" + std::to_string(a.stages.size()) +
                " of the sequences"
      : target::findTarget(o.target)->pipelinesStages()
          ? "fewer sequences than stages: a sequence is in one step at a time"
          : "the " + o.target + " runtime runs one step at a time through the stages";
  os << fmt::format("  bubble at concurrency {}: {:.1f}% (each stage busy {}): {}\n", o.concurrency,
                    100 * pipeline.bubble, busy, why);
}

void renderText(const Analysis &a, llvm::raw_ostream &os) {
  const AnalyzeOptions &o = a.options;
  os << fmt::format("tpc analyze: {} with plan {} at {}tp {}\n", o.model, o.plan,
                    a.stages.empty() ? "" : fmt::format("pp {} x ", o.pp), o.tp);
  os << "bytes: tpc's on the wire (one rank's larger buffer of each call); transformers: "
        "one collective per module whose strategy hook communicates, on its full output, "
        "before folding\n";
  int64_t fullestHost = o.hosts > 0 ? (o.tp * o.pp + o.hosts - 1) / o.hosts : 0;
  if (o.hosts > 0)
    os << fmt::format("predicted on {} host{} of {} rank{} (the fullest), linked at {:g} Gbit/s "
                      "with {:g} us latency (docs/multi-host.md)\n",
                      o.hosts, o.hosts == 1 ? "" : "s", fullestHost, fullestHost == 1 ? "" : "s",
                      o.linkGbps, o.linkLatencyUs);
  for (size_t i = 0; i < a.phases.size(); ++i)
    printPhase(a.phases[i], i < a.predictedMicros.size() ? a.predictedMicros[i]
                                                         : std::vector<double>{},
               os);
  printHosts(a, os);
  printPipeline(a, os);
  printMemory(a, os);
  printImbalance(a.shares, int64_t(a.stages.size()), os);
  for (const std::string &note : a.notes)
    os << "note: " << note << "\n";
}

} // namespace

void printJson(const Analysis &analysis, llvm::raw_ostream &os) { renderJson(analysis, os); }
void printText(const Analysis &analysis, llvm::raw_ostream &os) { renderText(analysis, os); }

} // namespace tpc::analysis
