// Ring-algorithm traffic per rank, the unit every cost in tpc is measured in.
#include "tpc/Analysis/CostModel.h"

#include "llvm/Support/ErrorHandling.h"

using namespace tpc;

double tpc::wireBytes(CollectiveKind kind, double globalBytes, int64_t tp) {
  return kind == CollectiveKind::AllToAll ? globalBytes / double(tp) : globalBytes;
}

llvm::StringRef tpc::collectiveName(CollectiveKind kind) {
  switch (kind) {
  case CollectiveKind::AllReduce: return "all_reduce";
  case CollectiveKind::AllGather: return "all_gather";
  case CollectiveKind::ReduceScatter: return "reduce_scatter";
  case CollectiveKind::AllToAll: return "all_to_all";
  case CollectiveKind::Local: return "local_reshard";
  }
  llvm_unreachable("unknown collective");
}

double tpc::sentBytes(CollectiveKind kind, double payloadBytes, int64_t tp) {
  double n = static_cast<double>(tp);
  double share = (n - 1) / n;
  switch (kind) {
  case CollectiveKind::AllReduce: return 2 * share * payloadBytes;
  case CollectiveKind::AllGather:
  case CollectiveKind::ReduceScatter:
  case CollectiveKind::AllToAll: return share * payloadBytes;
  case CollectiveKind::Local: return 0;
  }
  llvm_unreachable("unknown collective");
}
