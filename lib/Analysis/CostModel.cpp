// Ring-algorithm traffic per rank, the unit every cost in tpc is measured in.
#include "tpc/Analysis/CostModel.h"

#include "llvm/Support/ErrorHandling.h"

#include <algorithm>
#include <cassert>
#include <cmath>

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
  case CollectiveKind::Send: return "send";
  case CollectiveKind::Recv: return "recv";
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
  case CollectiveKind::Send: return payloadBytes;
  case CollectiveKind::Local:
  case CollectiveKind::Recv: return 0;
  }
  llvm_unreachable("unknown collective");
}

namespace {

// The host side of a collective, measured on this 2-core machine with tpc-comm-latency
// (bench/results/multi-host.txt, bench/results/comm-transport.txt): a shared-memory round
// between a host's ranks costs about a microsecond and moves 6-7 GB/s (2 KB in 0.3-0.8 us,
// 1 MiB in 140-170 us); a call on the TCP mesh ~15 us of system calls and wake-ups beyond
// the link's latency (28-35 us for 2 KB between two namespace hosts whose ping-pong takes
// 12-15 us one way); a Gloo message (all-to-all's path) ~150 us.
constexpr double kShmRoundMicros = 1;
constexpr double kShmBytesPerMicro = 6500;
constexpr double kMeshCallMicros = 15;
constexpr double kGlooMessageMicros = 150;

/// A shared-memory collective moving `bytes` through each rank's slot (1 MiB a round).
double shmMicros(double bytes) {
  double rounds = std::max(1.0, std::ceil(bytes / double(1 << 20)));
  return rounds * kShmRoundMicros + bytes / kShmBytesPerMicro;
}

/// `bytes` out of one host on its link, after a message's latency.
double linkMicros(double bytes, const LinkModel &link) {
  return link.linkLatencyUs + bytes * 8e-3 / link.linkGbps;
}

} // namespace

double tpc::collectiveMicros(CollectiveKind kind, double payloadBytes, int64_t tp,
                             const LinkModel &link) {
  assert(kind != CollectiveKind::Send && kind != CollectiveKind::Recv &&
         "transferMicros prices a transfer");
  if (kind == CollectiveKind::Local || tp <= 1)
    return 0;
  int64_t hosts = std::max<int64_t>(1, std::min(link.hosts, tp));
  double perHost = std::ceil(double(tp) / double(hosts)); // ranks on the fullest host
  double h = double(hosts);
  if (hosts == 1)
    return shmMicros(payloadBytes);
  // Inside the fullest host: its part gathered or summed, then the whole spread.
  double inside = perHost > 1 ? 2 * shmMicros(payloadBytes) : 0;
  switch (kind) {
  case CollectiveKind::AllReduce:
  case CollectiveKind::ReduceScatter: // the hierarchical all-reduce, sliced
    return inside + kMeshCallMicros + linkMicros((h - 1) * payloadBytes, link);
  case CollectiveKind::AllGather: // each host's block to every other host
    return inside + kMeshCallMicros + linkMicros((h - 1) * payloadBytes / h, link);
  case CollectiveKind::AllToAll: {
    // Each rank's parts for other hosts leave through its host's link, the host's ranks'
    // together: on the TCP mesh with one rank a host, else on Gloo between every pair.
    double leaving = perHost * payloadBytes * (double(tp) - perHost) / double(tp);
    double calls = perHost == 1 ? kMeshCallMicros : double(tp - 1) * kGlooMessageMicros;
    return calls + linkMicros(leaving, link);
  }
  case CollectiveKind::Local:
    return 0;
  case CollectiveKind::Send:
  case CollectiveKind::Recv:
    break;
  }
  llvm_unreachable("not a collective");
}

double tpc::transferMicros(double bytes, bool acrossHosts, int64_t ranksPerHost,
                           const LinkModel &link) {
  if (!acrossHosts) // the mailbox: a slot of 1 MiB a chunk, as a collective's round
    return shmMicros(bytes);
  return (ranksPerHost == 1 ? kMeshCallMicros : kGlooMessageMicros) + linkMicros(bytes, link);
}
