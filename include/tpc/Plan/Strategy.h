// The strategy registry: every name a plan may use, what it does to parameters and, on a
// module key, to the module's input and output layouts (docs/plans.md, "Strategies").
#ifndef TPC_PLAN_STRATEGY_H
#define TPC_PLAN_STRATEGY_H

#include "tpc/Dialect/TP/TPDialect.h"

#include <optional>
#include <string>
#include <vector>

namespace tpc::plan {

/// A placement as a plan writes it, before it meets a tensor: DTensor's spelling
/// (`Shard(-2)`, `Replicate()`, `Partial()`, `StridedShard(-2, 2)` for two equal blocks,
/// `StridedShard(-2, [64, 32, 32])` for given block sizes). Built-in and custom strategies
/// go through this one parser.
struct PlacementSpec {
  enum class Kind { Replicate, Shard, StridedShard, Partial };
  Kind kind = Kind::Replicate;
  int64_t dim = 0;
  int64_t equalBlocks = 0;          // StridedShard(d, n): n equal blocks
  std::vector<int64_t> blockSizes;  // StridedShard(d, [a, b, c])

  /// Parses a spec; on failure returns nullopt and says why in `error`.
  static std::optional<PlacementSpec> parse(llvm::StringRef text, std::string &error);

  /// The placement for a tensor of this shape; an error (via `emitError`) when the spec
  /// cannot apply to it (no such dim, blocks that do not divide or add up).
  mlir::FailureOr<tp::PlacementAttr>
  resolve(llvm::ArrayRef<int64_t> shape, mlir::MLIRContext *context,
          llvm::function_ref<mlir::InFlightDiagnostic()> emitError) const;

  std::string str() const;
};

/// Which modules a strategy can be put on (module keys only; parameter keys place any tensor).
enum class StrategyTarget { Any, LinearOrEmbedding, Linear, Embedding };

struct Strategy {
  std::string name;
  /// Placements of the module's own parameters; nullopt: the strategy leaves them to their
  /// own rules (local_params).
  std::optional<PlacementSpec> weight;          // >= 2-D parameters (nn.Linear: [out, in])
  std::optional<PlacementSpec> embeddingWeight; // the table of an nn.Embedding
  std::optional<PlacementSpec> vector;          // 1-D parameters (biases)
  /// Layouts the module hooks impose; nullopt where the strategy has no hook.
  std::optional<PlacementSpec> input, output;
  StrategyTarget target = StrategyTarget::Any;
  std::string summary;
  bool builtin = true;
};

class StrategyRegistry {
public:
  /// Exactly transformers' registry (docs/plans.md).
  static StrategyRegistry builtin();

  /// Adds the strategies of a custom strategies file (`{name: {weight, embedding_weight,
  /// bias, input, output, summary}}`), checked like the built-in ones. Errors point into
  /// the file.
  mlir::LogicalResult loadCustom(llvm::StringRef path, mlir::MLIRContext *context);

  const Strategy *lookup(llvm::StringRef name) const;
  std::vector<std::string> names() const;
  /// The registered name closest to `name` by edit distance.
  std::string closest(llvm::StringRef name) const;

  /// Why tpc refuses a name transformers knows (Mega-MoE, ep_dispatch_experts); "" if it
  /// does not.
  static std::string unsupportedReason(llvm::StringRef name);

private:
  std::vector<Strategy> strategies;
};

} // namespace tpc::plan

#endif // TPC_PLAN_STRATEGY_H
