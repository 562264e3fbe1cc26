// The compiler's tp.storage types against ggml's layouts (GgmlBlocks.h, not tpcrt/types.def,
// which TPDialect.cpp reads them from): every WeightType has a line, and its sizes are the
// layout's, which the cost model and tp-weight-storage's block checks use.
#include "tpc/Dialect/TP/TPDialect.h"

#include "GgmlBlocks.h"

#include <gtest/gtest.h>

using namespace tpc::tp;
using tpc::test::ggml::Layout;
using tpc::test::ggml::layoutOf;

TEST(WeightTypes, EveryWeightTypeHasItsLayout) {
  for (uint32_t value = 0; value <= getMaxEnumValForWeightType(); ++value) {
    std::optional<WeightType> type = symbolizeWeightType(value);
    ASSERT_TRUE(type.has_value()) << value;
    llvm::StringRef name = stringifyWeightType(*type);
    SCOPED_TRACE(name.str());
    const Layout *layout = layoutOf(std::string_view(name.data(), name.size()));
    ASSERT_NE(layout, nullptr);
    EXPECT_EQ(blockElements(*type), layout->elements);
    EXPECT_EQ(bytesPerElement(*type), double(layout->bytes) / double(layout->elements));
    EXPECT_EQ(isQuantized(*type), layout->elements > 1);
    // The CPU target holds every type a file can give a weight in as stored (its kernels
    // read them all: tp-weight-storage widens none for want of a kernel).
    EXPECT_TRUE(isHeldByCpu(*type));
  }
}
