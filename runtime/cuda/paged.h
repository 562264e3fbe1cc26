// What the CUDA attention kernels read of a step (tpcrt/batch.h), and the arithmetic they
// share with the host: which cache row holds a sequence's token (its block table of the
// layer's KV group, tpcrt/kv_groups.h), which keys a split of the decode reads, and how many
// splits a decode launch of several sequences takes.
// The host half (describeStep, decodeSplits) is plain C++17, so that the unit tests check it
// and the kernels' index arithmetic without a GPU; the kernels include the same functions.
// Internal to runtime/cuda.
#ifndef TPCRT_CUDA_PAGED_H
#define TPCRT_CUDA_PAGED_H

#include "tpcrt/batch.h"
#include "tpcrt/kv_groups.h"

#include <algorithm>
#include <cstdint>
#include <stdexcept>
#include <string>
#include <vector>

#ifdef __CUDACC__
#define TPC_HOST_DEVICE __host__ __device__
#else
#define TPC_HOST_DEVICE
#endif

namespace tpcrt::cuda {

/// One sequence of a step as the kernels read it: its rows [first, first + count) of the
/// step, the tokens its cache holds before them (its first row is at position `cached`), and
/// where its block tables start in the step's tables: one per KV group, `blocks` entries each
/// (its blocks for positions [0, cached + count)), group g's at table + g * blocks.
struct SequenceOnDevice {
  int64_t first = 0, count = 0, cached = 0, table = 0, blocks = 0;
};

/// A step's description on the device, passed to the kernels by value: the sequences, their
/// tables one after the other, each row's sequence, and the one-row sequences (those the
/// split-KV decode serves, in one launch).
struct StepView {
  const SequenceOnDevice *sequences = nullptr;
  const int32_t *tables = nullptr, *rowSequence = nullptr, *decodeList = nullptr;
  int blockSize = 1;
};

/// Sequence `s`'s block table of KV group `group` in the step's `tables`.
TPC_HOST_DEVICE inline const int32_t *tableOf(const int32_t *tables, const SequenceOnDevice &s,
                                              int group) {
  return tables + s.table + group * s.blocks;
}

/// The cache row holding a sequence's token at `position`: token p is in block
/// table[p / blockSize], at p % blockSize (tpcrt/batch.h). 32-bit division: a position is
/// below --max-model-len, which fits.
TPC_HOST_DEVICE inline int64_t cacheRow(const int32_t *table, int position, int blockSize) {
  return int64_t(table[position / blockSize]) * blockSize + position % blockSize;
}

/// The keys split `split` of `splits` of a one-row decode reads: the query at `position`
/// sees [lo, position] (lo the window's first key, or 0), cut into contiguous ranges of at
/// least `minKeys` keys; [first, last), empty (first >= last) for a split past the end.
struct KeyRange {
  int64_t first = 0, last = 0;
};
TPC_HOST_DEVICE inline KeyRange splitKeys(int64_t position, int64_t window, int64_t splits,
                                          int64_t split, int64_t minKeys) {
  int64_t lo = window > 0 && position - window + 1 > 0 ? position - window + 1 : 0;
  int64_t per = (position + 1 - lo + splits - 1) / splits;
  if (per < minKeys)
    per = minKeys;
  KeyRange r;
  r.first = lo + split * per;
  r.last = r.first + per < position + 1 ? r.first + per : position + 1;
  return r;
}

/// The splits of a decode launch over `sequences` one-row sequences, each of whose queries
/// reads at most `reads` keys (the layer's window, the longest sequence, its pool), where one
/// split of one sequence is `blocksPerSplit` blocks and the partials were prepared for
/// `prepared` splits of one sequence: enough blocks for about four per SM, none that could only
/// ever be empty, and never more partials than prepared (sequences * splits <= prepared; a
/// launch holds at most `prepared` sequences). It depends on no sequence's length, so a
/// captured launch stays valid at any length.
inline int64_t decodeSplits(int64_t sequences, int64_t reads, int64_t multiprocessors,
                            int64_t blocksPerSplit, int64_t prepared, int64_t minKeys) {
  if (sequences < 1 || sequences > prepared)
    throw std::logic_error("internal error: a decode launch of " + std::to_string(sequences) +
                           " sequences, where the partials hold " + std::to_string(prepared));
  int64_t blocks = blocksPerSplit * sequences;
  int64_t splits = std::min({(reads + minKeys - 1) / minKeys,
                             (4 * multiprocessors + blocks - 1) / blocks, prepared / sequences});
  return std::max<int64_t>(1, splits);
}

/// A step as the host uploads it (StepView's arrays), and the sequences of more than one row
/// (each its own prefill launch).
struct StepOnHost {
  std::vector<SequenceOnDevice> sequences;
  std::vector<int32_t> tables, rowSequence, decodeList;
  std::vector<int64_t> prefills;
};

/// A KV group as this rank's caches hold it: its pool's blocks, and the keys its layers'
/// queries read. blocks < 0: no layer of this rank's is in it (a pipeline stage's), so its
/// tables are copied but never read.
struct GroupOnDevice {
  int64_t blocks = -1;
  KvReach reach;
};

/// Describes `step` for the kernels, checking what a kernel would otherwise read out of
/// bounds: every row in exactly one sequence, and in each group's table every block the
/// sequence's rows read or write (positions from its reach's first read of the first row,
/// firstRead(cached), to cached + count) one of the group's blocks. Entries before those may
/// be -1 (blocks given back) and are never read. `groups` are the groups of the step's
/// tables, in order (Step::tableStride apart). Throws std::runtime_error naming the fault.
inline void describeStep(const Step &step, int64_t blockSize,
                         const std::vector<GroupOnDevice> &groups, StepOnHost &out) {
  if (blockSize < 1)
    throw std::runtime_error("internal error: a KV block of " + std::to_string(blockSize) +
                             " tokens");
  out.sequences.clear();
  out.tables.clear();
  out.decodeList.clear();
  out.prefills.clear();
  out.rowSequence.assign(size_t(std::max<int64_t>(0, step.tokens)), -1);
  for (size_t s = 0; s < step.sequences.size(); ++s) {
    const StepSequence &q = step.sequences[s];
    std::string which = "step sequence " + std::to_string(s);
    if (q.first < 0 || q.count < 1 || q.cached < 0 || q.first > step.tokens - q.count)
      throw std::runtime_error("internal error: " + which + " has rows [" +
                               std::to_string(q.first) + ", +" + std::to_string(q.count) +
                               ") after " + std::to_string(q.cached) + " cached, of a step of " +
                               std::to_string(step.tokens));
    if (q.cached + q.count > int64_t(INT32_MAX))
      throw std::runtime_error(which + " reaches position " + std::to_string(q.cached + q.count) +
                               ", past what the CUDA kernels index");
    for (int64_t r = q.first; r < q.first + q.count; ++r) {
      if (out.rowSequence[size_t(r)] >= 0)
        throw std::runtime_error("internal error: step row " + std::to_string(r) +
                                 " is in two sequences");
      out.rowSequence[size_t(r)] = int32_t(s);
    }
    int64_t held = (q.cached + q.count + blockSize - 1) / blockSize;
    SequenceOnDevice d{q.first, q.count, q.cached, int64_t(out.tables.size()), held};
    if (!q.blocks)
      throw std::runtime_error("internal error: " + which + " has no block table");
    if (groups.size() > 1 && step.tableStride < held)
      throw std::runtime_error("internal error: " + which + " holds " + std::to_string(held) +
                               " blocks, and its tables are " +
                               std::to_string(step.tableStride) + " apart");
    for (size_t g = 0; g < groups.size(); ++g) {
      const int32_t *table = q.blocks + int64_t(g) * step.tableStride;
      int64_t read = groups[g].reach.firstRead(q.cached) / blockSize;
      for (int64_t b = 0; b < held; ++b) {
        int32_t block = table[b];
        if (b >= read && groups[g].blocks >= 0 && (block < 0 || block >= groups[g].blocks))
          throw std::runtime_error(
              "internal error: " + which + "'s block table of KV group " + std::to_string(g) +
              " names block " + std::to_string(block) + " for its tokens from " +
              std::to_string(b * blockSize) + ", of a pool of " +
              std::to_string(groups[g].blocks) + " blocks");
        out.tables.push_back(block);
      }
    }
    out.sequences.push_back(d);
    if (q.count == 1)
      out.decodeList.push_back(int32_t(s));
    else
      out.prefills.push_back(int64_t(s));
  }
  for (size_t r = 0; r < out.rowSequence.size(); ++r)
    if (out.rowSequence[r] < 0)
      throw std::runtime_error("internal error: step row " + std::to_string(r) +
                               " is in no sequence");
}

} // namespace tpcrt::cuda

#endif // TPCRT_CUDA_PAGED_H
