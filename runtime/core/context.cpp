// The placement-aware collectives emitted code calls: padding of uneven pieces in, out.
#include "tpcrt/model.h"

#include <cstdio>
#include <cstdlib>
#include <cstring>

namespace tpcrt {

int64_t pieceSize(int64_t size, int64_t tp) { return (size + tp - 1) / tp; }

int64_t localWidth(const std::vector<int64_t> &blocks, int64_t tp) {
  int64_t w = 0;
  for (int64_t b : blocks)
    w += pieceSize(b, tp);
  return w;
}

int64_t globalWidth(const std::vector<int64_t> &blocks) {
  int64_t w = 0;
  for (int64_t b : blocks)
    w += b;
  return w;
}

void Context::fail(const std::string &message) const {
  std::fprintf(stderr, "error: %s\n", message.c_str());
  if (comm)
    comm->recordExit(message);
  std::exit(1);
}

void Context::resetCaches() {
  for (KVCache &cache : caches)
    cache.length = 0;
  if (device)
    device->resetCaches();
}

void Context::record(const char *kind, const char *module, int64_t rows, uint64_t bytes) {
  trace.push_back({kind, module ? module : "", rows, bytes});
}

void Context::allReduce(const float *in, int64_t rows, int64_t cols, float *out,
                        const char *module) {
  if (out != in)
    std::memcpy(out, in, rows * cols * sizeof(float));
  comm->allReduce(out, size_t(rows * cols));
  record("all_reduce", module, rows, uint64_t(rows * cols) * 4);
}

void Context::allGatherColumns(const float *in, int64_t rows, const std::vector<int64_t> &blocks,
                               float *out, const char *module) {
  int64_t local = localWidth(blocks, tp), global = globalWidth(blocks);
  scratch.resize(size_t(rows * local * tp));
  comm->allGather(in, size_t(rows * local), scratch.data());
  // scratch[r] is rank r's [rows, local]; put each rank's piece of each block in place.
  for (int r = 0; r < tp; ++r) {
    const float *from = scratch.data() + r * rows * local;
    forEachPiece(blocks, tp, r, [&](int64_t at, int64_t to, int64_t count, int64_t) {
      for (int64_t row = 0; row < rows; ++row)
        std::memcpy(out + row * global + to, from + row * local + at, count * sizeof(float));
    });
  }
  record("all_gather", module, rows, uint64_t(rows * global) * 4);
}

void Context::allGatherRows(const float *in, int64_t rows, int64_t cols, float *out,
                            const char *module) {
  comm->allGather(in, size_t(rows * cols), out); // tokens split evenly: rank-major is row order
  record("all_gather", module, rows * tp, uint64_t(rows * tp * cols) * 4);
}

void Context::reduceScatterColumns(const float *in, int64_t rows,
                                   const std::vector<int64_t> &blocks, float *out,
                                   const char *module) {
  int64_t global = globalWidth(blocks);
  scratch.assign(in, in + rows * global);
  comm->allReduce(scratch.data(), scratch.size());
  takeColumns(scratch.data(), rows, blocks, out);
  record("reduce_scatter", module, rows, uint64_t(rows * global) * 4);
}

void Context::reduceScatterRows(const float *in, int64_t rows, int64_t cols, float *out,
                                const char *module) {
  scratch.assign(in, in + rows * cols);
  comm->allReduce(scratch.data(), scratch.size());
  takeRows(scratch.data(), rows, cols, out);
  record("reduce_scatter", module, rows, uint64_t(rows * cols) * 4);
}

void Context::allToAll(const float *in, int64_t tokens, const std::vector<int64_t> &blocks,
                       bool rowsToColumns, float *out, const char *module) {
  // Every rank gathers the whole tensor and keeps its part: the traffic of an all_gather,
  // which Debian's Gloo makes simplest to get right for uneven pieces.
  int64_t global = globalWidth(blocks), local = localWidth(blocks, tp), mine = tokens / tp;
  std::vector<float> whole(size_t(tokens * global));
  if (rowsToColumns) {
    comm->allGather(in, size_t(mine * global), whole.data());
    takeColumns(whole.data(), tokens, blocks, out);
  } else {
    scratch.resize(size_t(tokens * local * tp));
    comm->allGather(in, size_t(tokens * local), scratch.data());
    for (int r = 0; r < tp; ++r)
      forEachPiece(blocks, tp, r, [&](int64_t at, int64_t to, int64_t count, int64_t) {
        for (int64_t row = 0; row < tokens; ++row)
          std::memcpy(whole.data() + row * global + to,
                      scratch.data() + (r * tokens + row) * local + at, count * sizeof(float));
      });
    takeRows(whole.data(), tokens, global, out);
  }
  record("all_to_all", module, tokens, uint64_t(tokens * global) * 4);
}

void Context::takeColumns(const float *in, int64_t rows, const std::vector<int64_t> &blocks,
                          float *out) {
  int64_t local = localWidth(blocks, tp), global = globalWidth(blocks);
  forEachPiece(blocks, tp, rank, [&](int64_t at, int64_t from, int64_t count, int64_t piece) {
    for (int64_t row = 0; row < rows; ++row) {
      float *dst = out + row * local + at;
      std::memcpy(dst, in + row * global + from, count * sizeof(float));
      std::fill(dst + count, dst + piece, 0.0f);
    }
  });
}

void Context::takeRows(const float *in, int64_t rows, int64_t cols, float *out) {
  int64_t mine = rows / tp; // token splits happen only where tp divides the tokens
  std::memcpy(out, in + rank * mine * cols, mine * cols * sizeof(float));
}

void Context::partialFromReplicate(const float *in, int64_t n, float *out) {
  if (rank == 0)
    std::memcpy(out, in, n * sizeof(float));
  else
    std::fill(out, out + n, 0.0f);
}

void Context::partialFromRows(const float *in, int64_t tokens, int64_t cols, float *out) {
  int64_t mine = tokens / tp;
  std::fill(out, out + tokens * cols, 0.0f);
  std::memcpy(out + rank * mine * cols, in, mine * cols * sizeof(float));
}

void Context::partialFromColumns(const float *in, int64_t rows,
                                 const std::vector<int64_t> &blocks, float *out) {
  int64_t local = localWidth(blocks, tp), global = globalWidth(blocks);
  std::fill(out, out + rows * global, 0.0f);
  forEachPiece(blocks, tp, rank, [&](int64_t at, int64_t to, int64_t count, int64_t) {
    for (int64_t row = 0; row < rows; ++row)
      std::memcpy(out + row * global + to, in + row * local + at, count * sizeof(float));
  });
}

} // namespace tpcrt
