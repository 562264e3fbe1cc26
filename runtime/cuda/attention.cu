// Attention for the CUDA backend over a step of any number of sequences (tpcrt/batch.h), each
// reading its keys and values through its block table of the layer's KV group (paged.h; a
// layer with a sliding window reads only its window, and its group keeps no more, the blocks
// before it given back, tpcrt/kv_groups.h): the KV-cache append, a
// split-KV decode kernel for the one-row sequences (all of them in one launch, with no host
// work that varies with their lengths, so a decode step can be captured in a CUDA graph and
// replayed at any length), and a tensor-core flash-attention prefill kernel for each longer
// one. Semantics are those of tpcrt/cpu/kernels.h: causal over absolute positions, GQA (query
// head h reads key/value head h / group), `scale` multiplies q.k, softcap > 0 applies
// softcap * tanh(s / softcap) to the scaled score, slidingWindow > 0 lets position p see keys
// t with p - window + 1 <= t <= p. bf16 in memory, fp32 math; softmax in base 2 (scores are
// multiplied by log2 e once, after the softcap).
//
// What a step holds is read on the device (State::stepView: each sequence's rows, cached
// tokens and table, each row's sequence, the one-row sequences), so no decode kernel argument
// depends on a length. Token p of a sequence is in cache row table[p / blockSize] * blockSize
// + p % blockSize (cacheRow). How each kernel's work is split, and why:
//
// appendKernel: one thread per 16 bytes (8 bf16) of the new k and v rows, each row copied to
//   its sequence's slot for its position. Scalar copies when k or v is not 16-byte aligned
//   (arena pointers are aligned only as their offsets make them); cache rows always are (width
//   is a multiple of 8).
//
// decodeKernel (one query row per sequence, bandwidth bound): grid (split, kvHead x
//   headChunk, sequence), 128 threads.
//   One block reads its split's keys and values of one kv head once, for up to G (1, 2, 4 or 8;
//   4 when headDim > 256) query heads of that kv head's group, so the cache is read once per
//   group (more than G heads in a group take ceil(group / G) head chunks). The visible keys
//   [lo, position] are cut on the device into `splits` contiguous ranges of at least
//   kMinKeysPerSplit keys (splitKeys); a range past the end is empty and writes the neutral
//   partial (max -inf, sum 0, no accumulator). Inside a block, `lanes` (8, 16 or 32: the power
//   of two covering headDim / 8) lanes share one key, each holding 16 bytes of it (two 16-byte
//   pieces when headDim > 256), so a warp reads 32 / lanes whole rows per load (consecutive
//   within a block of the cache) and a shuffle over `lanes` finishes each dot product; each
//   such slot keeps its own online softmax (max, sum, fp32 accumulator over its dims) per
//   query head, over kUnroll keys per step (loads for all of them issued first). The slots are
//   merged through shared memory (<= 33 KiB) and the block writes (max, sum, acc[headDim]) per
//   query head, into its sequence's partials.
// combineKernel: one block per (query head, sequence) merges the splits' partials, skipping the
//   empty ones (their accumulators are never written, so never read), and writes the bf16
//   output into the sequence's row.
//   Split count (host, from fixed numbers only: decodeSplits): min(ceil(reads /
//   kMinKeysPerSplit), ceil(4 * SMs / (kvHeads * headChunks * sequences)), 256 / sequences),
//   `reads` the most keys a query of the layer reads (its window, the longest sequence, its
//   pool): enough blocks for about four per SM at any length,
//   none that could only ever be empty, and no more partials than prepared (a launch takes at
//   most as many sequences as those). It never depends on a length, so a captured grid stays
//   valid; on the device each split takes max(kMinKeysPerSplit, ceil(visible / splits)) keys,
//   so short contexts use few splits.
//
// prefillKernel<D> (a sequence of several rows, compute bound; D in 64, 80, 96, 128, 256):
//   FlashAttention-2 on
//   mma.sync.m16n8k16 (bf16 in, fp32 accumulate). Grid (head, 64-row query block; the blocks
//   with the most keys first), 4 warps, each warp owning 16 query rows end to end, so the
//   softmax needs only shuffles among the 4 lanes that share a row and no block barrier. Q
//   (64 x D), one K tile and one V tile (64 keys x D) live in dynamic shared memory, rows
//   padded by 16 bytes so ldmatrix reads are conflict-free: 3 * 64 * (D + 8) * 2 bytes =
//   27 KiB (D 64), 51 KiB (128), 99 KiB (256). K and V are staged with cp.async: V of a tile
//   loads while Q.K^T runs, K of the next tile while P.V runs. S and O stay in registers in
//   the mma layouts (known, unlike WMMA's), P goes from S's accumulators straight into the A
//   operand. Key tiles run from the block's first row's window start to its last row's
//   position; tiles wholly visible to all 64 rows skip the mask. Keys past the last row's
//   position are zero-filled, never loaded (cache rows past the length may hold NaN bits).
//   One launch per such sequence, its rows at their place in the step.
// The three-pass kernels (scores, softmax, weighted sum) remain as the prefill fallback for
// other head sizes, with their host-sized scores buffer.
#include "state.h"

#include "paged.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <string>

