// KernelChoice: which of several kernels that give the same bits runs on this CPU, chosen by
// timing each on the process's own calls (issue 48, item 4: kernels chosen by what they
// achieve on the CPU at hand, not by its feature flags alone). Plain C++17.
//
// The kernels it chooses among differ only in how they walk W (how many rows at once, whether
// the next rows are prefetched), never in the order of any sum, so the choice changes how
// fast a product is and never its value: the answer does not depend on a timing, on the rank
// or on the host, and no wisdom needs to be stored or agreed on.
#ifndef TPCRT_CPU_CHOICE_H
#define TPCRT_CPU_CHOICE_H

#include <vector>

namespace tpcrt::cpu {

class KernelChoice {
public:
  /// Among `variants` kernels (variant 0 the default), each timed on `samples` calls before
  /// one is chosen.
  KernelChoice(int variants, int samples);

  /// The variant the next call runs: while timing, each in turn; then the chosen one.
  int next() const { return decided() ? chosen_ : turn_ % variants_; }
  /// A call of `variant` took `seconds` for `bytes` of W. Once every variant has been timed
  /// `samples` times, chooses: the fastest by bytes over seconds (the slowest eighth of each
  /// variant's calls left out, as a preempted call would be), where it beats the default by
  /// kMargin; else the default.
  void record(int variant, double seconds, double bytes);

  bool decided() const { return chosen_ >= 0; }
  int chosen() const { return chosen_; }
  int variants() const { return variants_; }
  /// A variant's rate over its timed calls (bytes per second; 0 before any).
  double rate(int variant) const;

  /// How much faster than the default another variant must be to be chosen: less is noise.
  static constexpr double kMargin = 1.03;

private:
  struct Call {
    double seconds, bytes;
  };
  int variants_, samples_, turn_ = 0, chosen_ = -1;
  std::vector<std::vector<Call>> calls_;
};

} // namespace tpcrt::cpu

#endif // TPCRT_CPU_CHOICE_H
