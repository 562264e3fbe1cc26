// The connection layer (http.h). One io_context, run by one thread; every socket, timer and
// queue below is touched on that thread alone. Other threads reach a connection only through
// its Exchange, whose calls post to the io_context.
//
// A connection's life: wait for a request's first byte (keep-alive deadline), read its head
// (header deadline) and body (body deadline) through RequestReader, hand the request to the
// handler, and until the exchange ends watch the socket for the client closing it (a peek, so
// that pipelined bytes stay put); write the answer's queued bytes (a deadline for each
// write), then log the exchange and read the next request, or close.
#include "http.h"

#include <boost/asio.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>

#include <sys/resource.h>
#include <sys/socket.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <cerrno>
#include <cstdio>
#include <deque>
#include <mutex>
#include <strings.h>
#include <thread>
#include <unordered_map>

namespace tpcrt::serve::http {

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace bhttp = boost::beast::http;
using tcp = asio::ip::tcp;
using Clock = std::chrono::steady_clock;

const char *reason(int status) {
  // (a literal: the view is NUL-terminated)
  return bhttp::obsolete_reason(bhttp::int_to_status(unsigned(status))).data();
}

const std::string *Request::header(std::string_view name) const {
  for (const auto &[key, value] : headers)
    if (key.size() == name.size() && strncasecmp(key.data(), name.data(), name.size()) == 0)
      return &value;
  return nullptr;
}

// ---- RequestReader -------------------------------------------------------------------------

struct RequestReader::State {
  Limits limits;
  std::string bytes;   // received, not yet parsed
  std::optional<bhttp::request_parser<bhttp::string_body>> parser;
  bool headReported = false;
  size_t scanned = 0;            // bytes searched for the head's end, none found before
  bool started = false;          // Beast has had bytes of this request
  size_t headUsed = 0;           // bytes of the head Beast has taken
  std::optional<Request> headOf; // the head as it came, without the trailers
  std::optional<std::pair<int, std::string>> failure;