namespace tpcrt::cuda {

namespace {

constexpr float kLog2e = 1.4426950408889634f;
constexpr int kDecodeThreads = 128, kCombineThreads = 128, kPrefillThreads = 128;
constexpr int kMaxSplits = 256, kMinKeysPerSplit = 64;
constexpr int kBlock = 64; // prefill: query rows per block, keys per tile
using namespace fused;

/// A score in base-2 units: scaled, softcapped, times log2 e.
__device__ __forceinline__ float logit(float dot, float scale, float softcap) {
  float s = dot * scale;
  if (softcap > 0)
    s = softcap * tanhf(s / softcap);
  return s * kLog2e;
}

/// The 8 bf16 of a 16-byte load as floats (a bf16 is the top half of an fp32).
__device__ __forceinline__ void unpack(const uint4 &v, float (&f)[8]) {
  const uint32_t w[4] = {v.x, v.y, v.z, v.w};
#pragma unroll
  for (int j = 0; j < 4; ++j) {
    f[2 * j] = __uint_as_float(w[j] << 16);
    f[2 * j + 1] = __uint_as_float(w[j] & 0xffff0000u);
  }
}

// ---------------------------------------------------------------------------------------------
// The append.

template <bool Vector>
__global__ void appendKernel(const act *k, const act *v, int64_t rows, int64_t width,
                             StepView step, int tableGroup, act *keys, act *values) {
  const int64_t perRow = Vector ? width / 8 : width; // 16-byte pieces, or elements
  int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= rows * perRow)
    return;
  const int64_t row = i / perRow, piece = i % perRow;
  const SequenceOnDevice s = step.sequences[step.rowSequence[row]];
  const int64_t slot = cacheRow(tableOf(step.tables, s, tableGroup), int(s.cached + row - s.first),
                                step.blockSize);
  if (Vector) {
    reinterpret_cast<uint4 *>(keys + slot * width)[piece] =
        reinterpret_cast<const uint4 *>(k + row * width)[piece];
    reinterpret_cast<uint4 *>(values + slot * width)[piece] =
        reinterpret_cast<const uint4 *>(v + row * width)[piece];
  } else {
    keys[slot * width + piece] = k[row * width + piece];
    values[slot * width + piece] = v[row * width + piece];
  }
}

// ---------------------------------------------------------------------------------------------
// Decode: split-KV partials, then their combination.

template <int CPL, int G>
__global__ void __launch_bounds__(kDecodeThreads)
    decodeKernel(const act *q, const act *keys, const act *values, StepView step, int tableGroup,
                 int from, int heads, int group, int headChunks, int headDim, int64_t width, int lanes,
                 int splits, float scale, float softcap, int64_t window, float2 *stats,
                 float *partials) {
  constexpr int kUnroll = G <= 2 ? 4 : 2; // keys per slot per step, loads issued together
  extern __shared__ float4 decodeShared[];
  const int split = blockIdx.x, kvHead = blockIdx.y / headChunks;
  const int chunkHead = (blockIdx.y % headChunks) * G;
  const int head0 = kvHead * group + chunkHead, count = min(G, group - chunkHead);

  // Sequence `from + blockIdx.z` of the step's one-row sequences: its query row sits at
  // position `cached` and sees keys [lo, position], read through its block table; its
  // partials are the launch's blockIdx.z-th.
  const SequenceOnDevice sequence = step.sequences[step.decodeList[from + int(blockIdx.z)]];
  const int32_t *table = tableOf(step.tables, sequence, tableGroup);
  const int blockSize = step.blockSize;
  q += sequence.first * heads * headDim;
  stats += int64_t(blockIdx.z) * heads * splits;
  partials += int64_t(blockIdx.z) * heads * splits * headDim;
  const int64_t position = sequence.cached;
  const KeyRange keysRead = splitKeys(position, window, splits, split, kMinKeysPerSplit);
  const int64_t first = keysRead.first, last = keysRead.last;
  if (first >= last) { // block-uniform: the neutral partial, no accumulator
    if (int(threadIdx.x) < count)
      stats[int64_t(head0 + threadIdx.x) * splits + split] = make_float2(-INFINITY, 0.0f);
    return;
  }

  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int subsPerWarp = 32 / lanes, sub = lane / lanes, part = lane % lanes;
  const int slot = warp * subsPerWarp + sub, slots = kDecodeThreads / lanes;
  const int chunks = headDim / 8;

  // This lane's 8 (or 16) dims of each query head; heads past `count` are zeros.
  float qf[G][CPL][8];
#pragma unroll
  for (int g = 0; g < G; ++g)
#pragma unroll
    for (int i = 0; i < CPL; ++i) {
      int c = part + i * lanes;
      bool ok = g < count && c < chunks;
#pragma unroll
      for (int j = 0; j < 8; ++j)
        qf[g][i][j] = ok ? __bfloat162float(q[int64_t(head0 + g) * headDim + c * 8 + j]) : 0.0f;
    }

  float m[G], l[G], acc[G][CPL][8];
#pragma unroll
  for (int g = 0; g < G; ++g) {
    m[g] = -INFINITY;
    l[g] = 0.0f;
#pragma unroll
    for (int i = 0; i < CPL; ++i)
#pragma unroll
      for (int j = 0; j < 8; ++j)
        acc[g][i][j] = 0.0f;
  }

  const act *kBase = keys + int64_t(kvHead) * headDim, *vBase = values + int64_t(kvHead) * headDim;
  // A warp takes subsPerWarp * kUnroll consecutive keys per step (warp-uniform bounds, so the
  // shuffles below always run with the whole warp); slot `sub` takes every subsPerWarp-th.
  for (int64_t base = first + int64_t(warp) * subsPerWarp * kUnroll; base < last;
       base += int64_t(slots) * kUnroll) {
    uint4 kr[kUnroll][CPL], vr[kUnroll][CPL];
    bool valid[kUnroll];
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      int64_t t = base + u * subsPerWarp + sub;
      valid[u] = t < last;
#pragma unroll
      for (int i = 0; i < CPL; ++i) {
        int c = part + i * lanes;
        if (valid[u] && c < chunks) {
          int64_t at = cacheRow(table, int(t), blockSize) * width + c * 8;
          kr[u][i] = __ldg(reinterpret_cast<const uint4 *>(kBase + at));
          vr[u][i] = __ldg(reinterpret_cast<const uint4 *>(vBase + at));
        } else {
          kr[u][i] = make_uint4(0, 0, 0, 0);
          vr[u][i] = make_uint4(0, 0, 0, 0);
        }
      }
    }
    float s[kUnroll][G];
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      float kf[CPL][8];
#pragma unroll
      for (int i = 0; i < CPL; ++i)
        unpack(kr[u][i], kf[i]);
#pragma unroll
      for (int g = 0; g < G; ++g) {
        float dot = 0.0f;
#pragma unroll
        for (int i = 0; i < CPL; ++i)
#pragma unroll
          for (int j = 0; j < 8; ++j)
            dot = fmaf(qf[g][i][j], kf[i][j], dot);
#pragma unroll
        for (int o = 16; o > 0; o /= 2)
          if (o < lanes) // warp-uniform
            dot += __shfl_xor_sync(0xffffffffu, dot, o);
        s[u][g] = valid[u] ? logit(dot, scale, softcap) : -INFINITY;
      }
    }
    float vf[kUnroll][CPL][8];
#pragma unroll
    for (int u = 0; u < kUnroll; ++u)
#pragma unroll
      for (int i = 0; i < CPL; ++i)
        unpack(vr[u][i], vf[u][i]);
#pragma unroll
    for (int g = 0; g < G; ++g) {
      float best = m[g];
#pragma unroll
      for (int u = 0; u < kUnroll; ++u)
        best = fmaxf(best, s[u][g]);
      if (best == -INFINITY) // no visible key in this slot yet: nothing to add (no -inf - -inf)
        continue;
      float rescale = exp2f(m[g] - best), p[kUnroll], added = 0.0f;
#pragma unroll
      for (int u = 0; u < kUnroll; ++u) {
        p[u] = exp2f(s[u][g] - best); // an invalid key: exp2(-inf) = 0, and its v is zeros
        added += p[u];
      }
      l[g] = l[g] * rescale + added;
      m[g] = best;
#pragma unroll
      for (int i = 0; i < CPL; ++i)
#pragma unroll
        for (int j = 0; j < 8; ++j) {
          float a = acc[g][i][j] * rescale;
#pragma unroll
          for (int u = 0; u < kUnroll; ++u)
            a = fmaf(p[u], vf[u][i][j], a);
          acc[g][i][j] = a;
        }
    }
  }

  // Merge the slots: [slots][G][headDim] accumulators, then max, sum and weight per (slot, g).
  float *sAcc = reinterpret_cast<float *>(decodeShared);
  float *sMax = sAcc + slots * G * headDim, *sSum = sMax + slots * G;
  float *sWeight = sSum + slots * G;
