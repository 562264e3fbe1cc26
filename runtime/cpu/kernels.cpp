// The CPU backend's kernels (tpcrt/cpu/kernels.h) but linear and embedding (matmul.cpp):
// plain loops over rows, attention's products through OpenBLAS.
#include "tpcrt/cpu/kernels.h"

#include "rows.h"

#include <cblas.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <type_traits>
#include <vector>

#if defined(__x86_64__)
#include <immintrin.h>
#endif

namespace tpcrt::cpu {

namespace {

/// e^x in fp32 without a call, so that loops over it vectorize: x = n ln 2 + r with
/// |r| <= ln 2 / 2 (ln 2 in two parts, so r keeps its low bits), e^r by the degree-7
/// polynomial of Cephes' expf (its published coefficients), and 2^n put straight into the
/// exponent bits. Within a few ulp of expf over [-87, 88]; below that 0 and above it
/// infinity, where e^x is within a factor of two of the smallest normal float or the largest.
inline float expApprox(float given) {
  float x = std::min(std::max(given, -87.0f), 88.0f);
  // n = round(x / ln 2): adding 1.5 * 2^23 rounds to an integer in the low mantissa bits.
  const float shifter = 12582912.0f;
  float n = x * 1.44269504088896341f + shifter;
  n -= shifter;
  float r = x - n * 0.693359375f;
  r -= n * -2.12194440e-4f;
  float p = 1.9875691500e-4f;
  p = p * r + 1.3981999507e-3f;
  p = p * r + 8.3334519073e-3f;
  p = p * r + 4.1665795894e-2f;
  p = p * r + 1.6666665459e-1f;
  p = p * r + 5.0000001201e-1f;
  p = p * r * r + r + 1.0f;
  int32_t bits = (int32_t(n) + 127) << 23;
  float twoN;
  std::memcpy(&twoN, &bits, sizeof twoN);
  float value = p * twoN;
  // Both tests made unconditionally, so that the selects are blends and the loop vectorizes.
  bool high = given > 88.0f, low = given < -87.0f;
  value = high ? INFINITY : value;
  return low ? 0.0f : value;
}

/// The sum of `n` floats, eight running sums wide (so it vectorizes), finished in double.
double sum(const float *x, int64_t n) {
  float lanes[8] = {};
  int64_t i = 0;
  for (; i + 8 <= n; i += 8)
    for (int j = 0; j < 8; ++j)
      lanes[j] += x[i + j];
  double total = 0;
  for (float lane : lanes)
    total += lane;
  for (; i < n; ++i)
    total += x[i];
  return total;
}

} // namespace

void rmsNorm(Host, const float *x, int64_t rows, int64_t cols, const float *weight, double epsilon,
             double weightOffset, float *out) {
  for (int64_t r = 0; r < rows; ++r) {
    const float *in = x + r * cols;
    double sum = 0;
    for (int64_t c = 0; c < cols; ++c)
      sum += double(in[c]) * in[c];
    double scale = 1.0 / std::sqrt(sum / cols + epsilon);
    for (int64_t c = 0; c < cols; ++c)
      out[r * cols + c] = float(in[c] * scale * (weight ? weight[c] + weightOffset : 1.0));
  }
}

void sumSquares(Host, const float *x, int64_t rows, int64_t cols, bool contribute, float *out) {
  for (int64_t r = 0; r < rows; ++r) {
    const float *in = x + r * cols;
    double sum = 0;
    for (int64_t c = 0; contribute && c < cols; ++c)
      sum += double(in[c]) * in[c];
    out[r] = float(sum);
  }
}

void rmsNormOfTotals(Host, const float *x, int64_t rows, int64_t cols, const float *totals,
                     int64_t features, const float *weight, double epsilon, double weightOffset,
                     float *out) {
  for (int64_t r = 0; r < rows; ++r) {
    double scale = 1.0 / std::sqrt(double(totals[r]) / features + epsilon);
    for (int64_t c = 0; c < cols; ++c)
      out[r * cols + c] = float(x[r * cols + c] * scale * (weight[c] + weightOffset));
  }
}

void rotary(Host, const float *x, int64_t rows, int64_t cols, int64_t headDim,
            const double *invFreq, const int64_t *positions, float *out, double scaling,
            bool interleaved, int64_t unrotated) {
  int64_t rotated = headDim - unrotated, half = rotated / 2;
  // Element i of a pair and its partner: halves (rotate_half), or neighbours (complex form).
  int64_t first = interleaved ? 2 : 1, second = interleaved ? 1 : half;
  // The angles depend on the position only: computed once per row, for every head.
  std::vector<double> cosines(half), sines(half);
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t i = 0; i < half; ++i) {
      double angle = positions[r] * invFreq[i];
      cosines[i] = std::cos(angle) * scaling;
      sines[i] = std::sin(angle) * scaling;
    }
    for (int64_t h = 0; h < cols / headDim; ++h) {
      const float *in = x + r * cols + h * headDim;
      float *o = out + r * cols + h * headDim;
      std::copy(in, in + unrotated, o);
      in += unrotated;
      o += unrotated;
      for (int64_t i = 0; i < half; ++i) {
        int64_t j = i * first, k = j + second;
        double a = in[j], b = in[k];
        o[j] = float(a * cosines[i] - b * sines[i]);
        o[k] = float(b * cosines[i] + a * sines[i]);
      }
    }
  }
}

