// --serve HOST:PORT: the OpenAI-compatible HTTP server (tpc serve). Rank 0 owns everything a
// client touches: HTTP (http.h, on Boost.Asio), the tokenizer, the chat template, and
// the engine's scheduler and sampler, stepped on rank 0's main thread; the HTTP threads only
// hand requests to it and carry back what it produced. The other ranks follow the engine's
// steps, as in any run; between requests rank 0 sends them idle steps, so that neither side
// waits on the other past --timeout without knowing it is alive.
#ifndef TPCRT_SERVE_SERVER_H
#define TPCRT_SERVE_SERVER_H

#include "../core/core.h"

#include <memory>
#include <string>

namespace tpcrt::serve {

class Server {
public:
  /// Rank 0: binds --serve's address and starts answering, before the group meets and the
  /// weights load (/health says 503 until then); prints "listening on HOST:PORT". Null with
  /// `error` when the address cannot be bound.
  static std::unique_ptr<Server> start(const ModelSpec &spec, const Args &args,
                                       std::string &error);
  ~Server();

  /// Rank 0, once the group has met and the weights are loaded: serves until SIGTERM or
  /// SIGINT (then drains: no new requests, those in flight finish within --drain-seconds or
  /// are aborted; returns 0) or until a rank is lost (every open request gets an error, and
  /// the failure is returned through group.stop: non-zero).
  /// `args`: the request's, as the backend sized it (--kv-cache-memory made tokens).
  int run(const Args &args, Backend &backend, const RankInfo &rank, const Group &group,
          const Fault &fault);

  struct State;

private:
  Server() = default;
  std::unique_ptr<State> state;
};

/// The other ranks under --serve: follow rank 0's steps until it stops (0) or is lost
/// (group.stop's status). SIGTERM and SIGINT are rank 0's to act on: ignored here.
int follow(const ModelSpec &spec, const Args &args, Backend &backend, const RankInfo &rank,
           const Group &group, const Fault &fault);

} // namespace tpcrt::serve

#endif // TPCRT_SERVE_SERVER_H
