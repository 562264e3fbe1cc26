// The CUDA backend's kernels: bf16 in memory, fp32 arithmetic. GEMMs go to cuBLASLt; the
// rest are plain kernels, one thread per element or one block per row. Attention is in
// attention.cu.
#include "draw.h"
#include "state.h"

#include <cmath>
#include <vector>

namespace tpcrt::cuda {

namespace {

using namespace fused;

__global__ void embeddingKernel(const int64_t *ids, int64_t tokens, const act *table,
                                int64_t rowOffset, int64_t rows, int64_t width, act *out) {
  int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= tokens * width)
    return;
  int64_t t = i / width, c = i % width, local = ids[t] - rowOffset;
  out[i] = local >= 0 && local < rows ? table[local * width + c] : __float2bfloat16(0.0f);
}

__global__ void rmsNormKernel(const act *x, int64_t cols, const act *w, float epsilon,
                              float offset, act *out) {
  __shared__ float partial[kThreads];
  const act *row = x + int64_t(blockIdx.x) * cols;
  float total = 0;
  for (int64_t c = threadIdx.x; c < cols; c += blockDim.x) {
    float v = load(row, c);
    total += v * v;
  }
  float scale = rsqrtf(blockSum(total, partial) / float(cols) + epsilon);
  for (int64_t c = threadIdx.x; c < cols; c += blockDim.x)
    out[int64_t(blockIdx.x) * cols + c] =
        __float2bfloat16(load(row, c) * scale * (load(w, c) + offset));
}

__global__ void sumSquaresKernel(const act *x, int64_t cols, bool contribute, float *out) {
  __shared__ float partial[kThreads];
  const act *row = x + int64_t(blockIdx.x) * cols;
  float total = 0;
  for (int64_t c = threadIdx.x; contribute && c < cols; c += blockDim.x) {
    float v = load(row, c);
    total += v * v;
  }
  total = blockSum(total, partial);
  if (threadIdx.x == 0)
    out[blockIdx.x] = total; // fp32, as the all_reduce that totals it (calls.def)
}

/// y[rows, out] = x[rows, in] w[out, in]^T (+ bias): the GEMM for the shapes and alignments
/// cuBLASLt has no algorithm for (and under TPC_CUDA_GEMM=tpc, so the GPU check can compare
/// it). A 16 x 16 tile of y a block, 16 columns of x and of w at a time through shared memory,
/// fp32 sums and the bias added in fp32 before the one rounding to bf16, as cuBLASLt's
/// epilogue does. Slow next to cuBLASLt's tensor cores; it exists so that such a shape runs.
constexpr int kGemmTile = 16;
__global__ void gemmKernel(const act *x, const act *w, const act *bias, int64_t rows, int64_t in,
                           int64_t out, act *y) {
  __shared__ float xs[kGemmTile][kGemmTile + 1], ws[kGemmTile][kGemmTile + 1];
  const int tx = threadIdx.x, ty = threadIdx.y;
  const int64_t r = int64_t(blockIdx.y) * kGemmTile + ty, o = int64_t(blockIdx.x) * kGemmTile + tx;
  const int64_t wRow = int64_t(blockIdx.x) * kGemmTile + ty; // the row of w this thread loads
  float sum = 0;
  for (int64_t k0 = 0; k0 < in; k0 += kGemmTile) {
    const int64_t k = k0 + tx;
    xs[ty][tx] = r < rows && k < in ? load(x, r * in + k) : 0.0f;
    ws[ty][tx] = wRow < out && k < in ? load(w, wRow * in + k) : 0.0f;
    __syncthreads();
    for (int j = 0; j < kGemmTile; ++j)
      sum += xs[ty][j] * ws[tx][j];
    __syncthreads();
  }
  if (r < rows && o < out)
    y[r * out + o] = __float2bfloat16(bias ? sum + load(bias, o) : sum);
}

/// Each row's argmax of [rows, vocab] logits, a block a row: the largest value, the lowest id
/// among equal ones (the CPU sampler's std::max_element), as an int64 id.
__global__ void rowArgmaxKernel(const act *logits, int64_t vocab, int64_t *out) {
  __shared__ float values[kThreads];
  __shared__ int64_t ids[kThreads];
  const act *row = logits + int64_t(blockIdx.x) * vocab;
  // A logit that is not finite makes the row's id -2 (kNotFinite), which wins every compare:
  // the engine fails that request, as the CPU's argmax and the host's sampler do.
  constexpr int64_t kNotFinite = -2;
  float best = 0;
  int64_t bestId = -1;
  for (int64_t c = threadIdx.x; c < vocab; c += blockDim.x) { // ids grow: the first of equals
    float v = load(row, c);
    if (!isfinite(v)) {
      bestId = kNotFinite;
      break;
    }
    if (bestId < 0 || v > best) {
      best = v;
      bestId = c;
    }
  }
  values[threadIdx.x] = best;
  ids[threadIdx.x] = bestId;
  __syncthreads();
  for (unsigned half = blockDim.x / 2; half > 0; half /= 2) {
    if (threadIdx.x < half) {
      float v = values[threadIdx.x + half];
      int64_t id = ids[threadIdx.x + half];
      int64_t mine = ids[threadIdx.x];
      bool better = id >= 0 && (mine < 0 || v > values[threadIdx.x] ||
                                (v == values[threadIdx.x] && id < mine));
      if (mine != kNotFinite && (id == kNotFinite || better)) {
        values[threadIdx.x] = v;
        ids[threadIdx.x] = id;
      }
    }
    __syncthreads();
  }
  if (threadIdx.x == 0)
    out[blockIdx.x] = ids[0];
}

/// pickRow's block: its phases on every thread then a barrier, or on the first then a
/// barrier; its histograms' sums by shared-memory atomics.
struct BlockThreads {
  __device__ int count() const { return int(blockDim.x); }
  template <class F> __device__ void all(F f) {
    f(int(threadIdx.x));
    __syncthreads();
  }
  template <class F> __device__ void one(F f) {
    if (threadIdx.x == 0)
      f(0);
    __syncthreads();
  }
  __device__ static void add(double &slot, double v) { atomicAdd(&slot, v); }
  __device__ static void add(uint32_t &slot, uint32_t v) { atomicAdd(&slot, v); }
};

/// Each row's token by its Draw (draw.h), a block of kDrawThreads a row.
__global__ void pickRowsKernel(const act *logits, int64_t vocab, const Draw *draws,
                               int64_t *out) {
  __shared__ DrawShared shared;
  const act *row = logits + int64_t(blockIdx.x) * vocab;
  BlockThreads threads;
  pickRow(threads, shared, [row](int64_t i) { return __bfloat162float(row[i]); }, vocab,
          draws[blockIdx.x]);
  if (threadIdx.x == 0)
    out[blockIdx.x] = shared.chosen;
}

__global__ void rmsNormOfTotalsKernel(const act *x, int64_t cols, const float *totals,
                                      float features, const act *w, float epsilon, float offset,
                                      act *out) {
  const act *row = x + int64_t(blockIdx.x) * cols;
  float scale = rsqrtf(totals[blockIdx.x] / features + epsilon);
  for (int64_t c = threadIdx.x; c < cols; c += blockDim.x)
    out[int64_t(blockIdx.x) * cols + c] =
        __float2bfloat16(load(row, c) * scale * (load(w, c) + offset));
}

__global__ void rotaryKernel(const act *x, int64_t rows, int64_t cols, int64_t headDim,
                             const float *invFreq, const int64_t *positions, float scaling,
                             act *out) {
  int64_t half = headDim / 2, pairs = rows * (cols / headDim) * half;
  int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= pairs)
    return;
  int64_t f = i % half, head = (i / half) % (cols / headDim), r = i / half / (cols / headDim);
  int64_t base = r * cols + head * headDim;
  float angle = float(positions[r]) * invFreq[f];
  float c = cosf(angle) * scaling, s = sinf(angle) * scaling, a = load(x, base + f),
        b = load(x, base + f + half);
  out[base + f] = __float2bfloat16(a * c - b * s);
  out[base + f + half] = __float2bfloat16(b * c + a * s);
}

