// The collective layer, written once for every target: placement-aware collectives (which
// rank holds which piece of a feature dim, padding, strided blocks, token splits) over an
// abstract Communicator (Gloo, NCCL, or a rank alone) and the Memory the buffers live in
// (host memory, or a GPU's on its stream). The trace is recorded at the Communicator, with
// the collective that went on the wire and its bytes. Plain C++17.
#ifndef TPCRT_COLLECTIVES_H
#define TPCRT_COLLECTIVES_H

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace tpcrt {

/// One collective (or one point-to-point message) as it went on the wire, for --trace.
struct TraceEntry {
  std::string kind;   // all_reduce, all_gather, reduce_scatter, all_to_all, send, recv
  std::string module; // the HF module it serves
  int64_t tokens;     // the forward's tokens it covers
  uint64_t bytes;     // one rank's larger buffer of the call, padding included
  std::string path;   // how it went: local, shm, tcp, mpi, nccl, or shm+tcp (within each host
                      // through shared memory, between hosts over TCP)
};

/// Where a rank's buffers live and how it moves elements within them: host memory for the CPU
/// target, a GPU's memory (copies on its stream) for the CUDA target. Counts and pitches are
/// in elements of `elementBytes` each.
class Memory {
public:
  explicit Memory(size_t elementBytes) : elementBytes(elementBytes) {}
  virtual ~Memory() = default;

  /// `rows` rows of `count` elements, read `srcPitch` elements apart, written `dstPitch` apart.
  virtual void copy2D(void *dst, int64_t dstPitch, const void *src, int64_t srcPitch,
                      int64_t count, int64_t rows) = 0;
  virtual void zero(void *dst, int64_t count) = 0;
  /// A staging buffer of at least `count` elements, valid until the next call.
  virtual void *scratch(size_t count) = 0;

  void copy(void *dst, const void *src, int64_t count) {
    if (dst != src)
      copy2D(dst, count, src, count, count, 1);
  }
  void *at(void *p, int64_t i) const { return static_cast<char *>(p) + i * elementBytes; }
  const void *at(const void *p, int64_t i) const {
    return static_cast<const char *>(p) + i * elementBytes;
  }

  const size_t elementBytes;
};

/// Host memory, for the CPU target (fp32) and for host-side staging.
class HostMemory : public Memory {
public:
  explicit HostMemory(size_t elementBytes = sizeof(float)) : Memory(elementBytes) {}
  void copy2D(void *dst, int64_t dstPitch, const void *src, int64_t srcPitch, int64_t count,
              int64_t rows) override;
  void zero(void *dst, int64_t count) override;
  void *scratch(size_t count) override;

private:
  std::vector<char> staging;
};

/// Moves elements between the ranks of one group: the four collectives every placement change
/// is made of, each the real one of the engine underneath (Gloo, NCCL), and the messages
/// between two ranks that carry a value from one pipeline stage to the next. Every call is
/// recorded in the trace, when one is attached, under the label the caller set.
class Communicator {
public:
  Communicator(int rank, int world, size_t elementBytes)
      : rank(rank), world(world), elementBytes(elementBytes) {}
  virtual ~Communicator() = default;

  /// Sums `count` elements over the ranks, in place.
  void allReduce(void *data, size_t count);
  /// Sums `count` fp32 values over the ranks, in place, whatever elementBytes is: the
  /// totals of a norm's sums of squares, which every target holds in fp32.
  void allReduceSums(float *data, size_t count);
  /// Every rank's `count` elements, rank-major, into `out` (world * count).
  void allGather(const void *in, size_t count, void *out);
  /// Rank r's `counts[r]` elements, rank-major, into `out` (their sum), nothing padded;
  /// only where gathersVariableSizes().
  void allGatherV(const void *in, const std::vector<size_t> &counts, void *out);
  /// Whether the engine has a variable-size gather (Gloo's allgatherv; NCCL has none, so
  /// uneven pieces go padded there).
  virtual bool gathersVariableSizes() const { return false; }
  /// `in` holds world parts of `count` elements; rank r receives the sum of every rank's r-th.
  void reduceScatter(const void *in, size_t count, void *out);
  /// `in` holds world parts of `count` elements; the i-th goes to rank i, which keeps it as
  /// its r-th part of `out` when it came from rank r.
  void allToAll(const void *in, size_t count, void *out);

  /// `count` elements to rank `peer` of this group (a pipeline stage's activation); may return
  /// before the peer has them.
  void send(const void *data, size_t count, int peer);
  /// `count` elements from rank `peer` into `data`.
  void recv(void *data, size_t count, int peer);
  /// `bytes` bytes (a multiple of elementBytes) to or from rank `peer`, untraced: a control
  /// message of the generation (the step descriptor passed from stage to stage), in order
  /// with the sends.
  void sendControl(const void *data, size_t bytes, int peer);
  void recvControl(void *data, size_t bytes, int peer);
  /// From now on sends (send, sendControl) are held, in order, until releaseSends() makes
  /// them; their buffers must stay as they are until then. A pipeline stage holds its step's
  /// sends while its engine receives what an earlier step owes it, so that no two ranks wait
  /// on each other's send.
  void holdSends() { holding = true; }
  void releaseSends();

  /// Every rank's `bytes` bytes (a multiple of elementBytes), rank-major, into `out`: a
  /// control message of the generation (rank 0's decision after each forward), not a
  /// collective of the model, so not traced. The engine's all-gather: shared memory's spin,
  /// where the ranks share it, costs microseconds where a Gloo broadcast over TCP costs about
  /// a millisecond on a busy machine.
  void exchange(const void *in, size_t bytes, void *out) {
    runAllGather(in, bytes / elementBytes, out);
  }

  /// Where calls are recorded from now on (null: nowhere).
  void traceInto(std::vector<TraceEntry> *entries) { trace = entries; }
  /// What the next calls are for: the module and the forward's tokens they cover.
  void label(const char *module, int64_t tokens) {
    labelModule = module ? module : "";
    labelTokens = tokens;
  }

  const int rank, world;
  const size_t elementBytes;

  /// The path a collective of `kind` takes on this communicator (TraceEntry::path).
  virtual std::string pathOf(const std::string &kind) const = 0;

protected:
  virtual void runAllReduce(void *data, size_t count) = 0;
  /// allReduceSums' work: runAllReduce's where the elements are fp32 already; a communicator
  /// of other elements overrides it.
  virtual void runAllReduceSums(float *data, size_t count);
  virtual void runAllGather(const void *in, size_t count, void *out) = 0;
  virtual void runReduceScatter(const void *in, size_t count, void *out) = 0;
  virtual void runAllToAll(const void *in, size_t count, void *out) = 0;
  virtual void runAllGatherV(const void *in, const std::vector<size_t> &counts, void *out);
  virtual void runSend(const void *data, size_t count, int peer);
  virtual void runRecv(void *data, size_t count, int peer);

  const char *labelModule = "";
  int64_t labelTokens = 0;

private:
  void record(const char *kind, size_t elements) { recordBytes(kind, elements * elementBytes); }
  void recordBytes(const char *kind, size_t bytes);
  struct HeldSend {
    const void *data;
    size_t count;
    int peer;
    bool traced;
    const char *module;
    int64_t tokens;
  };
  bool holding = false;
  std::vector<HeldSend> held;
  std::vector<TraceEntry> *trace = nullptr;
};

/// A rank with no peer to talk to: a tp group of one, or one rank of a larger group run alone
/// to time its compute (the per-rank view). Each collective is computed as if every rank held
/// what this one holds, by local copies, so the shapes, not the values, are the model's; the
/// trace still lists each call.
class LocalCommunicator : public Communicator {
public:
  /// `variableSizes`: whether the engine it stands in for gathers uneven pieces unpadded (the
  /// CPU's Gloo does, the GPU's NCCL does not), so that its trace is that engine's.
  LocalCommunicator(int rank, int world, Memory &memory, bool variableSizes)
      : Communicator(rank, world, memory.elementBytes), memory(memory),
        variableSizes(variableSizes) {}
  bool gathersVariableSizes() const override { return variableSizes; }
  std::string pathOf(const std::string &) const override { return "local"; }

protected:
  void runAllReduce(void *data, size_t count) override;
  void runAllReduceSums(float *data, size_t count) override;
  void runAllGather(const void *in, size_t count, void *out) override;
  void runReduceScatter(const void *in, size_t count, void *out) override;
  void runAllToAll(const void *in, size_t count, void *out) override;
  void runAllGatherV(const void *in, const std::vector<size_t> &counts, void *out) override;
  void runSend(const void *data, size_t count, int peer) override;
  void runRecv(void *data, size_t count, int peer) override;

private:
  Memory &memory;
  bool variableSizes;
};

/// A dim of `size` split over `tp` ranks: each holds ceil(size / tp), the last ones padded.
int64_t pieceSize(int64_t size, int64_t tp);
/// The local and the global width of a feature dim made of strided `blocks`.
int64_t localWidth(const std::vector<int64_t> &blocks, int64_t tp);
int64_t globalWidth(const std::vector<int64_t> &blocks);

/// Calls fn(localOffset, globalOffset, count, piece) for rank `rank`'s piece of each block of
/// a feature dim: where it sits in the local row, where in the global row, how many of its
/// `piece` columns are real (the rest is padding).
template <typename Fn>
void forEachPiece(const std::vector<int64_t> &blocks, int tp, int rank, Fn fn) {
  int64_t localOffset = 0, globalOffset = 0;
  for (int64_t block : blocks) {
    int64_t piece = pieceSize(block, tp), first = rank * piece;
    fn(localOffset, globalOffset + first, std::max<int64_t>(0, std::min(piece, block - first)),
       piece);
    localOffset += piece;
    globalOffset += block;
  }
}

/// The placement changes a generated program calls, on [rows, cols] row-major matrices of the
/// Memory's elements. `blocks` are the global sizes of the strided blocks of a feature dim (one
/// block: a plain Shard); a local matrix holds this rank's ceil(size / tp) piece of each
/// block, padded with zeros. Token (row) splits happen only where tp divides the tokens. A
/// gather of pieces tp does not divide moves only the real columns where the program says so
/// (`variableGathers`, its #tp.target's gather mode), and pads them otherwise; a program that
/// asks for variable gathers on a communicator that cannot do them is refused.
/// `module` labels the collective in the trace.
class Collectives {
public:
  /// Throws when `variableGathers` is asked of a communicator without them.
  Collectives(Communicator &comm, Memory &memory, bool variableGathers);

  // Partial or sharded in, one communicator call each.
  void allReduce(const void *in, int64_t rows, int64_t cols, void *out, const char *module);
  /// The all_reduce of sums of squares: rows x cols fp32 values (Communicator::allReduceSums).
  void allReduceSums(const float *in, int64_t rows, int64_t cols, float *out,
                     const char *module);
  void allGatherColumns(const void *in, int64_t rows, const std::vector<int64_t> &blocks,
                        void *out, const char *module);
  void allGatherRows(const void *in, int64_t rows, int64_t cols, void *out,
                     const char *module);
  void reduceScatterColumns(const void *in, int64_t rows, const std::vector<int64_t> &blocks,
                            void *out, const char *module);
  void reduceScatterRows(const void *in, int64_t rows, int64_t cols, void *out,
                         const char *module);
  /// Shard(0) -> Shard(1) (rowsToColumns) or back: `tokens` global, `blocks` the features.
  void allToAll(const void *in, int64_t tokens, const std::vector<int64_t> &blocks,
                bool rowsToColumns, void *out, const char *module);

  // Reshards that need no communication.
  void takeColumns(const void *in, int64_t rows, const std::vector<int64_t> &blocks, void *out);
  void takeRows(const void *in, int64_t rows, int64_t cols, void *out);
  void partialFromReplicate(const void *in, int64_t n, void *out);
  void partialFromColumns(const void *in, int64_t rows, const std::vector<int64_t> &blocks,
                          void *out);
  void partialFromRows(const void *in, int64_t tokens, int64_t cols, void *out);

private:
  /// Rank `owner`'s pieces of [rows, global] `in` into its [rows, local] part of `out`,
  /// padding zeroed (pack), or back into their columns (unpack).
  void pack(const void *in, int64_t rows, const std::vector<int64_t> &blocks, int owner,
            void *out);
  void unpack(const void *in, int64_t rows, const std::vector<int64_t> &blocks, int owner,
              void *out);

  Communicator &comm;
  Memory &memory;
  const int rank, tp;
  const bool variableGathers;
};

} // namespace tpcrt

#endif // TPCRT_COLLECTIVES_H
