// Memory for the buffers a decode step streams whole (tpcrt/cpu/context.h's allocateStreamed):
// a mapping of their own in transparent huge pages on Linux, the heap elsewhere and in the
// sanitizer build.
#include "tpcrt/cpu/context.h"

#include <sys/mman.h>

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <new>

namespace tpcrt {
namespace cpu {
namespace {
// Sanitizer builds keep the heap, whose redzones catch a kernel reading past a weight.
#if defined(__linux__) && !defined(__SANITIZE_ADDRESS__)
constexpr size_t kHugePage = size_t(2) << 20;
size_t mappedSize(size_t bytes) { return (bytes + kHugePage - 1) / kHugePage * kHugePage; }
#endif
constexpr std::align_val_t kLineAlign{64};
} // namespace

std::byte *allocateStreamed(size_t bytes, bool zeroed) {
  if (bytes == 0)
    return nullptr;
#if defined(__linux__) && !defined(__SANITIZE_ADDRESS__)
  if (bytes > SIZE_MAX - 2 * kHugePage)
    throw std::bad_alloc();
  // Mapped one huge page larger, then trimmed to a start on a huge page's boundary: the
  // kernel backs only aligned 2 MiB stretches with huge pages.
  size_t size = mappedSize(bytes);
  void *mapped = ::mmap(nullptr, size + kHugePage, PROT_READ | PROT_WRITE,
                        MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (mapped == MAP_FAILED)
    throw std::bad_alloc();
  auto *start = static_cast<std::byte *>(mapped);
  size_t lead = (kHugePage - reinterpret_cast<uintptr_t>(start) % kHugePage) % kHugePage;
  if (lead)
    ::munmap(start, lead);
  ::munmap(start + lead + size, kHugePage - lead); // lead < kHugePage
  // Advice only: where the system keeps huge pages off ("never"), the pages stay small.
  ::madvise(start + lead, size, MADV_HUGEPAGE);
  (void)zeroed; // a fresh anonymous mapping reads as zeros
  return start + lead;
#else
  auto *heap = static_cast<std::byte *>(::operator new(bytes, kLineAlign));
  if (zeroed)
    std::memset(heap, 0, bytes);
  return heap;
#endif
}

void freeStreamed(std::byte *bytes, size_t size) {
  if (!bytes)
    return;
#if defined(__linux__) && !defined(__SANITIZE_ADDRESS__)
  ::munmap(bytes, mappedSize(size));
#else
  (void)size;
  ::operator delete(bytes, kLineAlign);
#endif
}
} // namespace cpu
} // namespace tpcrt
