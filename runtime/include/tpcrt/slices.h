// How a rank's slice of a tensor lies in the row-major HF tensor: a sequence of contiguous
// runs, shared by the checkpoint reader and the weight generators (the host's, and a
// backend's that generates weights where they live).
#ifndef TPCRT_SLICES_H
#define TPCRT_SLICES_H

#include "tpcrt/weights.h"

#include <algorithm>

namespace tpcrt {

/// Calls fn(first, count, padded) for each contiguous run of this rank's slice, in the order
/// the local tensor stores them: `count` elements from HF element `first`, then
/// `padded - count` zeros.
template <typename Fn>
void forEachRun(const std::vector<int64_t> &shape, const SliceSpec &spec, Fn fn) {
  bool whole = spec.dim < 0;
  int64_t dim = whole ? 0 : spec.dim;
  std::vector<int64_t> offsets = whole ? std::vector<int64_t>{0} : spec.offsets;
  std::vector<int64_t> sizes =
      whole ? std::vector<int64_t>{shape.empty() ? 1 : shape[0]} : spec.sizes;
  int64_t chunks = whole ? 1 : spec.chunks, piece = whole ? 0 : spec.piece;
  int64_t outer = 1, inner = 1;
  for (int64_t i = 0; i < dim; ++i)
    outer *= shape[i];
  for (size_t i = dim + 1; i < shape.size(); ++i)
    inner *= shape[i];
  int64_t dimSize = shape.empty() ? 1 : shape[dim];
  for (int64_t o = 0; o < outer; ++o)
    for (size_t b = 0; b < sizes.size(); ++b) {
      int64_t rows = whole || spec.extent <= 0 ? (sizes[b] + chunks - 1) / chunks : spec.extent;
      int64_t first = offsets[b] + piece * rows;
      int64_t count = std::max<int64_t>(0, std::min(rows, offsets[b] + sizes[b] - first));
      fn(uint64_t((o * dimSize + first) * inner), count * inner, rows * inner);
    }
}

} // namespace tpcrt

#endif // TPCRT_SLICES_H