#pragma unroll
  for (int g = 0; g < G; ++g)
#pragma unroll
    for (int i = 0; i < CPL; ++i) {
      int c = part + i * lanes;
      if (c < chunks) {
        float4 *dst = reinterpret_cast<float4 *>(sAcc + (slot * G + g) * headDim + c * 8);
        dst[0] = make_float4(acc[g][i][0], acc[g][i][1], acc[g][i][2], acc[g][i][3]);
        dst[1] = make_float4(acc[g][i][4], acc[g][i][5], acc[g][i][6], acc[g][i][7]);
      }
    }
  if (part == 0)
#pragma unroll
    for (int g = 0; g < G; ++g) {
      sMax[slot * G + g] = m[g];
      sSum[slot * G + g] = l[g];
    }
  __syncthreads();
  if (int(threadIdx.x) < G) {
    int g = threadIdx.x;
    float best = -INFINITY, total = 0.0f;
    for (int st = 0; st < slots; ++st)
      best = fmaxf(best, sMax[st * G + g]);
    for (int st = 0; st < slots; ++st) {
      float mine = sMax[st * G + g];
      float w = mine == -INFINITY ? 0.0f : exp2f(mine - best); // empty slot: weight 0
      sWeight[st * G + g] = w;
      total += sSum[st * G + g] * w;
    }
    if (g < count)
      stats[int64_t(head0 + g) * splits + split] = make_float2(best, total);
  }
  __syncthreads();
  for (int i = threadIdx.x; i < count * headDim; i += kDecodeThreads) {
    int g = i / headDim, d = i % headDim;
    float a = 0.0f;
    for (int st = 0; st < slots; ++st)
      a = fmaf(sAcc[(st * G + g) * headDim + d], sWeight[st * G + g], a);
    partials[(int64_t(head0 + g) * splits + split) * headDim + d] = a;
  }
}

__global__ void __launch_bounds__(kCombineThreads)
    combineKernel(const float2 *stats, const float *partials, StepView step, int from, int splits,
                  int headDim, act *out) {
  __shared__ float weight[kMaxSplits];
  __shared__ float inverse;
  // Head blockIdx.x of the launch's blockIdx.y-th sequence, whose row of `out` is its own.
  const int head = blockIdx.x, heads = gridDim.x;
  const int64_t at = int64_t(blockIdx.y) * heads;
  stats += at * splits;
  partials += at * splits * headDim;
  out += step.sequences[step.decodeList[from + int(blockIdx.y)]].first * heads * headDim;
  const float2 *mine = stats + int64_t(head) * splits;
  if (threadIdx.x < 32) { // warp 0, whole
    int lane = threadIdx.x;
    float best = -INFINITY, total = 0.0f;
    for (int s = lane; s < splits; s += 32)
      best = fmaxf(best, mine[s].x);
#pragma unroll
    for (int o = 16; o > 0; o /= 2)
      best = fmaxf(best, __shfl_xor_sync(0xffffffffu, best, o));
    for (int s = lane; s < splits; s += 32) {
      float2 e = mine[s];
      float w = e.x == -INFINITY ? 0.0f : exp2f(e.x - best); // an empty split: weight 0
      weight[s] = w;
      total += e.y * w;
    }
#pragma unroll
    for (int o = 16; o > 0; o /= 2)
      total += __shfl_xor_sync(0xffffffffu, total, o);
    if (lane == 0)
      inverse = total > 0 ? 1.0f / total : 0.0f; // key `position` is always seen: total > 0
  }
  __syncthreads();
  for (int d = threadIdx.x; d < headDim; d += kCombineThreads) {
    float a = 0.0f;
    for (int s = 0; s < splits; ++s)
      if (weight[s] != 0.0f) // block-uniform; an empty split's accumulator was never written
        a = fmaf(weight[s], partials[(int64_t(head) * splits + s) * headDim + d], a);
    out[int64_t(head) * headDim + d] = __float2bfloat16(a * inverse);
  }
}

