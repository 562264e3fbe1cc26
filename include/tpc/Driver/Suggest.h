// tpc suggest: the meshes (pipeline stages x tensor-parallel ranks) and plans a model can be
// run on with some number of ranks, each compiled and checked as tpc analyze does, priced by
// its cost model (analysis::predictMesh), and ranked.
#ifndef TPC_DRIVER_SUGGEST_H
#define TPC_DRIVER_SUGGEST_H

#include "tpc/Analysis/Analyze.h"

#include "llvm/Support/raw_ostream.h"

#include <optional>
#include <string>
#include <vector>

namespace tpc::driver {

struct SuggestArgs {
  /// A model file as tpc analyze takes it, or a checkpoint as tpc run does.
  std::string model;
  int64_t ranks = 0;
  /// --plan: only this plan; empty: transformers' own (auto), and for a model with experts
  /// its expert-parallel one too (auto-ep).
  std::string plan, strategies;
  /// --memory-per-rank as given ("16GiB"); empty: no limit.
  std::string memoryPerRank;
  /// Hosts, link, machine, concurrency, prefill and context, target, --weights-dtype: as
  /// tpc analyze takes them (hosts 0: one).
  analysis::AnalyzeOptions machine;
};

/// One mesh and plan, and what became of it.
struct Candidate {
  int64_t pp = 1, tp = 1, hosts = 1;
  std::string plan;
  /// Why it is not ranked: what the compiler refused, or what does not fit; empty where it is.
  std::string refused;
  analysis::MeshPrediction predicted;
  int64_t rank = 0; // 1 is the best; 0 where not ranked
  std::string mesh() const;
};

struct Suggestion {
  SuggestArgs args;
  double memoryLimit = 0; // bytes; 0: none
  int64_t ranksPerHost = 0;
  std::vector<Candidate> ranked, refused; // ranked best first
  std::string why;                        // why the first is best
};

/// Reads `args`' model and ranks every mesh of a divisor of --ranks ranks (pp x tp, placed
/// on the fewest hosts that hold them) and plan: by output tokens a second at --concurrency
/// where it is above 1, else by a decode step's time. None, with the errors reported, for a
/// usage error or a model that cannot be read.
std::optional<Suggestion> suggest(const SuggestArgs &args);

/// "16GiB", "512M", "1e9", "1000000": bytes, or none (with `error` set) for anything else.
std::optional<double> parseBytes(const std::string &text, std::string &error);

void printText(const Suggestion &suggestion, llvm::raw_ostream &os);
void printJson(const Suggestion &suggestion, llvm::raw_ostream &os);

} // namespace tpc::driver

#endif // TPC_DRIVER_SUGGEST_H