  explicit State(const Limits &limits) : limits(limits) { fresh(); }
  void fresh() {
    parser.emplace();
    parser->header_limit(limits.maxHeaderBytes);
    parser->body_limit(limits.maxBodyBytes); // a Content-Length over it: refused at the head
    headReported = false;
    scanned = 0;
    started = false;
    headUsed = 0;
    headOf.reset();
  }
  /// What HTTP/1.1 requires of a head beyond what Beast checks; empty when it is fine.
  std::string headFault() const {
    const auto &message = parser->get();
    auto coding = message.find(bhttp::field::transfer_encoding);
    if (coding != message.end() && !beast::iequals(coding->value(), "chunked"))
      return "Transfer-Encoding '" + std::string(coding->value()) + "' is not one this "
             "server reads (only chunked)";
    if (message.version() >= 11 && message.count(bhttp::field::host) != 1)
      return "an HTTP/1.1 request must carry one Host header";
    return "";
  }
  void fail(const beast::error_code &ec) {
    if (ec == bhttp::error::header_limit) {
      failure = {431, "the request line and headers are larger than the limit of " +
                          std::to_string(limits.maxHeaderBytes) + " bytes"};
    } else if (ec == bhttp::error::body_limit) {
      const auto &fields = parser->get();
      auto length = fields.find(bhttp::field::content_length);
      failure = {413, length != fields.end()
                          ? "the body has " + std::string(length->value()) +
                                " bytes, more than the limit of " +
                                std::to_string(limits.maxBodyBytes)
                          : "the body is larger than the limit of " +
                                std::to_string(limits.maxBodyBytes) + " bytes"};
    } else {
      failure = {400, "the request is not HTTP/1.1 this server reads: " + ec.message()};
    }
  }
};

RequestReader::RequestReader(const Limits &limits) : state(std::make_unique<State>(limits)) {}
RequestReader::~RequestReader() = default;

void RequestReader::receive(std::string_view bytes) { state->bytes.append(bytes); }

size_t RequestReader::buffered() const { return state->bytes.size(); }

Parsed RequestReader::parse() {
  // Beast's parser is fed so that what it decides cannot depend on how the bytes were split
  // into reads (the HTTP fuzz target holds it to that): the head whole, once its end is here;
  // then the body in slices of at most maxHeaderBytes, so that a chunk's size line or the
  // trailers longer than that are refused however they arrive, and never buffered unbounded.
  State &s = *state;
  if (s.failure)
    return Parsed::Error;
  size_t limit = s.limits.maxHeaderBytes;
  for (;;) {
    if (s.parser->is_header_done() && !s.headReported) {
      s.headReported = true;
      s.headOf = head();
      if (std::string fault = s.headFault(); !fault.empty()) {
        s.failure = {400, fault};
        return Parsed::Error;
      }
      // A chunked body is counted here, not by Beast, whose count goes wrong where it reads
      // a chunk's line twice (a quoted extension running past the line's end).
      if (s.parser->get().chunked())
        s.parser->body_limit(boost::none);
      return Parsed::Head;
    }
    if (s.parser->is_done())
      return Parsed::Request;
    if (!s.started) {
      // Empty lines before a request line are let pass (RFC 9112, 2.2).
      size_t blank = 0;
      while (blank < s.bytes.size() && (s.bytes[blank] == '\r' || s.bytes[blank] == '\n'))
        ++blank;
      s.bytes.erase(0, blank);
    }
    if (s.bytes.empty())
      return Parsed::More;
    size_t give = 0;
    if (!s.parser->is_header_done()) {
      // The head ends at its first empty line: CRLF CRLF, or LF LF, which Beast refuses.
      // (The search resumes where it stopped: a head that comes a byte at a time is searched
      // once, not once a byte.)
      std::string_view seen(s.bytes.data(),
                            std::min(s.bytes.size(), size_t(limit) - s.headUsed + 4));
      size_t from = s.scanned > 3 ? s.scanned - 3 : 0;
      size_t crlf = seen.find("\r\n\r\n", from), lf = seen.find("\n\n", from);
      size_t end = std::min(crlf == seen.npos ? seen.npos : crlf + 4,
                            lf == seen.npos ? seen.npos : lf + 2);
      s.scanned = end == seen.npos ? seen.size() : end;
      if (end == seen.npos) {
        if (s.headUsed + s.bytes.size() > limit) {
          s.fail(bhttp::error::header_limit);
          return Parsed::Error;
        }
        return Parsed::More;
      }
      if (s.headUsed + end > limit) {
        s.fail(bhttp::error::header_limit);
        return Parsed::Error;
      }
      give = end;
    } else {
      give = std::min(s.bytes.size(), size_t(limit));
    }
    beast::error_code ec;
    size_t used = 0;
    s.started = true;
    bool inHead = !s.parser->is_header_done();
    try {
      used = s.parser->put(asio::buffer(s.bytes.data(), give), ec);
    } catch (const std::exception &e) { // Beast throws where a field outgrows its own limits
      s.failure = {400, std::string("the request is not HTTP/1.1 this server reads: ") +
                            e.what()};
      return Parsed::Error;
    }
    s.bytes.erase(0, used);
    s.scanned = s.scanned > used ? s.scanned - used : 0; // (Beast may take part of a head)
    if (inHead)
      s.headUsed += used;
    if (s.parser->is_header_done() && s.headReported &&
        s.parser->get().body().size() > s.limits.maxBodyBytes) { // (before Beast's faults)
      s.failure = {413, "the body is larger than the limit of " +
                            std::to_string(s.limits.maxBodyBytes) + " bytes"};
      return Parsed::Error;
    }
    if (ec && ec != bhttp::error::need_more) {
      s.fail(ec);
      return Parsed::Error;
    }
    if (used == 0 && !s.parser->is_done() && !(s.parser->is_header_done() && !s.headReported)) {
      if (!s.parser->is_header_done()) { // all of a head, and Beast wants more of it
        s.failure = {400, "the request's head is not HTTP/1.1 this server reads"};
        return Parsed::Error;
      }
      if (give == limit) { // a chunk's line or the trailers longer than a slice
        s.failure = {400, "a line of the request (a chunk's size, or the trailers) is longer "
                          "than " + std::to_string(limit) + " bytes"};
        return Parsed::Error;
      }
      return Parsed::More;
    }
  }
}

std::optional<uint64_t> RequestReader::contentLength() const {
  const auto &fields = state->parser->get();
  if (fields.chunked() || fields.find(bhttp::field::content_length) == fields.end())
    return std::nullopt;
  return state->parser->content_length().value_or(0);
}

bool RequestReader::expectsContinue() const {
  const auto &fields = state->parser->get();
  auto expect = fields.find(bhttp::field::expect);
  return fields.version() >= 11 && expect != fields.end() &&
         beast::iequals(expect->value(), "100-continue");
}

Request RequestReader::head() const {
  const auto &message = state->parser->get();
  Request request;
  request.method = std::string(message.method_string());
  request.target = std::string(message.target());
  request.path = request.target.substr(0, request.target.find('?'));
  for (const auto &field : message)
    request.headers.emplace_back(std::string(field.name_string()), std::string(field.value()));
  request.keepAlive = message.keep_alive();
  request.version = int(message.version());
  return request;
}

Request RequestReader::take() {
  // The head's fields as they came; trailers are not headers (RFC 9110, 6.5.1) and are
  // dropped.
  Request request = state->headOf ? std::move(*state->headOf) : head();
  request.body = std::move(state->parser->get().body());
  state->fresh();
  return request;
}

std::pair<int, std::string> RequestReader::error() const {
  return state->failure.value_or(std::pair<int, std::string>{400, "no error"});
}

// ---- The server ------------------------------------------------------------------------------

namespace {

/// A response's head: the status line, the headers given, the framing.
std::string headOf(const Response &response, const std::string &framing, bool close) {
  std::string out = "HTTP/1.1 " + std::to_string(response.status) + " " +
                    reason(response.status) + "\r\n";
  if (!response.contentType.empty())
    out += "Content-Type: " + response.contentType + "\r\n";
  for (const auto &[name, value] : response.headers)
    out += name + ": " + value + "\r\n";
  out += framing;
  if (close)
    out += "Connection: close\r\n";
  return out + "\r\n";
}

bool asksToClose(const Response &response) {
  for (const auto &[name, value] : response.headers)
    if (beast::iequals(name, "Connection") && beast::iequals(value, "close"))
      return true;
  return false;
}

class Connection;

} // namespace

struct Server::Impl : std::enable_shared_from_this<Server::Impl> {
  Limits limits;
  std::string logPrefix;
  ErrorBody errorBody;
  asio::io_context io{1};
  tcp::acceptor acceptor{io};
  asio::steady_timer acceptRetry{io};
  std::thread thread;
  Handler handler;
  std::unordered_map<Connection *, std::shared_ptr<Connection>> open;
  bool stopping = false;

