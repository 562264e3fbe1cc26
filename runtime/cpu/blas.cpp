// Which OpenBLAS core the CPU backend runs on (tpcrt/cpu/blas.h).
#include "tpcrt/cpu/blas.h"

#include <cblas.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <strings.h>
#include <unistd.h>

namespace tpcrt::cpu {

namespace {

/// Set (to the library's own guess) in the environment of the process chooseBlasCore executes,
/// so that it can tell its OPENBLAS_CORETYPE from a user's.
constexpr const char *kGuessVariable = "TPC_BLAS_LIBRARY_CORE";

/// OpenBLAS's x86-64 core names (0.3.21's DYNAMIC_ARCH list, and SapphireRapids of later
/// versions) and the instruction sets of the kernels each runs. Bulldozer to Excavator have
/// AVX (and FMA) but not AVX2; Zen runs Haswell's kernels. "Unknown" is what the library says
/// when it recognized nothing, and runs its generic kernels.
struct CoreIsa {
  const char *name;
  BlasIsa isa;
};
constexpr CoreIsa kCores[] = {
    {"Katmai", BlasIsa::Sse},        {"Coppermine", BlasIsa::Sse},   {"Northwood", BlasIsa::Sse},
    {"Prescott", BlasIsa::Sse},      {"Banias", BlasIsa::Sse},       {"Atom", BlasIsa::Sse},
    {"Core2", BlasIsa::Sse},         {"Penryn", BlasIsa::Sse},       {"Dunnington", BlasIsa::Sse},
    {"Nehalem", BlasIsa::Sse},       {"Opteron", BlasIsa::Sse},      {"Opteron_SSE3", BlasIsa::Sse},
    {"Barcelona", BlasIsa::Sse},     {"Bobcat", BlasIsa::Sse},       {"Nano", BlasIsa::Sse},
    {"Athlon", BlasIsa::Sse},        {"Unknown", BlasIsa::Sse},      {"Sandybridge", BlasIsa::Avx},
    {"Bulldozer", BlasIsa::Avx},     {"Piledriver", BlasIsa::Avx},   {"Steamroller", BlasIsa::Avx},
    {"Excavator", BlasIsa::Avx},     {"Haswell", BlasIsa::Avx2},     {"Zen", BlasIsa::Avx2},
    {"SkylakeX", BlasIsa::Avx512},   {"Cooperlake", BlasIsa::Avx512},
    {"SapphireRapids", BlasIsa::Avx512},
};

/// The best instruction sets a core may use on a CPU with `features`, and the core for them.
struct Best {
  BlasIsa isa;
  const char *core, *reason;
};
std::optional<Best> bestFor(const CpuFeatures &f) {
  if (f.avx512f && f.avx512bw && f.avx512dq && f.avx512vl && f.avx2 && f.fma)
    return Best{BlasIsa::Avx512, "SkylakeX", "AVX-512"};
  if (f.avx2 && f.fma)
    return Best{BlasIsa::Avx2, "Haswell", "AVX2+FMA"};
  if (f.avx)
    return Best{BlasIsa::Avx, "Sandybridge", "AVX"};
  return std::nullopt;
}

/// "OpenBLAS 0.3.21" from the library's configuration string.
std::string libraryVersion() {
  std::string config = openblas_get_config();
  size_t space = config.find(' ');
  space = space == std::string::npos ? space : config.find(' ', space + 1);
  return config.substr(0, space);
}

} // namespace

CpuFeatures hostCpuFeatures() {
  CpuFeatures f;
#if defined(__x86_64__)
  f.avx = __builtin_cpu_supports("avx");
  f.avx2 = __builtin_cpu_supports("avx2");
  f.fma = __builtin_cpu_supports("fma");
  f.avx512f = __builtin_cpu_supports("avx512f");
  f.avx512bw = __builtin_cpu_supports("avx512bw");
  f.avx512dq = __builtin_cpu_supports("avx512dq");
  f.avx512vl = __builtin_cpu_supports("avx512vl");
#endif
  return f;
}

std::optional<BlasIsa> blasCoreIsa(const std::string &core) {
  for (const CoreIsa &entry : kCores)
    if (strcasecmp(entry.name, core.c_str()) == 0)
      return entry.isa;
  return std::nullopt;
}

std::optional<std::string> betterBlasCore(const CpuFeatures &features,
                                          const std::string &libraryCore) {
  std::optional<BlasIsa> chosen = blasCoreIsa(libraryCore);
  std::optional<Best> best = bestFor(features);
  if (!chosen || !best || *chosen >= best->isa)
    return std::nullopt;
  return std::string(best->core);
}

void chooseBlasCore(char **argv) {
  if (std::getenv("OPENBLAS_CORETYPE"))
    return;
  // Only a DYNAMIC_ARCH library reads OPENBLAS_CORETYPE; another runs the kernels it was
  // built for whatever the variable says.
  if (!std::strstr(openblas_get_config(), "DYNAMIC_ARCH"))
    return;
  std::string guessed = openblas_get_corename();
  std::optional<std::string> core = betterBlasCore(hostCpuFeatures(), guessed);
  if (!core)
    return;
  setenv("OPENBLAS_CORETYPE", core->c_str(), 1);
  setenv(kGuessVariable, guessed.c_str(), 1);
  std::fflush(nullptr);
  execv("/proc/self/exe", argv);
  // Still here: the library keeps its own choice, and the variables go, so that nothing this
  // program starts believes otherwise.
  std::fprintf(stderr,
               "tpc: warning: OpenBLAS chose its %s kernels on a CPU that runs %s's; executing "
               "again with OPENBLAS_CORETYPE=%s failed (%s), so the prefill runs slower\n",
               guessed.c_str(), core->c_str(), core->c_str(), std::strerror(errno));
  unsetenv("OPENBLAS_CORETYPE");
  unsetenv(kGuessVariable);
}

std::string blasDescription() {
  std::string core = openblas_get_corename();
  std::string text = libraryVersion() + ", core " + core + " (";
  const char *given = std::getenv("OPENBLAS_CORETYPE");
  const char *guessed = std::getenv(kGuessVariable);
  std::optional<Best> best = bestFor(hostCpuFeatures());
  if (given && guessed && best && strcasecmp(given, best->core) == 0)
    return text + "chosen for " + best->reason + "; the library guessed " + guessed + ")";
  if (given)
    return text + "OPENBLAS_CORETYPE)";
  return text + "the library's choice)";
}

} // namespace tpcrt::cpu
