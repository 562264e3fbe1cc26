// The KV cache's block pool and its prefix cache (block_pool.h). Its misuse is the
// scheduler's bug, never a client's: an internal error, thrown.
#include "block_pool.h"

#include <functional>
#include <stdexcept>
#include <string>

namespace tpcrt {

BlockPool::BlockPool(int64_t blocks)
    : freeList(size_t(blocks)), holders(size_t(blocks), 0), generation(size_t(blocks), 0),
      queued(size_t(blocks), evictQueue.end()), origins(size_t(blocks)) {
  for (size_t b = 0; b < freeList.size(); ++b)
    freeList[b] = int32_t(blocks - 1 - int64_t(b));
}

size_t BlockPool::OriginHash::operator()(const Origin &o) const {
  // Only spreads the table's buckets: a lookup compares the whole origin.
  uint64_t h = uint64_t(int64_t(o.parent)) * 0x9e3779b97f4a7c15ull ^ o.parentGeneration;
  for (int64_t t : o.tokens)
    h = (h ^ uint64_t(t)) * 0x100000001b3ull + (h >> 29);
  return size_t(h ^ std::hash<std::string>()(o.salt));
}

void BlockPool::check(int32_t block, const char *what) const {
  if (block < 0 || block >= total())
    throw std::logic_error(std::string("internal error: ") + what + " KV block " +
                           std::to_string(block) + " of " + std::to_string(total()));
}

void BlockPool::forget(int32_t block) {
  std::optional<Origin> &origin = origins[size_t(block)];
  if (!origin)
    return;
  auto it = cache.find(*origin);
  if (it != cache.end() && it->second == block)
    cache.erase(it);
  origin.reset();
}

int32_t BlockPool::allocate() {
  int32_t block;
  if (!freeList.empty()) {
    block = freeList.back();
    freeList.pop_back();
  } else if (!evictQueue.empty()) {
    block = evictQueue.front();
    evictQueue.pop_front();
    queued[size_t(block)] = evictQueue.end();
    forget(block);
  } else {
    throw std::logic_error("internal error: a KV block allocated with none free");
  }
  holders[size_t(block)] = 1;
  ++generation[size_t(block)];
  return block;
}

void BlockPool::hold(int32_t block) {
  check(block, "holding");
  if (holders[size_t(block)] == 0) {
    auto &place = queued[size_t(block)];
    if (place == evictQueue.end())
      throw std::logic_error("internal error: holding free KV block " + std::to_string(block));
    evictQueue.erase(place);
    place = evictQueue.end();
  }
  ++holders[size_t(block)];
}

void BlockPool::release(int32_t block) {
  check(block, "releasing");
  if (holders[size_t(block)] == 0)
    throw std::logic_error("internal error: releasing free KV block " + std::to_string(block));
  if (--holders[size_t(block)] > 0)
    return;
  if (origins[size_t(block)])
    queued[size_t(block)] = evictQueue.insert(evictQueue.end(), block);
  else
    freeList.push_back(block);
}

void BlockPool::releaseAll(std::vector<int32_t> &blocks) {
  for (auto b = blocks.rbegin(); b != blocks.rend(); ++b)
    release(*b);
  blocks.clear();
}

int32_t BlockPool::holdersOf(int32_t block) const {
  check(block, "asking after");
  return holders[size_t(block)];
}

uint64_t BlockPool::generationOf(int32_t block) const {
  check(block, "asking after");
  return generation[size_t(block)];
}

std::optional<int32_t> BlockPool::find(int32_t parent, const int64_t *tokens, int64_t count,
                                       const std::string &salt) const {
  Origin origin{parent, parent < 0 ? 0 : generationOf(parent),
                std::vector<int64_t>(tokens, tokens + count), parent < 0 ? salt : ""};
  auto it = cache.find(origin);
  if (it == cache.end())
    return std::nullopt;
  return it->second;
}

std::optional<int32_t> BlockPool::find(int32_t parent, uint64_t parentGeneration,
                                       const int64_t *tokens, int64_t count) const {
  auto it = cache.find(Origin{parent, parentGeneration,
                              std::vector<int64_t>(tokens, tokens + count), ""});
  if (it == cache.end())
    return std::nullopt;
  return it->second;
}

int32_t BlockPool::publish(int32_t block, int32_t parent, uint64_t parentGeneration,
                           const int64_t *tokens, int64_t count, const std::string &salt) {
  check(block, "publishing");
  if (holders[size_t(block)] == 0)
    throw std::logic_error("internal error: publishing free KV block " + std::to_string(block));
  if (origins[size_t(block)])
    throw std::logic_error("internal error: publishing KV block " + std::to_string(block) +
                           " twice");
  Origin origin{parent, parent < 0 ? 0 : parentGeneration,
                std::vector<int64_t>(tokens, tokens + count), parent < 0 ? salt : ""};
  auto [it, added] = cache.try_emplace(origin, block);
  if (added)
    origins[size_t(block)] = std::move(origin);
  return it->second;
}

} // namespace tpcrt
