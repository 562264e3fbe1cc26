// The KV cache's blocks as rank 0 hands them out: which are free, how many holders each has,
// and the prefix cache: which full blocks hold the keys and values of which tokens, so that a
// sequence whose tokens begin as another's did may hold those blocks instead of computing
// them again (automatic prefix caching). The pool knows nothing of sequences: the scheduler
// decides who holds what and tells the cache what a full block holds.
//
// A full block's origin is the block before it in its sequence, as the cache has that one,
// and its own tokens. The keys and values of a block depend on nothing else (one model per
// process; positions follow from the chain), so two blocks of one origin hold the same ones.
// A first block's origin holds its requests' cache_salt too, which keeps clients who salt
// their requests apart: another salt finds none of their blocks.
// Origins are compared exactly, tokens and all: the cache never answers by a hash alone, so
// no crafted prompt can make one client's tokens read another's keys and values. A block's
// generation counts the times it was given out: an origin names its parent with the
// generation the parent had then, so once the parent is given out again its children are
// found no more (they wait in the eviction queue, as any cached block nobody holds).
//
// A cached block whose last holder lets go is kept, evictable: allocate() hands out a free
// block first, and only when none is left the cached block released longest ago, which the
// cache then forgets. available() counts both, so a sequence's admission and growth count
// cached blocks as room, as vLLM's free queue does.
#ifndef TPCRT_ENGINE_BLOCK_POOL_H
#define TPCRT_ENGINE_BLOCK_POOL_H

#include <cstdint>
#include <list>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

namespace tpcrt {

class BlockPool {
public:
  /// `blocks` free blocks, numbered from 0.
  explicit BlockPool(int64_t blocks);
  // (Its eviction queue's places are iterators into its own list: never copied or moved.)
  BlockPool(const BlockPool &) = delete;
  BlockPool &operator=(const BlockPool &) = delete;

  int64_t total() const { return int64_t(holders.size()); }
  /// What allocate() can hand out: the free blocks and the cached ones nobody holds.
  int64_t available() const { return int64_t(freeList.size() + evictQueue.size()); }
  /// Cached blocks nobody holds (kept for a later prefix, evictable).
  int64_t evictable() const { return int64_t(evictQueue.size()); }
  /// Blocks some sequence holds.
  int64_t held() const { return total() - available(); }

  /// A block, now held once: a free one (block 0 first from a fresh pool, then the one freed
  /// last, so a sequence readmitted after another finished reuses its blocks in order), else
  /// the cached one released longest ago, which the cache forgets.
  int32_t allocate();
  /// One more holder of a held block, or the first of a cached one nobody holds (no longer
  /// evictable).
  void hold(int32_t block);
  /// One holder fewer; with none left the block is free again, or evictable where cached.
  void release(int32_t block);
  /// Releases every block of `blocks` (a sequence's table), last first, and empties it: the
  /// table's first block is then the next one allocated, or, cached, the last one evicted.
  void releaseAll(std::vector<int32_t> &blocks);
  int32_t holdersOf(int32_t block) const;
  /// How many times `block` has been given out.
  uint64_t generationOf(int32_t block) const;

  /// The cached block holding the keys and values of `tokens` (`count` of them, a full
  /// block) after `parent` (a cached block, or -1 for a sequence's first block, of requests
  /// salted `salt`), if any.
  std::optional<int32_t> find(int32_t parent, const int64_t *tokens, int64_t count,
                              const std::string &salt = "") const;
  /// The same, for a parent of another pool (a KV window group's block is cached under
  /// group 0's), whose generation the caller gives.
  std::optional<int32_t> find(int32_t parent, uint64_t parentGeneration, const int64_t *tokens,
                              int64_t count) const;
  /// Held, full `block` holds the keys and values of `tokens` after `parent`, which had
  /// generation `parentGeneration` when the sequence found or made it (a first block: of
  /// requests salted `salt`). Returns the block the cache holds for that origin from now on:
  /// `block`, or the one it had already (kept: sequences may hold it already).
  int32_t publish(int32_t block, int32_t parent, uint64_t parentGeneration,
                  const int64_t *tokens, int64_t count, const std::string &salt = "");

private:
  struct Origin {
    int32_t parent = -1;
    uint64_t parentGeneration = 0;
    std::vector<int64_t> tokens;
    std::string salt; // a first block's (parent -1): its requests' cache_salt
    bool operator==(const Origin &o) const {
      return parent == o.parent && parentGeneration == o.parentGeneration &&
             tokens == o.tokens && salt == o.salt;
    }
  };
  struct OriginHash {
    size_t operator()(const Origin &o) const;
  };
  void check(int32_t block, const char *what) const;
  /// The cache forgets `block` (given out again).
  void forget(int32_t block);

  std::vector<int32_t> freeList;  // allocated from the back
  std::vector<int32_t> holders;   // per block
  std::vector<uint64_t> generation; // per block
  std::list<int32_t> evictQueue;  // cached blocks nobody holds, released longest ago first
  std::vector<std::list<int32_t>::iterator> queued; // per block: its place there, or end()
  std::vector<std::optional<Origin>> origins;       // per block: what it holds, where cached
  std::unordered_map<Origin, int32_t, OriginHash> cache;
};

} // namespace tpcrt

#endif // TPCRT_ENGINE_BLOCK_POOL_H