// ---------------------------------------------------------------------------------------------
// Prefill: FlashAttention-2 on mma.sync.m16n8k16.
//
// Fragment layouts (PTX ISA, mma.m16n8k16 with .bf16; g = lane / 4, t = lane % 4):
//   A (16x16, row): a0 = (g, 2t..2t+1), a1 = (g+8, 2t..), a2 = (g, 8+2t..), a3 = (g+8, 8+2t..)
//   B (16x8, col):  b0 = (k 2t..2t+1, n g), b1 = (k 8+2t.., n g)
//   C (16x8):       c0, c1 = (g, 2t), (g, 2t+1); c2, c3 = (g+8, 2t), (g+8, 2t+1)
// ldmatrix.x4: lanes 8j..8j+7 give the row addresses of 8x8 matrix j, and register j gets
// (row g, cols 2t, 2t+1) of it, or (rows 2t, 2t+1, col g) with .trans.

__device__ __forceinline__ uint32_t sharedAddress(const void *p) {
  return uint32_t(__cvta_generic_to_shared(p));
}

__device__ __forceinline__ void copyAsync16(void *shared, const void *global) {
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" ::"r"(sharedAddress(shared)),
               "l"(global)
               : "memory");
}

__device__ __forceinline__ void commitAsync() {
  asm volatile("cp.async.commit_group;\n" ::: "memory");
}

__device__ __forceinline__ void waitAsync() {
  asm volatile("cp.async.wait_group 0;\n" ::: "memory");
}

__device__ __forceinline__ void loadMatrix(uint32_t (&r)[4], uint32_t address) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(address)
               : "memory");
}

__device__ __forceinline__ void loadMatrixTransposed(uint32_t (&r)[4], uint32_t address) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(address)
               : "memory");
}

