// The parts runModel (driver.cpp) is made of, shared by the files that hold them: so far the
// request (request.cpp). Private to libtpcrt; emitted code sees only tpcrt/model.h.
#ifndef TPCRT_CORE_DRIVER_H
#define TPCRT_CORE_DRIVER_H

#include "tpcrt/model.h"

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace tpcrt {

/// The command line.
struct Args {
  std::string weights, dumpLogits, trace, host = "127.0.0.1";
  std::optional<uint64_t> randomSeed;
  std::vector<int64_t> prompt, forced;
  std::optional<int64_t> eosId; // overrides the model's end-of-sequence ids
  bool ignoreEos = false, warmup = false;
  int64_t maxNewTokens = 16, maxSeqLen = 0; // maxSeqLen 0: not given, see chooseMaxSeqLen
  int timeoutSeconds = 30;
};

/// TPC_FAULT: a fault one rank injects into itself, so that tests can kill a rank at a known
/// point of a run, or keep it from joining, deterministically.
struct Fault {
  enum Kind { None, Kill, Device, NoStart } kind = None;
  int rank = -1;
  int64_t step = -1;
};

/// What this process is asked to do, from its flags and its environment, checked against
/// the model before anything is connected.
struct Request {
  Args args; // maxSeqLen chosen
  int rank = 0, world = 1;
  int localRank = 0; // LOCAL_RANK, else the rank
  Fault fault;
};

/// The request, or empty once the reason is printed, with the exit status in `status`.
std::optional<Request> readRequest(const ModelSpec &spec, int argc, char **argv, int &status);

} // namespace tpcrt

#endif // TPCRT_CORE_DRIVER_H
