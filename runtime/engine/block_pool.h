// The KV cache's blocks as rank 0 hands them out: which are free, and how many holders each
// has. Today one sequence holds each block it fills; prefix caching will let sequences that
// share a prompt's beginning hold the same blocks, so a block is free again only when its last
// holder lets go. The pool knows nothing of sequences or tokens: the scheduler decides who
// holds what.
#ifndef TPCRT_ENGINE_BLOCK_POOL_H
#define TPCRT_ENGINE_BLOCK_POOL_H

#include <cstdint>
#include <vector>

namespace tpcrt {

class BlockPool {
public:
  /// `blocks` free blocks, numbered from 0.
  explicit BlockPool(int64_t blocks);

  int64_t total() const { return int64_t(holders.size()); }
  int64_t available() const { return int64_t(freeList.size()); }

  /// A free block, now held once: block 0 first from a fresh pool, then the one freed last,
  /// so a sequence readmitted after another finished reuses its blocks in order.
  int32_t allocate();
  /// One more holder of a held block.
  void hold(int32_t block);
  /// One holder fewer; the block is free again when none is left.
  void release(int32_t block);
  /// Releases every block of `blocks` (a sequence's table), last first, and empties it: the
  /// table's first block is then the next one allocated.
  void releaseAll(std::vector<int32_t> &blocks);
  int32_t holdersOf(int32_t block) const;

private:
  void check(int32_t block, const char *what) const;

  std::vector<int32_t> freeList; // allocated from the back
  std::vector<int32_t> holders;  // per block
};

} // namespace tpcrt

#endif // TPCRT_ENGINE_BLOCK_POOL_H
