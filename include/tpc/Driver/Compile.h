// Compile: a model and a plan to the per-rank binary. Its steps before it writes anything
// (the front half) are what `tpc check` runs whole, so check refuses what compile would, with
// the same messages, and says nothing compile would not.
#ifndef TPC_DRIVER_COMPILE_H
#define TPC_DRIVER_COMPILE_H

#include "tpc/Driver/Session.h"

#include "tpc/Plan/Plan.h"
#include "tpc/Transforms/Pipeline.h"

#include <optional>

namespace tpc::driver {

/// What every command that applies a plan takes: the model, --plan, --tp, --strategies.
struct PlanArgs {
  std::string model, plan, strategies;
  int64_t tp = 0;
  int64_t pp = 1;               // --pp: pipeline stages
  std::vector<int64_t> ppSplit; // --pp-split: decoder layers per stage (empty: balanced)
};

/// Reports a --tp or --pp below 1 (a usage error); true when the values are fine.
bool checkTpArg(const PlanArgs &args);

/// What says which program compile builds (and check checks): the plan's arguments and
/// --target, --sequence-parallel, --no-fold, --fuse and --weights-dtype.
struct ProgramArgs : PlanArgs {
  std::string target = "cpu", fuse, weights = "stored";
  bool sequenceParallel = false, noFold = false;
};

/// The pipeline's options for `args`: the target's #tp.target, with --fuse's choices where
/// given; none, with a usage error reported, for a bad --fuse.
std::optional<ProgramOptions> programOptions(const ProgramArgs &args, mlir::MLIRContext &ctx);

/// What each step made; the steps after one that failed leave theirs empty.
struct FrontHalf {
  mlir::OwningOpRef<mlir::ModuleOp> model; // parsed, then planned
  std::optional<plan::PlanReport> plan;
  mlir::OwningOpRef<mlir::ModuleOp> program; // buildProgram's: sharded, partitioned, decided
  mlir::OwningOpRef<mlir::ModuleOp> lowered; // in EmitC for the target: what is printed
};

/// Runs one step, named "parse", "plan", "shard" or "lower", and returns whether it worked
/// (compile times each).
using StepRunner =
    llvm::function_ref<bool(llvm::StringRef name, llvm::function_ref<bool()> step)>;

/// Parses the model, applies the plan, builds the program and lowers it for the target, each
/// step through `run`; false at the first that fails, its errors reported.
bool runFrontHalf(Session &session, const ProgramArgs &args, const ProgramOptions &options,
                  FrontHalf &out, StepRunner run);

/// What `tpc compile` takes: the program's arguments, the output directory, --emit-only.
struct CompileArgs : ProgramArgs {
  std::string output;
  bool emitOnly = false;
  /// Warnings and notes counted, not printed (errors always are).
  bool quiet = false;
  /// The binary written (set by compileModel when it succeeds).
  std::string binary;
};

/// `tpc compile`: the front half, the program's source for the target, and the build, each
/// stage timed on `log`; the exit code (errors reported).
int compileModel(CompileArgs &args, llvm::raw_ostream &log);

/// What `tpc launch` takes: how many ranks, where they meet, the binary and its arguments.
/// The machines a job spans, as torchrun takes them: this node's ranks and where rank 0's
/// store is. One node with no master address: the ranks meet in a rendezvous directory.
struct NodeOptions {
  int nnodes = 1;
  int nodeRank = 0;
  std::string masterAddr;
  int masterPort = 29500;
  /// Ranks a node: "" (the world divided by the nodes), "N" (each node), or "N0,N1,..." (each
  /// node's, in node order).
  std::string nprocPerNode;

  bool spansHosts() const { return nnodes > 1 || !masterAddr.empty(); }
};

struct LaunchOptions {
  /// The command its own messages name ("tpc launch", "tpc serve", ...).
  std::string name = "tpc launch";
  int ranks = 0; // the world: every node's ranks
  NodeOptions nodes;
  std::string rendezvous;
  std::vector<std::string> command;
  /// Rank 0's output as it comes, unprefixed (tpc run's streamed text); the others' prefixed.
  bool rankZeroRaw = false;
  /// The ranks' output to stderr instead of stdout (tpc bench: its table alone on stdout).
  bool ranksToStderr = false;
  /// SIGTERM or SIGINT to the launcher goes to rank 0 alone as SIGTERM (a server drains and
  /// stops its peers itself); a second one kills every rank.
  bool forwardSignals = false;
  /// When a rank fails, how long the others may take to stop by themselves before they are
  /// sent SIGTERM: ranks refusing the same bad input each say why, and a server answers its
  /// clients first (it asks for its --timeout and more).
  int failureGraceSeconds = 2;
};
/// Runs this node's ranks, each with torchrun's environment and a rendezvous directory (a
/// fresh one under /tmp unless given) or, across nodes, rank 0's address (MASTER_ADDR), each's output prefixed "[rank R] " line by line (on stdout unless
/// ranksToStderr); the first failure stops them all (after failureGraceSeconds). The exit code.
int launchRanks(const LaunchOptions &options);

} // namespace tpc::driver

#endif // TPC_DRIVER_COMPILE_H