void headSlice(Host, const float *x, int64_t rows, int64_t cols, int64_t headDim, int64_t offset,
               int64_t size, float *out) {
  int64_t heads = cols / headDim;
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t h = 0; h < heads; ++h)
      std::memcpy(out + (r * heads + h) * size, x + r * cols + h * headDim + offset,
                  size * sizeof(float));
}

void concatHeads(Host, const float *heads, int64_t rows, int64_t cols, int64_t headDim,
                 const float *shared, int64_t sharedCols, float *out) {
  int64_t count = cols / headDim, width = headDim + sharedCols;
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t h = 0; h < count; ++h) {
      float *o = out + (r * count + h) * width;
      std::memcpy(o, heads + r * cols + h * headDim, headDim * sizeof(float));
      std::memcpy(o + headDim, shared + r * sharedCols, sharedCols * sizeof(float));
    }
}

namespace {

/// The local KV head that query head h reads (see attention()), or -1 for a padding head of
/// an uneven split, whose output is zero.
int64_t kvHeadOf(int64_t h, int64_t heads, int64_t kvHeads, const HeadSplit &split) {
  if (!split.group)
    return h / (heads / kvHeads);
  if (h >= split.heads)
    return -1;
  return (split.firstHead + h) / split.group - split.firstKvHead;
}

/// One query row's scores over `keys` keys turned into its attention weights: the keys it
/// reads are first .. last, of the query at `position`; Llama 4's temperature and the
/// soft-cap applied, then the softmax, whose denominator `sink` (the head's, or null) joins
/// and no value receives; the others come out zero.
/// Inlined, so that a decode step's (attendOneWide) is compiled for AVX-512 too.
inline __attribute__((always_inline)) void
softmaxScores(float *row, int64_t keys, int64_t first, int64_t last, int64_t position,
              const float *sink, double softcap, const AttentionMask &mask) {
  if (mask.temperatureFloor > 0) { // as the query scaled, in float32
    float factor =
        float(std::log1p(std::floor(float(position + 1) / float(mask.temperatureFloor))) *
                  float(mask.temperatureScale) +
              1.0f);
    for (int64_t t = first; t <= last; ++t)
      row[t] *= factor;
  }
  float best = sink ? *sink : -INFINITY;
  for (int64_t t = first; t <= last; ++t) {
    if (softcap > 0)
      row[t] = float(softcap * std::tanh(row[t] / softcap));
    best = std::max(best, row[t]);
  }
  std::fill(row, row + first, 0.0f);
  for (int64_t t = first; t <= last; ++t)
    row[t] = expApprox(row[t] - best);
  std::fill(row + last + 1, row + keys, 0.0f);
  double total = sum(row + first, last + 1 - first);
  if (sink) // the sink's share of the softmax, which no value receives
    total += expApprox(*sink - best);
  float inverse = float(1.0 / total);
  for (int64_t t = first; t <= last; ++t)
    row[t] *= inverse;
}

/// Row `slot` of a cache's keys or values of `rowWidth` elements of `type` (of a block type,
/// whole blocks: the driver refuses one whose blocks do not divide the rows).
inline std::byte *cacheRow(void *base, DType type, int64_t slot, int64_t rowWidth) {
  return static_cast<std::byte *>(base) + dtypeBytesFor(type, slot * rowWidth);
}

/// A decode step's attention, one new token of a sequence at `position`, reading the keys and
/// values where they lie in the cache through the sequence's block table: an f32 or bf16
/// cache's rows in place (E float or Bf16), another type's a block of rows at a time widened
/// into fp32 that stays in cache. So no copy of the sequence's keys and values is made,
/// whatever the blocks' order, and each key and value row is read once a step and met by every
/// query head that reads it, not once per head of its group. Each score is a dot product of
/// the query and the key (Dot's), each output the weighted sum of the values key by key: the
/// prefill's arithmetic in another order, as the scores' GEMM rounds them in its own.
template <class E, class Dot>
inline __attribute__((always_inline)) void
attendOneBody(const float *q, int64_t position, const int32_t *table, const KVCache &cache,
              int64_t heads, int64_t kvHeads, int64_t headDim, double scale, KvReach reach,
              double softcap, const HeadSplit &split, float *out, const float *sinks,
              int64_t valueHeadDim, const AttentionMask &mask) {
  const int64_t width = kvHeads * headDim, vWidth = kvHeads * valueHeadDim;
  const int64_t size = cache.blockSize, first = reach.firstRead(position);
  const int64_t keys = position + 1 - first;
  const bool inPlace = std::is_same_v<E, Bf16> || cache.type == DType::F32;
  thread_local std::vector<float> scores, widened;
  scores.resize(size_t(heads * keys));
  if (!inPlace)
    widened.resize(size_t(size * std::max(width, vWidth)));
  // Positions from .. to - 1 (one block's) of the keys or values.
  auto rowsOf = [&](void *base, int64_t rowWidth, int64_t from, int64_t to) -> const E * {
    const std::byte *at =
        cacheRow(base, cache.type, int64_t(table[from / size]) * size + from % size, rowWidth);
    if (inPlace)
      return reinterpret_cast<const E *>(at);
    widenFast(at, cache.type, widened.data(), size_t((to - from) * rowWidth));
    return reinterpret_cast<const E *>(widened.data()); // E is float here
  };
  for (int64_t from = first; from <= position; from = (from / size + 1) * size) {
    int64_t to = std::min(position + 1, (from / size + 1) * size);
    const E *k = rowsOf(cache.keys, width, from, to);
    for (int64_t t = from; t < to; ++t, k += width)
      for (int64_t h = 0; h < heads; ++h)
        if (int64_t kv = kvHeadOf(h, heads, kvHeads, split); kv >= 0)
          scores[size_t(h * keys + t - first)] =
              float(scale) * Dot::of(q + h * headDim, k + kv * headDim, headDim);
  }
  for (int64_t h = 0; h < heads; ++h)
    if (kvHeadOf(h, heads, kvHeads, split) >= 0)
      softmaxScores(scores.data() + h * keys, keys, 0, keys - 1, position,
                    sinks ? sinks + h : nullptr, softcap, mask);
  std::fill(out, out + heads * valueHeadDim, 0.0f);
  for (int64_t from = first; from <= position; from = (from / size + 1) * size) {
    int64_t to = std::min(position + 1, (from / size + 1) * size);
    const E *v = rowsOf(cache.values, vWidth, from, to);
    for (int64_t t = from; t < to; ++t, v += vWidth)
      for (int64_t h = 0; h < heads; ++h)
        if (int64_t kv = kvHeadOf(h, heads, kvHeads, split); kv >= 0) {
          const float p = scores[size_t(h * keys + t - first)];
          const E *vt = v + kv * valueHeadDim;
          float *o = out + h * valueHeadDim;
          for (int64_t d = 0; d < valueHeadDim; ++d)
            o[d] += p * fp32(vt[d]);
        }
  }
}

#define TPC_ATTEND_ONE_ARGS                                                                    \
  const float *q, int64_t position, const int32_t *table, const KVCache &cache, int64_t heads, \
      int64_t kvHeads, int64_t headDim, double scale, KvReach reach, double softcap,           \
      const HeadSplit &split, float *out, const float *sinks, int64_t valueHeadDim,            \
      const AttentionMask &mask
#define TPC_ATTEND_ONE_CALL                                                                    \
  q, position, table, cache, heads, kvHeads, headDim, scale, reach, softcap, split, out, sinks, \
      valueHeadDim, mask

/// dot() as it is compiled where it is called.
struct PlainDot {
  template <class E> static float of(const float *a, const E *b, int64_t n) {
    return dot(a, b, n);
  }
};

// attendOneBody compiled twice: for the CPUs with AVX-512 (its dot products sixteen lanes
// wide, the rest as the compiler vectorizes it for them) and for every x86-64.
#if defined(__x86_64__)
// GCC 12's AVX-512 intrinsics trip -Wmaybe-uninitialized (GCC bug 105593; see matmul.cpp).
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"
#define TPC_AVX512 __attribute__((target("avx512f,avx512bw,avx2,fma")))
/// A dot product in sixteen lanes, reduced once at its end (for a head of 64, four FMAs and a
/// reduction, where dot()'s eight lanes compile to four-lane halves).
struct WideDot {
  template <class E> TPC_AVX512 static inline float of(const float *a, const E *b, int64_t n) {
    __m512 acc = _mm512_setzero_ps();
    int64_t i = 0;
    for (; i + 16 <= n; i += 16) {
      __m512 wide;
      if constexpr (std::is_same_v<E, Bf16>)
        wide = _mm512_castsi512_ps(_mm512_slli_epi32(
            _mm512_cvtepu16_epi32(_mm256_loadu_si256(reinterpret_cast<const __m256i *>(b + i))),
            16));
      else
        wide = _mm512_loadu_ps(b + i);
      acc = _mm512_fmadd_ps(_mm512_loadu_ps(a + i), wide, acc);
    }
    float total = _mm512_reduce_add_ps(acc);
    for (; i < n; ++i)
      total += a[i] * fp32(b[i]);
    return total;
  }
};

TPC_AVX512 void attendOneWide(TPC_ATTEND_ONE_ARGS) {
  if (cache.type == DType::BF16)
    return attendOneBody<Bf16, WideDot>(TPC_ATTEND_ONE_CALL);
  attendOneBody<float, WideDot>(TPC_ATTEND_ONE_CALL);
}
#undef TPC_AVX512
#pragma GCC diagnostic pop
#endif

void attendOne(TPC_ATTEND_ONE_ARGS) {
#if defined(__x86_64__)
  // AVX-512 F and BW with FMA, unless a test switched the wide or the vector kernels off.
  if (avx512Allowed() && detail::vectorKernelsFor(DType::F32))
    return attendOneWide(TPC_ATTEND_ONE_CALL);
#endif
  if (cache.type == DType::BF16)
    return attendOneBody<Bf16, PlainDot>(TPC_ATTEND_ONE_CALL);
  attendOneBody<float, PlainDot>(TPC_ATTEND_ONE_CALL);
}
#undef TPC_ATTEND_ONE_ARGS
#undef TPC_ATTEND_ONE_CALL

/// Attention of one sequence's `rows` new tokens, at positions start .., whose keys and values
/// (those of positions base .. start + rows - 1, the new ones included; base is at most the
/// first position the first row reads) lie contiguous from `keysOf` and `valuesOf`; see
/// attention() for the rest.
void attendSequence(const float *q, int64_t rows, int64_t start, int64_t base, const float *keysOf,
                    const float *valuesOf, int64_t heads, int64_t kvHeads, int64_t headDim,
                    double scale, int64_t slidingWindow, double softcap, const HeadSplit &split,
                    float *out, const float *sinks, int64_t valueHeadDim,
                    const AttentionMask &mask) {
  int64_t width = kvHeads * headDim, vWidth = kvHeads * valueHeadDim;
  int64_t keys = start + rows - base, qWidth = heads * headDim;
  KvReach reach{slidingWindow, mask.chunkSize};
  int64_t oWidth = heads * valueHeadDim;
  // Scores of one head for every new token against every cached key, [rows, keys]; reused
  // across calls so a decode step allocates nothing.
  thread_local std::vector<float> scores;
  scores.resize(size_t(rows * keys));
  for (int64_t h = 0; h < heads; ++h) {
    int64_t kv = kvHeadOf(h, heads, kvHeads, split);
    if (kv < 0) { // padding: a head this rank does not hold
      for (int64_t r = 0; r < rows; ++r)
        std::fill_n(out + r * oWidth + h * valueHeadDim, valueHeadDim, 0.0f);
      continue;
    }
    const float *kh = keysOf + kv * headDim;
    const float *vh = valuesOf + kv * valueHeadDim;
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, int(rows), int(keys), int(headDim),
                float(scale), q + h * headDim, int(qWidth), kh, int(width), 0.0f, scores.data(),
                int(keys));
    for (int64_t r = 0; r < rows; ++r) {
      // The row's scores, from key `base` on; causal: keys reach.firstRead(p) .. p, counted
      // from base (first .. last).
      int64_t position = start + r;
      softmaxScores(scores.data() + r * keys, keys, reach.firstRead(position) - base,
                    position - base, position, sinks ? sinks + h : nullptr, softcap, mask);
    }
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, int(rows), int(valueHeadDim),
                int(keys), 1.0f, scores.data(), int(keys), vh, int(vWidth), 0.0f,
                out + h * valueHeadDim, int(oWidth));
  }
}

} // namespace

