// The oracle the type tests check tpcrt/types.def against, written without reading it:
// ggml's ids (ggml.h's enum ggml_type) and its block structs (ggml-common.h) member by
// member, so that each expected size is what the layout composes to (block_q4_1: two halves
// and 16 bytes of nibbles, 20), not a number copied from the table. The types tpc reads:
// every DType and every tp.storage type is one of them. Both unit test binaries include it.
#ifndef TPC_TEST_UNIT_GGMLBLOCKS_H
#define TPC_TEST_UNIT_GGMLBLOCKS_H

#include <cstddef>
#include <cstdint>
#include <string_view>

namespace tpc::test::ggml {

using ggml_half = uint16_t; // ggml-common.h's C declaration: a half held as its bits
using ggml_bf16_t = uint16_t;

constexpr int QK4_0 = 32, QK4_1 = 32, QK5_0 = 32, QK5_1 = 32, QK8_0 = 32;
constexpr int QK_K = 256, K_SCALE_SIZE = 12; // the K-quants' super-block, its packed scales
constexpr int QK_MXFP4 = 32;

struct block_q4_0 {
  ggml_half d;
  uint8_t qs[QK4_0 / 2];
};
struct block_q4_1 {
  ggml_half d, m;
  uint8_t qs[QK4_1 / 2];
};
struct block_q5_0 {
  ggml_half d;
  uint8_t qh[4];
  uint8_t qs[QK5_0 / 2];
};
struct block_q5_1 {
  ggml_half d, m;
  uint8_t qh[4];
  uint8_t qs[QK5_1 / 2];
};
struct block_q8_0 {
  ggml_half d;
  int8_t qs[QK8_0];
};
struct block_q4_K {
  ggml_half d, dmin;
  uint8_t scales[K_SCALE_SIZE];
  uint8_t qs[QK_K / 2];
};
struct block_q5_K {
  ggml_half d, dmin;
  uint8_t scales[K_SCALE_SIZE];
  uint8_t qh[QK_K / 8];
  uint8_t qs[QK_K / 2];
};
struct block_q6_K {
  uint8_t ql[QK_K / 2];
  uint8_t qh[QK_K / 4];
  int8_t scales[QK_K / 16];
  ggml_half d;
};

struct block_mxfp4 {
  uint8_t e; // E8M0
  uint8_t qs[QK_MXFP4 / 2];
};

// ggml's own checks that no struct is padded, so that sizeof is the bytes a file holds.
static_assert(sizeof(block_q4_0) == sizeof(ggml_half) + QK4_0 / 2);
static_assert(sizeof(block_q4_1) == 2 * sizeof(ggml_half) + QK4_1 / 2);
static_assert(sizeof(block_q5_0) == sizeof(ggml_half) + sizeof(uint32_t) + QK5_0 / 2);
static_assert(sizeof(block_q5_1) == 2 * sizeof(ggml_half) + sizeof(uint32_t) + QK5_1 / 2);
static_assert(sizeof(block_q8_0) == sizeof(ggml_half) + QK8_0);
static_assert(sizeof(block_q4_K) == 2 * sizeof(ggml_half) + K_SCALE_SIZE + QK_K / 2);
static_assert(sizeof(block_q5_K) == 2 * sizeof(ggml_half) + K_SCALE_SIZE + QK_K / 2 + QK_K / 8);
static_assert(sizeof(block_q6_K) == sizeof(ggml_half) + QK_K / 16 + 3 * QK_K / 4);
static_assert(sizeof(block_mxfp4) == sizeof(uint8_t) + QK_MXFP4 / 2);

/// A type as ggml defines it: its name (gguf-py's), id, elements and bytes per block.
struct Layout {
  const char *name;
  uint32_t id;
  int64_t elements;
  size_t bytes;
};

constexpr Layout kLayouts[] = {
    {"F32", 0, 1, sizeof(float)},
    {"F16", 1, 1, sizeof(ggml_half)},
    {"BF16", 30, 1, sizeof(ggml_bf16_t)},
    {"Q4_0", 2, QK4_0, sizeof(block_q4_0)},
    {"Q4_1", 3, QK4_1, sizeof(block_q4_1)},
    {"Q5_0", 6, QK5_0, sizeof(block_q5_0)},
    {"Q5_1", 7, QK5_1, sizeof(block_q5_1)},
    {"Q8_0", 8, QK8_0, sizeof(block_q8_0)},
    {"Q4_K", 12, QK_K, sizeof(block_q4_K)},
    {"Q5_K", 13, QK_K, sizeof(block_q5_K)},
    {"Q6_K", 14, QK_K, sizeof(block_q6_K)},
    {"MXFP4", 39, QK_MXFP4, sizeof(block_mxfp4)},
};

/// The layout whose name is `name` in any case (the compiler and dtypeName spell "q4_k");
/// null for a type not above.
inline const Layout *layoutOf(std::string_view name) {
  auto upper = [](char c) { return c >= 'a' && c <= 'z' ? char(c - 'a' + 'A') : c; };
  for (const Layout &layout : kLayouts) {
    std::string_view candidate = layout.name;
    bool same = candidate.size() == name.size();
    for (size_t i = 0; same && i < name.size(); ++i)
      same = upper(name[i]) == candidate[i];
    if (same)
      return &layout;
  }
  return nullptr;
}

} // namespace tpc::test::ggml

#endif // TPC_TEST_UNIT_GGMLBLOCKS_H
