// The per-rank Context of the CPU target: stopping a rank, its caches, its group.
#include "tpcrt/model.h"

#include <cstdio>
#include <cstdlib>

namespace tpcrt {

void Context::fail(const std::string &message) const {
  std::fprintf(stderr, "error: %s\n", message.c_str());
  if (comm)
    comm->recordExit(message);
  std::exit(1);
}

void Context::resetCaches() {
  for (KVCache &cache : caches)
    cache.length = 0;
  if (device)
    device->resetCaches();
}

void Context::attach(Comm &group) {
  comm = &group;
  group.communicator().traceInto(&trace);
  placement = std::make_unique<Collectives>(group.communicator(), memory);
}

} // namespace tpcrt