void attention(Host, const float *q, const float *k, const float *v, int64_t rows, int64_t heads,
               int64_t kvHeads, int64_t headDim, double scale, int64_t slidingWindow,
               double softcap, const HeadSplit &split, StepCache c, float *out,
               const float *sinks, int64_t valueHeadDim, const AttentionMask &mask) {
  (void)rows; // the step's tokens, which its sequences divide
  if (valueHeadDim == 0)
    valueHeadDim = headDim;
  KVCache &cache = c.cache;
  int64_t width = kvHeads * headDim, vWidth = kvHeads * valueHeadDim, size = cache.blockSize;
  int64_t qWidth = heads * headDim, oWidth = heads * valueHeadDim;
  auto rowOf = [&](void *base, int64_t slot, int64_t rowWidth) {
    return cacheRow(base, cache.type, slot, rowWidth);
  };
  // The blocks are read from the first one the step's first row reads: before it, a layer
  // with a window or chunks reads nothing, and its group's table may have given them back.
  KvReach reach{slidingWindow, mask.chunkSize};
  // A sequence's decode step reads the cache in place (attendOne). A prefill whose blocks are
  // not one run, or of a cache of another type than f32, is read from an fp32 copy of its keys
  // and values in order (one GEMM of its rows by them); reused across calls.
  thread_local std::vector<float> keysInOrder, valuesInOrder;
  for (const StepSequence &s : c.step.sequences) {
    const int32_t *table = s.blocks + cache.group * c.step.tableStride; // its group's
    for (int64_t i = 0; i < s.count; ++i) { // the new keys and values into their slots
      int64_t position = s.cached + i;
      int64_t slot = int64_t(table[position / size]) * size + position % size;
      narrow(k + (s.first + i) * width, cache.type, rowOf(cache.keys, slot, width),
             size_t(width));
      narrow(v + (s.first + i) * vWidth, cache.type, rowOf(cache.values, slot, vWidth),
             size_t(vWidth));
    }
    if (s.count == 1) {
      attendOne(q + s.first * qWidth, s.cached, table, cache, heads, kvHeads, headDim, scale,
                reach, softcap, split, out + s.first * oWidth, sinks, valueHeadDim, mask);
      continue;
    }
    int64_t total = s.cached + s.count, blocks = (total + size - 1) / size;
    int64_t firstBlock = reach.firstRead(s.cached) / size, base = firstBlock * size;
    bool run = true;
    for (int64_t b = firstBlock + 1; b < blocks && run; ++b)
      run = table[b] == table[firstBlock] + (b - firstBlock);
    const float *keysOf, *valuesOf;
    if (run && cache.type == DType::F32) {
      int64_t from = int64_t(table[firstBlock]) * size;
      keysOf = reinterpret_cast<const float *>(rowOf(cache.keys, from, width));
      valuesOf = reinterpret_cast<const float *>(rowOf(cache.values, from, vWidth));
    } else {
      keysInOrder.resize(size_t((total - base) * width));
      valuesInOrder.resize(size_t((total - base) * vWidth));
      for (int64_t b = firstBlock; b < blocks; ++b) {
        int64_t from = int64_t(table[b]) * size, count = std::min(size, total - b * size);
        int64_t at = (b - firstBlock) * size;
        widenFast(rowOf(cache.keys, from, width), cache.type, keysInOrder.data() + at * width,
                  size_t(count * width));
        widenFast(rowOf(cache.values, from, vWidth), cache.type,
                  valuesInOrder.data() + at * vWidth, size_t(count * vWidth));
      }
      keysOf = keysInOrder.data();
      valuesOf = valuesInOrder.data();
    }
    attendSequence(q + s.first * qWidth, s.count, s.cached, base, keysOf, valuesOf, heads, kvHeads,
                   headDim, scale, slidingWindow, softcap, split, out + s.first * oWidth, sinks,
                   valueHeadDim, mask);
  }
}

