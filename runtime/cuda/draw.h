// Picking a sampled row's token on the device (Step::argmax with a Draw per sequence): the
// host's Sampler (runtime/engine/sampling.cpp) restated for one block of threads over one row
// of logits, so that given the same row and the uniform number u that rank 0 drew from the
// request's generator, it picks the Sampler's token:
//   p = exp(logit / temperature - the largest of them), in double;
//   min_p drops p < min_p; top_k keeps the logits at least the k-th largest (ties kept);
//   top_p keeps the most likely tokens (ties by id) while the mass before each is below
//   top_p of what min_p and top_k kept (the most likely always);
//   the pick: the first token, in id order, whose running share of the kept mass passes u.
// Where the Sampler sorts, this selects: the k-th largest logit and the least likely token
// top_p keeps are found by radix selection, a digit of their key a pass (a histogram of counts,
// or of mass, in shared memory), so any vocabulary takes a fixed number of passes over its row.
//
// The phases are written once for the kernel and the unit tests: `Threads` runs a phase on
// every thread of the block (the kernel: each thread, then a barrier) or on the first alone;
// the tests run each thread of a phase in turn, which is all a barrier promises. Each thread
// holds a contiguous run of ids, so the runs' sums in thread order are sums in id order.
// The sums run in another order than the Sampler's (and the device's exp is not glibc's), so
// where u or a top_p cut falls within rounding of a boundary the two may pick neighbours.
// Internal to runtime/cuda; plain C++17 on the host.
#ifndef TPCRT_CUDA_DRAW_H
#define TPCRT_CUDA_DRAW_H

#include "paged.h" // TPC_HOST_DEVICE
#include "tpcrt/batch.h"

#include <cmath>
#include <cstdint>
#include <cstring>