enum class Unary { Silu, GeluTanh, Gelu, Scale, Softcap };

__global__ void unaryKernel(const act *x, int64_t n, Unary kind, float arg, act *out) {
  int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= n)
    return;
  float v = load(x, i), y = v;
  switch (kind) {
  case Unary::Silu:
    y = fused::silu(v);
    break;
  case Unary::GeluTanh:
    y = fused::geluTanh(v);
    break;
  case Unary::Gelu:
    y = fused::gelu(v);
    break;
  case Unary::Scale:
    y = v * arg;
    break;
  case Unary::Softcap:
    y = fused::softcap(v, arg);
    break;
  }
  out[i] = __float2bfloat16(y);
}

__global__ void binaryKernel(const act *a, const act *b, int64_t n, bool product, act *out) {
  int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i < n)
    out[i] = __float2bfloat16(product ? load(a, i) * load(b, i) : load(a, i) + load(b, i));
}

void unary(Device::State &state, const act *x, int64_t n, Unary kind, float arg, act *out) {
  if (n == 0)
    return;
  unaryKernel<<<blocksFor(n), kThreads, 0, state.stream>>>(x, n, kind, arg, out);
  launched("an elementwise kernel");
}

void cublasCheck(cublasStatus_t s, const char *what) {
  if (s != CUBLAS_STATUS_SUCCESS)
    throw DeviceError("cuBLASLt", what, cublasLtGetStatusString(s));
}

} // namespace