void silu(Host, const float *x, int64_t n, float *out) {
  for (int64_t i = 0; i < n; ++i)
    out[i] = x[i] / (1.0f + expApprox(-x[i]));
}

void gelu(Host, const float *x, int64_t n, bool tanhApproximation, float *out) {
  for (int64_t i = 0; i < n; ++i) {
    double v = x[i];
    if (tanhApproximation)
      out[i] = float(0.5 * v * (1 + std::tanh(0.7978845608028654 * (v + 0.044715 * v * v * v))));
    else
      out[i] = float(0.5 * v * (1 + std::erf(v / std::sqrt(2.0))));
  }
}

void scale(Host, const float *x, int64_t n, double factor, float *out) {
  for (int64_t i = 0; i < n; ++i)
    out[i] = float(x[i] * factor);
}

void softcap(Host, const float *x, int64_t n, double cap, float *out) {
  for (int64_t i = 0; i < n; ++i)
    out[i] = float(cap * std::tanh(x[i] / cap));
}

/// The indices of the k largest of `values` first in `order` (torch.topk's choice: the
/// largest, the lower index first on ties).
static void topIndices(const std::vector<double> &values, int64_t k, std::vector<int64_t> &order) {
  order.resize(values.size());
  for (size_t i = 0; i < order.size(); ++i)
    order[i] = int64_t(i);
  std::partial_sort(order.begin(), order.begin() + k, order.end(), [&](int64_t a, int64_t b) {
    return values[size_t(a)] > values[size_t(b)] ||
           (values[size_t(a)] == values[size_t(b)] && a < b);
  });
}

