// The same-host transport (shm_comm.h). A round: every rank copies its part
// into its slot and bumps its `arrived` word; every rank reads what it needs of
// its peers' slots and bumps its `released` word; a rank writes its slot again
// only once every peer has released the round before. Sums are taken in rank
// order on every rank, so every rank holds the same bits.
//
// A message goes a chunk at a time through the sender's mailbox: the sender
// waits until its previous chunk was taken, copies the next in, names its
// receiver and bumps `sent`; the receiver waits for a chunk named for it, copies
// it out and sets `taken` to it. One chunk is in a mailbox at a time, so the
// messages from one rank arrive in the order it sent them, whoever they are for.
#include "shm_comm.h"

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <climits>
#include <cstring>
#include <fcntl.h>
#include <linux/futex.h>
#include <new>
#include <stdexcept>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <thread>
#include <unistd.h>

namespace tpcrt {

/// A sequence word on a cache line of its own, with the count of peers asleep on it: a rank
/// makes the wake-up system call only when someone sleeps.
struct alignas(64) ShmCommunicator::Word {
  std::atomic<uint32_t> value;
  std::atomic<uint32_t> sleepers;
};

/// One rank's sequence words for the rounds.
struct ShmCommunicator::Header {
  Word arrived;  // the last round whose part is in the slot
  Word released; // the last round whose peers' slots it read
};

/// One rank's sequence words for its messages, and whom its chunk in the box is for.
struct ShmCommunicator::Mailbox {
  Word sent;  // the last chunk put in the mailbox slot
  Word taken; // the last chunk a receiver copied out
  alignas(64) std::atomic<int32_t> to;
};
static_assert(std::atomic<uint32_t>::is_always_lock_free, "futexes need plain 32-bit words");

namespace {

uint32_t *word(std::atomic<uint32_t> &a) { return reinterpret_cast<uint32_t *>(&a); }

void futexWake(std::atomic<uint32_t> &a) {
  ::syscall(SYS_futex, word(a), FUTEX_WAKE, INT_MAX, nullptr, nullptr, 0);
}

/// Publishes `value`, waking the peers that sleep on it. The store and the load of the
/// sleepers are sequentially consistent, as are a sleeper's count and its look at the value
/// (waitFor): either this rank sees the sleeper, or the sleeper sees the value.
template <typename Word> void publish(Word &w, uint32_t value) {
  w.value.store(value, std::memory_order_seq_cst);
  if (w.sleepers.load(std::memory_order_seq_cst) != 0)
    futexWake(w.value);
}

/// Sleeps while `a` still holds `seen`, for at most `micros`.
void futexWait(std::atomic<uint32_t> &a, uint32_t seen, long micros) {
  timespec timeout{micros / 1000000, (micros % 1000000) * 1000};
  ::syscall(SYS_futex, word(a), FUTEX_WAIT, seen, &timeout, nullptr, 0);
}

bool reached(uint32_t value, uint32_t target) { return int32_t(value - target) >= 0; }

void pause() {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#endif
}

/// Each rank's two sequence words (a Header), each rank's reason for stopping, each rank's
/// slot; then each rank's mailbox and each rank's mailbox slot.
constexpr size_t kHeaderBytes = 128;
constexpr size_t kReasonBytes = 512;
constexpr size_t kMailboxBytes = 192;
size_t mailboxesAt(int world) {
  return size_t(world) * (kHeaderBytes + kReasonBytes + ShmCommunicator::kSlotBytes);
}
size_t segmentBytes(int world) {
  return mailboxesAt(world) + size_t(world) * (kMailboxBytes + ShmCommunicator::kSlotBytes);
}

} // namespace

std::unique_ptr<ShmCommunicator> ShmCommunicator::open(const std::string &name, int rank, int world,
                                                       int timeoutSeconds, PeerCheck peerGone,
                                                       std::string &error) {
  size_t bytes = segmentBytes(world);
  int fd = rank == 0 ? ::shm_open(name.c_str(), O_CREAT | O_EXCL | O_RDWR, 0600)
                     : ::shm_open(name.c_str(), O_RDWR, 0600);
  if (fd < 0) {
    error = "cannot " + std::string(rank == 0 ? "create" : "open") + " the shared-memory segment " +
            name + ": " + std::strerror(errno);
    return nullptr;
  }
  if (rank == 0 && ::ftruncate(fd, off_t(bytes)) != 0) {
    error = "cannot size the shared-memory segment " + name + " to " + std::to_string(bytes) +
            " bytes: " + std::strerror(errno) + " (is /dev/shm large enough?)";
    ::close(fd);
    ::shm_unlink(name.c_str());
    return nullptr;
  }
  struct stat st {};
  if (::fstat(fd, &st) != 0 || size_t(st.st_size) < bytes) {
    error = "the shared-memory segment " + name + " is smaller than " + std::to_string(bytes) +
            " bytes";
    ::close(fd);
    return nullptr;
  }
  void *base = ::mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  ::close(fd);
  if (base == MAP_FAILED) {
    error = "cannot map the shared-memory segment " + name + ": " + std::strerror(errno);
    if (rank == 0)
      ::shm_unlink(name.c_str());
    return nullptr;
  }
  if (rank == 0) { // the words every rank waits on, before any other rank can see them
    char *mailboxes = static_cast<char *>(base) + mailboxesAt(world);
    for (int r = 0; r < world; ++r) {
      new (static_cast<char *>(base) + size_t(r) * kHeaderBytes) Header{{{0}, {0}}, {{0}, {0}}};
      new (mailboxes + size_t(r) * kMailboxBytes) Mailbox{{{0}, {0}}, {{0}, {0}}, {0}};
    }
  }
  return std::unique_ptr<ShmCommunicator>(
      new ShmCommunicator(rank, world, base, bytes, timeoutSeconds, std::move(peerGone)));
}

ShmCommunicator::ShmCommunicator(int rank, int world, void *base, size_t bytes, int timeoutSeconds,
                                 PeerCheck peerGone)
    : Communicator(rank, world, sizeof(float)), base(base), bytes(bytes),
      headers(static_cast<Header *>(base)), timeoutSeconds(timeoutSeconds),
      peerGone(std::move(peerGone)) {
  static_assert(sizeof(Header) == kHeaderBytes, "segmentBytes counts a Header per rank");
  static_assert(sizeof(Mailbox) == kMailboxBytes, "segmentBytes counts a Mailbox per rank");
  // Spin a while before sleeping where every rank has a core; where ranks
  // outnumber cores a spinning rank would take a core from the peer it waits
  // for, so sleep at once.
  unsigned cores = std::thread::hardware_concurrency();
  spins = cores == 0 || unsigned(world) > cores ? 0 : 4000;
}

ShmCommunicator::~ShmCommunicator() { ::munmap(base, bytes); }

char *ShmCommunicator::reasonOf(int r) const {
  return static_cast<char *>(base) + size_t(world) * sizeof(Header) + size_t(r) * kReasonBytes;
}

float *ShmCommunicator::slot(int r) const {
  char *slots = static_cast<char *>(base) + size_t(world) * (sizeof(Header) + kReasonBytes);
  return reinterpret_cast<float *>(slots + size_t(r) * kSlotBytes);
}

ShmCommunicator::Mailbox &ShmCommunicator::mailboxOf(int r) const {
  char *mailboxes = static_cast<char *>(base) + mailboxesAt(world);
  return *reinterpret_cast<Mailbox *>(mailboxes + size_t(r) * kMailboxBytes);
}

float *ShmCommunicator::mailSlot(int r) const {
  char *slots = static_cast<char *>(base) + mailboxesAt(world) + size_t(world) * kMailboxBytes;
  return reinterpret_cast<float *>(slots + size_t(r) * kSlotBytes);
}

std::string ShmCommunicator::nameOf(int r) const {
  return "rank " + std::to_string(names.empty() ? r : names[size_t(r)]);
}

void ShmCommunicator::recordExit(const std::string &reason) const {
  // The text first, then its first byte, which peers look at: they never see half of it.
  char *mine = reasonOf(rank);
  size_t n = std::min(reason.size(), kReasonBytes - 1);
  if (n == 0)
    return;
  std::memcpy(mine + 1, reason.data() + 1, n - 1);
  mine[n] = '\0';
  reinterpret_cast<std::atomic<char> *>(mine)->store(reason[0], std::memory_order_release);
}

void ShmCommunicator::waitFor(Word &w, int peer, uint32_t target) {
  for (long i = 0; i < spins; ++i) {
    if (reached(w.value.load(std::memory_order_acquire), target))
      return;
    pause();
  }
  using Clock = std::chrono::steady_clock;
  auto start = Clock::now(), nextCheck = start + std::chrono::milliseconds(100);
  auto deadline = start + std::chrono::seconds(timeoutSeconds);
  for (;;) {
    w.sleepers.fetch_add(1, std::memory_order_seq_cst);
    uint32_t seen = w.value.load(std::memory_order_seq_cst);
    if (!reached(seen, target))
      futexWait(w.value, seen, 20000);
    w.sleepers.fetch_sub(1, std::memory_order_seq_cst);
    if (reached(seen, target) || reached(w.value.load(std::memory_order_acquire), target))
      return;
    auto now = Clock::now();
    if (now >= nextCheck) {
      nextCheck = now + std::chrono::milliseconds(100);
      for (int r = 0; r < world; ++r)
        if (r != rank &&
            reinterpret_cast<std::atomic<char> *>(reasonOf(r))->load(std::memory_order_acquire))
          throw std::runtime_error("shared-memory collective: " + nameOf(r) +
                                   " stopped: " + std::string(reasonOf(r)));
      if (peerGone)
        if (std::string gone = peerGone(); !gone.empty())
          throw std::runtime_error("shared-memory collective: " + gone);
    }
    if (now >= deadline)
      throw std::runtime_error("shared-memory collective: " + nameOf(peer) +
                               " did not answer within " + std::to_string(timeoutSeconds) +
                               " s (--timeout)");
  }
}

void ShmCommunicator::round(const std::function<void(float *)> &write,
                            const std::function<void()> &read) {
  uint32_t s = ++sequence;
  for (int p = 0; p < world; ++p) // the peers have read this slot's previous round
    if (p != rank)
      waitFor(headers[p].released, p, s - 1);
  write(slot(rank));
  publish(headers[rank].arrived, s);
  for (int p = 0; p < world; ++p)
    if (p != rank)
      waitFor(headers[p].arrived, p, s);
  read();
  publish(headers[rank].released, s);
}

void ShmCommunicator::runAllReduce(void *data, size_t count) {
  float *x = static_cast<float *>(data);
  const size_t chunk = kSlotBytes / sizeof(float);
  for (size_t at = 0; at < count; at += chunk) {
    size_t n = std::min(chunk, count - at);
    round([&](float *mine) { std::memcpy(mine, x + at, n * sizeof(float)); },
          [&] { sumSlots(0, n, x + at); });
  }
}

void ShmCommunicator::runAllGather(const void *in, size_t count, void *out) {
  std::vector<size_t> counts(size_t(world), count);
  runAllGatherV(in, counts, out);
}

void ShmCommunicator::runAllGatherV(const void *in, const std::vector<size_t> &counts, void *out) {
  const float *x = static_cast<const float *>(in);
  float *y = static_cast<float *>(out);
  std::vector<size_t> displacement(size_t(world), 0);
  for (int r = 1; r < world; ++r)
    displacement[size_t(r)] = displacement[size_t(r - 1)] + counts[size_t(r - 1)];
  size_t most = *std::max_element(counts.begin(), counts.end());
  const size_t chunk = kSlotBytes / sizeof(float);
  auto part = [&](int r, size_t at) {
    return counts[size_t(r)] > at ? std::min(chunk, counts[size_t(r)] - at) : size_t(0);
  };
  for (size_t at = 0; at < std::max<size_t>(most, 1); at += chunk)
    round([&](float *mine) { std::memcpy(mine, x + at, part(rank, at) * sizeof(float)); },
          [&] {
            for (int r = 0; r < world; ++r)
              std::memcpy(y + displacement[size_t(r)] + at, slot(r), part(r, at) * sizeof(float));
          });
}

void ShmCommunicator::broadcast(void *data, size_t count, int root) {
  float *x = static_cast<float *>(data);
  const size_t chunk = kSlotBytes / sizeof(float);
  for (size_t at = 0; at < count; at += chunk) {
    size_t n = std::min(chunk, count - at);
    round(
        [&](float *mine) {
          if (rank == root)
            std::memcpy(mine, x + at, n * sizeof(float));
        },
        [&] {
          if (rank != root)
            std::memcpy(x + at, slot(root), n * sizeof(float));
        });
  }
}

void ShmCommunicator::inParts(const float *in, size_t count,
                              const std::function<void(size_t at, size_t n)> &read) {
  // Each round holds elements [at, at + n) of every one of the world parts, part p at p * n.
  const size_t chunk = kSlotBytes / sizeof(float) / size_t(world);
  for (size_t at = 0; at < count; at += chunk) {
    size_t n = std::min(chunk, count - at);
    round(
        [&](float *mine) {
          for (int p = 0; p < world; ++p)
            std::memcpy(mine + size_t(p) * n, in + size_t(p) * count + at, n * sizeof(float));
        },
        [&] { read(at, n); });
  }
}

void ShmCommunicator::sumSlots(size_t offset, size_t n, float *out) const {
  // Rank order on every rank: the same bits everywhere.
  std::memcpy(out, slot(0) + offset, n * sizeof(float));
  for (int r = 1; r < world; ++r) {
    const float *s = slot(r) + offset;
    for (size_t i = 0; i < n; ++i)
      out[i] += s[i];
  }
}

void ShmCommunicator::runReduceScatter(const void *in, size_t count, void *out) {
  float *y = static_cast<float *>(out);
  inParts(static_cast<const float *>(in), count,
          [&](size_t at, size_t n) { sumSlots(size_t(rank) * n, n, y + at); });
}

void ShmCommunicator::runAllToAll(const void *in, size_t count, void *out) {
  float *y = static_cast<float *>(out);
  inParts(static_cast<const float *>(in), count, [&](size_t at, size_t n) {
    for (int r = 0; r < world; ++r)
      std::memcpy(y + size_t(r) * count + at, slot(r) + size_t(rank) * n, n * sizeof(float));
  });
}

void ShmCommunicator::runSend(const void *data, size_t count, int peer) {
  const float *x = static_cast<const float *>(data);
  Mailbox &mine = mailboxOf(rank);
  const size_t chunk = kSlotBytes / sizeof(float);
  for (size_t at = 0; at < count; at += chunk) {
    size_t n = std::min(chunk, count - at);
    uint32_t k = mine.sent.value.load(std::memory_order_relaxed) + 1; // only this rank sets it
    waitFor(mine.taken, lastReceiver, k - 1);
    std::memcpy(mailSlot(rank), x + at, n * sizeof(float));
    mine.to.store(peer, std::memory_order_seq_cst);
    publish(mine.sent, k);
    lastReceiver = peer;
  }
}

void ShmCommunicator::runRecv(void *data, size_t count, int peer) {
  float *y = static_cast<float *>(data);
  Mailbox &theirs = mailboxOf(peer);
  const size_t chunk = kSlotBytes / sizeof(float);
  for (size_t at = 0; at < count; at += chunk) {
    size_t n = std::min(chunk, count - at);
    uint32_t k;
    for (;;) {
      // Read in this order: while chunk k is not taken, the sender cannot name the receiver
      // of the next one, so `to` is chunk k's.
      k = theirs.sent.value.load(std::memory_order_seq_cst);
      int32_t to = theirs.to.load(std::memory_order_seq_cst);
      uint32_t taken = theirs.taken.value.load(std::memory_order_seq_cst);
      if (taken != k && to == rank)
        break;
      if (taken == k) // an empty mailbox: wait for the next chunk
        waitFor(theirs.sent, peer, k + 1);
      else // another receiver's chunk: wait until it takes it
        waitFor(theirs.taken, to, k);
    }
    std::memcpy(y + at, mailSlot(peer), n * sizeof(float));
    publish(theirs.taken, k);
  }
}

} // namespace tpcrt