/// c += a . b for one 16x8 tile.
__device__ __forceinline__ void mma(float (&c)[4], const uint32_t (&a)[4], uint32_t b0,
                                    uint32_t b1) {
  asm("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0, %1, %2, %3}, "
      "{%4, %5, %6, %7}, {%8, %9}, {%0, %1, %2, %3};\n"
      : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

/// Two floats as a bf16 pair, the first in the low half (the lower column).
__device__ __forceinline__ uint32_t pack(float lo, float hi) {
  __nv_bfloat162 v = __floats2bfloat162_rn(lo, hi);
  return *reinterpret_cast<uint32_t *>(&v);
}

template <int D> constexpr int prefillSharedBytes() { return 3 * kBlock * (D + 8) * 2; }

template <int D>
__global__ void __launch_bounds__(kPrefillThreads)
    prefillKernel(const act *q, const act *keys, const act *values, const int32_t *table,
                  int blockSize, int64_t start, int rows, int group, int64_t width, float scale,
                  float softcap, int64_t window, bool qAligned, act *out) {
  static_assert(D % 16 == 0 && D <= 256, "head dims for the mma tiles");
  constexpr int kChunks = D / 8; // 16-byte pieces per row
  constexpr int kStride = D + 8; // shared row in bf16; +16 bytes: ldmatrix conflict-free
  extern __shared__ uint4 prefillShared[];
  act *sQ = reinterpret_cast<act *>(prefillShared);
  act *sK = sQ + kBlock * kStride, *sV = sK + kBlock * kStride;

  const int head = blockIdx.x, kvHead = head / group;
  const int q0 = (gridDim.y - 1 - blockIdx.y) * kBlock; // the longest blocks start first
  const int64_t qWidth = int64_t(gridDim.x) * D;
  const int qEnd = min(rows, q0 + kBlock);
  // Keys this block needs: from its first row's window start to its last row's position.
  const int64_t keyEnd = start + qEnd; // exclusive
  const int64_t keyBegin = window > 0 ? max(int64_t(0), start + q0 - window + 1) : int64_t(0);
  const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32;

  for (int i = tid; i < kBlock * kChunks; i += kPrefillThreads) {
    int r = i / kChunks, c = i % kChunks;
    uint4 value = make_uint4(0, 0, 0, 0); // rows past `rows`: zeros, their output dropped
    if (q0 + r < rows) {
      const act *src = q + (q0 + r) * qWidth + head * D + c * 8;
      if (qAligned) {
        value = *reinterpret_cast<const uint4 *>(src);
      } else {
        alignas(16) act e[8];
#pragma unroll
        for (int j = 0; j < 8; ++j)
          e[j] = src[j];
        value = *reinterpret_cast<const uint4 *>(e);
      }
    }
    *reinterpret_cast<uint4 *>(sQ + r * kStride + c * 8) = value;
  }

  const act *kSource = keys + int64_t(kvHead) * D, *vSource = values + int64_t(kvHead) * D;
  // One 64-key tile into shared memory; keys at or past keyEnd (never written, or not this
  // block's) become zeros, so a masked p = 0 never meets a NaN.
  auto stage = [&](act *tile, const act *source, int64_t k0) {
    for (int i = tid; i < kBlock * kChunks; i += kPrefillThreads) {
      int r = i / kChunks, c = i % kChunks;
      act *dst = tile + r * kStride + c * 8;
      if (k0 + r < keyEnd)
        copyAsync16(dst, source + cacheRow(table, int(k0 + r), blockSize) * width + c * 8);
      else
        *reinterpret_cast<uint4 *>(dst) = make_uint4(0, 0, 0, 0);
    }
    commitAsync();
  };

  float o[D / 8][4];
#pragma unroll
  for (int n = 0; n < D / 8; ++n)
#pragma unroll
    for (int e = 0; e < 4; ++e)
      o[n][e] = 0.0f;
  float rowMax[2] = {-INFINITY, -INFINITY}, rowSum[2] = {0.0f, 0.0f};
  const int rowInBlock = warp * 16 + lane / 4; // and rowInBlock + 8
  const int64_t position[2] = {start + q0 + rowInBlock, start + q0 + rowInBlock + 8};
  const int64_t firstPosition = start + q0, lastPosition = start + q0 + kBlock - 1;
  // Per-lane ldmatrix row addresses (see the layouts above): Q rows of this warp's A tiles;
  // K as B of Q.K^T (matrices: keys 0-7/dims 0-7, keys 0-7/dims 8-15, keys 8-15/dims 0-7,
  // keys 8-15/dims 8-15); V as B of P.V, transposed (keys 0-7/dims 0-7, keys 8-15/dims 0-7,
  // keys 0-7/dims 8-15, keys 8-15/dims 8-15).
  const uint32_t qAddress = sharedAddress(sQ + (warp * 16 + lane % 16) * kStride + (lane / 16) * 8);
  const uint32_t kAddress =
      sharedAddress(sK + ((lane / 16) * 8 + lane % 8) * kStride + ((lane / 8) % 2) * 8);
  const uint32_t vAddress = sharedAddress(sV + (lane % 16) * kStride + (lane / 16) * 8);

  stage(sK, kSource, keyBegin);
  // Block-uniform trip count: every __syncthreads below is reached by all threads.
  for (int64_t k0 = keyBegin; k0 < keyEnd; k0 += kBlock) {
    waitAsync();
    __syncthreads(); // K of this tile (and Q) in place; every warp is done with the last V
    stage(sV, vSource, k0);

    float s[8][4]; // this warp's 16 rows x 64 keys, 8 tiles of 8 keys
#pragma unroll
    for (int n = 0; n < 8; ++n)
#pragma unroll
      for (int e = 0; e < 4; ++e)
        s[n][e] = 0.0f;
#pragma unroll
    for (int kd = 0; kd < D / 16; ++kd) {
      uint32_t a[4];
      loadMatrix(a, qAddress + kd * 16 * 2);
#pragma unroll
      for (int np = 0; np < 4; ++np) {
        uint32_t b[4];
        loadMatrix(b, kAddress + (np * 16 * kStride + kd * 16) * 2);
        mma(s[2 * np], a, b[0], b[1]);
        mma(s[2 * np + 1], a, b[2], b[3]);
      }
    }

    // Online softmax over this tile. Visible: key <= position and, with a window, key >
    // position - window. A tile before every row's position and inside every row's window
    // needs no mask.
    const bool open =
        k0 + kBlock - 1 <= firstPosition && (window <= 0 || k0 >= lastPosition - window + 1);
    float tileMax[2] = {-INFINITY, -INFINITY};
#pragma unroll
    for (int n = 0; n < 8; ++n)
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        float x = logit(s[n][e], scale, softcap);
        if (!open) {
          int64_t key = k0 + n * 8 + (lane % 4) * 2 + (e % 2), p = position[e / 2];
          if (key > p || (window > 0 && key <= p - window))
            x = -INFINITY;
        }
        s[n][e] = x;
        tileMax[e / 2] = fmaxf(tileMax[e / 2], x);
      }
    float base[2], rescale[2];
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      // The 4 lanes of a row are lanes 4g..4g+3.
      tileMax[r] = fmaxf(tileMax[r], __shfl_xor_sync(0xffffffffu, tileMax[r], 1));
      tileMax[r] = fmaxf(tileMax[r], __shfl_xor_sync(0xffffffffu, tileMax[r], 2));
      float best = fmaxf(rowMax[r], tileMax[r]);
      // A row with no visible key yet (a window that starts past this tile): subtract 0, so
      // that exp2(-inf - -inf) never happens; its p, sum and O all stay 0.
      base[r] = best == -INFINITY ? 0.0f : best;
      rescale[r] = exp2f(rowMax[r] - base[r]);
      rowMax[r] = best;
      rowSum[r] *= rescale[r];
    }
#pragma unroll
    for (int n = 0; n < 8; ++n)
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        s[n][e] = exp2f(s[n][e] - base[e / 2]);
        rowSum[e / 2] += s[n][e]; // this lane's columns; the row's 4 lanes add up at the end
      }
#pragma unroll
    for (int n = 0; n < D / 8; ++n) {
      o[n][0] *= rescale[0];
      o[n][1] *= rescale[0];
      o[n][2] *= rescale[1];
      o[n][3] *= rescale[1];
    }

    waitAsync();
    __syncthreads(); // V of this tile in place; every warp is done reading this K
    if (k0 + kBlock < keyEnd)
      stage(sK, kSource, k0 + kBlock);

#pragma unroll
    for (int kk = 0; kk < 4; ++kk) {
      // O += P.V: P's 16x16 A tiles are S's accumulator tiles 2kk and 2kk+1, repacked.
      uint32_t a[4] = {pack(s[2 * kk][0], s[2 * kk][1]), pack(s[2 * kk][2], s[2 * kk][3]),
                       pack(s[2 * kk + 1][0], s[2 * kk + 1][1]),
                       pack(s[2 * kk + 1][2], s[2 * kk + 1][3])};
#pragma unroll
      for (int dp = 0; dp < D / 16; ++dp) {
        uint32_t b[4];
        loadMatrixTransposed(b, vAddress + (kk * 16 * kStride + dp * 16) * 2);
        mma(o[2 * dp], a, b[0], b[1]);
        mma(o[2 * dp + 1], a, b[2], b[3]);
      }
    }
  }
  waitAsync();