void router(Host host, const float *x, int64_t rows, int64_t hidden, const float *w,
            int64_t experts, int64_t topK, bool normalize, float *out, const float *bias,
            bool softmaxAfterTopK, double scale, int64_t groups, int64_t topGroups,
            bool sigmoid) {
  linear(host, x, rows, hidden, w, experts, bias, out);
  std::vector<int64_t> order(experts), groupOrder;
  std::vector<double> probs(experts), groupBest(size_t(std::max<int64_t>(groups, 0)));
  for (int64_t r = 0; r < rows; ++r) {
    float *row = out + r * experts;
    if (sigmoid) { // Llama 4: the top k logits, each through a sigmoid (in float32)
      for (int64_t e = 0; e < experts; ++e)
        probs[e] = row[e];
      topIndices(probs, topK, order);
      std::vector<float> kept(static_cast<size_t>(topK));
      for (int64_t i = 0; i < topK; ++i)
        kept[size_t(i)] = 1.0f / (1.0f + std::exp(-row[order[i]]));
      std::fill(row, row + experts, 0.0f);
      for (int64_t i = 0; i < topK; ++i)
        row[order[i]] = kept[size_t(i)];
      continue;
    }
    if (softmaxAfterTopK) {
      for (int64_t e = 0; e < experts; ++e)
        order[e] = e;
      std::partial_sort(
          order.begin(), order.begin() + topK, order.end(),
          [&](int64_t a, int64_t b) { return row[a] > row[b] || (row[a] == row[b] && a < b); });
      double best = row[order[0]], total = 0;
      for (int64_t i = 0; i < topK; ++i)
        total += probs[i] = std::exp(double(row[order[i]]) - best);
      std::fill(row, row + experts, 0.0f);
      for (int64_t i = 0; i < topK; ++i)
        row[order[i]] = float(probs[i] / total);
      continue;
    }
    double best = *std::max_element(row, row + experts), total = 0;
    for (int64_t e = 0; e < experts; ++e)
      total += probs[e] = std::exp(double(row[e]) - best);
    for (int64_t e = 0; e < experts; ++e)
      probs[e] = float(probs[e] / total); // torch's softmax is float32
    if (groups > 0) { // group_limited_greedy: experts of the top_groups best groups only
      int64_t size = experts / groups;
      for (int64_t g = 0; g < groups; ++g)
        groupBest[size_t(g)] = *std::max_element(&probs[g * size], &probs[g * size] + size);
      topIndices(groupBest, topGroups, groupOrder);
      std::vector<bool> kept(size_t(groups), false);
      for (int64_t i = 0; i < topGroups; ++i)
        kept[size_t(groupOrder[size_t(i)])] = true;
      for (int64_t e = 0; e < experts; ++e)
        if (!kept[size_t(e / size)])
          probs[e] = 0.0;
    }
    topIndices(probs, topK, order);
    double kept = 0;
    for (int64_t i = 0; i < topK; ++i)
      kept += float(probs[order[i]]);
    std::fill(row, row + experts, 0.0f);
    for (int64_t i = 0; i < topK; ++i) {
      int64_t e = order[i];
      float weight = normalize ? float(float(probs[e]) / kept) : float(probs[e]);
      row[e] = scale == 1.0 ? weight : float(weight * float(scale));
    }
  }
}

