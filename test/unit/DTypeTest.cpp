// The runtime's types against ggml's layouts (GgmlBlocks.h, not tpcrt/types.def, which they
// are made from): every DType's block size, name and ggml type, and the GGUF reader's entry of
// every type tpc reads, so that a wrong line in the table fails here, not in a file's offsets.
#include "tpcrt/dtype.h"
#include "tpcrt/gguf.h"

#include "GgmlBlocks.h"

#include <gtest/gtest.h>

#include <iterator>
#include <string>
#include <vector>

using namespace tpcrt;
using tpc::test::ggml::kLayouts;
using tpc::test::ggml::Layout;
using tpc::test::ggml::layoutOf;

namespace {

std::string lower(std::string name) {
  for (char &c : name)
    c = char(c >= 'A' && c <= 'Z' ? c - 'A' + 'a' : c);
  return name;
}

/// Every DType: the enumerators are 0, 1, ... and dtypeName says "?" past the last.
std::vector<DType> everyDType() {
  std::vector<DType> types;
  for (int i = 0; std::string(dtypeName(DType(i))) != "?"; ++i)
    types.push_back(DType(i));
  return types;
}

} // namespace

TEST(Types, EveryReadGgmlTypeHasItsLayout) {
  for (const Layout &layout : kLayouts) {
    SCOPED_TRACE(layout.name);
    const GgmlTypeInfo *info = ggmlTypeInfo(layout.id);
    ASSERT_NE(info, nullptr);
    EXPECT_STREQ(info->name, layout.name);
    EXPECT_EQ(info->blockElements, uint32_t(layout.elements));
    EXPECT_EQ(info->blockBytes, layout.bytes);
    EXPECT_TRUE(info->dequantizable);
  }
  // Nothing else is read: an id past the layouts is refused by name.
  int read = 0;
  for (uint32_t id = 0; id < 256; ++id)
    if (const GgmlTypeInfo *info = ggmlTypeInfo(id))
      read += info->dequantizable;
  EXPECT_EQ(read, int(std::size(kLayouts)));
}

TEST(Types, EveryDTypeHasItsLayout) {
  std::vector<DType> types = everyDType();
  EXPECT_EQ(types.size(), 12u); // f32, f16, bf16, q8_0, q4_0, q4_1, q5_0, q5_1, q4_k, q5_k, q6_k,
                                // mxfp4
  for (DType type : types) {
    SCOPED_TRACE(dtypeName(type));
    const Layout *layout = layoutOf(dtypeName(type));
    ASSERT_NE(layout, nullptr);
    EXPECT_EQ(dtypeName(type), lower(layout->name));
    EXPECT_EQ(dtypeBlockElements(type), layout->elements);
    EXPECT_EQ(dtypeBlockBytes(type), layout->bytes);
    EXPECT_EQ(isQuantized(type), layout->elements > 1);
    EXPECT_EQ(dtypeBytesFor(type, 4 * layout->elements), 4 * layout->bytes);
    // Its ggml type is the layout's, and back; both spellings of its name parse to it.
    EXPECT_EQ(uint32_t(ggmlTypeOf(type)), layout->id);
    EXPECT_EQ(dtypeOf(ggmlTypeOf(type)), type);
    EXPECT_EQ(parseDType(dtypeName(type)), type);
    EXPECT_EQ(parseDType(layout->name), type);
  }
}

TEST(Types, OnlyHeldTypesAreDTypes) {
  // Every type tpc reads it also holds (Q5_0 and Q6_K among them); IQ2_XXS is neither.
  EXPECT_EQ(dtypeOf(GgmlType::Q5_0), DType::Q5_0);
  EXPECT_EQ(dtypeOf(GgmlType::Q6_K), DType::Q6_K);
  EXPECT_EQ(dtypeOf(GgmlType::IQ2_XXS), std::nullopt);
  EXPECT_EQ(parseDType("iq2_xxs"), std::nullopt);
  EXPECT_EQ(parseDType("Q4_k"), std::nullopt); // one spelling or the other, not a mix
}