#pragma unroll
  for (int r = 0; r < 2; ++r) {
    rowSum[r] += __shfl_xor_sync(0xffffffffu, rowSum[r], 1);
    rowSum[r] += __shfl_xor_sync(0xffffffffu, rowSum[r], 2);
  }
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    int row = q0 + rowInBlock + 8 * r;
    if (row >= rows)
      continue;
    float inverse = rowSum[r] > 0 ? 1.0f / rowSum[r] : 0.0f; // > 0: key `position` is seen
    act *dst = out + row * qWidth + head * D + (lane % 4) * 2;
#pragma unroll
    for (int n = 0; n < D / 8; ++n) {
      dst[n * 8] = __float2bfloat16(o[n][2 * r] * inverse);
      dst[n * 8 + 1] = __float2bfloat16(o[n][2 * r + 1] * inverse);
    }
  }
}

// ---------------------------------------------------------------------------------------------
// The fallback for prefill at other head sizes: scores, softmax, weighted sum.

// scores[(r * heads + h) * keys + t] = softcap(scale * q_rh . k_t) for visible t, else -inf.
__global__ void scoresKernel(const act *q, const act *keysCache, const int32_t *table,
                             int blockSize, int64_t rows, int64_t heads, int64_t group,
                             int64_t headDim, int64_t width, int64_t start, int64_t keys,
                             float scale, int64_t window, float softcap, float *scores) {
  int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= rows * heads * keys)
    return;
  int64_t t = i % keys, h = (i / keys) % heads, r = i / keys / heads;
  int64_t position = start + r, first = window > 0 ? position - window + 1 : 0;
  if (t > position || t < first) {
    scores[i] = -INFINITY;
    return;
  }
  const act *qh = q + r * heads * headDim + h * headDim;
  const act *kt = keysCache + cacheRow(table, int(t), blockSize) * width + (h / group) * headDim;
  float dot = 0;
  for (int64_t d = 0; d < headDim; ++d)
    dot += load(qh, d) * load(kt, d);
  float s = dot * scale;
  scores[i] = softcap > 0 ? softcap * tanhf(s / softcap) : s;
}

__global__ void softmaxKernel(float *scores, int64_t keys) {
  __shared__ float partial[kThreads];
  float *row = scores + int64_t(blockIdx.x) * keys;
  float best = -INFINITY;
  for (int64_t t = threadIdx.x; t < keys; t += blockDim.x)
    best = fmaxf(best, row[t]);
  best = blockReduce(best, partial, Max{});
  float total = 0;
  for (int64_t t = threadIdx.x; t < keys; t += blockDim.x) {
    row[t] = row[t] == -INFINITY ? 0.0f : expf(row[t] - best);
    total += row[t];
  }
  float inverse = 1.0f / blockSum(total, partial);
  for (int64_t t = threadIdx.x; t < keys; t += blockDim.x)
    row[t] *= inverse;
}

__global__ void weightedSumKernel(const float *scores, const act *valuesCache,
                                  const int32_t *table, int blockSize, int64_t rows,
                                  int64_t heads, int64_t group, int64_t headDim, int64_t width,
                                  int64_t keys, act *out) {
  int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= rows * heads * headDim)
    return;
  int64_t d = i % headDim, h = (i / headDim) % heads, r = i / headDim / heads;
  const float *p = scores + (r * heads + h) * keys;
  const act *v = valuesCache + (h / group) * headDim + d;
  float acc = 0;
  for (int64_t t = 0; t < keys; ++t)
    if (p[t] != 0.0f) // a key outside the window: its block may have been given back
      acc += p[t] * load(v, cacheRow(table, int(t), blockSize) * width);
  out[r * heads * headDim + h * headDim + d] = __float2bfloat16(acc);
}

// ---------------------------------------------------------------------------------------------
// Host side.

void append(Device::State &state, const act *k, const act *v, int64_t rows, int64_t width,
            KVCache &cache) {
  bool vector = (uintptr_t(k) | uintptr_t(v)) % 16 == 0; // width % 8 == 0: cache rows are
  int64_t pieces = rows * (vector ? width / 8 : width);
  if (vector)
    appendKernel<true><<<blocksFor(pieces), kThreads, 0, state.stream>>>(
        k, v, rows, width, state.stepView, int(cache.group), cache.keys, cache.values);
  else
    appendKernel<false><<<blocksFor(pieces), kThreads, 0, state.stream>>>(
        k, v, rows, width, state.stepView, int(cache.group), cache.keys, cache.values);
  launched("attention: the KV-cache append kernel");
}

template <int CPL, int G>
void launchDecode(Device::State &state, dim3 grid, size_t shared, const act *q,
                  const KVCache &cache, int from, int heads, int group, int headChunks,
                  int headDim, int64_t width, int lanes, int splits, float scale, float softcap,
                  int64_t window) {
  decodeKernel<CPL, G><<<grid, kDecodeThreads, shared, state.stream>>>(
      q, cache.keys, cache.values, state.stepView, int(cache.group), from, heads, group, headChunks, headDim,
      width, lanes, splits, scale, softcap, window, state.attentionStats,
      state.attentionPartials);
}