  std::atomic<int64_t> openCount{0}, exchanges{0};
  std::atomic<uint64_t> accepted{0}, refused{0}, headerTimeouts{0}, bodyTimeouts{0},
      idleClosed{0}, writeTimeouts{0}, badRequests{0}, bodiesTooLarge{0};

  void accept();
  void refuse(tcp::socket socket);
  void log(const std::string &line) { std::fprintf(stderr, "%s\n", line.c_str()); }
};

namespace {

class ExchangeImpl;

/// One client's socket.
class Connection : public std::enable_shared_from_this<Connection> {
public:
  Connection(Server::Impl &server, tcp::socket socket)
      : server(server), stream(std::move(socket)), reader(server.limits) {}

  void start() { readNext(); }
  /// Closes the socket; a live exchange's client is gone.
  void close(const char *why);
  /// From an exchange, on the I/O thread: bytes of exchange `serial`'s answer; `last` ends it.
  void write(uint64_t serial, std::string bytes, bool last, bool closeAfter);

private:
  enum class Phase { Idle, Head, Body, Busy, Closing };
  void readNext();
  void readMore();
  void onBytes(size_t n);
  void answerError(int status, const std::string &message);
  void watch();
  void kick();
  void exchangeDone();
  void linger();
  void drain(uint64_t budget);

