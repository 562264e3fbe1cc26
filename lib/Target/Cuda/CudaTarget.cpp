// The CUDA target's spelling: calls into libtpcrt_cuda (bf16 activations, fp32 arithmetic,
// cuBLASLt, NCCL) on the rank's Device, and each fused unit as a generated __global__ kernel
// plus the host function that launches it on the Device's stream.
#include "tpc/Target/Target.h"

#include "tpc/Dialect/TP/TPDialect.h"

#include "llvm/ADT/StringExtras.h"
#include "llvm/Support/FormatVariadic.h"

using namespace mlir;
using namespace tpc::target;

namespace {

/// `const act *in0, const act *in1, ` and the matching `in0, in1, `.
std::pair<std::string, std::string> inputs(unsigned count) {
  std::string params, names;
  for (unsigned i = 0; i < count; ++i) {
    params += "const tpcrt::cuda::act *in" + std::to_string(i) + ", ";
    names += "in" + std::to_string(i) + ", ";
  }
  return {params, names};
}

/// A fused chain's kernel up to its body: what it computes, its signature, the helpers.
std::string chainKernelHead(StringRef what, StringRef name, StringRef params) {
  return llvm::formatv("// {0}, as one kernel.\n"
                       "__global__ void {1}_kernel({2}) {{\n"
                       "  using namespace tpcrt::cuda::fused;\n",
                       what, name, params);
}

class CudaSpelling : public Spelling {
public:
  CudaSpelling()
      : Spelling({"CUDA", "tpcrt/cuda/program.h", "tpcrt::cuda", "tpcrt::cuda::Device &",
                  "tpcrt::cuda::act", /*groupsLinears=*/true}) {}

  LogicalResult supports(Operation *op) const override {
    if (isa<tpc::tp::RouterOp, tpc::tp::ExpertsOp>(op))
      return op->emitError() << "the CUDA target cannot run mixture-of-experts layers yet";
    auto rotary = dyn_cast<tpc::tp::RotaryOp>(op);
    auto mla = dyn_cast<tpc::tp::AttentionOp>(op);
    if (rotary && rotary.getInterleaved() && !rotary.getUnrotated())
      return op->emitError() << rotary.getModule()
                             << ": rotary embeddings in the complex form (adjacent pairs: "
                                "Llama 4's) run on the CPU target only for now (the CUDA "
                                "rotary kernel rotates the two halves of a head); use --target "
                                "cpu";
    if (isa<tpc::tp::HeadSliceOp, tpc::tp::ConcatHeadsOp>(op) ||
        (rotary && (rotary.getInterleaved() || rotary.getUnrotated())) ||
        (mla && mla.getValueHeadDim()))
      return op->emitError() << tpc::tp::getModuleName(op)
                             << ": the CUDA target cannot run DeepSeek's multi-head latent "
                                "attention yet (its attention kernels take one head_dim for "
                                "keys and values); use --target cpu";
    if (auto attention = dyn_cast<tpc::tp::AttentionOp>(op); attention && attention.getSinks())
      return op->emitError() << attention.getModule()
                             << ": attention sinks (GPT-OSS) run on the CPU target only for now "
                                "(the CUDA attention kernels have no sink in their softmax); use "
                                "--target cpu";
    if (isa<tpc::tp::L2NormOp>(op))
      return op->emitError() << tpc::tp::getModuleName(op)
                             << ": Llama 4's q/k L2 norm runs on the CPU target only for now; "
                                "use --target cpu";
    if (auto attention = dyn_cast<tpc::tp::AttentionOp>(op);
        attention && (attention.getChunkSize() || attention.getTemperatureFloor()))
      return op->emitError() << attention.getModule()
                             << ": chunked attention and attention temperature tuning (Llama "
                                "4) run on the CPU target only for now (the CUDA attention "
                                "kernels mask causally or by a sliding window); use --target "
                                "cpu";
    if (auto attention = dyn_cast<tpc::tp::AttentionOp>(op); attention && attention.getKvGroup())
      return op->emitError()
             << attention.getModule()
             << ": heads split unevenly over the ranks run on the CPU target only for now (the "
                "CUDA attention kernels group query heads evenly over KV heads); use --target "
                "cpu, or a tp that divides the query and KV heads";
    if (auto transfer = dyn_cast<tpc::tp::TransferOp>(op);
        transfer && transfer.getArgmaxIfGreedy())
      return op->emitError() << tpc::tp::getModuleName(op)
                             << ": a greedy step's argmax on the last pipeline stage "
                                "(argmax_if_greedy) runs on the CPU target only for now; use "
                                "--target cpu";
    if (auto gather = dyn_cast<tpc::tp::AllGatherOp>(op); gather && gather.getArgmaxIfGreedy())
      return op->emitError() << tpc::tp::getModuleName(op)
                             << ": a greedy step's argmax on the ranks (argmax_if_greedy) runs on "
                                "the CPU target only for now (the CUDA program gathers the "
                                "logits); use --target cpu";
    return success();
  }

