// The KV cache's block pool (block_pool.h). Its misuse is the scheduler's bug, never a
// client's: an internal error, thrown.
#include "block_pool.h"

#include <stdexcept>
#include <string>

namespace tpcrt {

BlockPool::BlockPool(int64_t blocks) : freeList(size_t(blocks)), holders(size_t(blocks), 0) {
  for (size_t b = 0; b < freeList.size(); ++b)
    freeList[b] = int32_t(blocks - 1 - int64_t(b));
}

void BlockPool::check(int32_t block, const char *what) const {
  if (block < 0 || block >= total())
    throw std::logic_error(std::string("internal error: ") + what + " KV block " +
                           std::to_string(block) + " of " + std::to_string(total()));
}

int32_t BlockPool::allocate() {
  if (freeList.empty())
    throw std::logic_error("internal error: a KV block allocated with none free");
  int32_t block = freeList.back();
  freeList.pop_back();
  holders[size_t(block)] = 1;
  return block;
}

void BlockPool::hold(int32_t block) {
  check(block, "holding");
  if (holders[size_t(block)] == 0)
    throw std::logic_error("internal error: holding free KV block " + std::to_string(block));
  ++holders[size_t(block)];
}

void BlockPool::release(int32_t block) {
  check(block, "releasing");
  if (holders[size_t(block)] == 0)
    throw std::logic_error("internal error: releasing free KV block " + std::to_string(block));
  if (--holders[size_t(block)] == 0)
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

} // namespace tpcrt