  Server::Impl &server;
  beast::tcp_stream stream;
  RequestReader reader;
  std::array<char, 16384> in{};
  Phase phase = Phase::Idle;
  bool reading = false, watching = false, writing = false, closed = false;
  bool ended = false, closeAfter = false;
  std::shared_ptr<ExchangeImpl> exchange;
  uint64_t serial = 0;
  std::deque<std::string> out;
  std::string sending;
  size_t queued = 0;
};

class ExchangeImpl : public Exchange {
public:
  ExchangeImpl(std::weak_ptr<Server::Impl> server, std::weak_ptr<Connection> connection,
               uint64_t serial, Request request)
      : server(std::move(server)), connection(std::move(connection)), serial(serial),
        req(std::move(request)), start(Clock::now()) {}

  const Request &request() const override { return req; }

  void respond(Response response) override {
    if (!claim(State::Open, State::Ended))
      return;
    bool head = req.method == "HEAD";
    bool close = !req.keepAlive || asksToClose(response);
    status = response.status;
    std::string bytes =
        headOf(response, "Content-Length: " + std::to_string(response.body.size()) + "\r\n",
               close);
    if (!head)
      bytes += response.body;
    post(std::move(bytes), true, close);
  }

  void open(Response response) override {
    if (!claim(State::Open, State::Streaming))
      return;
    status = response.status;
    // HTTP/1.0 has no chunks: its stream is the bytes until the connection closes.
    post(headOf(response, chunked() ? "Transfer-Encoding: chunked\r\n" : "",
                !req.keepAlive || !chunked()),
         false, false);
  }

  bool send(std::string bytes) override {
    if (state.load() != State::Streaming || gone.load())
      return false;
    if (bytes.empty())
      return true; // an empty chunk would end the stream
    if (!chunked()) {
      post(std::move(bytes), false, false);
      return !gone.load();
    }
    char size[24];
    std::snprintf(size, sizeof size, "%zx\r\n", bytes.size());
    post(size + std::move(bytes) + "\r\n", false, false);
    return !gone.load();
  }

  void end() override {
    if (claim(State::Streaming, State::Ended))
      post(chunked() ? "0\r\n\r\n" : "", true, !req.keepAlive || !chunked());
  }

  void onGone(std::function<void()> callback) override {
    std::unique_lock<std::mutex> lock(mutex);
    if (gone.load()) {
      lock.unlock();
      callback();
      return;
    }
    goneCallback = std::move(callback);
  }

  void describe(std::string id, std::string words) override {
    std::lock_guard<std::mutex> lock(mutex);
    logId = std::move(id);
    logWords = std::move(words);
  }

  /// The I/O thread: the client went before the exchange ended.
  void clientGone() {
    std::function<void()> callback;
    {
      std::lock_guard<std::mutex> lock(mutex);
      if (state.load() == State::Ended && !goneCallback)
        return;
      gone = true;
      callback = std::move(goneCallback);
      goneCallback = nullptr;
    }
    if (callback && state.load() != State::Ended)
      callback();
  }

  /// The access log's line, once the exchange is over.
  std::string logLine(const std::string &prefix, bool completed) {
    std::lock_guard<std::mutex> lock(mutex);
    double ms = std::chrono::duration<double, std::milli>(Clock::now() - start).count();
    char tail[64];
    std::snprintf(tail, sizeof tail, " %.1f ms", ms);
    return prefix + ": request " + (logId.empty() ? "-" : logId) + ": " + req.method + " " +
           req.path + " " + std::to_string(status) + (logWords.empty() ? "" : " " + logWords) +
           (completed ? "" : " (client gone)") + tail;
  }

private:
  enum class State { Open, Streaming, Ended };
  bool chunked() const { return req.version >= 11; }
  bool claim(State from, State to) { return state.compare_exchange_strong(from, to); }
  void post(std::string bytes, bool last, bool closeAfter) {
    std::shared_ptr<Server::Impl> s = server.lock();
    if (!s)
      return;
    asio::post(s->io, [connection = connection, serial = serial, bytes = std::move(bytes), last,
                       closeAfter]() mutable {
      if (std::shared_ptr<Connection> c = connection.lock())
        c->write(serial, std::move(bytes), last, closeAfter);
    });
  }