bool embedding(Device::State &state, const int64_t *ids, int64_t tokens, const act *table,
               int64_t rowOffset, int64_t rows, int64_t vocab, int64_t width, act *out) {
  (void)vocab; // checked on the host before the ids came to the device
  if (tokens * width == 0)
    return true;
  embeddingKernel<<<blocksFor(tokens * width), kThreads, 0, state.stream>>>(
      ids, tokens, table, rowOffset, rows, width, out);
  launched("embedding");
  return true;
}

void rmsNorm(Device::State &state, const act *x, int64_t rows, int64_t cols, const act *weight,
             double epsilon, double weightOffset, act *out) {
  if (rows == 0)
    return;
  rmsNormKernel<<<unsigned(rows), kThreads, 0, state.stream>>>(x, cols, weight, float(epsilon),
                                                               float(weightOffset), out);
  launched("rms_norm");
}

void rowArgmax(Device::State &state, const act *logits, int64_t rows, int64_t vocab,
               int64_t *out) {
  if (rows == 0)
    return;
  rowArgmaxKernel<<<unsigned(rows), kThreads, 0, state.stream>>>(logits, vocab, out);
  launched("the logits' argmax");
}

void pickRows(Device::State &state, const act *logits, int64_t rows, int64_t vocab,
              const Draw *draws, int64_t *out) {
  if (rows == 0)
    return;
  pickRowsKernel<<<unsigned(rows), kDrawThreads, 0, state.stream>>>(logits, vocab, draws, out);
  launched("the logits' draws");
}

void sumSquares(Device::State &state, const act *x, int64_t rows, int64_t cols, bool contribute,
                float *out) {
  if (rows == 0)
    return;
  sumSquaresKernel<<<unsigned(rows), kThreads, 0, state.stream>>>(x, cols, contribute, out);
  launched("sum_squares");
}

void rmsNormOfTotals(Device::State &state, const act *x, int64_t rows, int64_t cols,
                     const float *totals, int64_t features, const act *weight, double epsilon,
                     double weightOffset, act *out) {
  if (rows == 0)
    return;
  rmsNormOfTotalsKernel<<<unsigned(rows), kThreads, 0, state.stream>>>(
      x, cols, totals, float(features), weight, float(epsilon), float(weightOffset), out);
  launched("rms_norm");
}

