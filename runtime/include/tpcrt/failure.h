// How a rank tells why a forward failed, and how long it waits for one: a fault of its own
// device is reported as the device's (the call, the library's reason, what was running),
// never as a lost peer; only a rank with peers gives up after --timeout, since only a peer
// can leave it waiting forever. Plain C++17, shared by the driver and the CUDA backend.
#ifndef TPCRT_FAILURE_H
#define TPCRT_FAILURE_H

#include <chrono>
#include <stdexcept>
#include <string>

namespace tpcrt {

/// A call of this rank's own device that failed (CUDA, cuBLASLt): "CUDA error in CALL:
/// REASON". Thrown by the CUDA backend; the driver adds what was running.
struct DeviceError : std::runtime_error {
  DeviceError(const std::string &library, const std::string &call, const std::string &reason)
      : std::runtime_error(library + " error in " + call + ": " + reason) {}
};

/// A request that failed alone while every rank ran its steps (its logits not finite): with
/// one prompt, the run's error. Thrown by the core on rank 0; no peer is to blame.
struct RequestError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

/// The message a rank stops with when a forward throws `e`. `model` and `phase` ("the
/// prefill", "decode step 3") say what was running. A DeviceError is the device's and a
/// RequestError the request's, whatever the tp; with `peers`, anything else is a collective
/// that lost one (`lost`, from Comm::lostPeers, names it when it can); a rank alone has no
/// peer to blame. What `e` repeats of `lost` is said once.
std::string describeFailure(const std::exception &e, bool peers, const std::string &lost,
                            const std::string &model, const std::string &phase);

/// The deadline of a wait that peers may hold up: --timeout from now where there are peers,
/// none for a rank alone (its forward takes what its own device needs, however long).
class PeerDeadline {
public:
  PeerDeadline(bool peers, int seconds)
      : peers(peers), seconds(seconds),
        end(std::chrono::steady_clock::now() + std::chrono::seconds(seconds)) {}
  bool passed() const { return peers && std::chrono::steady_clock::now() > end; }
  /// Why the wait for `what` gave up.
  std::string message(const std::string &what) const {
    return what + ": no answer from a peer rank within " + std::to_string(seconds) +
           " s (a rank stopped?)";
  }

private:
  bool peers;
  int seconds;
  std::chrono::steady_clock::time_point end;
};

} // namespace tpcrt

#endif // TPCRT_FAILURE_H