  std::weak_ptr<Server::Impl> server;
  std::weak_ptr<Connection> connection;
  const uint64_t serial;
  const Request req;
  const Clock::time_point start;
  std::atomic<State> state{State::Open};
  std::atomic<bool> gone{false};
  std::atomic<int> status{0};
  std::mutex mutex; // the callback and the log's words
  std::function<void()> goneCallback;
  std::string logId, logWords;
};

void Connection::readNext() {
  phase = Phase::Idle;
  if (reader.buffered() > 0) { // a pipelined request is here already
    onBytes(0);
    return;
  }
  stream.expires_after(server.limits.keepAlive);
  readMore();
}

void Connection::readMore() {
  reading = true;
  stream.async_read_some(asio::buffer(in), [self = shared_from_this()](
                                               const beast::error_code &ec, size_t n) {
    self->reading = false;
    if (self->closed)
      return;
    if (ec) {
      if (ec == beast::error::timeout) {
        Server::Impl &s = self->server;
        ++(self->phase == Phase::Idle ? s.idleClosed
           : self->phase == Phase::Head ? s.headerTimeouts
                                        : s.bodyTimeouts);
      }
      self->close("read");
      return;
    }
    self->onBytes(n);
  });
}

void Connection::onBytes(size_t n) {
  if (phase == Phase::Idle) { // a request's first byte: its head has until the deadline
    phase = Phase::Head;
    stream.expires_after(server.limits.header);
  }
  reader.receive(std::string_view(in.data(), n));
  for (;;) {
    switch (reader.parse()) {
    case Parsed::More:
      readMore();
      return;
    case Parsed::Head:
      phase = Phase::Body;
      if (reader.expectsContinue()) { // (its write's deadline first: the body's outlasts it)
        out.push_back("HTTP/1.1 100 Continue\r\n\r\n");
        queued += out.back().size();
        kick();
      }
      stream.expires_after(server.limits.body);
      continue;
    case Parsed::Error: {
      ++server.badRequests;
      auto [status, message] = reader.error();
      if (status == 413)
        ++server.bodiesTooLarge;
      answerError(status, message);
      return;
    }
    case Parsed::Request:
      phase = Phase::Busy;
      stream.expires_never();
      ended = false;
      closeAfter = false;
      exchange = std::make_shared<ExchangeImpl>(server.weak_from_this(), weak_from_this(),
                                                ++serial, reader.take());
      ++server.exchanges;
      watch();
      server.handler(exchange);
      return;
    }
  }
}

void Connection::answerError(int status, const std::string &message) {
  phase = Phase::Busy;
  stream.expires_never();
  Request request = reader.head();
  exchange = std::make_shared<ExchangeImpl>(server.weak_from_this(), weak_from_this(), ++serial,
                                            std::move(request));
  ++server.exchanges;
  Response response;
  response.status = status;
  response.body = server.errorBody(status, message);
  response.headers.emplace_back("Connection", "close");
  exchange->respond(std::move(response));
}

void Connection::watch() {
  if (watching || closed)
    return;
  watching = true;
  stream.socket().async_wait(
      tcp::socket::wait_read,
      [self = shared_from_this()](const beast::error_code &ec) {
        self->watching = false;
        // (the exchange may be a later one than the wait's, a pipelined request's: it is
        // watched alike)
        if (ec || self->closed || !self->exchange || self->ended)
          return;
        char byte;
        ssize_t got = ::recv(self->stream.socket().native_handle(), &byte, 1,
                             MSG_PEEK | MSG_DONTWAIT);
        if (got == 0 || (got < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR))
          self->close("client");
        else if (got < 0)
          self->watch();
        // got > 0: the next request is arriving; it waits in the socket for this one's end.
      });
}

void Connection::write(uint64_t at, std::string bytes, bool last, bool closing) {
  if (closed || at != serial || !exchange || ended)
    return;
  size_t before = queued;
  queued += bytes.size();
  out.push_back(std::move(bytes));
  if (last) {
    ended = true;
    closeAfter = closing;
  }
  // The client does not read its answer (one part larger than the bound alone is let go).
  if (before > 0 && queued > server.limits.maxQueuedBytes) {
    ++server.writeTimeouts;
    close("queue");
    return;
  }
  kick();
}

void Connection::kick() {
  if (writing || closed || out.empty())
    return;
  sending.clear();
  while (!out.empty()) {
    sending += out.front();
    out.pop_front();
  }
  writing = true;
  stream.expires_after(server.limits.write);
  asio::async_write(stream, asio::buffer(sending),
                    [self = shared_from_this()](const beast::error_code &ec, size_t n) {
                      self->writing = false;
                      if (self->closed)
                        return;
                      if (ec) {
                        if (ec == beast::error::timeout)
                          ++self->server.writeTimeouts;
                        self->close("write");
                        return;
                      }
                      self->queued -= std::min(self->queued, n);
                      if (!self->out.empty()) {
                        self->kick();
                        return;
                      }
                      if (self->phase == Phase::Busy) {
                        if (self->ended)
                          self->exchangeDone();
                        else
                          self->stream.expires_never();
                      }
                    });
}

void Connection::exchangeDone() {
  server.log(exchange->logLine(server.logPrefix, true));
  exchange.reset();
  --server.exchanges;
  if (closeAfter) {
    linger();
    return;
  }
  readNext();
}

void Connection::linger() {
  // Closing with the client's bytes unread would reset the connection, and the client could
  // lose the answer (a 413 sent while it still sends its body): say no more, then read and
  // drop what comes, for a moment and a bounded number of bytes, before closing.
  beast::error_code ignored;
  stream.socket().shutdown(tcp::socket::shutdown_send, ignored);
  phase = Phase::Closing;
  stream.expires_after(std::chrono::seconds(2));
  drain(2 * server.limits.maxBodyBytes);
}

void Connection::drain(uint64_t budget) {
  stream.async_read_some(asio::buffer(in), [self = shared_from_this(), budget](
                                               const beast::error_code &ec, size_t n) {
    if (self->closed)
      return;
    if (ec || n >= budget) {
      self->close(nullptr);
      return;
    }
    self->drain(budget - n);
  });
}

void Connection::close(const char *) {
  if (closed)
    return;
  closed = true;
  beast::error_code ignored;
  stream.socket().shutdown(tcp::socket::shutdown_both, ignored);
  stream.close();
  if (exchange) {
    std::shared_ptr<ExchangeImpl> gone = std::move(exchange);
    --server.exchanges;
    gone->clientGone();
    server.log(gone->logLine(server.logPrefix, false));
  }
  --server.openCount;
  server.open.erase(this); // may be the last owner: nothing of this after it
}

} // namespace

void Server::Impl::accept() {
  acceptor.async_accept([this](const beast::error_code &ec, tcp::socket socket) {
    if (stopping)
      return;
    if (ec) {
      // Out of descriptors (EMFILE) or another passing failure: try again shortly, never in
      // a tight loop.
      acceptRetry.expires_after(std::chrono::milliseconds(50));
      acceptRetry.async_wait([this](const beast::error_code &e) {
        if (!e && !stopping)
          accept();
      });
      return;
    }
    ++accepted;
    if (openCount.load() >= limits.maxConnections) {
      refuse(std::move(socket));
    } else {
      ++openCount;
      auto connection = std::make_shared<Connection>(*this, std::move(socket));
      open.emplace(connection.get(), connection);
      connection->start();
    }
    accept();
  });
}

void Server::Impl::refuse(tcp::socket socket) {
  ++refused;
  std::string body = errorBody(503, "the server has " + std::to_string(openCount.load()) +
                                        " connections open, its --max-connections; try again");
  std::string bytes = "HTTP/1.1 503 Service Unavailable\r\nContent-Type: application/json\r\n"
                      "Retry-After: 1\r\nConnection: close\r\nContent-Length: " +
                      std::to_string(body.size()) + "\r\n\r\n" + body;
  beast::error_code ignored;
  socket.non_blocking(true, ignored);
  socket.write_some(asio::buffer(bytes), ignored); // a fresh socket's buffer takes it
  socket.shutdown(tcp::socket::shutdown_both, ignored);
  socket.close(ignored);
}

std::unique_ptr<Server> Server::bind(const std::string &host, int port, const Limits &given,
                                     std::string logPrefix, ErrorBody errorBody,
                                     std::string &error) {
  std::unique_ptr<Server> server(new Server());
  server->impl = std::make_shared<Impl>();
  Impl &s = *server->impl;
  s.limits = given;
  s.logPrefix = std::move(logPrefix);
  s.errorBody = std::move(errorBody);

  // Every connection is a descriptor: raise the soft limit toward what --max-connections
  // needs (plus room for the model's files and the ranks' channels), as far as the hard limit
  // allows; past it, fewer connections, said once.
  constexpr int64_t kReserve = 256;
  rlimit files{};
  if (getrlimit(RLIMIT_NOFILE, &files) == 0) {
    rlim_t want = rlim_t(s.limits.maxConnections + kReserve);
    if (files.rlim_cur != RLIM_INFINITY && files.rlim_cur < want) {
      rlimit raised = files;
      raised.rlim_cur = files.rlim_max == RLIM_INFINITY ? want : std::min(want, files.rlim_max);
      if (setrlimit(RLIMIT_NOFILE, &raised) == 0)
        files = raised;
    }
    if (files.rlim_cur != RLIM_INFINITY && files.rlim_cur < want) {
      int64_t fit = std::max<int64_t>(1, int64_t(files.rlim_cur) - kReserve);
      std::fprintf(stderr, "%s: warning: --max-connections %lld needs %lld file descriptors "
                           "and this process may open %llu (ulimit -n): %lld connections\n",
                   s.logPrefix.c_str(), (long long)s.limits.maxConnections, (long long)want,
                   (unsigned long long)files.rlim_cur, (long long)fit);
      s.limits.maxConnections = fit;
    }
  }

  beast::error_code ec;
  asio::ip::address address = asio::ip::make_address(host == "localhost" ? "127.0.0.1" : host,
                                                     ec);
  if (ec) {
    tcp::resolver resolver(s.io);
    auto found = resolver.resolve(host, std::to_string(port), ec);
    if (ec || found.empty()) {
      error = "cannot resolve '" + host + "'" + (ec ? ": " + ec.message() : "");
      return nullptr;
    }
    address = found.begin()->endpoint().address();
  }
  tcp::endpoint endpoint(address, uint16_t(port));
  s.acceptor.open(endpoint.protocol(), ec);
  if (!ec)
    s.acceptor.set_option(asio::socket_base::reuse_address(true), ec);
  if (!ec)
    s.acceptor.bind(endpoint, ec);
  if (!ec)
    s.acceptor.listen(asio::socket_base::max_listen_connections, ec);
  if (ec) {
    error = ec.message();
    return nullptr;
  }
  return server;
}

int Server::port() const {
  beast::error_code ec;
  return impl->acceptor.local_endpoint(ec).port();
}

void Server::start(Handler handler) {
  impl->handler = std::move(handler);
  impl->accept();
  impl->thread = std::thread([impl = impl.get()] { impl->io.run(); });
}

Stats Server::stats() const {
  const Impl &s = *impl;
  Stats stats;
  stats.open = s.openCount.load();
  stats.accepted = s.accepted.load();
  stats.refused = s.refused.load();
  stats.headerTimeouts = s.headerTimeouts.load();
  stats.bodyTimeouts = s.bodyTimeouts.load();
  stats.idleClosed = s.idleClosed.load();
  stats.writeTimeouts = s.writeTimeouts.load();
  stats.badRequests = s.badRequests.load();
  stats.bodiesTooLarge = s.bodiesTooLarge.load();
  stats.exchanges = s.exchanges.load();
  return stats;
}

int64_t Server::maxConnections() const { return impl->limits.maxConnections; }

Server::~Server() {
  if (!impl)
    return;
  Impl &s = *impl;
  auto shutdown = [&s] {
    s.stopping = true;
    beast::error_code ignored;
    s.acceptor.close(ignored);
    s.acceptRetry.cancel();
    std::vector<std::shared_ptr<Connection>> all;
    for (auto &[key, connection] : s.open)
      all.push_back(connection);
    for (auto &connection : all)
      connection->close(nullptr);
    s.io.stop(); // what is still queued is dropped with the io_context
  };
  if (s.thread.joinable()) {
    asio::post(s.io, shutdown);
    s.thread.join();
  } else {
    shutdown();
  }
}

} // namespace tpcrt::serve::http
