// Private to the runtime's comm/: where the ranks of a Gloo group meet and what they leave
// there. Two places: a directory every rank can read (tpc launch on one machine), or the TCP
// store rank 0 serves on MASTER_ADDR (ranks on several machines, torchrun). Either way a
// rank claims its id once, saying which host it is on, its process and an address where it
// can be probed; a rank that stops leaves its reason; and when a peer is lost, the claims say
// where it was and a probe of its address tells gone from unreachable from silent. Plain C++17.
#ifndef TPCRT_COMM_RENDEZVOUS_H
#define TPCRT_COMM_RENDEZVOUS_H

#include "tpcrt/comm.h"

#include <gloo/rendezvous/store.h>

#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace tpcrt {

/// What a rank says of itself when it joins.
struct Claim {
  std::string host; // the host it is on: "node N" where its node rank is known, else the hostname
  long pid = 0;
  std::string probe; // "address:port" that accepts connections while the process lives; "" none

  std::string str() const;
  static std::optional<Claim> parse(const std::string &text);
};

class Rendezvous {
public:
  /// Joins through `options.rendezvousDir`, or, with none, the TCP store of
  /// options.store (rank 0 serves it). Claims this rank's id; null, with `error`, where the
  /// place cannot be used or another rank holds the id.
  static std::unique_ptr<Rendezvous> join(const CommOptions &options, std::string &error);
  virtual ~Rendezvous() = default;

  /// Gloo's rendezvous store.
  virtual gloo::rendezvous::Store &store() = 0;
  /// Rank `rank`'s claim, where it has made one.
  virtual std::optional<Claim> claimOf(int rank) = 0;
  /// Why rank `rank` stopped, "" where it did not say.
  virtual std::string exitOf(int rank) = 0;
  virtual void recordExit(int rank, const std::string &reason) = 0;
  /// "; the store refused ..." where rank 0's store turned ranks away (another job's, another
  /// world size); "" otherwise.
  virtual std::string refusals() { return ""; }
  /// A clean end of the job: the directory is marked used up.
  virtual void retire() {}
  /// "directory D", "rank 0's store on A:P".
  virtual std::string where() const = 0;
  /// The address this rank's transport listens on.
  const std::string &address() const { return listenAddress; }

  /// Every rank's claim, read once every rank has joined and kept: a peer can be named after
  /// the store went with its host.
  const std::vector<std::optional<Claim>> &readClaims(int world);
  const std::vector<std::optional<Claim>> &claims() const { return known; }

  /// After a collective failed: which peers are gone, unreachable or silent, and why, grouped
  /// by host ("lost host 1 (rank 1): unreachable ..."); "" where nothing can be said.
  std::string lostPeers(const CommOptions &options);

protected:
  std::string listenAddress;
  std::vector<std::optional<Claim>> known;
};

/// The host key of this process: "node N" from GROUP_RANK (torchrun, tpc launch), else the
/// hostname.
std::string thisHost();

} // namespace tpcrt

#endif // TPCRT_COMM_RENDEZVOUS_H
