// The message a rank stops with when a forward fails (tpcrt/failure.h).
#include "tpcrt/failure.h"

namespace tpcrt {

std::string describeFailure(const std::exception &e, bool peers, const std::string &lost,
                            const std::string &model, const std::string &phase) {
  if (dynamic_cast<const DeviceError *>(&e) || dynamic_cast<const RequestError *>(&e) || !peers)
    return std::string(e.what()) + " (while running " + model + ", " + phase + ")";
  std::string what = e.what();
  // A collective that saw a peer stop often repeats what the peer said, which `lost` says
  // already: the collective then only names itself.
  if (size_t at = lost.empty() ? std::string::npos : what.find(lost); at != std::string::npos) {
    std::string how = what.substr(0, at);
    while (!how.empty() && (how.back() == ' ' || how.back() == ':'))
      how.pop_back();
    return lost + "; a collective of " + phase + " failed" + (how.empty() ? "" : " (" + how + ")");
  }
  return (lost.empty() ? "a peer stopped answering" : lost) + "; a collective of " + phase +
         " failed: " + what;
}

} // namespace tpcrt