/// The split-KV decode of every one-row sequence of the step (StepOnHost::decodeList), in
/// launches of at most as many sequences as the partials were prepared splits for.
void decode(Device::State &state, const act *q, int64_t heads, int64_t kvHeads, int64_t headDim,
            double scale, int64_t window, double softcap, const KVCache &cache, act *out) {
  if (!state.attentionPartials)
    throw std::runtime_error("attention: the decode kernel's scratch is missing "
                             "(prepareAttention was not called)");
  if (heads > state.attentionHeads || headDim > state.attentionHeadDim)
    throw std::runtime_error("attention: " + std::to_string(heads) + " heads of " +
                             std::to_string(headDim) + " exceed the decode scratch prepared for " +
                             std::to_string(state.attentionHeads) + " heads of " +
                             std::to_string(state.attentionHeadDim));
  int64_t chunks = headDim / 8, group = heads / kvHeads;
  if (chunks > 64)
    throw std::runtime_error("attention: the decode kernel takes head_dim up to 512, not " +
                             std::to_string(headDim));
  int lanes = chunks <= 8 ? 8 : chunks <= 16 ? 16 : 32;
  int cpl = int((chunks + lanes - 1) / lanes); // 16-byte pieces per lane: 1 or 2
  int64_t most = std::min<int64_t>(group, cpl == 1 ? 8 : 4);
  int g = most <= 1 ? 1 : most <= 2 ? 2 : most <= 4 ? 4 : 8;
  int headChunks = int((group + g - 1) / g);
  int64_t blocksPerSplit = kvHeads * headChunks;
  int slots = kDecodeThreads / lanes;
  size_t shared = (size_t(slots) * g * (headDim + 3)) * sizeof(float);
  // The most keys one query of this layer reads: its window, and at most the longest sequence
  // (a forward's most tokens bound it) and the layer's pool.
  int64_t reads = std::min(cache.rows, state.longestSequence);
  if (window > 0)
    reads = std::min(reads, window);
  int64_t sequences = int64_t(state.stepHost.decodeList.size());
  for (int64_t from = 0; from < sequences; from += state.attentionSplits) {
    int64_t n = std::min<int64_t>(sequences - from, state.attentionSplits);
    int64_t splits = decodeSplits(n, reads, state.multiprocessors, blocksPerSplit,
                                  state.attentionSplits, kMinKeysPerSplit);
    dim3 grid = dim3(unsigned(splits), unsigned(blocksPerSplit), unsigned(n));
    auto run = [&](auto launch) {
      launch(state, grid, shared, q, cache, int(from), int(heads), int(group), headChunks,
             int(headDim), kvHeads * headDim, lanes, int(splits), float(scale), float(softcap),
             window);
    };
    switch (cpl * 16 + g) {
    case 16 + 1:
      run(launchDecode<1, 1>);
      break;
    case 16 + 2:
      run(launchDecode<1, 2>);
      break;
    case 16 + 4:
      run(launchDecode<1, 4>);
      break;
    case 16 + 8:
      run(launchDecode<1, 8>);
      break;
    case 32 + 1:
      run(launchDecode<2, 1>);
      break;
    case 32 + 2:
      run(launchDecode<2, 2>);
      break;
    default:
      run(launchDecode<2, 4>);
      break;
    }
    launched("attention: the split-KV decode kernel");
    combineKernel<<<dim3(unsigned(heads), unsigned(n)), kCombineThreads, 0, state.stream>>>(
        state.attentionStats, state.attentionPartials, state.stepView, int(from), int(splits),
        int(headDim), out);
    launched("attention: the split-KV combine kernel");
  }
}

/// Sequence `s`'s rows of the step (more than one: a prompt or a chunk of one): where its
/// queries and outputs start, its block table of the layer's KV group on the device, and what
/// its cache held.
struct PrefillRows {
  const act *q;
  act *out;
  const int32_t *table;
  int64_t rows, start;
};

PrefillRows prefillRows(const Device::State &state, int64_t s, const KVCache &cache,
                        const act *q, int64_t qWidth, act *out) {
  const SequenceOnDevice &sequence = state.stepHost.sequences[size_t(s)];
  return {q + sequence.first * qWidth, out + sequence.first * qWidth,
          tableOf(state.stepView.tables, sequence, int(cache.group)), sequence.count,
          sequence.cached};
}

template <int D>
void launchPrefill(Device::State &state, const PrefillRows &p, const KVCache &cache,
                   int64_t heads, int64_t group, int64_t width, double scale, double softcap,
                   int64_t window) {
  constexpr int bytes = prefillSharedBytes<D>();
  static bool configured = false; // once per kernel: the opt-in past 48 KiB
  if (!configured) {
    check(
        cudaFuncSetAttribute(prefillKernel<D>, cudaFuncAttributeMaxDynamicSharedMemorySize, bytes),
        "cudaFuncSetAttribute (the attention prefill kernel)");
    configured = true;
  }
  dim3 grid(unsigned(heads), unsigned((p.rows + kBlock - 1) / kBlock));
  prefillKernel<D><<<grid, kPrefillThreads, bytes, state.stream>>>(
      p.q, cache.keys, cache.values, p.table, state.stepView.blockSize, p.start, int(p.rows),
      int(group), width, float(scale), float(softcap), window, uintptr_t(p.q) % 16 == 0, p.out);
  launched("attention: the flash prefill kernel");
}

