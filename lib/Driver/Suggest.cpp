// tpc suggest (include/tpc/Driver/Suggest.h): every mesh and plan of the given ranks, each
// analyzed as tpc analyze analyzes it (so only what compiles and checks is ranked), priced by
// analysis::predictMesh, and ranked.
#include "tpc/Driver/Suggest.h"

#include "tpc/Driver/Run.h"
#include "tpc/Driver/Session.h"
#include "tpc/Import/Importer.h"
#include "tpc/Dialect/TP/TPDialect.h"

#include "mlir/IR/Diagnostics.h"
#include "llvm/ADT/StringExtras.h"
#include "llvm/ADT/StringRef.h"

#include <fmt/core.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <cmath>

namespace tpc::driver {

std::string Candidate::mesh() const {
  return pp > 1 ? fmt::format("pp {} x tp {}", pp, tp) : fmt::format("tp {}", tp);
}

std::optional<double> parseBytes(const std::string &text, std::string &error) {
  llvm::StringRef s = llvm::StringRef(text).trim();
  // The longest suffix first: "GiB" before "B".
  static const std::pair<const char *, double> units[] = {
      {"KiB", 1024.0},  {"MiB", 1048576.0}, {"GiB", 1073741824.0}, {"TiB", 1099511627776.0},
      {"KB", 1e3},      {"MB", 1e6},        {"GB", 1e9},           {"TB", 1e12},
      {"K", 1e3},       {"M", 1e6},         {"G", 1e9},            {"T", 1e12},
      {"B", 1}};
  double scale = 1;
  for (auto [suffix, factor] : units)
    if (s.ends_with_insensitive(suffix)) {
      s = s.drop_back(llvm::StringRef(suffix).size()).rtrim();
      scale = factor;
      break;
    }
  double value = 0;
  if (s.empty() || s.getAsDouble(value) || !std::isfinite(value) || !(value > 0) ||
      !std::isfinite(value * scale)) {
    error = fmt::format("--memory-per-rank '{}' is not a positive number of bytes (as 16GiB, "
                        "512MB or 1e9)",
                        text);
    return std::nullopt;
  }
  return value * scale;
}

namespace {

/// "1.23 GB", for a person.
std::string bytesText(double bytes) {
  if (bytes >= 1e9)
    return fmt::format("{:.2f} GB", bytes / 1e9);
  if (bytes >= 1e6)
    return fmt::format("{:.1f} MB", bytes / 1e6);
  return fmt::format("{:.1f} KB", bytes / 1e3);
}

/// The usage errors of `args`, reported; true where there are none.
bool checkArgs(const SuggestArgs &args, double &memoryLimit) {
  const analysis::AnalyzeOptions &m = args.machine;
  auto fail = [](const std::string &message) {
    reportError(message);
    return false;
  };
  // A bound, so that a huge --ranks is refused rather than enumerated.
  constexpr int64_t kMaxRanks = 4096;
  if (args.ranks < 1 || args.ranks > kMaxRanks)
    return fail(fmt::format("--ranks must be from 1 to {}, got {}", kMaxRanks, args.ranks));
  int64_t hosts = std::max<int64_t>(1, m.hosts);
  if (m.hosts < 0 || hosts > args.ranks || args.ranks % hosts != 0)
    return fail(fmt::format("--hosts must divide --ranks {} (the same ranks on every host), "
                            "got {}",
                            args.ranks, m.hosts));
  if (m.concurrency < 1 || m.concurrency > 1 << 20)
    return fail(fmt::format("--concurrency must be from 1 to {}, got {}", 1 << 20,
                            m.concurrency));
  if (m.prefillLen < 1 || m.maxSeqLen < 1)
    return fail("--prefill-len and --max-model-len must be at least 1");
  for (auto [name, value] :
       {std::pair{"--link-gbps", m.linkGbps}, {"--host-mem-gbs", m.hostMemGBs},
        {"--core-gbs", m.coreGBs}, {"--core-gflops", m.coreGflops}})
    if (!(value > 0) || !std::isfinite(value))
      return fail(fmt::format("{} must be a positive number, got {}", name, value));
  if (!(m.linkLatencyUs >= 0) || !std::isfinite(m.linkLatencyUs))
    return fail(fmt::format("--link-latency-us must be at least 0, got {}", m.linkLatencyUs));
  memoryLimit = 0;
  if (!args.memoryPerRank.empty()) {
    std::string error;
    std::optional<double> bytes = parseBytes(args.memoryPerRank, error);
    if (!bytes)
      return fail(error);
    memoryLimit = *bytes;
  }
  return true;
}

/// The model of `path`: a model file, or a checkpoint (a directory, its config.json, or a
/// GGUF file) imported as tpc run imports it.
mlir::OwningOpRef<mlir::ModuleOp> loadModel(Session &session, const std::string &path) {
  if (llvm::StringRef(path).ends_with(".mlir"))
    return session.loadModel(path);
  if (!checkpointExists("tpc suggest", path))
    return nullptr;
  std::optional<CheckpointConfig> config = readCheckpointConfig(path);
  if (!config)
    return nullptr;
  mlir::FailureOr<std::string> text =
      import::importConfigText(config->name, config->text, &session.context(), &config->stored);
  if (mlir::failed(text))
    return nullptr;
  return session.loadModelText(path + " (imported)", *text);
}

bool hasExperts(mlir::ModuleOp module) {
  bool found = false;
  module.walk([&](tp::ExpertsOp) {
    found = true;
    return mlir::WalkResult::interrupt();
  });
  return found;
}

/// Analyzes one candidate on a copy of `module`; what the compiler says against it is kept
/// in `c.refused` (its first error), not printed.
void analyzeCandidate(mlir::ModuleOp module, const SuggestArgs &args, int64_t ranksPerHost,
                      Candidate &c) {
  analysis::AnalyzeOptions o = args.machine;
  o.model = args.model;
  o.plan = c.plan;
  o.strategies = args.strategies;
  o.tp = c.tp;
  o.pp = c.pp;
  c.hosts = (c.pp * c.tp + ranksPerHost - 1) / ranksPerHost;
  o.hosts = c.hosts;
  o.stepTokens = o.stepSequences = analysis::sequencesPerStep(o);

  std::string firstError;
  mlir::ScopedDiagnosticHandler capture(module.getContext(), [&](mlir::Diagnostic &diag) {
    if (diag.getSeverity() == mlir::DiagnosticSeverity::Error && firstError.empty())
      firstError = diag.str();
    return mlir::success();
  });
  mlir::OwningOpRef<mlir::ModuleOp> copy = module.clone();
  std::string usage;
  mlir::FailureOr<analysis::Analysis> report = analysis::analyze(*copy, o, usage);
  if (mlir::failed(report)) {
    c.refused = !usage.empty() ? usage : !firstError.empty() ? firstError : "the compiler refused it";
    return;
  }
  c.predicted = analysis::predictMesh(*report);
}

/// Why the first of `ranked` is first, against the second, with its slowest stage's step by
/// its parts.
std::string whyBest(const std::vector<Candidate> &ranked, int64_t concurrency) {
  const Candidate &best = ranked.front();
  const analysis::MeshPrediction &p = best.predicted;
  std::string why;
  bool throughput = concurrency > 1;
  if (ranked.size() == 1)
    why = fmt::format("{} is the only mesh that compiles and fits", best.mesh());
  else {
    const Candidate &next = ranked[1];
    why = throughput
              ? fmt::format("{} ({}) gives {:.1f} output tokens/s at concurrency {}, {:.2f}x "
                            "the next, {} ({}), at {:.1f}",
                            best.mesh(), best.plan, p.tokensPerSecond, concurrency,
                            p.tokensPerSecond / next.predicted.tokensPerSecond, next.mesh(),
                            next.plan, next.predicted.tokensPerSecond)
              : fmt::format("{} ({}) takes {:.2f} ms a decode step, {:.2f}x the next's, {} "
                            "({}), at {:.2f} ms",
                            best.mesh(), best.plan, p.decodeMicros / 1e3,
                            p.decodeMicros / next.predicted.decodeMicros, next.mesh(), next.plan,
                            next.predicted.decodeMicros / 1e3);
  }
  const analysis::StepTime &t = p.slowest;
  why += fmt::format(
      "; its slowest stage{} takes {:.2f} ms a step of {} sequence{}: weight and KV reads "
      "{:.2f} ms, multiply-adds {:.2f} ms, collectives {:.2f} ms, sends {:.2f} ms",
      best.pp > 1 ? fmt::format(" ({})", p.slowestStage) : "", t.total() / 1e3,
      p.stepSequences, p.stepSequences == 1 ? "" : "s", t.reads / 1e3, t.multiplyAdds / 1e3,
      t.collectives / 1e3, t.sends / 1e3);
  if (best.pp > 1)
    why += fmt::format(", with {} step{} in flight", p.inFlight, p.inFlight == 1 ? "" : "s");
  return why;
}

} // namespace

std::optional<Suggestion> suggest(const SuggestArgs &args) {
  Suggestion s;
  s.args = args;
  if (!checkArgs(args, s.memoryLimit))
    return std::nullopt;
  s.ranksPerHost = args.ranks / std::max<int64_t>(1, args.machine.hosts);
  Session session(/*quiet=*/true);
  mlir::OwningOpRef<mlir::ModuleOp> module = loadModel(session, args.model);
  if (!module)
    return std::nullopt;
  std::vector<std::string> plans;
  if (!args.plan.empty())
    plans = {args.plan};
  else if (hasExperts(*module))
    plans = {"auto", "auto-ep"};
  else
    plans = {"auto"};

  // Meshes of every divisor of --ranks: fewer ranks can be faster where the link is slow.
  for (int64_t used = 1; used <= args.ranks; ++used) {
    if (args.ranks % used != 0)
      continue;
    for (int64_t pp = 1; pp <= used; ++pp) {
      if (used % pp != 0)
        continue;
      for (const std::string &plan : plans) {
        Candidate c;
        c.pp = pp;
        c.tp = used / pp;
        c.plan = plan;
        // Expert parallelism is a plan for several ranks; on one it is the tp plan's mesh.
        if (plan == "auto-ep" && args.plan.empty() && c.tp == 1)
          continue;
        analyzeCandidate(*module, args, s.ranksPerHost, c);
        if (c.refused.empty() && s.memoryLimit > 0 && c.predicted.memoryPerRank > s.memoryLimit)
          c.refused = fmt::format("needs {} a rank (weights, KV cache and activations), more "
                                  "than --memory-per-rank {}",
                                  bytesText(c.predicted.memoryPerRank),
                                  bytesText(s.memoryLimit));
        (c.refused.empty() ? s.ranked : s.refused).push_back(std::move(c));
      }
    }
  }
  bool throughput = args.machine.concurrency > 1;
  // The better first; between equals, the fewer ranks, then the fewer stages.
  std::stable_sort(s.ranked.begin(), s.ranked.end(), [&](const Candidate &a, const Candidate &b) {
    double x = throughput ? -a.predicted.tokensPerSecond : a.predicted.decodeMicros;
    double y = throughput ? -b.predicted.tokensPerSecond : b.predicted.decodeMicros;
    if (x != y)
      return x < y;
    if (a.pp * a.tp != b.pp * b.tp)
      return a.pp * a.tp < b.pp * b.tp;
    return a.pp < b.pp;
  });
  for (size_t i = 0; i < s.ranked.size(); ++i)
    s.ranked[i].rank = int64_t(i) + 1;
  if (!s.ranked.empty())
    s.why = whyBest(s.ranked, args.machine.concurrency);
  return s;
}

namespace {

std::string linkText(const SuggestArgs &args) {
  const analysis::AnalyzeOptions &m = args.machine;
  if (m.hosts <= 1)
    return "one host";
  return fmt::format("{} hosts of {} ranks, a {:g} Gbit/s link of {:g} us", m.hosts,
                     args.ranks / m.hosts, m.linkGbps, m.linkLatencyUs);
}

} // namespace

void printText(const Suggestion &s, llvm::raw_ostream &os) {
  const analysis::AnalyzeOptions &m = s.args.machine;
  os << fmt::format("tpc suggest {}: meshes of {} rank{} or a divisor of it on {}; each rank "
                    "a core of {:g} GB/s and {:g} GFLOP/s, each host's memory {:g} GB/s\n",
                    s.args.model, s.args.ranks, s.args.ranks == 1 ? "" : "s", linkText(s.args),
                    m.coreGBs, m.coreGflops, m.hostMemGBs);
  os << fmt::format("ranked by {}; prefill: a prompt of {} tokens; decode: a step of one "
                    "sequence after it\n",
                    m.concurrency > 1
                        ? fmt::format("output tokens a second at concurrency {}", m.concurrency)
                        : std::string("a decode step's time (concurrency 1)"),
                    m.prefillLen);
  if (s.memoryLimit > 0)
    os << fmt::format("memory per rank at most {}\n", bytesText(s.memoryLimit));
  os << fmt::format("\n  {:>4}  {:<13}  {:<7}  {:>5}  {:>5}  {:>11}  {:>10}  {:>9}  {:>9}\n",
                    "rank", "mesh", "plan", "ranks", "hosts", "memory/rank", "prefill ms",
                    "decode ms", fmt::format("tok/s c{}", m.concurrency));
  for (const Candidate &c : s.ranked)
    os << fmt::format("  {:>4}  {:<13}  {:<7}  {:>5}  {:>5}  {:>11}  {:>10.1f}  {:>9.2f}  "
                      "{:>9.1f}\n",
                      c.rank, c.mesh(), c.plan, c.pp * c.tp, c.hosts,
                      bytesText(c.predicted.memoryPerRank), c.predicted.prefillMicros / 1e3,
                      c.predicted.decodeMicros / 1e3, c.predicted.tokensPerSecond);
  if (s.ranked.empty())
    os << "  none: no mesh compiles and fits (below, why)\n";
  else
    os << "\nbest: " << s.why << "\n";
  if (!s.refused.empty()) {
    os << "\nnot ranked:\n";
    for (const Candidate &c : s.refused)
      os << fmt::format("  {} ({}): {}\n", c.mesh(), c.plan, c.refused);
  }
}

void printJson(const Suggestion &s, llvm::raw_ostream &os) {
  const analysis::AnalyzeOptions &m = s.args.machine;
  nlohmann::ordered_json j;
  j["model"] = s.args.model;
  j["ranks"] = s.args.ranks;
  j["hosts"] = std::max<int64_t>(1, m.hosts);
  j["link"] = {{"gbps", m.linkGbps}, {"latency_us", m.linkLatencyUs}};
  j["machine"] = {
      {"core_gbs", m.coreGBs}, {"core_gflops", m.coreGflops}, {"host_memory_gbs", m.hostMemGBs}};
  j["concurrency"] = m.concurrency;
  j["prefill_len"] = m.prefillLen;
  j["memory_per_rank_limit_bytes"] =
      s.memoryLimit > 0 ? nlohmann::ordered_json(s.memoryLimit) : nlohmann::ordered_json();
  j["ranked_by"] = m.concurrency > 1 ? "throughput" : "decode";
  nlohmann::ordered_json list = nlohmann::ordered_json::array();
  for (const Candidate &c : s.ranked) {
    const analysis::MeshPrediction &p = c.predicted;
    const analysis::StepTime &t = p.slowest;
    list.push_back({{"rank", c.rank},
                    {"mesh", c.mesh()},
                    {"pp", c.pp},
                    {"tp", c.tp},
                    {"plan", c.plan},
                    {"ranks", c.pp * c.tp},
                    {"hosts", c.hosts},
                    {"fits", true},
                    {"memory_per_rank_bytes", p.memoryPerRank},
                    {"prefill_ms", p.prefillMicros / 1e3},
                    {"decode_ms", p.decodeMicros / 1e3},
                    {"throughput_tok_s", p.tokensPerSecond},
                    {"step_sequences", p.stepSequences},
                    {"steps_in_flight", p.inFlight},
                    {"round_ms", p.roundMicros / 1e3},
                    {"slowest_stage", p.slowestStage},
                    {"slowest_step_ms",
                     {{"reads", t.reads / 1e3},
                      {"multiply_adds", t.multiplyAdds / 1e3},
                      {"collectives", t.collectives / 1e3},
                      {"sends", t.sends / 1e3}}}});
  }
  j["candidates"] = list;
  if (!s.ranked.empty())
    j["best"] = {{"mesh", s.ranked.front().mesh()},
                 {"plan", s.ranked.front().plan},
                 {"why", s.why}};
  else
    j["best"] = nullptr;
  nlohmann::ordered_json refused = nlohmann::ordered_json::array();
  for (const Candidate &c : s.refused)
    refused.push_back({{"mesh", c.mesh()}, {"pp", c.pp}, {"tp", c.tp}, {"plan", c.plan},
                       {"error", c.refused}});
  j["not_ranked"] = refused;
  os << j.dump(2) << "\n";
}

} // namespace tpc::driver
