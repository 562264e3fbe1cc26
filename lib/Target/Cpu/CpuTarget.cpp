// The CPU target's spelling: calls into libtpcrt (fp32, OpenBLAS, Gloo) on the rank's
// Context, and fused units as plain loops over the same straight-line code the CUDA target
// puts in a kernel (acc is double here, as in the runtime's own kernels).
#include "tpc/Target/Target.h"

#include "llvm/ADT/StringExtras.h"
#include "llvm/Support/FormatVariadic.h"

using namespace mlir;
using namespace tpc::target;

namespace {

std::string inputs(unsigned count) {
  std::string text;
  for (unsigned i = 0; i < count; ++i)
    text += "const float *in" + std::to_string(i) + ", ";
  return text;
}

class CpuSpelling : public Spelling {
public:
  CpuSpelling()
      : Spelling({"CPU", "tpcrt/program.h", "tpcrt", "tpcrt::Context &", "float",
                  /*groupsLinears=*/false}) {}
  LogicalResult supports(Operation *) const override { return success(); }

  std::string elementwiseKernel(StringRef name, const ChainCode &chain,
                                int64_t width) const override {
    return llvm::formatv("// {0}, as one loop.\n"
                         "static void {1}(tpcrt::Context &, int64_t rows, {2}float *out) {{\n"
                         "  using namespace tpcrt::fused;\n"
                         "  const int64_t count = rows * {3};\n"
                         "  for (int64_t i = 0; i < count; ++i) {{\n"
                         "{4}"
                         "    store(out, i, {5});\n"
                         "  }\n"
                         "}",
                         chain.what, name, inputs(chain.inputs), width,
                         indentLines(chain.lines, "    "), chain.result);
  }

  std::string normKernel(StringRef name, const ChainCode &chain, int64_t width,
                         int64_t normWidth, double epsilon,
                         double weightOffset) const override {
    return llvm::formatv(
        "// {0}, as one loop over rows.\n"
        "static void {1}(tpcrt::Context &, int64_t rows, {2}const float *weight, float *stored, "
        "float *out) {{\n"
        "  using namespace tpcrt::fused;\n"
        "  const int64_t width = {3}, norms = rows * {4};\n"
        "  for (int64_t r = 0; r < norms; ++r) {{\n"
        "    const int64_t base = r * width;\n"
        "    acc total = 0;\n"
        "    for (int64_t c = 0; c < width; ++c) {{\n"
        "      const int64_t i = base + c;\n"
        "{5}"
        "      store(stored, i, {6});\n"
        "      const acc y = load(stored, i);\n"
        "      total += y * y;\n"
        "    }\n"
        "    const acc scale = acc(1) / std::sqrt(total / acc(width) + acc({7}));\n"
        "    for (int64_t c = 0; c < width; ++c)\n"
        "      store(out, base + c, load(stored, base + c) * scale * (load(weight, c) + "
        "acc({8})));\n"
        "  }\n"
        "}",
        chain.what, name, inputs(chain.inputs), normWidth, width / normWidth,
        indentLines(chain.lines, "      "), chain.result, doubleLiteral(epsilon),
        doubleLiteral(weightOffset));
  }

  std::string rotaryKernel(StringRef name, int64_t headDim, int64_t aHeads, int64_t bHeads,
                           ArrayRef<double> frequencies, double scaling) const override {
    std::string list = literalList(frequencies, doubleLiteral);
    return llvm::formatv(
        "// The rotary embedding of an attention's query and key, as one loop.\n"
        "static void {0}(tpcrt::Context &, int64_t rows, const float *a, float *aOut, "
        "const float *b, float *bOut, const int64_t *positions) {{\n"
        "  using namespace tpcrt::fused;\n"
        "  static const double frequencies[{1}] = {{{2}};\n"
        "  for (int64_t i = 0; i < rows * {3}; ++i) {{\n"
        "{4}"
        "  }\n"
        "}",
        name, frequencies.size(), list, (aHeads + bHeads) * int64_t(frequencies.size()),
        indentLines(rotaryPairCode(headDim, aHeads, bHeads, "frequencies",
                                   scaling == 1.0 ? "" : doubleLiteral(scaling)),
                    "    "));
  }
};

} // namespace

std::unique_ptr<Spelling> tpc::target::makeCpuSpelling() {
  return std::make_unique<CpuSpelling>();
}