void experts(Host host, const float *x, int64_t rows, int64_t hidden, const float *routing,
             int64_t experts, const float *gateUp, const float *down, int64_t inter, bool geluTanh,
             const ExpertsForm &form, float *out) {
  if (!form.inOutInterleaved && !form.gateUpBias && !(form.alpha > 0) && !form.inOut &&
      !form.scaleInput)
    return cpu::experts(host, x, rows, hidden, routing, experts, gateUp, down, inter, geluTanh,
                        out);
  std::fill(out, out + rows * hidden, 0.0f);
  std::vector<float> gu(2 * inter), gate(inter), up(inter), act(inter), y(hidden), scaled(hidden);
  bool inOut = form.inOutInterleaved || form.inOut; // x @ W
  for (int64_t t = 0; t < rows; ++t)
    for (int64_t e = 0; e < experts; ++e) {
      float weight = routing[t * experts + e];
      if (weight == 0.0f)
        continue;
      const float *w = gateUp + e * 2 * inter * hidden, *d = down + e * hidden * inter;
      const float *in = x + t * hidden;
      if (form.scaleInput) { // Llama 4: the expert sees weight * x
        for (int64_t h = 0; h < hidden; ++h)
          scaled[h] = in[h] * weight;
        in = scaled.data();
      }
      if (inOut) // x @ W, W [hidden, 2 * inter]
        cblas_sgemv(CblasRowMajor, CblasTrans, int(hidden), int(2 * inter), 1.0f, w, int(2 * inter),
                    in, 1, 0.0f, gu.data(), 1);
      else
        linear(host, in, 1, hidden, w, 2 * inter, nullptr, gu.data());
      if (form.gateUpBias)
        for (int64_t j = 0; j < 2 * inter; ++j)
          gu[j] += form.gateUpBias[e * 2 * inter + j];
      for (int64_t i = 0; i < inter; ++i) {
        gate[i] = form.inOutInterleaved ? gu[2 * i] : gu[i];
        up[i] = form.inOutInterleaved ? gu[2 * i + 1] : gu[inter + i];
      }
      if (form.alpha > 0) {
        float limit = float(form.limit), alpha = float(form.alpha);
        for (int64_t i = 0; i < inter; ++i) {
          float g = std::min(gate[i], limit), u = std::min(std::max(up[i], -limit), limit);
          float glu = g / (1.0f + std::exp(-g * alpha));
          act[i] = (u + 1.0f) * glu;
        }
      } else {
        if (geluTanh)
          gelu(host, gate.data(), inter, true, act.data());
        else
          silu(host, gate.data(), inter, act.data());
        mul(host, act.data(), up.data(), inter, act.data());
      }
      if (inOut) // act @ D, D [inter, hidden]
        cblas_sgemv(CblasRowMajor, CblasTrans, int(inter), int(hidden), 1.0f, d, int(hidden),
                    act.data(), 1, 0.0f, y.data(), 1);
      else
        linear(host, act.data(), 1, inter, d, hidden, nullptr, y.data());
      if (form.downBias)
        for (int64_t h = 0; h < hidden; ++h)
          y[h] += form.downBias[e * hidden + h];
      float outWeight = form.scaleInput ? 1.0f : weight;
      for (int64_t h = 0; h < hidden; ++h)
        out[t * hidden + h] += outWeight * y[h];
    }
}