namespace tpcrt::cuda {

constexpr int kDrawThreads = 256;
constexpr int kDrawDigitBits = 11, kDrawBins = 1 << kDrawDigitBits;
/// A row with a logit that is not finite: its id, as the argmax's (the engine fails it).
constexpr int64_t kDrawNotFinite = -2;

/// One block's shared memory: the histograms, each thread's partial result, and what the
/// first thread decides for all.
struct DrawShared {
  double mass[kDrawBins];
  uint32_t count[kDrawBins];
  double partial[kDrawThreads];
  int64_t partialIds[kDrawThreads];
  float partialMax[kDrawThreads];
  int64_t chosen; // the pick once made, -1 before
  int64_t argmax; // the largest logit's id
  double inverse, top, target;
  bool topK, topP;
  uint32_t kthKey; // top_k: the k-th largest logit's key
  uint64_t pivot;  // top_p: the least likely kept probability's bits
  int64_t tieKeep; // top_p: how many tokens of probability `pivot` stay, the lowest ids
  uint64_t prefix; // the radix selection's digits so far
  double massAbove;
  int64_t countAbove;
};

/// A float's key: ordered as the floats are (for finite ones).
TPC_HOST_DEVICE inline uint32_t floatKey(float x) {
  uint32_t bits;
  std::memcpy(&bits, &x, sizeof bits);
  return bits & 0x80000000u ? ~bits : bits | 0x80000000u;
}

/// A probability's key: a non-negative double's bits are ordered as it is.
TPC_HOST_DEVICE inline uint64_t probabilityKey(double p) {
  uint64_t bits;
  std::memcpy(&bits, &p, sizeof bits);
  return bits;
}

TPC_HOST_DEVICE inline double probabilityOf(uint64_t key) {
  double p;
  std::memcpy(&p, &key, sizeof p);
  return p;
}

/// A block of `threads` threads on the host, each phase's threads run in turn: the unit
/// tests' (the kernel's is in kernels.cu).
struct SerialThreads {
  int threads;
  int count() const { return threads; }
  template <class F> void all(F f) {
    for (int t = 0; t < threads; ++t)
      f(t);
  }
  template <class F> void one(F f) { f(0); }
  static void add(double &slot, double v) { slot += v; }
  static void add(uint32_t &slot, uint32_t v) { slot += v; }
};

/// Picks the token of `row` (vocab logits, row(i) a float) for `draw` into s.chosen, on a
/// block of `threads.count()` threads (at most kDrawThreads).
template <class Threads, class Row>
TPC_HOST_DEVICE void pickRow(Threads &threads, DrawShared &s, const Row &row, int64_t vocab,
                             const Draw &draw) {
  const int64_t chunk = (vocab + threads.count() - 1) / threads.count();
  auto begin = [&](int t) { return t * chunk < vocab ? t * chunk : vocab; };
  auto end = [&](int t) { return (t + 1) * chunk < vocab ? (t + 1) * chunk : vocab; };
  // Thread t's run of a digit's bins: [binsFrom(t), binsFrom(t + 1)).
  auto binsFrom = [&](int t, int width) {
    const int bins = 1 << width, per = (bins + threads.count() - 1) / threads.count();
    return t * per < bins ? t * per : bins;
  };

  // The largest logit (the lowest id of equal ones), and whether every logit is finite.
  threads.all([&](int t) {
    float best = 0;
    int64_t bestId = -1;
    for (int64_t i = begin(t); i < end(t); ++i) {
      float x = row(i);
      if (!std::isfinite(x)) {
        bestId = kDrawNotFinite;
        break;
      }
      if (bestId < 0 || x > best) {
        best = x;
        bestId = i;
      }
    }
    s.partialMax[t] = best;
    s.partialIds[t] = bestId;
  });
  threads.one([&](int) {
    float best = 0;
    int64_t bestId = -1;
    for (int t = 0; t < threads.count(); ++t) {
      int64_t id = s.partialIds[t];
      if (id == kDrawNotFinite) {
        bestId = kDrawNotFinite;
        break;
      }
      if (id >= 0 && (bestId < 0 || s.partialMax[t] > best)) {
        best = s.partialMax[t];
        bestId = id;
      }
    }
    s.argmax = bestId;
    s.chosen = bestId < 0 || draw.temperature == 0 ? bestId : -1; // (Draw::greedy: host only)
    s.inverse = 1.0 / draw.temperature;
    s.top = double(best) * s.inverse;
    s.topK = draw.topK > 0 && draw.topK < vocab;
    s.topP = draw.topP < 1;
    s.prefix = 0;
    s.countAbove = 0;
  });
  if (s.chosen != -1)
    return;

  // top_k: the k-th largest logit's key, a digit at a time from the top: the bin that holds
  // it is the one where the count of larger keys reaches k.
  for (int done = 0; s.topK && done < 32; done += kDrawDigitBits) {
    const int width = 32 - done < kDrawDigitBits ? 32 - done : kDrawDigitBits;
    const int shift = 32 - done - width;
    threads.all([&](int t) {
      for (int b = t; b < kDrawBins; b += threads.count())
        s.count[b] = 0;
    });
    threads.all([&](int t) {
      for (int64_t i = begin(t); i < end(t); ++i) {
        uint32_t key = floatKey(row(i));
        if (done == 0 || uint64_t(key >> (shift + width)) == s.prefix)
          threads.add(s.count[(key >> shift) & ((1u << width) - 1)], 1u);
      }
    });
    // Each thread totals a run of bins; the first walks the runs from the top, then the bins
    // of the run that reaches k.
    threads.all([&](int t) {
      int64_t n = 0;
      for (int b = binsFrom(t, width); b < binsFrom(t + 1, width); ++b)
        n += s.count[b];
      s.partialIds[t] = n;
    });
    threads.one([&](int) {
      int64_t above = s.countAbove;
      int t = threads.count() - 1;
      for (; t > 0 && above + s.partialIds[t] < draw.topK; --t)
        above += s.partialIds[t];
      int b = binsFrom(t + 1, width) - 1;
      for (; b > binsFrom(t, width) && above + s.count[b] < draw.topK; --b)
        above += s.count[b];
      s.prefix = s.prefix << width | uint64_t(b);
      s.countAbove = above;
      s.kthKey = uint32_t(s.prefix); // once the last digit is in
    });
  }

  auto probability = [&](int64_t i) { return std::exp(double(row(i)) * s.inverse - s.top); };
  // What min_p and top_k keep (a probability that underflowed to 0 is no candidate).
  auto filtered = [&](int64_t i, double p) {
    return p > 0 && (draw.minP <= 0 || p >= draw.minP) &&
           (!s.topK || floatKey(row(i)) >= s.kthKey);
  };
  threads.all([&](int t) {
    double sum = 0;
    for (int64_t i = begin(t); i < end(t); ++i) {
      double p = probability(i);
      if (filtered(i, p))
        sum += p;
    }
    s.partial[t] = sum;
  });
  threads.one([&](int) {
    double kept = 0;
    for (int t = 0; t < threads.count(); ++t)
      kept += s.partial[t];
    s.target = draw.topP * kept;
    s.prefix = 0;
    s.massAbove = 0;
  });

  // top_p: the least likely probability that stays. A token stays while the mass of those
  // more likely is below the target, so the cut's probability is the smallest whose mass
  // above is: a digit at a time, the lowest non-empty bin whose mass above is still below it.
  for (int done = 0; s.topP && done < 64; done += kDrawDigitBits) {
    const int width = 64 - done < kDrawDigitBits ? 64 - done : kDrawDigitBits;
    const int shift = 64 - done - width;
    threads.all([&](int t) {
      for (int b = t; b < kDrawBins; b += threads.count())
        s.mass[b] = 0;
    });
    threads.all([&](int t) {
      for (int64_t i = begin(t); i < end(t); ++i) {
        double p = probability(i);
        if (!filtered(i, p))
          continue;
        uint64_t key = probabilityKey(p);
        if (done == 0 || key >> (shift + width) == s.prefix)
          threads.add(s.mass[(key >> shift) & ((uint64_t(1) << width) - 1)], p);
      }
    });
    // Each thread totals a run of bins; the first walks the runs from the top to the last
    // with mass whose mass above is below the target (the lowest such bin is in it), then
    // its bins the same way.
    threads.all([&](int t) {
      double m = 0;
      for (int b = binsFrom(t, width); b < binsFrom(t + 1, width); ++b)
        m += s.mass[b];
      s.partial[t] = m;
    });
    threads.one([&](int) {
      double above = s.massAbove, runAbove = s.massAbove;
      int run = -1;
      for (int t = threads.count() - 1; t >= 0; --t) {
        if (s.partial[t] <= 0)
          continue;
        if (!(above < s.target) && run >= 0)
          break;
        run = t; // (the first run with mass always: its top token has no mass above)
        runAbove = above;
        above += s.partial[t];
      }
      int chosen = -1;
      above = runAbove;
      double chosenAbove = runAbove;
      for (int b = binsFrom(run + 1, width) - 1; run >= 0 && b >= binsFrom(run, width); --b) {
        if (s.mass[b] <= 0)
          continue;
        if (!(above < s.target) && chosen >= 0)
          break;
        chosen = b;
        chosenAbove = above;
        above += s.mass[b];
      }
      s.prefix = s.prefix << width | uint64_t(chosen < 0 ? 0 : chosen);
      s.massAbove = chosenAbove;
      s.pivot = s.prefix; // once the last digit is in
    });
  }

  // top_p's tie: of the tokens of the cut's probability, the j-th (by id) stays while the
  // mass above plus j of them is below the target. Each thread's count of them first, as
  // offsets: a token's rank among them is then its thread's offset and its place in the run.
  if (s.topP) {
    threads.all([&](int t) {
      int64_t n = 0;
      for (int64_t i = begin(t); i < end(t); ++i) {
        double p = probability(i);
        n += filtered(i, p) && probabilityKey(p) == s.pivot;
      }
      s.partialIds[t] = n;
    });
    threads.one([&](int) {
      int64_t tied = 0;
      for (int t = 0; t < threads.count(); ++t) {
        int64_t n = s.partialIds[t];
        s.partialIds[t] = tied;
        tied += n;
      }
      double p = probabilityOf(s.pivot), room = s.target - s.massAbove;
      double estimate = std::ceil(room / p);
      int64_t keep = estimate < 1 ? 1 : estimate > double(tied) ? tied : int64_t(estimate);
      while (keep > 1 && !(s.massAbove + double(keep - 1) * p < s.target))
        --keep;
      while (keep < tied && s.massAbove + double(keep) * p < s.target)
        ++keep;
      s.tieKeep = keep;
    });
  }
  // Whether token i stays, the tokens of the cut's probability counted in `tied` as they come.
  auto kept = [&](int64_t i, double p, int64_t &tied) {
    if (!filtered(i, p))
      return false;
    if (!s.topP)
      return true;
    uint64_t key = probabilityKey(p);
    return key > s.pivot || (key == s.pivot && tied++ < s.tieKeep);
  };

  // The draw: each run's kept mass; the first thread then finds the run where the running
  // share passes u, and in it the token.
  threads.all([&](int t) {
    int64_t tied = s.topP ? s.partialIds[t] : 0;
    double sum = 0;
    for (int64_t i = begin(t); i < end(t); ++i) {
      double p = probability(i);
      if (kept(i, p, tied))
        sum += p;
    }
    s.partial[t] = sum;
  });
  threads.one([&](int) {
    double total = 0;
    for (int t = 0; t < threads.count(); ++t)
      total += s.partial[t];
    double before = 0, runBefore = 0;
    int run = -1;
    for (int t = 0; t < threads.count(); ++t) {
      if (s.partial[t] <= 0)
        continue;
      run = t;
      runBefore = before;
      if (draw.u < (before + s.partial[t]) / total)
        break;
      before += s.partial[t];
    }
    if (run < 0) { // nothing kept, which the most likely token always is
      s.chosen = s.argmax;
      return;
    }
    // In that run, the first token past u; else (rounding left u past the last sum) the last
    // token kept, as the Sampler takes.
    int64_t tied = s.topP ? s.partialIds[run] : 0, chosen = -1;
    double sum = runBefore;
    for (int64_t i = begin(run); i < end(run); ++i) {
      double p = probability(i);
      if (!kept(i, p, tied))
        continue;
      chosen = i;
      sum += p;
      if (draw.u < sum / total)
        break;
    }
    s.chosen = chosen;
  });
}

} // namespace tpcrt::cuda

#endif // TPCRT_CUDA_DRAW_H
