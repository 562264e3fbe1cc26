// tpc serve's HTTP/1.1 connection layer, event-driven on Boost.Asio with Boost.Beast's
// request parser (docs/serve.md, "Connections", says why these). One I/O thread owns every
// socket; an open connection costs a file descriptor and a few kilobytes, never a thread, so
// idle and slow clients cannot starve the others. Each phase of a connection has a deadline:
// the first byte of a request (--keep-alive-timeout), its request line and headers
// (--header-timeout), its body (--body-timeout), and each write of the answer
// (--write-timeout); past one the connection is closed. Connections beyond --max-connections
// get a 503 at once and are closed.
//
// The handler runs on the I/O thread and must not block: it answers at once, or keeps the
// Exchange and answers later from any thread (the engine's, for a completion). Answers are
// queued and written by the I/O thread, so a client that stops reading never blocks the one
// that answers it: its queue is bounded, and past the bound or the write deadline the
// connection is dropped and the exchange's onGone runs.
#ifndef TPCRT_SERVE_HTTP_H
#define TPCRT_SERVE_HTTP_H

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace tpcrt::serve::http {

/// The limits of one server.
struct Limits {
  int64_t maxConnections = 4096;
  std::chrono::seconds header{10}, body{30}, keepAlive{5}, write{30};
  uint64_t maxBodyBytes = uint64_t(4) << 20;
  uint32_t maxHeaderBytes = 16 << 10; // the request line and the headers together
  size_t maxQueuedBytes = size_t(8) << 20; // an answer's bytes the client has not taken
};

struct Request {
  std::string method, target, path; // path: the target without its query
  std::vector<std::pair<std::string, std::string>> headers;
  std::string body;
  int version = 11; // 10 or 11: HTTP/1.0 or 1.1
  bool keepAlive = true;
  /// The first header of that name (case-insensitive), or null.
  const std::string *header(std::string_view name) const;
};

struct Response {
  int status = 200;
  std::string contentType = "application/json";
  std::vector<std::pair<std::string, std::string>> headers;
  std::string body; // a whole response's; a stream's chunks come through send()
};

/// What a request parser made of the bytes so far (RequestReader).
enum class Parsed { More, Head, Request, Error };

/// HTTP/1.1 requests out of a connection's bytes, one at a time: the request line and headers
/// (Parsed::Head, when the caller may refuse a body by its declared size or say 100 Continue),
/// then the body, plain or chunked (Parsed::Request). Bytes past one request stay buffered for
/// the next (pipelining). No I/O: the connection and the HTTP fuzz target feed it alike.
class RequestReader {
public:
  explicit RequestReader(const Limits &limits);
  ~RequestReader();
  RequestReader(const RequestReader &) = delete;
  RequestReader &operator=(const RequestReader &) = delete;

  /// Appends bytes received.
  void receive(std::string_view bytes);
  /// Parses what is buffered: More (send more bytes), Head (once per request), Request (then
  /// take()), or Error (then error(); the connection must close after answering it).
  Parsed parse();
  /// The head's declared body size, once Parsed::Head; none for a chunked or absent body.
  std::optional<uint64_t> contentLength() const;
  /// Whether the head asked for "Expect: 100-continue".
  bool expectsContinue() const;
  /// The request parsed (after Parsed::Request); the reader moves on to the next one.
  Request take();
  /// The head so far, as take() would give it without a body (after Parsed::Head or
  /// Parsed::Request; for an error's log line).
  Request head() const;
  /// After Parsed::Error: the status to answer (400, 413 or 431) and why.
  std::pair<int, std::string> error() const;
  /// Bytes received and not yet parsed.
  size_t buffered() const;

private:
  struct State;
  std::unique_ptr<State> state;
};

/// One request's answer, from any thread: respond() once, or open() then send() chunks and
/// end(). Calls after the exchange has ended (or its client has gone) do nothing.
class Exchange {
public:
  virtual ~Exchange() = default;
  virtual const Request &request() const = 0;
  /// A whole response; the exchange ends.
  virtual void respond(Response response) = 0;
  /// A streamed response's head (its body is ignored): chunked, or to an HTTP/1.0 client
  /// the bytes as they come, then the connection's close.
  virtual void open(Response head) = 0;
  /// One chunk of an open response; false when the client has gone (the rest is dropped).
  virtual bool send(std::string bytes) = 0;
  /// The last chunk; the exchange ends.
  virtual void end() = 0;
  /// Runs once, on the I/O thread, if the client goes (it closed, or a deadline or the queue's
  /// bound dropped it) before the exchange ended. Set it before handing the exchange on.
  virtual void onGone(std::function<void()> gone) = 0;
  /// What the access log line says of the request: its id, and words after the status
  /// ("prompt_tokens=5 completion_tokens=3").
  virtual void describe(std::string id, std::string words) = 0;
};

using Handler = std::function<void(std::shared_ptr<Exchange>)>;
/// The body of an error the layer answers by itself (a request it cannot read: 400, 413, 431;
/// a connection past the limit: 503).
using ErrorBody = std::function<std::string(int status, const std::string &message)>;

/// Counters for /metrics.
struct Stats {
  int64_t open = 0;       // connections open now
  uint64_t accepted = 0;  // connections taken, all told
  uint64_t refused = 0;   // beyond --max-connections
  uint64_t headerTimeouts = 0, bodyTimeouts = 0, idleClosed = 0, writeTimeouts = 0;
  uint64_t badRequests = 0; // the bytes were not HTTP/1.1 this server takes (400, 413, 431)
  uint64_t bodiesTooLarge = 0; // of those, the 413s
  int64_t exchanges = 0;  // requests read and not yet answered in full
};

class Server {
public:
  /// Binds HOST:PORT (port 0: any free one); null with `error` when it cannot. `logPrefix`
  /// begins each access-log line ("tpc serve").
  /// The file-descriptor limit is raised toward what limits.maxConnections needs; where the
  /// hard limit is lower, fewer connections are taken, with a warning.
  static std::unique_ptr<Server> bind(const std::string &host, int port, const Limits &limits,
                                      std::string logPrefix, ErrorBody errorBody,
                                      std::string &error);
  ~Server(); // stops: closes every connection and joins the I/O thread

  int port() const;
  /// --max-connections as the descriptor limit let it be.
  int64_t maxConnections() const;
  /// Starts the I/O thread; `handler` gets every request read in full.
  void start(Handler handler);
  Stats stats() const;

  struct Impl;

private:
  Server() = default;
  std::shared_ptr<Impl> impl;
};

/// The reason phrase of a status ("Not Found").
const char *reason(int status);

} // namespace tpcrt::serve::http

#endif // TPCRT_SERVE_HTTP_H
