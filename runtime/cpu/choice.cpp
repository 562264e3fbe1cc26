// KernelChoice: the fastest of several kernels that give the same bits, by timing (choice.h).
#include "tpcrt/cpu/choice.h"

#include <algorithm>
#include <stdexcept>

namespace tpcrt::cpu {

KernelChoice::KernelChoice(int variants, int samples)
    : variants_(variants), samples_(samples), calls_(size_t(std::max(variants, 0))) {
  if (variants < 1 || samples < 1)
    throw std::invalid_argument("KernelChoice needs at least one variant and one sample");
  if (variants == 1)
    chosen_ = 0;
}

void KernelChoice::record(int variant, double seconds, double bytes) {
  if (decided() || variant < 0 || variant >= variants_ || !(seconds > 0) || !(bytes > 0))
    return;
  calls_[size_t(variant)].push_back({seconds, bytes});
  ++turn_;
  for (const std::vector<Call> &calls : calls_)
    if (int(calls.size()) < samples_)
      return;
  int best = 0;
  for (int v = 1; v < variants_; ++v)
    if (rate(v) > rate(best))
      best = v;
  chosen_ = rate(best) > rate(0) * kMargin ? best : 0;
}

double KernelChoice::rate(int variant) const {
  if (variant < 0 || variant >= variants_ || calls_[size_t(variant)].empty())
    return 0;
  std::vector<Call> calls = calls_[size_t(variant)];
  // The slowest eighth by seconds per byte left out: a call the OS interrupted says nothing
  // of the kernel.
  std::sort(calls.begin(), calls.end(), [](const Call &a, const Call &b) {
    return a.seconds * b.bytes < b.seconds * a.bytes;
  });
  calls.resize(calls.size() - calls.size() / 8);
  double seconds = 0, bytes = 0;
  for (const Call &call : calls) {
    seconds += call.seconds;
    bytes += call.bytes;
  }
  return bytes / seconds;
}

} // namespace tpcrt::cpu