void experts(Host host, const float *x, int64_t rows, int64_t hidden, const float *routing,
             int64_t experts, const float *gateUp, const float *down, int64_t inter, bool geluTanh,
             float *out) {
  std::fill(out, out + rows * hidden, 0.0f);
  std::vector<float> gu(2 * inter), act(inter), y(hidden);
  for (int64_t t = 0; t < rows; ++t)
    for (int64_t e = 0; e < experts; ++e) {
      float weight = routing[t * experts + e];
      if (weight == 0.0f)
        continue;
      linear(host, x + t * hidden, 1, hidden, gateUp + e * 2 * inter * hidden, 2 * inter, nullptr,
             gu.data());
      if (geluTanh)
        gelu(host, gu.data(), inter, true, act.data());
      else
        silu(host, gu.data(), inter, act.data());
      mul(host, act.data(), gu.data() + inter, inter, act.data());
      linear(host, act.data(), 1, inter, down + e * hidden * inter, hidden, nullptr, y.data());
      for (int64_t h = 0; h < hidden; ++h)
        out[t * hidden + h] += weight * y[h];
    }
}

void add(Host, const float *a, const float *b, int64_t n, float *out) {
  for (int64_t i = 0; i < n; ++i)
    out[i] = a[i] + b[i];
}

void mul(Host, const float *a, const float *b, int64_t n, float *out) {
  for (int64_t i = 0; i < n; ++i)
    out[i] = a[i] * b[i];
}

void copyRows(Host, float *dst, int64_t dstStride, const float *src, int64_t srcStride,
              int64_t rows, int64_t cols) {
  for (int64_t r = 0; r < rows; ++r)
    std::memmove(dst + r * dstStride, src + r * srcStride, cols * sizeof(float));
}

void sliceColumns(Host, const float *x, int64_t rows, int64_t cols, int64_t offset, int64_t size,
                  float *out) {
  for (int64_t r = 0; r < rows; ++r)
    std::memcpy(out + r * size, x + r * cols + offset, size * sizeof(float));
}

} // namespace tpcrt::cpu
