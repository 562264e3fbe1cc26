// Which OpenBLAS core the CPU backend runs on. A DYNAMIC_ARCH OpenBLAS (Debian's) picks its
// kernels once, when it loads, from the CPUs it knows: on newer ones (Zen 4, Sapphire Rapids)
// Debian 12's 0.3.21 falls back to Prescott's SSE3 kernels, several times slower at a prefill,
// and says nothing. It reads OPENBLAS_CORETYPE at that moment only, so a program that wants
// another core sets it and executes itself again (chooseBlasCore). Plain C++17.
#ifndef TPCRT_CPU_BLAS_H
#define TPCRT_CPU_BLAS_H

#include <optional>
#include <string>

namespace tpcrt::cpu {

/// The instruction sets a BLAS core's kernels use, in order.
enum class BlasIsa { Sse, Avx, Avx2, Avx512 };

/// The CPU's features that decide the best core.
struct CpuFeatures {
  bool avx = false, avx2 = false, fma = false;
  bool avx512f = false, avx512bw = false, avx512dq = false, avx512vl = false;
};
/// This CPU's (__builtin_cpu_supports).
CpuFeatures hostCpuFeatures();

/// The instruction sets of an OpenBLAS core name (as openblas_get_corename says it or
/// OPENBLAS_CORETYPE takes it, any case); none for a name tpc does not know.
std::optional<BlasIsa> blasCoreIsa(const std::string &core);

/// The core OpenBLAS should use on a CPU with `features` when it chose `libraryCore`: SkylakeX
/// for AVX-512 (F, BW, DQ and VL), Haswell for AVX2 and FMA, Sandybridge for AVX; none when
/// the library's core already uses the best of those the CPU has, or is a name tpc does not
/// know (so a newer library's own choice stands).
std::optional<std::string> betterBlasCore(const CpuFeatures &features,
                                          const std::string &libraryCore);

/// The first thing a program's main does, before any thread: when OPENBLAS_CORETYPE is unset
/// and betterBlasCore names a core, set it and execute /proc/self/exe again with `argv` (once:
/// the new process finds it set). A user's OPENBLAS_CORETYPE always stands. If the execution
/// fails, the library's choice stands and a warning says so.
void chooseBlasCore(char **argv);

/// "OpenBLAS 0.3.21, core Haswell (chosen for AVX2+FMA; the library guessed Prescott)", or
/// "(the library's choice)", or "(OPENBLAS_CORETYPE)".
std::string blasDescription();

} // namespace tpcrt::cpu

#endif // TPCRT_CPU_BLAS_H
