// The one cost model of tpc: what a collective costs, used by the redistribution planner,
// tp-fold-redistribute's choices and `tpc analyze`'s report alike.
#ifndef TPC_ANALYSIS_COSTMODEL_H
#define TPC_ANALYSIS_COSTMODEL_H

#include "llvm/ADT/StringRef.h"

#include <cstdint>

namespace tpc {

enum class CollectiveKind { AllReduce, AllGather, ReduceScatter, AllToAll, Local };

llvm::StringRef collectiveName(CollectiveKind kind);

/// Bytes each rank sends for a collective over `tp` ranks whose full (global) tensor has
/// `payloadBytes`, with ring algorithms: all_reduce 2(n-1)/n of it, all_gather and
/// reduce_scatter (n-1)/n, all_to_all (n-1)/n of a rank's 1/n share; local reshards nothing.
double sentBytes(CollectiveKind kind, double payloadBytes, int64_t tp);

} // namespace tpc

#endif // TPC_ANALYSIS_COSTMODEL_H