void linear(Device::State &state, const act *x, int64_t rows, int64_t in, const act *w, int64_t out,
            const act *bias, act *y) {
  if (rows == 0)
    return;
  // Column-major view: y^T [out, rows] = op(W^T [in, out])^T . x^T [in, rows]. Arena
  // pointers are aligned only as their offsets make them, so a plan is chosen for the
  // alignments it will meet (cuBLASLt otherwise assumes 256 bytes).
  auto alignment = [](const void *p) {
    uintptr_t a = uintptr_t(p);
    return uint32_t(std::min<uintptr_t>(256, a & (~a + 1)));
  };
  uint32_t alignA = alignment(w), alignB = alignment(x), alignC = alignment(y),
           alignBias = bias ? alignment(bias) : 256;
  auto key = std::make_tuple(out, rows, in, bias != nullptr, alignA, alignB, alignC, alignBias);
  auto [at, fresh] = state.plans.try_emplace(key);
  Device::State::Plan &plan = at->second;
  if (fresh) {
    cublasCheck(cublasLtMatmulDescCreate(&plan.desc, CUBLAS_COMPUTE_32F, CUDA_R_32F),
                "cublasLtMatmulDescCreate");
    cublasOperation_t transA = CUBLAS_OP_T, transB = CUBLAS_OP_N;
    cublasLtMatmulDescSetAttribute(plan.desc, CUBLASLT_MATMUL_DESC_TRANSA, &transA,
                                   sizeof(transA));
    cublasLtMatmulDescSetAttribute(plan.desc, CUBLASLT_MATMUL_DESC_TRANSB, &transB,
                                   sizeof(transB));
    if (bias) {
      cublasLtEpilogue_t epilogue = CUBLASLT_EPILOGUE_BIAS;
      cublasLtMatmulDescSetAttribute(plan.desc, CUBLASLT_MATMUL_DESC_EPILOGUE, &epilogue,
                                     sizeof(epilogue));
      cudaDataType_t biasType = CUDA_R_16BF;
      cublasLtMatmulDescSetAttribute(plan.desc, CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE, &biasType,
                                     sizeof(biasType));
    }
    cublasCheck(cublasLtMatrixLayoutCreate(&plan.a, CUDA_R_16BF, in, out, in), "layout A");
    cublasCheck(cublasLtMatrixLayoutCreate(&plan.b, CUDA_R_16BF, in, rows, in), "layout B");
    cublasCheck(cublasLtMatrixLayoutCreate(&plan.c, CUDA_R_16BF, out, rows, out), "layout C");
    cublasLtMatmulPreference_t preference;
    cublasCheck(cublasLtMatmulPreferenceCreate(&preference), "cublasLtMatmulPreferenceCreate");
    cublasLtMatmulPreferenceSetAttribute(preference, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES,
                                         &state.workspaceBytes, sizeof(state.workspaceBytes));
    for (auto [attribute, value] :
         {std::pair{CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, alignA},
          {CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES, alignB},
          {CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, alignC},
          {CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES, alignC}})
      cublasCheck(cublasLtMatmulPreferenceSetAttribute(preference, attribute, &value,
                                                       sizeof(value)),
                  "cublasLtMatmulPreferenceSetAttribute");
    int found = 0;
    cublasStatus_t status =
        cublasLtMatmulAlgoGetHeuristic(state.lt, plan.desc, plan.a, plan.b, plan.c, plan.c,
                                       preference, 1, &plan.heuristic, &found);
    cublasLtMatmulPreferenceDestroy(preference);
    if (state.ownGemm || status == CUBLAS_STATUS_NOT_SUPPORTED ||
        (status == CUBLAS_STATUS_SUCCESS && found == 0))
      plan.own = true; // no algorithm for these alignments: tpc's own kernel, from now on
    else
      cublasCheck(status, "cublasLtMatmulAlgoGetHeuristic");
  }
  if (plan.own) {
    dim3 block(kGemmTile, kGemmTile);
    dim3 grid(unsigned((out + kGemmTile - 1) / kGemmTile),
              unsigned((rows + kGemmTile - 1) / kGemmTile));
    gemmKernel<<<grid, block, 0, state.stream>>>(x, w, bias, rows, in, out, y);
    launched("the GEMM cuBLASLt has no algorithm for");
    return;
  }
  if (bias)
    cublasLtMatmulDescSetAttribute(plan.desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &bias,
                                   sizeof(bias));
  float alpha = 1.0f, beta = 0.0f;
  cublasCheck(cublasLtMatmul(state.lt, plan.desc, &alpha, w, plan.a, x, plan.b, &beta, y, plan.c, y,
                             plan.c, &plan.heuristic.algo, state.workspace, state.workspaceBytes,
                             state.stream),
              "cublasLtMatmul");
}

