// The ranks of one machine, through a shared-memory segment: each rank writes
// its part into its own slot and reads its peers' (a round), with
// spin-then-block waiting on sequence words (futexes); a message to one peer
// goes through the sender's mailbox, a slot of its own beside the rounds'.
// Gloo stays for the rendezvous, the barrier and broadcasts; this only moves
// the collectives' elements and the messages. Plain C++17, Linux.
#ifndef TPCRT_COMM_SHM_COMM_H
#define TPCRT_COMM_SHM_COMM_H

#include "tpcrt/collectives.h"

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

namespace tpcrt {

class ShmCommunicator : public Communicator {
public:
  /// What a rank asks when a peer is slow: the reason that peer is gone, or ""
  /// while it may still answer.
  using PeerCheck = std::function<std::string()>;

  /// Maps segment `name` (rank 0 creates it, the others open what it made) for
  /// `world` ranks of fp32 elements. A wait longer than `timeoutSeconds`, or a
  /// peer that `peerGone` reports gone, fails the collective with an exception.
  /// Null, with `error` saying why, when the segment cannot be made or opened.
  static std::unique_ptr<ShmCommunicator> open(const std::string &name, int rank, int world,
                                               int timeoutSeconds, PeerCheck peerGone,
                                               std::string &error);
  ~ShmCommunicator() override;
  bool gathersVariableSizes() const override { return true; }
  std::string pathOf(const std::string &) const override { return "shm"; }

  /// Copies `count` elements of rank `root`'s `data` into every other rank's `data`: not one
  /// of the model's collectives (the hierarchical group spreads a host's result with it).
  void broadcast(void *data, size_t count, int root);
  /// Names rank r of this segment `ranks[r]` in messages (a host's ranks within the group, a
  /// part's within the whole).
  void nameRanks(std::vector<int> ranks) { names = std::move(ranks); }
  /// Leaves in the segment why this rank stops: a peer waiting on it says so at once.
  void recordExit(const std::string &reason) const;

  /// The bytes of one rank's slot: collectives larger than this go in rounds.
  static constexpr size_t kSlotBytes = size_t(1) << 20;

protected:
  void runAllReduce(void *data, size_t count) override;
  void runAllGather(const void *in, size_t count, void *out) override;
  void runReduceScatter(const void *in, size_t count, void *out) override;
  void runAllToAll(const void *in, size_t count, void *out) override;
  void runAllGatherV(const void *in, const std::vector<size_t> &counts, void *out) override;
  void runSend(const void *data, size_t count, int peer) override;
  void runRecv(void *data, size_t count, int peer) override;

private:
  struct Word;
  struct Header;
  struct Mailbox;
  ShmCommunicator(int rank, int world, void *base, size_t bytes, int timeoutSeconds,
                  PeerCheck peerGone);
  float *slot(int r) const;
  char *reasonOf(int r) const;
  /// How messages name rank r: "rank 3".
  std::string nameOf(int r) const;
  Mailbox &mailboxOf(int r) const;
  /// Rank r's mailbox slot: the chunk of a message it sent that its receiver has not taken.
  float *mailSlot(int r) const;
  /// One round: waits until the peers have read this rank's slot, lets `write`
  /// fill it, publishes it, waits for every peer's, lets `read` take what it
  /// needs, and says so.
  void round(const std::function<void(float *mine)> &write, const std::function<void()> &read);
  /// Waits until `w` reaches `sequence`; `peer` is the rank named when it does not in time.
  void waitFor(Word &w, int peer, uint32_t sequence);
  /// Rounds over `in`'s world parts of `count` elements, a chunk of every part per round;
  /// `read(at, n)` takes elements [at, at + n) of them, part p of a slot at p * n.
  void inParts(const float *in, size_t count, const std::function<void(size_t at, size_t n)> &read);
  /// The sum over the slots of their `n` elements from `offset`, in rank order, into `out`.
  void sumSlots(size_t offset, size_t n, float *out) const;

  void *base;
  size_t bytes;
  Header *headers;
  uint32_t sequence = 0;
  int timeoutSeconds;
  PeerCheck peerGone;
  long spins;
  std::vector<int> names; // none: rank r is "rank r"
  int lastReceiver = 0; // of this rank's latest chunk: the one a send waits on
};

} // namespace tpcrt

#endif // TPCRT_COMM_SHM_COMM_H