void fallback(Device::State &state, const PrefillRows &p, int64_t heads, int64_t group,
              int64_t headDim, double scale, int64_t window, double softcap,
              const KVCache &cache) {
  int64_t width = (heads / group) * headDim, keys = p.start + p.rows, rows = p.rows;
  // Scores for a chunk of query rows at a time, so a long prompt's [rows, heads, keys] never
  // has to fit at once (at most 64 Mi floats).
  int64_t chunk =
      std::max<int64_t>(1, std::min<int64_t>(rows, (int64_t(64) << 20) / (heads * keys)));
  size_t needed = size_t(chunk * heads * keys);
  if (needed > state.scoresCapacity) {
    waitForStream(state, "before regrowing the attention scores");
    cudaFree(state.scores);
    state.scores = nullptr;
    state.scoresCapacity = 0;
    check(cudaMalloc(&state.scores, needed * sizeof(float)), "cudaMalloc (attention scores)");
    state.scoresCapacity = needed;
  }
  int64_t qWidth = heads * headDim;
  int blockSize = state.stepView.blockSize;
  for (int64_t r0 = 0; r0 < rows; r0 += chunk) {
    int64_t n = std::min(chunk, rows - r0);
    int64_t count = n * heads * keys;
    scoresKernel<<<blocksFor(count), kThreads, 0, state.stream>>>(
        p.q + r0 * qWidth, cache.keys, p.table, blockSize, n, heads, group, headDim, width,
        p.start + r0, keys, float(scale), window, float(softcap), state.scores);
    launched("attention: the fallback scores kernel");
    softmaxKernel<<<unsigned(n * heads), kThreads, 0, state.stream>>>(state.scores, keys);
    launched("attention: the fallback softmax kernel");
    weightedSumKernel<<<blocksFor(n * qWidth), kThreads, 0, state.stream>>>(
        state.scores, cache.values, p.table, blockSize, n, heads, group, headDim, width, keys,
        p.out + r0 * qWidth);
    launched("attention: the fallback output kernel");
  }
}

} // namespace

void prepareAttention(Device::State &state, int64_t maxHeads, int64_t maxHeadDim) {
  int device = 0;
  check(cudaGetDevice(&device), "cudaGetDevice (attention)");
  check(cudaDeviceGetAttribute(&state.multiprocessors, cudaDevAttrMultiProcessorCount, device),
        "cudaDeviceGetAttribute (attention)");
  // As many splits as the combine takes, whatever the cache: one sequence may use them all,
  // and a launch of several shares them (at most as many sequences as splits), so a batch's
  // decode rows take few launches. [heads, 256, headDim] floats: 32 MiB at 128 heads of 256.
  int64_t splits = kMaxSplits;
  size_t partials = size_t(std::max<int64_t>(1, maxHeads) * splits);
  cudaFree(state.attentionPartials);
  cudaFree(state.attentionStats);
  state.attentionPartials = nullptr;
  state.attentionStats = nullptr;
  check(cudaMalloc(&state.attentionPartials,
                   partials * size_t(std::max<int64_t>(1, maxHeadDim)) * sizeof(float)),
        "cudaMalloc (attention decode partials)");
  check(cudaMalloc(&state.attentionStats, partials * sizeof(float2)),
        "cudaMalloc (attention decode partials)");
  state.attentionHeads = maxHeads;
  state.attentionHeadDim = maxHeadDim;
  state.attentionSplits = splits;
}

void attention(Device::State &state, const act *q, const act *k, const act *v, int64_t rows,
               int64_t heads, int64_t kvHeads, int64_t headDim, double scale, int64_t slidingWindow,
               double softcap, const HeadSplit &split, KVCache &cache, act *out) {
  if (split.group != 0) // the CUDA target refuses these at compile time
    throw std::runtime_error("attention: heads split unevenly over the ranks run on the CPU "
                             "target only");
  if (rows <= 0)
    return;
  if (headDim <= 0 || headDim % 8 != 0)
    throw std::runtime_error("attention: head_dim " + std::to_string(headDim) +
                             " is not a multiple of 8, which the CUDA kernels need");
  if (kvHeads <= 0 || heads % kvHeads != 0)
    throw std::runtime_error("attention: " + std::to_string(heads) +
                             " query heads do not group over " + std::to_string(kvHeads) +
                             " key/value heads");
  if (!state.stepView.sequences || int64_t(state.stepHost.rowSequence.size()) != rows)
    throw std::runtime_error("attention: over " + std::to_string(rows) +
                             " rows, where the step described to the device has " +
                             std::to_string(state.stepHost.rowSequence.size()));
  int64_t width = kvHeads * headDim, group = heads / kvHeads, qWidth = heads * headDim;
  // Every row's keys and values into its sequence's blocks, then the one-row sequences in one
  // decode (what a captured decode step holds: nothing here reads a length on the host), and
  // each longer sequence's rows in a prefill launch of their own.
  append(state, k, v, rows, width, cache);
  if (!state.stepHost.decodeList.empty())
    decode(state, q, heads, kvHeads, headDim, scale, slidingWindow, softcap, cache, out);
  for (int64_t s : state.stepHost.prefills) {
    PrefillRows p = prefillRows(state, s, cache, q, qWidth, out);
    switch (headDim) {
    case 64:
      launchPrefill<64>(state, p, cache, heads, group, width, scale, softcap, slidingWindow);
      break;
    case 80:
      launchPrefill<80>(state, p, cache, heads, group, width, scale, softcap, slidingWindow);
      break;
    case 96:
      launchPrefill<96>(state, p, cache, heads, group, width, scale, softcap, slidingWindow);
      break;
    case 128:
      launchPrefill<128>(state, p, cache, heads, group, width, scale, softcap, slidingWindow);
      break;
    case 256:
      launchPrefill<256>(state, p, cache, heads, group, width, scale, softcap, slidingWindow);
      break;
    default:
      fallback(state, p, heads, group, headDim, scale, slidingWindow, softcap, cache);
    }
  }
}

} // namespace tpcrt::cuda
