// Virtual KV heads: where tp is above an attention's KV heads and a multiple of them, each
// real KV head is repeated tp / num_kv_heads times so that every rank holds one. Both
// tp-propagate-layouts (colwise k and v) and tp-fold-redistribute (k and v it keeps sharded
// past a gather) widen the same way, through this one widener; the fold, which may have to
// take a try back, gives it a log of what it changed.
#ifndef TPC_TRANSFORMS_VIRTUALKVHEADS_H
#define TPC_TRANSFORMS_VIRTUALKVHEADS_H

#include "tpc/Dialect/TP/TPDialect.h"

#include <optional>
#include <tuple>

namespace tpc::tp {

/// How many times each KV head of `attention` repeats for tp ranks: tp / num_kv_heads where
/// tp is above the KV heads, a multiple of them, and divides the query heads; none otherwise
/// (query heads tp does not divide are rewriteUnevenHeads' case).
std::optional<int64_t> virtualKVRepeat(AttentionOp attention, int64_t tp);

/// Types and attributes a widening changed, to put back when the rewrite is taken back.
struct WideningLog {
  llvm::SmallVector<std::pair<mlir::Value, mlir::Type>> values;
  llvm::SmallVector<std::tuple<ParamOp, mlir::Type, std::optional<int64_t>>> params;
  llvm::SmallVector<std::pair<AttentionOp, int64_t>> kvHeads;
  void restore();
};

class KVHeadWidener {
public:
  /// Widens by `repeat`; every change goes to `log` where one is given.
  explicit KVHeadWidener(int64_t repeat, WideningLog *log = nullptr)
      : repeat(repeat), log(log) {}

  /// Multiplies dim `dim` of `value`'s type by the repeat.
  void widenValue(mlir::Value value, int64_t dim);
  /// Repeats the head rows (dim 0) of the parameter `use` is the tp.weight of, marks it with
  /// head_repeat for the loader, and widens `use` alike. False, changing nothing, where `use`
  /// is not the only use of a tp.weight, or its parameter is repeated already: a parameter
  /// another op reads, or one widened twice, would no longer fit its other readers.
  bool widenParam(mlir::Value use);
  /// The attention now reads `tp` KV heads.
  void widenAttention(AttentionOp attention, int64_t tp);

private:
  int64_t repeat;
  WideningLog *log;
};

} // namespace tpc::tp

#endif // TPC_TRANSFORMS_VIRTUALKVHEADS_H
