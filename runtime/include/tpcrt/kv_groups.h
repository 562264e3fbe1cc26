// Which keys each attention layer reads, and so which of a sequence's KV blocks it must keep:
// the KV cache's groups. One table for the scheduler (a pool and a block table per group),
// the driver (how many blocks each layer's cache holds), the step descriptor (a table per
// group) and `tpc analyze` (bytes a token per layer kind, sequences that fit). Inline: the
// compiler asks it too, and links no runtime layer above the formats.
//
// The query at position p of a layer with a sliding window W reads keys p - W + 1 .. p; of
// a layer with chunked attention of C (Llama 4's), keys C * floor(p / C) .. p; of any other
// layer, every key. The layers that read alike form a group. Group 0 holds the layers that
// read every key, and its block table is the sequence's chain for the prefix cache, also where
// no layer is in it. Every other group has its own pool of blocks, which only its layers'
// caches hold, and a table per sequence whose blocks are given back (their entries -1) once
// no later query of the group reads them. A window or chunk no shorter than --max-model-len
// reads every key a sequence can have: such layers are group 0's.
#ifndef TPCRT_KV_GROUPS_H
#define TPCRT_KV_GROUPS_H

#include <algorithm>
#include <cstdint>
#include <string>
#include <vector>

namespace tpcrt {

/// Which keys a layer's queries read (both 0: every key).
struct KvReach {
  int64_t window = 0, chunk = 0;

  bool everyKey() const { return window == 0 && chunk == 0; }
  bool operator==(const KvReach &o) const { return window == o.window && chunk == o.chunk; }
  /// The first position the query at `position` reads.
  int64_t firstRead(int64_t position) const {
    int64_t first = 0;
    if (window > 0)
      first = std::max<int64_t>(0, position - window + 1);
    if (chunk > 0)
      first = std::max(first, position / chunk * chunk);
    return first;
  }
  /// The most blocks of `blockSize` tokens one query reads (those of positions firstRead(p)
  /// .. p), for sequences of at most `maxLen` tokens: what a sequence of the group holds at
  /// most between steps, the block of its next token included.
  int64_t blocksRead(int64_t blockSize, int64_t maxLen) const {
    int64_t all = (maxLen + blockSize - 1) / blockSize;
    if (everyKey())
      return all;
    int64_t span = window > 0 ? window - 1 : chunk - 1; // positions before p read
    if (window > 0 && chunk > 0)
      span = std::min(window, chunk) - 1;
    return std::min(all, (span + blockSize - 1) / blockSize + 1);
  }
  std::string describe() const {
    if (everyKey())
      return "every key";
    if (chunk > 0 && window == 0)
      return "chunks of " + std::to_string(chunk);
    std::string text = "a window of " + std::to_string(window);
    return chunk > 0 ? text + " in chunks of " + std::to_string(chunk) : text;
  }
};

/// The groups of a model's attention layers.
struct KvGroups {
  std::vector<KvReach> reaches; // per group; reaches[0] every key
  std::vector<int> layerGroup;  // per attention layer

  size_t size() const { return reaches.size(); }
  /// Whether some group frees blocks (a group besides group 0).
  bool windowed() const { return reaches.size() > 1; }
};

/// The groups of layers that read `layers`' keys, for sequences of at most `maxLen` tokens;
/// `separate` false: every layer in group 0.
inline KvGroups kvGroups(const std::vector<KvReach> &layers, int64_t maxLen, bool separate) {
  KvGroups groups;
  groups.reaches.push_back({});
  for (KvReach reach : layers) {
    // A reach no shorter than the longest sequence reads every key it can have.
    if (!separate || ((reach.window == 0 || reach.window >= maxLen) &&
                      (reach.chunk == 0 || reach.chunk >= maxLen)))
      reach = {};
    auto it = std::find(groups.reaches.begin(), groups.reaches.end(), reach);
    if (it == groups.reaches.end())
      it = groups.reaches.insert(groups.reaches.end(), reach);
    groups.layerGroup.push_back(int(it - groups.reaches.begin()));
  }
  return groups;
}

/// How many blocks each group's pool holds, where some group frees blocks, out of a budget:
/// on each stage, `tokens` tokens of every layer (--kv-cache-tokens, or what
/// --kv-cache-memory holds). The budget is shared between the groups as a sequence of
/// `maxLen` tokens uses them: it holds blocksRead() blocks of each group, so the pools hold
/// as many such sequences, n, as the stage whose budget is tightest allows, and each group
/// blocksRead() * n blocks (at least one sequence's). `layerBytes` is each layer's bytes a
/// token, `layerStage` its stage. Group 0's pool, where no layer is in it, holds no memory:
/// it is sized for n sequences, and at least `maxNumSeqs`. Without a group besides group 0:
/// `tokens` in blocks, as ever.
inline std::vector<int64_t> kvPoolBlocks(const KvGroups &groups,
                                         const std::vector<double> &layerBytes,
                                         const std::vector<int64_t> &layerStage, int64_t tokens,
                                         int64_t blockSize, int64_t maxLen, int64_t maxNumSeqs) {
  int64_t whole = tokens / blockSize + (tokens % blockSize != 0);
  if (!groups.windowed())
    return {whole};
  int64_t stages = 1;
  for (int64_t s : layerStage)
    stages = std::max(stages, s + 1);
  std::vector<double> budget(size_t(stages), 0), perSequence(size_t(stages), 0);
  bool groupZeroHolds = false;
  for (size_t l = 0; l < groups.layerGroup.size(); ++l) {
    size_t stage = l < layerStage.size() ? size_t(layerStage[l]) : 0;
    const KvReach &reach = groups.reaches[size_t(groups.layerGroup[l])];
    budget[stage] += double(tokens) * layerBytes[l];
    perSequence[stage] +=
        double(reach.blocksRead(blockSize, maxLen) * blockSize) * layerBytes[l];
    groupZeroHolds |= groups.layerGroup[l] == 0;
  }
  double sequences = -1;
  for (size_t s = 0; s < budget.size(); ++s)
    if (perSequence[s] > 0) {
      double fit = budget[s] / perSequence[s];
      sequences = sequences < 0 ? fit : std::min(sequences, fit);
    }
  sequences = std::max(sequences, 1.0);
  std::vector<int64_t> blocks;
  for (size_t g = 0; g < groups.size(); ++g) {
    double n = g == 0 && !groupZeroHolds ? std::max(sequences, double(maxNumSeqs)) : sequences;
    // (A block is named by an int32: a budget past that many fails to allocate anyway.)
    int64_t read = groups.reaches[g].blocksRead(blockSize, maxLen);
    blocks.push_back(std::max(read, int64_t(std::min(n * double(read), 2147483647.0))));
  }
  return blocks;
}

} // namespace tpcrt

#endif // TPCRT_KV_GROUPS_H
