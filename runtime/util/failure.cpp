// The message a rank stops with when a forward fails (tpcrt/failure.h).
#include "tpcrt/failure.h"

namespace tpcrt {

std::string describeFailure(const std::exception &e, bool peers, const std::string &lost,
                            const std::string &model, const std::string &phase) {
  if (dynamic_cast<const DeviceError *>(&e) || dynamic_cast<const RequestError *>(&e) || !peers)
    return std::string(e.what()) + " (while running " + model + ", " + phase + ")";
  return (lost.empty() ? "a peer stopped answering" : lost) + "; a collective of " + phase +
         " failed: " + e.what();
}

} // namespace tpcrt