void rotary(Device::State &state, const act *x, int64_t rows, int64_t cols, int64_t headDim,
            const double *invFreq, const int64_t *positions, act *out, double scaling) {
  int64_t half = headDim / 2;
  // The program's table (one per rotary, static), copied to the device once.
  float *&frequencies = state.invFreqs[{invFreq, headDim}];
  if (!frequencies) {
    std::vector<float> values(half);
    for (int64_t i = 0; i < half; ++i)
      values[i] = float(invFreq[i]);
    // A plain cudaMemcpy waits for the stream's work, collectives included, out of the
    // watchdog's reach: wait through it first, so the copy finds the stream idle.
    waitForStream(state, "before copying the rotary frequencies");
    check(cudaMalloc(&frequencies, half * sizeof(float)), "cudaMalloc (rotary)");
    check(cudaMemcpy(frequencies, values.data(), half * sizeof(float), cudaMemcpyHostToDevice),
          "cudaMemcpy (rotary)");
  }
  int64_t pairs = rows * (cols / headDim) * half;
  if (pairs == 0)
    return;
  rotaryKernel<<<blocksFor(pairs), kThreads, 0, state.stream>>>(x, rows, cols, headDim, frequencies,
                                                                positions, float(scaling), out);
  launched("rotary");
}

void silu(Device::State &state, const act *x, int64_t n, act *out) {
  unary(state, x, n, Unary::Silu, 0, out);
}
void gelu(Device::State &state, const act *x, int64_t n, bool tanhApproximation, act *out) {
  unary(state, x, n, tanhApproximation ? Unary::GeluTanh : Unary::Gelu, 0, out);
}
void scale(Device::State &state, const act *x, int64_t n, double factor, act *out) {
  unary(state, x, n, Unary::Scale, float(factor), out);
}
void softcap(Device::State &state, const act *x, int64_t n, double cap, act *out) {
  unary(state, x, n, Unary::Softcap, float(cap), out);
}

void add(Device::State &state, const act *a, const act *b, int64_t n, act *out) {
  if (n == 0)
    return;
  binaryKernel<<<blocksFor(n), kThreads, 0, state.stream>>>(a, b, n, false, out);
  launched("add");
}

void mul(Device::State &state, const act *a, const act *b, int64_t n, act *out) {
  if (n == 0)
    return;
  binaryKernel<<<blocksFor(n), kThreads, 0, state.stream>>>(a, b, n, true, out);
  launched("mul");
}

void copyRows(Device::State &state, act *dst, int64_t dstStride, const act *src, int64_t srcStride,
              int64_t rows, int64_t cols) {
  if (rows == 0 || cols == 0)
    return;
  if (rows == 1) { // one contiguous run (an identity's strides are 0)
    check(cudaMemcpyAsync(dst, src, cols * sizeof(act), cudaMemcpyDeviceToDevice, state.stream),
          "cudaMemcpyAsync");
    return;
  }
  check(cudaMemcpy2DAsync(dst, dstStride * sizeof(act), src, srcStride * sizeof(act),
                          cols * sizeof(act), rows, cudaMemcpyDeviceToDevice, state.stream),
        "cudaMemcpy2DAsync");
}

void sliceColumns(Device::State &state, const act *x, int64_t rows, int64_t cols, int64_t offset,
                  int64_t size, act *out) {
  copyRows(state, out, size, x + offset, cols, rows, size);
}

} // namespace tpcrt::cuda