  std::string elementwiseKernel(StringRef name, const ChainCode &chain,
                                int64_t width) const override {
    auto [params, names] = inputs(chain.inputs);
    return chainKernelHead(chain.what, name, "int64_t count, " + params + "tpcrt::cuda::act *out") +
           llvm::formatv(
        "  const int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;\n"
        "  if (i >= count)\n"
        "    return;\n"
        "{3}"
        "  store(out, i, {4});\n"
        "}\n"
        "static void {1}(tpcrt::cuda::Device &cx, int64_t rows, {2}tpcrt::cuda::act *out) {{\n"
        "  using namespace tpcrt::cuda::fused;\n"
        "  const int64_t count = rows * {5};\n"
        "  if (count == 0)\n"
        "    return;\n"
        "  {1}_kernel<<<blocksFor(count), kThreads, 0, cx.stream()>>>(count, {6}out);\n"
        "  cx.launched(\"{0}\");\n"
        "}",
        chain.what, name, params, indentLines(chain.lines, "  "), chain.result, width, names)
        .str();
  }

  std::string normKernel(StringRef name, const ChainCode &chain, int64_t width,
                         int64_t normWidth, double epsilon,
                         double weightOffset) const override {
    auto [params, names] = inputs(chain.inputs);
    // One block per row: the chain's value is stored (the residual stream) and squared into
    // the row's sum, then the stored row is normalized.
    return chainKernelHead(chain.what, name,
                           params + "const tpcrt::cuda::act *weight, tpcrt::cuda::act *stored, "
                                    "tpcrt::cuda::act *out") +
           llvm::formatv(
        "  __shared__ float partial[kThreads];\n"
        "  const int64_t width = {3}, base = int64_t(blockIdx.x) * width;\n"
        "  acc total = 0;\n"
        "  for (int64_t c = threadIdx.x; c < width; c += blockDim.x) {{\n"
        "    const int64_t i = base + c;\n"
        "{4}"
        "    store(stored, i, {5});\n"
        "    const acc y = load(stored, i);\n"
        "    total += y * y;\n"
        "  }\n"
        "  const acc scale = rsqrtf(blockSum(total, partial) / acc(width) + {6});\n"
        "  for (int64_t c = threadIdx.x; c < width; c += blockDim.x)\n"
        "    store(out, base + c, load(stored, base + c) * scale * (load(weight, c) + {7}));\n"
        "}\n"
        "static void {1}(tpcrt::cuda::Device &cx, int64_t rows, {2}const tpcrt::cuda::act "
        "*weight, tpcrt::cuda::act *stored, tpcrt::cuda::act *out) {{\n"
        "  using namespace tpcrt::cuda::fused;\n"
        "  const int64_t blocks = rows * {8};\n"
        "  if (blocks == 0)\n"
        "    return;\n"
        "  {1}_kernel<<<unsigned(blocks), kThreads, 0, cx.stream()>>>({9}weight, stored, out);\n"
        "  cx.launched(\"{0}\");\n"
        "}",
        chain.what, name, params, normWidth, indentLines(chain.lines, "    "), chain.result,
        floatLiteral(epsilon), floatLiteral(weightOffset), width / normWidth, names)
        .str();
  }

  std::string rotaryKernel(StringRef name, int64_t headDim, int64_t aHeads, int64_t bHeads,
                           ArrayRef<double> frequencies, double scaling) const override {
    std::string list = literalList(frequencies, floatLiteral);
    // The frequencies are constants of the kernel, rounded to float as the runtime's rotary
    // rounds them.
    std::string table = (name + "_frequencies").str();
    int64_t pairs = (aHeads + bHeads) * int64_t(frequencies.size());
    return llvm::formatv(
        "// The rotary embedding of an attention's query and key, as one kernel.\n"
        "__constant__ float {0}[{1}] = {{{2}};\n"
        "__global__ void {3}_kernel(const tpcrt::cuda::act *a, tpcrt::cuda::act *aOut, "
        "const tpcrt::cuda::act *b, tpcrt::cuda::act *bOut, const int64_t *positions, "
        "int64_t rows) {{\n"
        "  using namespace tpcrt::cuda::fused;\n"
        "  const int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;\n"
        "  if (i >= rows * {4})\n"
        "    return;\n"
        "{5}"
        "}\n"
        "static void {3}(tpcrt::cuda::Device &cx, int64_t rows, const tpcrt::cuda::act *a, "
        "tpcrt::cuda::act *aOut, const tpcrt::cuda::act *b, tpcrt::cuda::act *bOut, "
        "const int64_t *positions) {{\n"
        "  using namespace tpcrt::cuda::fused;\n"
        "  if (rows == 0)\n"
        "    return;\n"
        "  {3}_kernel<<<blocksFor(rows * {4}), kThreads, 0, cx.stream()>>>(a, aOut, b, bOut, "
        "positions, rows);\n"
        "  cx.launched(\"rotary (query and key)\");\n"
        "}",
        table, frequencies.size(), list, name, pairs,
        indentLines(rotaryPairCode(headDim, aHeads, bHeads, table,
                                   scaling == 1.0 ? "" : floatLiteral(scaling)),
                    "  "));
  }
};

} // namespace

std::unique_ptr<Spelling> tpc::target::makeCudaSpelling() {
  return std::make_unique<CudaSpelling>();
}
