// The collective layer (tpcrt/collectives.h): placement arithmetic once, over any
// Communicator and Memory.
#include "tpcrt/collectives.h"

#include <algorithm>
#include <cstring>
#include <stdexcept>

namespace tpcrt {

int64_t pieceSize(int64_t size, int64_t tp) { return (size + tp - 1) / tp; }

int64_t localWidth(const std::vector<int64_t> &blocks, int64_t tp) {
  int64_t w = 0;
  for (int64_t b : blocks)
    w += pieceSize(b, tp);
  return w;
}

int64_t globalWidth(const std::vector<int64_t> &blocks) {
  int64_t w = 0;
  for (int64_t b : blocks)
    w += b;
  return w;
}

// --- Host memory -------------------------------------------------------------------------

void HostMemory::copy2D(void *dst, int64_t dstPitch, const void *src, int64_t srcPitch,
                        int64_t count, int64_t rows) {
  size_t bytes = size_t(count) * elementBytes;
  if (bytes == 0)
    return;
  for (int64_t row = 0; row < rows; ++row)
    std::memcpy(at(dst, row * dstPitch), at(src, row * srcPitch), bytes);
}

void HostMemory::zero(void *dst, int64_t count) {
  if (count > 0)
    std::memset(dst, 0, size_t(count) * elementBytes);
}

void *HostMemory::scratch(size_t count) {
  if (staging.size() < count * elementBytes)
    staging.resize(count * elementBytes);
  return staging.data();
}

// --- Communicators -----------------------------------------------------------------------

void Communicator::recordBytes(const char *kind, size_t bytes) {
  if (trace)
    trace->push_back({kind, labelModule, labelTokens, uint64_t(bytes), pathOf(kind)});
}

void Communicator::allReduce(void *data, size_t count) {
  record("all_reduce", count);
  runAllReduce(data, count);
}

void Communicator::allReduceSums(float *data, size_t count) {
  recordBytes("all_reduce", count * sizeof(float));
  runAllReduceSums(data, count);
}

void Communicator::runAllReduceSums(float *data, size_t count) {
  if (elementBytes != sizeof(float))
    throw std::logic_error("this communicator's elements are not fp32, and it has no fp32 "
                           "all-reduce for a norm's sums");
  runAllReduce(data, count);
}

void Communicator::allGather(const void *in, size_t count, void *out) {
  record("all_gather", count * world);
  runAllGather(in, count, out);
}

void Communicator::allGatherV(const void *in, const std::vector<size_t> &counts, void *out) {
  size_t total = 0;
  for (size_t count : counts)
    total += count;
  record("all_gather", total);
  runAllGatherV(in, counts, out);
}

void Communicator::runAllGatherV(const void *, const std::vector<size_t> &, void *) {
  throw std::logic_error("this communicator has no variable-size gather");
}

void Communicator::reduceScatter(const void *in, size_t count, void *out) {
  record("reduce_scatter", count * world);
  runReduceScatter(in, count, out);
}

void Communicator::allToAll(const void *in, size_t count, void *out) {
  record("all_to_all", count * world);
  runAllToAll(in, count, out);
}

void Communicator::send(const void *data, size_t count, int peer) {
  if (holding) {
    held.push_back({data, count, peer, true, labelModule, labelTokens});
    return;
  }
  record("send", count);
  runSend(data, count, peer);
}

void Communicator::sendControl(const void *data, size_t bytes, int peer) {
  if (holding) {
    held.push_back({data, bytes / elementBytes, peer, false, "", 0});
    return;
  }
  runSend(data, bytes / elementBytes, peer);
}

void Communicator::recvControl(void *data, size_t bytes, int peer) {
  runRecv(data, bytes / elementBytes, peer);
}

void Communicator::releaseSends() {
  holding = false;
  std::vector<HeldSend> sends;
  sends.swap(held);
  for (const HeldSend &s : sends) {
    if (s.traced) {
      label(s.module, s.tokens);
      record("send", s.count);
    }
    runSend(s.data, s.count, s.peer);
  }
}

void Communicator::recv(void *data, size_t count, int peer) {
  record("recv", count);
  runRecv(data, count, peer);
}

void Communicator::runSend(const void *, size_t, int) {
  throw std::logic_error("this communicator has no point-to-point");
}

void Communicator::runRecv(void *, size_t, int) {
  throw std::logic_error("this communicator has no point-to-point");
}

// Every rank is taken to hold what this one holds: a sum keeps this rank's summand, a gather
// repeats its piece, and this rank's part of anything is its own.
void LocalCommunicator::runAllReduce(void *, size_t) {}
void LocalCommunicator::runAllReduceSums(float *, size_t) {}

void LocalCommunicator::runAllGather(const void *in, size_t count, void *out) {
  for (int r = 0; r < world; ++r)
    memory.copy(memory.at(out, int64_t(r * count)), in, int64_t(count));
}

void LocalCommunicator::runAllGatherV(const void *in, const std::vector<size_t> &counts,
                                      void *out) {
  // Every rank's piece taken to be this one's, cut or zero-extended to its count.
  int64_t at = 0, mine = int64_t(counts[size_t(rank)]);
  for (size_t count : counts) {
    int64_t n = int64_t(count), copied = std::min(n, mine);
    memory.copy(memory.at(out, at), in, copied);
    memory.zero(memory.at(out, at + copied), n - copied);
    at += n;
  }
}

void LocalCommunicator::runReduceScatter(const void *in, size_t count, void *out) {
  memory.copy(out, memory.at(in, int64_t(rank * count)), int64_t(count));
}

void LocalCommunicator::runAllToAll(const void *in, size_t count, void *out) {
  for (int r = 0; r < world; ++r)
    memory.copy(memory.at(out, int64_t(r * count)), memory.at(in, int64_t(rank * count)),
                int64_t(count));
}

// No peer holds a value this rank could stand in for: what it receives is zeros, of the
// message's shape.
void LocalCommunicator::runSend(const void *, size_t, int) {}

void LocalCommunicator::runRecv(void *data, size_t count, int) {
  memory.zero(data, int64_t(count));
}

// --- Placement changes -------------------------------------------------------------------

void Collectives::pack(const void *in, int64_t rows, const std::vector<int64_t> &blocks,
                       int owner, void *out) {
  int64_t local = localWidth(blocks, tp), global = globalWidth(blocks);
  bool padded = false;
  forEachPiece(blocks, tp, owner, [&](int64_t, int64_t, int64_t count, int64_t piece) {
    padded |= count < piece;
  });
  if (padded)
    memory.zero(out, rows * local);
  forEachPiece(blocks, tp, owner, [&](int64_t at, int64_t from, int64_t count, int64_t) {
    if (count > 0)
      memory.copy2D(memory.at(out, at), local, memory.at(in, from), global, count, rows);
  });
}

void Collectives::unpack(const void *in, int64_t rows, const std::vector<int64_t> &blocks,
                         int owner, void *out) {
  int64_t local = localWidth(blocks, tp), global = globalWidth(blocks);
  forEachPiece(blocks, tp, owner, [&](int64_t at, int64_t to, int64_t count, int64_t) {
    if (count > 0)
      memory.copy2D(memory.at(out, to), global, memory.at(in, at), local, count, rows);
  });
}

void Collectives::allReduce(const void *in, int64_t rows, int64_t cols, void *out,
                            const char *module) {
  memory.copy(out, in, rows * cols);
  comm.label(module, rows);
  comm.allReduce(out, size_t(rows * cols));
}

void Collectives::allReduceSums(const float *in, int64_t rows, int64_t cols, float *out,
                                const char *module) {
  // The fp32 values as whole elements of the memory's (4 bytes: one fp32, or two bf16).
  memory.copy(out, in, rows * cols * int64_t(sizeof(float) / memory.elementBytes));
  comm.label(module, rows);
  comm.allReduceSums(out, size_t(rows * cols));
}

Collectives::Collectives(Communicator &comm, Memory &memory, bool variableGathers)
    : comm(comm), memory(memory), rank(comm.rank), tp(comm.world),
      variableGathers(variableGathers) {
  if (variableGathers && !comm.gathersVariableSizes())
    throw std::runtime_error(
        "this program was compiled to gather uneven pieces unpadded (its target's gather mode "
        "is variable), which this communicator cannot do; compile it for the target it runs "
        "on");
}

void Collectives::allGatherColumns(const void *in, int64_t rows,
                                   const std::vector<int64_t> &blocks, void *out,
                                   const char *module) {
  int64_t local = localWidth(blocks, tp);
  comm.label(module, rows);
  // One row of one evenly split block: rank-major is column order already.
  bool even = std::all_of(blocks.begin(), blocks.end(), [&](int64_t b) { return b % tp == 0; });
  if (rows == 1 && blocks.size() == 1 && even) {
    comm.allGather(in, size_t(local), out);
    return;
  }
  if (!even && variableGathers) {
    // Only the real columns on the wire: each rank's [rows, real] after the gathered rows.
    std::vector<size_t> counts(static_cast<size_t>(tp));
    std::vector<int64_t> real(static_cast<size_t>(tp), 0);
    for (int r = 0; r < tp; ++r) {
      forEachPiece(blocks, tp, r, [&](int64_t, int64_t, int64_t count, int64_t) {
        real[size_t(r)] += count;
      });
      counts[size_t(r)] = size_t(rows * real[size_t(r)]);
    }
    int64_t global = globalWidth(blocks), mine = real[size_t(rank)];
    void *gathered = memory.scratch(size_t(rows * (global + mine)));
    void *packed = memory.at(gathered, rows * global);
    int64_t column = 0;
    forEachPiece(blocks, tp, rank, [&](int64_t at, int64_t, int64_t count, int64_t) {
      if (count > 0)
        memory.copy2D(memory.at(packed, column), mine, memory.at(in, at), local, count, rows);
      column += count;
    });
    comm.allGatherV(packed, counts, gathered);
    int64_t base = 0;
    for (int r = 0; r < tp; ++r) {
      int64_t width = real[size_t(r)], column = 0;
      forEachPiece(blocks, tp, r, [&](int64_t, int64_t to, int64_t count, int64_t) {
        if (count > 0)
          memory.copy2D(memory.at(out, to), global, memory.at(gathered, base + column), width,
                        count, rows);
        column += count;
      });
      base += rows * width;
    }
    return;
  }
  // Rank-major [tp][rows][local], then each rank's pieces to their columns.
  void *pieces = memory.scratch(size_t(tp * rows * local));
  comm.allGather(in, size_t(rows * local), pieces);
  for (int r = 0; r < tp; ++r)
    unpack(memory.at(pieces, r * rows * local), rows, blocks, r, out);
}

void Collectives::allGatherRows(const void *in, int64_t rows, int64_t cols, void *out,
                                const char *module) {
  comm.label(module, rows * tp);
  comm.allGather(in, size_t(rows * cols), out); // rank-major is row order
}

void Collectives::reduceScatterColumns(const void *in, int64_t rows,
                                       const std::vector<int64_t> &blocks, void *out,
                                       const char *module) {
  // Each rank's pieces, padding zeroed, rank-major: rank r receives the sum of the r-th.
  int64_t local = localWidth(blocks, tp);
  void *pieces = memory.scratch(size_t(tp * rows * local));
  for (int r = 0; r < tp; ++r)
    pack(in, rows, blocks, r, memory.at(pieces, r * rows * local));
  comm.label(module, rows);
  comm.reduceScatter(pieces, size_t(rows * local), out);
}

void Collectives::reduceScatterRows(const void *in, int64_t rows, int64_t cols, void *out,
                                    const char *module) {
  comm.label(module, rows);
  comm.reduceScatter(in, size_t(rows / tp * cols), out); // rank r's rows are the r-th part
}

void Collectives::allToAll(const void *in, int64_t tokens, const std::vector<int64_t> &blocks,
                           bool rowsToColumns, void *out, const char *module) {
  // The part for (or from) rank i is [tokens / tp, local]: rank i's pieces of this rank's
  // tokens. Laid one after the other, the parts from every rank are [tokens, local] in token
  // order, which is why only one side needs packing.
  int64_t local = localWidth(blocks, tp), mine = tokens / tp;
  size_t part = size_t(mine * local);
  void *parts = memory.scratch(size_t(tp) * part);
  comm.label(module, tokens);
  if (rowsToColumns) {
    for (int i = 0; i < tp; ++i)
      pack(in, mine, blocks, i, memory.at(parts, int64_t(i * part)));
    comm.allToAll(parts, part, out);
  } else {
    comm.allToAll(in, part, parts);
    for (int i = 0; i < tp; ++i)
      unpack(memory.at(parts, int64_t(i * part)), mine, blocks, i, out);
  }
}

void Collectives::takeColumns(const void *in, int64_t rows, const std::vector<int64_t> &blocks,
                              void *out) {
  pack(in, rows, blocks, rank, out);
}

void Collectives::takeRows(const void *in, int64_t rows, int64_t cols, void *out) {
  int64_t mine = rows / tp;
  memory.copy(out, memory.at(in, rank * mine * cols), mine * cols);
}

void Collectives::partialFromReplicate(const void *in, int64_t n, void *out) {
  if (rank == 0)
    memory.copy(out, in, n);
  else
    memory.zero(out, n);
}

void Collectives::partialFromColumns(const void *in, int64_t rows,
                                     const std::vector<int64_t> &blocks, void *out) {
  memory.zero(out, rows * globalWidth(blocks));
  unpack(in, rows, blocks, rank, out);
}

void Collectives::partialFromRows(const void *in, int64_t tokens, int64_t cols, void *out) {
  int64_t mine = tokens / tp;
  memory.zero(out, tokens * cols);
  memory.copy(memory.at(out, rank * mine * cols), in, mine * cols);
}

} // namespace tpcrt
