// The one cost model of tpc: what a collective costs, used by the redistribution planner,
// tp-fold-redistribute's choices and `tpc analyze`'s report alike.
#ifndef TPC_ANALYSIS_COSTMODEL_H
#define TPC_ANALYSIS_COSTMODEL_H

#include "llvm/ADT/StringRef.h"

#include <cstdint>

namespace tpc {

/// What a rank's communicator does: a collective over its tp group, a local reshard, or
/// (Send, Recv) one end of a value passing between pipeline stages, tp rank r to tp rank r.
enum class CollectiveKind { AllReduce, AllGather, ReduceScatter, AllToAll, Local, Send, Recv };

llvm::StringRef collectiveName(CollectiveKind kind);

/// The buffer a rank hands its communicator for a collective over `tp` ranks of a tensor of
/// `globalBytes` (evenly split): the tensor itself, but a 1/tp share for all_to_all, which
/// exchanges parts of one rank's shard.
double wireBytes(CollectiveKind kind, double globalBytes, int64_t tp);

/// Bytes each rank sends for a collective over `tp` ranks whose wire buffer (wireBytes, or
/// what the runtime recorded) has `payloadBytes`, with ring algorithms: all_reduce 2(n-1)/n
/// of it, all_gather, reduce_scatter and all_to_all (n-1)/n; local reshards nothing; a send
/// all of it, a receive nothing.
double sentBytes(CollectiveKind kind, double payloadBytes, int64_t tp);

/// The machines a tp group spans and the link between them (tpc analyze --hosts): the ranks
/// spread evenly over `hosts`, numbered host by host, as the runtime's launchers place them.
struct LinkModel {
  int64_t hosts = 1;
  double linkGbps = 10;      // each host's link, each way
  double linkLatencyUs = 50; // a message's one-way time on it, network stacks included
};

/// Microseconds one collective whose wire buffer (wireBytes) has `payloadBytes` takes over
/// `tp` ranks on `link.hosts` hosts, as the runtime runs it (docs/multi-host.md): on one host
/// through shared memory; on several, the hierarchy (shared memory inside each host, each
/// host's first rank sending its host's part to every other host on tpc's TCP mesh, the
/// result spread inside the host), all-to-all over Gloo between every pair (on the mesh with
/// one rank a host). The host-side
/// constants are this machine's, measured (bench/results/multi-host.txt). Not for a
/// transfer between stages, which transferMicros prices.
double collectiveMicros(CollectiveKind kind, double payloadBytes, int64_t tp,
                        const LinkModel &link);

/// Microseconds a value of `bytes` takes from one stage's rank to another's, as the runtime
/// sends it: through the sender's shared-memory mailbox on one host; `acrossHosts`, on the
/// whole group's TCP mesh where every host has one rank (`ranksPerHost`), else on Gloo.
double transferMicros(double bytes, bool acrossHosts, int64_t ranksPerHost,
                      const LinkModel &link);

} // namespace tpc

#endif // TPC_ANALYSIS_COSTMODEL_H
