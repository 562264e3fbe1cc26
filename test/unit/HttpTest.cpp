// tpc serve's HTTP/1.1 connection layer (runtime/serve/http.h): the request reader alone (bytes
// fed whole, byte by byte and in pieces; pipelining, chunked bodies, the 400/413/431 errors,
// Expect: 100-continue), then a real server on 127.0.0.1 driven by plain POSIX sockets whose
// answers are parsed here, by the protocol (not by the product's reader): keep-alive, close,
// pipelining, each phase's deadline and its counter, --max-connections' 503, exchanges answered
// or streamed later from other threads, clients that go or stop reading, and the server's
// destruction with connections and exchanges still open. Every wait is bounded.
#include "http.h"

#include <gtest/gtest.h>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <condition_variable>
#include <cstring>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

namespace http = tpcrt::serve::http;
using Clock = std::chrono::steady_clock;
using std::chrono::milliseconds;
using namespace std::chrono_literals;

namespace {

long long msSince(Clock::time_point t0) {
  return std::chrono::duration_cast<milliseconds>(Clock::now() - t0).count();
}

bool iequals(std::string_view a, std::string_view b) {
  return a.size() == b.size() &&
         std::equal(a.begin(), a.end(), b.begin(), [](char x, char y) {
           return std::tolower((unsigned char)x) == std::tolower((unsigned char)y);
         });
}

// ---- The reader alone ------------------------------------------------------------------------

/// What a reader made of some bytes: its events (More left out), each head's declared length
/// and Expect, the requests taken, and the error if any.
struct ReadOut {
  std::vector<http::Parsed> events;
  std::vector<std::optional<uint64_t>> lengths;
  std::vector<bool> continues;
  std::vector<http::Request> requests;
  std::optional<std::pair<int, std::string>> error;
};

/// Parses what `reader` holds until it wants more bytes or fails.
void drain(http::RequestReader &reader, ReadOut &out) {
  for (int guard = 0; guard < 10000; ++guard) {
    http::Parsed parsed = reader.parse();
    if (parsed == http::Parsed::More)
      return;
    out.events.push_back(parsed);
    switch (parsed) {
    case http::Parsed::Head:
      out.lengths.push_back(reader.contentLength());
      out.continues.push_back(reader.expectsContinue());
      break;
    case http::Parsed::Request:
      out.requests.push_back(reader.take());
      break;
    case http::Parsed::Error:
      out.error = reader.error();
      return;
    default:
      return;
    }
  }
  ADD_FAILURE() << "parse() never asked for more bytes";
}

/// Feeds `pieces` one receive() each, parsing after each, and stops at an error.
ReadOut feedPieces(const http::Limits &limits, const std::vector<std::string> &pieces) {
  http::RequestReader reader(limits);
  ReadOut out;
  for (const std::string &piece : pieces) {
    reader.receive(piece);
    drain(reader, out);
    if (out.error)
      break;
  }
  return out;
}

/// `bytes` in pieces of `step` bytes (0: at once).
ReadOut feed(const http::Limits &limits, const std::string &bytes, size_t step = 0) {
  std::vector<std::string> pieces;
  if (step == 0)
    pieces.push_back(bytes);
  else
    for (size_t at = 0; at < bytes.size(); at += step)
      pieces.push_back(bytes.substr(at, step));
  return feedPieces(limits, pieces);
}

void expectSameRequest(const http::Request &a, const http::Request &b) {
  EXPECT_EQ(a.method, b.method);
  EXPECT_EQ(a.target, b.target);
  EXPECT_EQ(a.path, b.path);
  EXPECT_EQ(a.headers, b.headers);
  EXPECT_EQ(a.body, b.body);
  EXPECT_EQ(a.keepAlive, b.keepAlive);
}

http::Limits readerLimits() {
  http::Limits limits;
  limits.maxBodyBytes = 1024;
  limits.maxHeaderBytes = 1024;
  return limits;
}

TEST(HttpReader, ByteByByteEqualsAtOnce) {
  const std::string bytes = "POST /v1/chat/completions?stream=1 HTTP/1.1\r\n"
                            "Host: localhost\r\n"
                            "Content-Type: application/json\r\n"
                            "X-Twice: a\r\n"
                            "X-Twice: b\r\n"
                            "Content-Length: 15\r\n"
                            "\r\n"
                            "{\"say\":\"hello\"}";
  ReadOut whole = feed(readerLimits(), bytes);
  ASSERT_FALSE(whole.error) << whole.error->second;
  ASSERT_EQ(whole.requests.size(), 1u);
  EXPECT_EQ(whole.events, (std::vector<http::Parsed>{http::Parsed::Head, http::Parsed::Request}));
  ASSERT_EQ(whole.lengths.size(), 1u);
  EXPECT_EQ(whole.lengths[0], std::optional<uint64_t>(15));
  const http::Request &request = whole.requests[0];
  EXPECT_EQ(request.method, "POST");
  EXPECT_EQ(request.target, "/v1/chat/completions?stream=1");
  EXPECT_EQ(request.path, "/v1/chat/completions");
  EXPECT_EQ(request.body, "{\"say\":\"hello\"}");
  EXPECT_TRUE(request.keepAlive);
  ASSERT_NE(request.header("content-type"), nullptr);
  EXPECT_EQ(*request.header("CONTENT-TYPE"), "application/json");
  ASSERT_NE(request.header("x-twice"), nullptr);
  EXPECT_EQ(*request.header("x-twice"), "a"); // the first of that name
  EXPECT_EQ(request.header("x-absent"), nullptr);

  for (size_t step : {1, 2, 3, 7, 16}) {
    SCOPED_TRACE("pieces of " + std::to_string(step));
    ReadOut pieces = feed(readerLimits(), bytes, step);
    ASSERT_FALSE(pieces.error) << pieces.error->second;
    EXPECT_EQ(pieces.events, whole.events);
    EXPECT_EQ(pieces.lengths, whole.lengths);
    ASSERT_EQ(pieces.requests.size(), 1u);
    expectSameRequest(pieces.requests[0], request);
  }
}

TEST(HttpReader, PipelinedRequestsComeOutInOrder) {
  const std::string bytes = "GET /first HTTP/1.1\r\nHost: x\r\n\r\n"
                            "POST /second HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\n\r\nabcde"
                            "POST /third HTTP/1.1\r\nHost: x\r\nContent-Length: 2\r\n\r\nfg"
                            "GET /fourth HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n";
  for (size_t step : {0, 1, 5}) {
    SCOPED_TRACE("pieces of " + std::to_string(step));
    http::RequestReader reader(readerLimits());
    ReadOut out;
    for (size_t at = 0; at < bytes.size(); at += step ? step : bytes.size()) {
      reader.receive(std::string_view(bytes).substr(at, step ? step : bytes.size()));
      drain(reader, out);
    }
    ASSERT_FALSE(out.error) << out.error->second;
    ASSERT_EQ(out.requests.size(), 4u);
    EXPECT_EQ(out.requests[0].path, "/first");
    EXPECT_EQ(out.requests[0].body, "");
    EXPECT_EQ(out.requests[1].path, "/second");
    EXPECT_EQ(out.requests[1].body, "abcde");
    EXPECT_EQ(out.requests[2].path, "/third");
    EXPECT_EQ(out.requests[2].body, "fg");
    EXPECT_EQ(out.requests[3].path, "/fourth");
    EXPECT_TRUE(out.requests[2].keepAlive);
    EXPECT_FALSE(out.requests[3].keepAlive);
    EXPECT_EQ(reader.buffered(), 0u);
  }
}

TEST(HttpReader, ChunkedBodyIsAssembled) {
  const std::string bytes = "POST /chunked HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n"
                            "5\r\nhello\r\n"
                            "1;ext=1\r\n,\r\n"
                            "6\r\n world\r\n"
                            "0\r\n\r\n"
                            "GET /after HTTP/1.1\r\nHost: x\r\n\r\n";
  for (size_t step : {0, 1, 4}) {
    SCOPED_TRACE("pieces of " + std::to_string(step));
    ReadOut out = feed(readerLimits(), bytes, step);
    ASSERT_FALSE(out.error) << out.error->second;
    ASSERT_EQ(out.requests.size(), 2u);
    EXPECT_EQ(out.requests[0].body, "hello, world");
    EXPECT_EQ(out.lengths[0], std::nullopt); // chunked: no declared size
    EXPECT_EQ(out.requests[1].path, "/after");
    EXPECT_EQ(out.lengths[1], std::nullopt); // no body at all
  }
}

// A chunk's size line is bounded like a head's line, however its bytes arrive.
TEST(HttpReader, OverlongChunkLineIsRefused) {
  const std::string bytes = "POST / HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n"
                            "5;ext=" + std::string(3000, 'e') + "\r\nhello\r\n0\r\n\r\n";
  for (size_t step : {0, 1, 500}) {
    SCOPED_TRACE("pieces of " + std::to_string(step));
    ReadOut out = feed(readerLimits(), bytes, step);
    ASSERT_TRUE(out.error);
    EXPECT_EQ(out.error->first, 400) << out.error->second;
    EXPECT_TRUE(out.requests.empty());
  }
}

TEST(HttpReader, OverLimitContentLengthIs413NamingBothSizes) {
  ReadOut out = feed(readerLimits(), "POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 5000\r\n\r\n");
  ASSERT_TRUE(out.error);
  EXPECT_EQ(out.error->first, 413);
  EXPECT_NE(out.error->second.find("5000"), std::string::npos) << out.error->second;
  EXPECT_NE(out.error->second.find("1024"), std::string::npos) << out.error->second;
  EXPECT_TRUE(out.requests.empty());

  // A chunked body past the limit, which no head announced.
  std::string chunked = "POST / HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n";
  for (int i = 0; i < 5; ++i)
    chunked += "100\r\n" + std::string(256, 'a') + "\r\n";
  chunked += "0\r\n\r\n";
  out = feed(readerLimits(), chunked);
  ASSERT_TRUE(out.error);
  EXPECT_EQ(out.error->first, 413) << out.error->second;
  EXPECT_NE(out.error->second.find("1024"), std::string::npos) << out.error->second;
  EXPECT_TRUE(out.requests.empty());
}

TEST(HttpReader, HeadOverLimitIs431) {
  const std::string head = "GET / HTTP/1.1\r\nHost: x\r\nX-Big: " + std::string(2000, 'b') +
                           "\r\n\r\n";
  for (size_t step : {0, 1, 100}) {
    SCOPED_TRACE("pieces of " + std::to_string(step));
    ReadOut out = feed(readerLimits(), head, step);
    ASSERT_TRUE(out.error);
    EXPECT_EQ(out.error->first, 431) << out.error->second;
    EXPECT_NE(out.error->second.find("1024"), std::string::npos) << out.error->second;
    EXPECT_TRUE(out.requests.empty());
  }
  // A head that never ends: its bytes may not wait without bound either.
  ReadOut endless = feed(readerLimits(), "GET / HTTP/1.1\r\nX-Big: " + std::string(4000, 'b'));
  ASSERT_TRUE(endless.error);
  EXPECT_EQ(endless.error->first, 431) << endless.error->second;
}

// The head's limit must hold however its bytes arrive: here each piece ends one byte into the
// next header line, as a client writing the head in small segments makes the server's reads
// do. Over a socket, the 431 must come before the head is taken in whole.
TEST(HttpReader, HeadOverLimitInPiecesIs431) {
  std::vector<std::string> pieces{"GET / HTTP/1.1\r\nX"};
  for (int i = 0; i < 200; ++i)
    pieces.push_back("-Pad-" + std::to_string(1000 + i) + ": " + std::string(24, 'v') + "\r\nX");
  pieces.push_back("-Last: 1\r\n\r\n"); // about 7,000 bytes of head, against a limit of 1,024
  ReadOut out = feedPieces(readerLimits(), pieces);
  ASSERT_TRUE(out.error) << "a head of 7,000 bytes was read under a limit of 1,024: "
                         << out.requests.size() << " request(s), the first with "
                         << (out.requests.empty() ? 0 : out.requests[0].headers.size())
                         << " headers";
  EXPECT_EQ(out.error->first, 431) << out.error->second;
}

TEST(HttpReader, GarbageIs400) {
  static const char kTlsHello[] = "\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03 hello\r\n\r\n";
  for (const std::string &bytes :
       {std::string(kTlsHello, sizeof kTlsHello - 1), // a TLS client's first bytes
        std::string("PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"),
        std::string("GET / HTTP/1.1\r\nContent-Length: twelve\r\n\r\n"),
        std::string("GET / HTTP/1.1\r\nNo colon here\r\n\r\n"),
        std::string("POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n")}) {
    SCOPED_TRACE(bytes);
    ReadOut out = feed(readerLimits(), bytes);
    ASSERT_TRUE(out.error);
    EXPECT_EQ(out.error->first, 400) << out.error->second;
    // Once failed, the reader stays failed.
    http::RequestReader reader(readerLimits());
    reader.receive(bytes);
    http::Parsed parsed;
    while ((parsed = reader.parse()) == http::Parsed::Head)
      ;
    EXPECT_EQ(parsed, http::Parsed::Error);
    reader.receive("GET / HTTP/1.1\r\n\r\n");
    EXPECT_EQ(reader.parse(), http::Parsed::Error);
  }
}

TEST(HttpReader, ExpectContinueIsReported) {
  ReadOut out = feed(readerLimits(), "POST / HTTP/1.1\r\nHost: x\r\nExpect: 100-Continue\r\n"
                                     "Content-Length: 3\r\n\r\n");
  ASSERT_FALSE(out.error);
  ASSERT_EQ(out.continues.size(), 1u);
  EXPECT_TRUE(out.continues[0]);
  EXPECT_EQ(out.lengths[0], std::optional<uint64_t>(3));
  EXPECT_TRUE(out.requests.empty()); // the body has not come

  out = feed(readerLimits(), "POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 3\r\n\r\nabc");
  ASSERT_EQ(out.continues.size(), 1u);
  EXPECT_FALSE(out.continues[0]);

  // HTTP/1.0 has no 100 Continue.
  out = feed(readerLimits(), "POST / HTTP/1.0\r\nExpect: 100-continue\r\nContent-Length: 1\r\n\r\n");
  ASSERT_EQ(out.continues.size(), 1u);
  EXPECT_FALSE(out.continues[0]);
}

TEST(HttpReader, KeepAliveFollowsVersionAndConnection) {
  auto keepAlive = [](const std::string &bytes) {
    ReadOut out = feed(readerLimits(), bytes);
    EXPECT_EQ(out.requests.size(), 1u) << bytes;
    return out.requests.empty() ? true : out.requests[0].keepAlive;
  };
  EXPECT_TRUE(keepAlive("GET / HTTP/1.1\r\nHost: x\r\n\r\n"));
  EXPECT_FALSE(keepAlive("GET / HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"));
  EXPECT_FALSE(keepAlive("GET / HTTP/1.0\r\n\r\n"));
  EXPECT_TRUE(keepAlive("GET / HTTP/1.0\r\nConnection: keep-alive\r\n\r\n"));
}

// What RFC 9112 and 9110 ask beyond the grammar: a Host on HTTP/1.1 (3.2), no transfer coding
// but chunked that the server cannot undo (6.1: else a body's end is unknowable, the way to
// smuggle a request), empty lines before a request line let pass (2.2), trailers not made
// headers (RFC 9110, 6.5.1).
TEST(HttpReader, RefusesWhatHttp11Forbids) {
  ReadOut out = feed(readerLimits(), "GET / HTTP/1.1\r\n\r\n");
  ASSERT_TRUE(out.error);
  EXPECT_EQ(out.error->first, 400);
  out = feed(readerLimits(), "GET / HTTP/1.1\r\nHost: a\r\nHost: b\r\n\r\n");
  ASSERT_TRUE(out.error);
  EXPECT_EQ(out.error->first, 400);
  for (const char *coding : {"gzip", "gzip, chunked"}) {
    out = feed(readerLimits(), std::string("POST / HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: ") +
                                   coding + "\r\n\r\n5\r\nhello\r\n0\r\n\r\n");
    ASSERT_TRUE(out.error) << coding;
    EXPECT_EQ(out.error->first, 400) << coding;
    EXPECT_TRUE(out.requests.empty()) << coding;
  }
}

TEST(HttpReader, EmptyLinesBeforeARequestAndTrailersAreNotHeaders) {
  ReadOut out = feed(readerLimits(), "\r\n\r\nGET /a HTTP/1.1\r\nHost: x\r\n\r\n\r\n"
                                     "POST /b HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked"
                                     "\r\n\r\n2\r\nhi\r\n0\r\nAuthorization: Bearer x\r\n\r\n");
  ASSERT_FALSE(out.error) << out.error->second;
  ASSERT_EQ(out.requests.size(), 2u);
  EXPECT_EQ(out.requests[0].target, "/a");
  EXPECT_EQ(out.requests[1].body, "hi");
  EXPECT_EQ(out.requests[1].header("Authorization"), nullptr);
}

// ---- A client, and a response parsed by the protocol -----------------------------------------

/// A response as read off the wire.
struct Raw {
  std::string version, reason;
  int status = 0;
  std::vector<std::pair<std::string, std::string>> headers;
  std::string body;                // the whole body (a chunked one's chunks joined)
  bool chunked = false;
  std::vector<std::string> chunks; // a chunked body's chunks, in order, the last one excluded
  bool lastChunk = false;          // the terminating "0" chunk came

  const std::string *header(std::string_view name) const {
    for (const auto &[key, value] : headers)
      if (iequals(key, name))
        return &value;
    return nullptr;
  }
  std::string get(std::string_view name) const {
    const std::string *value = header(name);
    return value ? *value : "";
  }
};

enum class Got { Incomplete, Done, Bad };

/// One response at the front of `in` (`eof`: no more bytes will come): Done with the bytes it
/// took in `used`, Incomplete, or Bad with why.
Got parseResponse(const std::string &in, bool eof, Raw &raw, size_t &used, std::string &why) {
  raw = Raw();
  size_t end = in.find("\r\n\r\n");
  if (end == std::string::npos)
    return Got::Incomplete;
  std::string head = in.substr(0, end + 2);
  size_t lineEnd = head.find("\r\n");
  std::string statusLine = head.substr(0, lineEnd);
  // HTTP-version SP 3DIGIT SP reason-phrase
  if (statusLine.size() < 12 || statusLine.compare(0, 5, "HTTP/") != 0 || statusLine[8] != ' ' ||
      !std::isdigit((unsigned char)statusLine[9]) || !std::isdigit((unsigned char)statusLine[10]) ||
      !std::isdigit((unsigned char)statusLine[11]) ||
      (statusLine.size() > 12 && statusLine[12] != ' ')) {
    why = "bad status line '" + statusLine + "'";
    return Got::Bad;
  }
  raw.version = statusLine.substr(0, 8);
  raw.status = std::stoi(statusLine.substr(9, 3));
  raw.reason = statusLine.size() > 13 ? statusLine.substr(13) : "";
  for (size_t at = lineEnd + 2; at < head.size();) {
    size_t next = head.find("\r\n", at);
    std::string line = head.substr(at, next - at);
    at = next + 2;
    size_t colon = line.find(':');
    if (colon == std::string::npos || colon == 0) {
      why = "bad header line '" + line + "'";
      return Got::Bad;
    }
    std::string value = line.substr(colon + 1);
    value.erase(0, value.find_first_not_of(" \t"));
    value.erase(value.find_last_not_of(" \t") + 1);
    raw.headers.emplace_back(line.substr(0, colon), value);
  }
  size_t at = end + 4;
  if (raw.status / 100 == 1 || raw.status == 204 || raw.status == 304) {
    used = at;
    return Got::Done;
  }
  std::string encoding = raw.get("Transfer-Encoding");
  if (!encoding.empty()) {
    if (!iequals(encoding, "chunked")) {
      why = "unexpected Transfer-Encoding '" + encoding + "'";
      return Got::Bad;
    }
    if (raw.header("Content-Length")) {
      why = "both Transfer-Encoding and Content-Length";
      return Got::Bad;
    }
    raw.chunked = true;
    for (;;) {
      size_t sizeEnd = in.find("\r\n", at);
      if (sizeEnd == std::string::npos)
        return Got::Incomplete;
      std::string sizeLine = in.substr(at, sizeEnd - at);
      std::string digits = sizeLine.substr(0, sizeLine.find(';'));
      if (digits.empty() || digits.find_first_not_of("0123456789abcdefABCDEF") != std::string::npos) {
        why = "bad chunk size line '" + sizeLine + "'";
        return Got::Bad;
      }
      size_t size = std::stoul(digits, nullptr, 16);
      at = sizeEnd + 2;
      if (size == 0) { // the last chunk, then no trailers: CRLF
        if (in.size() < at + 2)
          return Got::Incomplete;
        if (in.compare(at, 2, "\r\n") != 0) {
          why = "no CRLF after the last chunk";
          return Got::Bad;
        }
        raw.lastChunk = true;
        used = at + 2;
        return Got::Done;
      }
      if (in.size() < at + size + 2)
        return Got::Incomplete;
      if (in.compare(at + size, 2, "\r\n") != 0) {
        why = "no CRLF after a chunk's data";
        return Got::Bad;
      }
      raw.chunks.push_back(in.substr(at, size));
      raw.body += raw.chunks.back();
      at += size + 2;
    }
  }
  if (const std::string *length = raw.header("Content-Length")) {
    if (length->empty() || length->find_first_not_of("0123456789") != std::string::npos) {
      why = "bad Content-Length '" + *length + "'";
      return Got::Bad;
    }
    size_t size = std::stoul(*length);
    if (in.size() < at + size)
      return Got::Incomplete;
    raw.body = in.substr(at, size);
    used = at + size;
    return Got::Done;
  }
  if (!eof) // no framing: the body runs to the close
    return Got::Incomplete;
  raw.body = in.substr(at);
  used = in.size();
  return Got::Done;
}

/// A blocking-free client socket: every wait has a timeout.
class Client {
public:
  explicit Client(int port, int receiveBuffer = 0) {
    fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0)
      return;
    if (receiveBuffer > 0)
      ::setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &receiveBuffer, sizeof receiveBuffer);
    int one = 1;
    ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    sockaddr_in address{};
    address.sin_family = AF_INET;
    address.sin_port = htons(uint16_t(port));
    address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    connected = ::connect(fd, reinterpret_cast<sockaddr *>(&address), sizeof address) == 0;
  }
  ~Client() { close(); }
  Client(const Client &) = delete;
  Client &operator=(const Client &) = delete;

  bool ok() const { return connected; }
  void close() {
    if (fd >= 0)
      ::close(fd);
    fd = -1;
  }

  /// Sends all of `bytes` (each wait at most `timeout`); false if the peer is gone or stalls.
  bool send(std::string_view bytes, milliseconds timeout = 5000ms) {
    while (!bytes.empty()) {
      pollfd p{fd, POLLOUT, 0};
      if (::poll(&p, 1, int(timeout.count())) <= 0)
        return false;
      ssize_t n = ::send(fd, bytes.data(), bytes.size(), MSG_NOSIGNAL | MSG_DONTWAIT);
      if (n < 0 && (errno == EAGAIN || errno == EINTR))
        continue;
      if (n <= 0)
        return false;
      bytes.remove_prefix(size_t(n));
    }
    return true;
  }

  /// One receive of at most `timeout`: the bytes go to `in`. >0: bytes came; 0: the peer
  /// closed (or reset: `reset`); -1: nothing within the timeout.
  int receive(milliseconds timeout) {
    if (eof)
      return 0;
    pollfd p{fd, POLLIN, 0};
    int ready = ::poll(&p, 1, int(std::max<long long>(0, timeout.count())));
    if (ready <= 0)
      return -1;
    char buffer[65536];
    ssize_t n = ::recv(fd, buffer, sizeof buffer, MSG_DONTWAIT);
    if (n > 0) {
      in.append(buffer, size_t(n));
      return int(n);
    }
    if (n < 0 && (errno == EAGAIN || errno == EINTR))
      return -1;
    eof = true;
    reset = n < 0;
    return 0;
  }

  /// The next response, within `timeout`; none (and why in `failure`) if it did not come whole
  /// or broke the protocol.
  std::optional<Raw> response(milliseconds timeout = 5000ms) {
    Clock::time_point deadline = Clock::now() + timeout;
    for (;;) {
      Raw raw;
      size_t used = 0;
      switch (parseResponse(in, eof, raw, used, failure)) {
      case Got::Done:
        in.erase(0, used);
        return raw;
      case Got::Bad:
        return std::nullopt;
      case Got::Incomplete:
        break;
      }
      if (eof) {
        failure = std::string(reset ? "connection reset" : "connection closed") +
                  " before a whole response; had '" + in + "'";
        return std::nullopt;
      }
      auto left = std::chrono::duration_cast<milliseconds>(deadline - Clock::now());
      if (left.count() <= 0) {
        failure = "no whole response within " + std::to_string(timeout.count()) + " ms; had '" +
                  in.substr(0, 200) + "'";
        return std::nullopt;
      }
      receive(left);
    }
  }

  /// Whether the peer closed (or reset) within `timeout`; what comes meanwhile goes to `in`.
  bool waitClosed(milliseconds timeout) {
    Clock::time_point deadline = Clock::now() + timeout;
    while (!eof) {
      auto left = std::chrono::duration_cast<milliseconds>(deadline - Clock::now());
      if (left.count() <= 0)
        return false;
      receive(left);
    }
    return true;
  }

  std::string in;          // received, not yet taken by response()
  bool eof = false, reset = false;
  std::string failure;     // why response() gave none

private:
  int fd = -1;
  bool connected = false;
};

#define ASSERT_RESPONSE(var, client, ...)                                                      \
  std::optional<Raw> var##Opt = (client).response(__VA_ARGS__);                                \
  ASSERT_TRUE(var##Opt) << (client).failure;                                                   \
  Raw &var = *var##Opt

// ---- Servers ---------------------------------------------------------------------------------

std::string errorBody(int status, const std::string &message) {
  return "{\"error\":{\"code\":" + std::to_string(status) + ",\"message\":\"" + message + "\"}}";
}

/// Small limits: each deadline 1 s.
http::Limits smallLimits() {
  http::Limits limits;
  limits.maxConnections = 256;
  limits.header = limits.body = limits.keepAlive = limits.write = std::chrono::seconds(1);
  limits.maxBodyBytes = 64 << 10;
  limits.maxHeaderBytes = 4 << 10;
  limits.maxQueuedBytes = 1 << 20;
  return limits;
}

std::unique_ptr<http::Server> startServer(const http::Limits &limits, http::Handler handler) {
  std::string error;
  std::unique_ptr<http::Server> server =
      http::Server::bind("127.0.0.1", 0, limits, "http-test", errorBody, error);
  EXPECT_TRUE(server) << error;
  if (server) {
    EXPECT_GT(server->port(), 0);
    server->start(std::move(handler));
  }
  return server;
}

/// Answers at once: 200 with "you asked for PATH" (and the body echoed, if any).
void answerNow(const std::shared_ptr<http::Exchange> &exchange) {
  http::Response response;
  response.contentType = "text/plain";
  response.body = "you asked for " + exchange->request().path;
  if (!exchange->request().body.empty())
    response.body += " with " + exchange->request().body;
  exchange->respond(std::move(response));
}

/// Values handed from the I/O thread to the test's, with a bounded wait.
template <class T> class Mailbox {
public:
  void put(T value) {
    {
      std::lock_guard<std::mutex> lock(mutex);
      items.push_back(std::move(value));
    }
    ready.notify_all();
  }
  std::optional<T> take(milliseconds timeout = 5000ms) {
    std::unique_lock<std::mutex> lock(mutex);
    if (!ready.wait_for(lock, timeout, [&] { return !items.empty(); }))
      return std::nullopt;
    T value = std::move(items.front());
    items.pop_front();
    return value;
  }

private:
  std::mutex mutex;
  std::condition_variable ready;
  std::deque<T> items;
};

/// Something that happens (an onGone), counted, with a bounded wait for it.
class Signal {
public:
  void raise() {
    {
      std::lock_guard<std::mutex> lock(mutex);
      ++count_;
      if (!first)
        first = Clock::now();
    }
    ready.notify_all();
  }
  bool wait(milliseconds timeout) {
    std::unique_lock<std::mutex> lock(mutex);
    return ready.wait_for(lock, timeout, [&] { return count_ > 0; });
  }
  int count() {
    std::lock_guard<std::mutex> lock(mutex);
    return count_;
  }
  std::optional<Clock::time_point> at() {
    std::lock_guard<std::mutex> lock(mutex);
    return first;
  }

private:
  std::mutex mutex;
  std::condition_variable ready;
  int count_ = 0;
  std::optional<Clock::time_point> first;
};

/// A thread joined when it goes out of scope, so that a failed ASSERT cannot leave it running.
class Joined {
public:
  Joined() = default;
  template <class F> explicit Joined(F &&body) : thread(std::forward<F>(body)) {}
  Joined(Joined &&) = default;
  Joined &operator=(Joined &&other) {
    join();
    thread = std::move(other.thread);
    return *this;
  }
  ~Joined() { join(); }
  void join() {
    if (thread.joinable())
      thread.join();
  }

private:
  std::thread thread;
};

/// Polls `condition` every 5 ms, for at most `timeout`.
bool eventually(const std::function<bool()> &condition, milliseconds timeout = 3000ms) {
  Clock::time_point deadline = Clock::now() + timeout;
  while (!condition()) {
    if (Clock::now() >= deadline)
      return false;
    std::this_thread::sleep_for(5ms);
  }
  return true;
}

// ---- The server: framing, keep-alive, close, pipelining ---------------------------------------

TEST(HttpServer, GetIsAnsweredWithContentLength) {
  auto server = startServer(smallLimits(), answerNow);
  ASSERT_TRUE(server);
  Client client(server->port());
  ASSERT_TRUE(client.ok());
  ASSERT_TRUE(client.send("GET /hello?x=1 HTTP/1.1\r\nHost: localhost\r\n\r\n"));
  ASSERT_RESPONSE(response, client);
  EXPECT_EQ(response.version, "HTTP/1.1");
  EXPECT_EQ(response.status, 200);
  EXPECT_EQ(response.reason, "OK");
  EXPECT_EQ(response.get("Content-Length"), std::to_string(response.body.size()));
  EXPECT_EQ(response.get("Content-Type"), "text/plain");
  EXPECT_EQ(response.body, "you asked for /hello");
  EXPECT_FALSE(response.chunked);
  EXPECT_EQ(response.header("Connection"), nullptr);
  EXPECT_TRUE(client.in.empty()) << "bytes past the response: " << client.in;
  EXPECT_TRUE(eventually([&] { return server->stats().exchanges == 0; }));
  EXPECT_EQ(server->stats().accepted, 1u);
  EXPECT_EQ(server->stats().open, 1);
}

TEST(HttpServer, KeepAliveServesTwoRequestsOnOneConnection) {
  auto server = startServer(smallLimits(), answerNow);
  ASSERT_TRUE(server);
  Client client(server->port());
  ASSERT_TRUE(client.send("GET /one HTTP/1.1\r\nHost: x\r\n\r\n"));
  ASSERT_RESPONSE(first, client);
  EXPECT_EQ(first.body, "you asked for /one");
  ASSERT_TRUE(client.send("POST /two HTTP/1.1\r\nHost: x\r\nContent-Length: 4\r\n\r\nbody"));
  ASSERT_RESPONSE(second, client);
  EXPECT_EQ(second.status, 200);
  EXPECT_EQ(second.body, "you asked for /two with body");
  EXPECT_FALSE(client.eof);
  EXPECT_EQ(server->stats().accepted, 1u);
}

TEST(HttpServer, Http10AndConnectionCloseCloseAfterTheAnswer) {
  auto server = startServer(smallLimits(), answerNow);
  ASSERT_TRUE(server);
  for (const char *request : {"GET /old HTTP/1.0\r\n\r\n",
                              "GET /old HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"}) {
    SCOPED_TRACE(request);
    Client client(server->port());
    ASSERT_TRUE(client.send(request));
    Clock::time_point t0 = Clock::now();
    ASSERT_RESPONSE(response, client);
    EXPECT_EQ(response.status, 200);
    EXPECT_EQ(response.body, "you asked for /old");
    EXPECT_TRUE(iequals(response.get("Connection"), "close"));
    ASSERT_TRUE(client.waitClosed(900ms)) << "still open after the answer";
    EXPECT_FALSE(client.reset);
    EXPECT_LT(msSince(t0), 900);
    EXPECT_TRUE(client.in.empty()) << client.in;
  }
}

TEST(HttpServer, PipelinedRequestsAreAnsweredInOrder) {
  // The second is answered a little later, from another thread: the third must still wait.
  std::vector<Joined> answerers;
  std::mutex answerersMutex;
  auto server = startServer(smallLimits(), [&](std::shared_ptr<http::Exchange> exchange) {
    if (exchange->request().path != "/2") {
      answerNow(exchange);
      return;
    }
    std::lock_guard<std::mutex> lock(answerersMutex);
    answerers.emplace_back([exchange] {
      std::this_thread::sleep_for(100ms);
      answerNow(exchange);
    });
  });
  ASSERT_TRUE(server);
  Client client(server->port());
  ASSERT_TRUE(client.send("GET /1 HTTP/1.1\r\nHost: x\r\n\r\n"
                          "POST /2 HTTP/1.1\r\nHost: x\r\nContent-Length: 3\r\n\r\nabc"
                          "GET /3 HTTP/1.1\r\nHost: x\r\n\r\n"));
  std::vector<std::string> bodies;
  for (int i = 0; i < 3; ++i) {
    ASSERT_RESPONSE(response, client);
    EXPECT_EQ(response.status, 200);
    bodies.push_back(response.body);
  }
  EXPECT_EQ(bodies, (std::vector<std::string>{"you asked for /1", "you asked for /2 with abc",
                                              "you asked for /3"}));
  EXPECT_FALSE(client.eof);
  std::lock_guard<std::mutex> lock(answerersMutex);
  for (Joined &answerer : answerers)
    answerer.join();
}

TEST(HttpServer, ExpectContinueGetsAn100BeforeTheBody) {
  auto server = startServer(smallLimits(), answerNow);
  ASSERT_TRUE(server);
  Client client(server->port());
  ASSERT_TRUE(client.send("POST /echo HTTP/1.1\r\nHost: x\r\nExpect: 100-continue\r\n"
                          "Content-Length: 5\r\n\r\n"));
  ASSERT_RESPONSE(interim, client, 2000ms);
  EXPECT_EQ(interim.status, 100);
  ASSERT_TRUE(client.send("hello"));
  ASSERT_RESPONSE(response, client);
  EXPECT_EQ(response.status, 200);
  EXPECT_EQ(response.body, "you asked for /echo with hello");
}

TEST(HttpServer, UnreadableRequestsAreAnsweredAndClosed) {
  auto server = startServer(smallLimits(), answerNow);
  ASSERT_TRUE(server);
  struct Case {
    std::string bytes;
    int status;
  };
  std::vector<Case> cases{
      {"this is not http\r\n\r\n", 400},
      {"POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 1000000\r\n\r\n" + std::string(1000, 'z'),
       413},
      {"GET / HTTP/1.1\r\nHost: x\r\nX-Big: " + std::string(8000, 'h') + "\r\n\r\n", 431},
  };
  for (const Case &c : cases) {
    SCOPED_TRACE(c.status);
    Client client(server->port());
    ASSERT_TRUE(client.send(c.bytes));
    ASSERT_RESPONSE(response, client);
    EXPECT_EQ(response.status, c.status);
    EXPECT_TRUE(iequals(response.get("Connection"), "close"));
    EXPECT_EQ(response.body.find("{\"error\":{\"code\":" + std::to_string(c.status)), 0u)
        << response.body;
    EXPECT_TRUE(client.waitClosed(3000ms));
  }
  http::Stats stats = server->stats();
  EXPECT_EQ(stats.badRequests, 3u);
  EXPECT_EQ(stats.bodiesTooLarge, 1u);
  EXPECT_TRUE(eventually([&] { return server->stats().exchanges == 0; }));
}

// The head's limit over a socket, when the head comes in segments that each end one byte into
// the next header line (HttpReader.HeadOverLimitInPiecesIs431, as a client can make it happen).
TEST(HttpServer, HeadOverLimitInSegmentsIs431) {
  http::Limits limits = smallLimits(); // a head of at most 4 KiB
  limits.header = std::chrono::seconds(5);
  std::atomic<size_t> headersSeen{0};
  auto server = startServer(limits, [&](std::shared_ptr<http::Exchange> exchange) {
    headersSeen = exchange->request().headers.size();
    answerNow(exchange);
  });
  ASSERT_TRUE(server);
  Client client(server->port());
  size_t sent = 0;
  std::string piece = "GET /big-head HTTP/1.1\r\nX";
  for (int i = 0; i < 150 && client.send(piece); ++i) {
    sent += piece.size();
    std::this_thread::sleep_for(2ms); // one read each
    piece = "-Pad-" + std::to_string(1000 + i) + ": " + std::string(40, 'v') + "\r\nX";
  }
  if (client.send("-Last: 1\r\n\r\n"))
    sent += 13;
  ASSERT_RESPONSE(response, client);
  EXPECT_EQ(response.status, 431) << "a head of " << sent << " bytes, sent in segments, was "
                                  << "taken under a limit of 4096 (" << headersSeen.load()
                                  << " headers)";
}

// ---- Deadlines -------------------------------------------------------------------------------

TEST(HttpDeadline, IdleConnectionsAreClosedAfterTheKeepAliveDeadline) {
  auto server = startServer(smallLimits(), answerNow);
  ASSERT_TRUE(server);
  Clock::time_point t0 = Clock::now();
  Client silent(server->port());    // never sends a byte
  Client answered(server->port());  // one request, then nothing
  ASSERT_TRUE(silent.ok() && answered.ok());
  ASSERT_TRUE(answered.send("GET /once HTTP/1.1\r\nHost: x\r\n\r\n"));
  ASSERT_RESPONSE(response, answered);
  EXPECT_EQ(response.status, 200);
  Clock::time_point answeredAt = Clock::now();

  ASSERT_TRUE(silent.waitClosed(5000ms)) << "an idle connection stayed open";
  long long silentMs = msSince(t0);
  ASSERT_TRUE(answered.waitClosed(5000ms)) << "a connection idle after its answer stayed open";
  long long answeredMs = msSince(answeredAt);
  EXPECT_GE(silentMs, 900);
  EXPECT_LE(silentMs, 3000);
  EXPECT_GE(answeredMs, 900);
  EXPECT_LE(answeredMs, 3000);
  EXPECT_FALSE(silent.reset);
  EXPECT_TRUE(eventually([&] { return server->stats().idleClosed == 2; }))
      << server->stats().idleClosed;
  http::Stats stats = server->stats();
  EXPECT_EQ(stats.headerTimeouts, 0u);
  EXPECT_EQ(stats.bodyTimeouts, 0u);
  EXPECT_EQ(stats.open, 0);
}

TEST(HttpDeadline, SlowHeadIsClosedAfterTheHeaderDeadline) {
  auto server = startServer(smallLimits(), answerNow);
  ASSERT_TRUE(server);
  Client client(server->port());
  ASSERT_TRUE(client.ok());
  const std::string head = "GET /slowly/and/never/finished HTTP/1.1\r\nHost: localhost\r\nX-A: b";
  Clock::time_point t0 = Clock::now();
  bool closed = false;
  for (size_t i = 0; i < head.size() && msSince(t0) < 5000; ++i) {
    if (!client.send(head.substr(i, 1), 1000ms)) {
      closed = true;
      break;
    }
    Clock::time_point sent = Clock::now();
    while (!client.eof && msSince(sent) < 300)
      client.receive(milliseconds(std::max<long long>(1, 300 - msSince(sent))));
    if (client.eof) {
      closed = true;
      break;
    }
  }
  long long elapsed = msSince(t0);
  ASSERT_TRUE(closed) << "a head sent one byte every 300 ms was not cut off";
  EXPECT_GE(elapsed, 900);
  EXPECT_LE(elapsed, 2500); // the deadline, 1 s, plus one byte's pause and slack
  EXPECT_TRUE(client.in.empty()) << "the server answered: " << client.in;
  EXPECT_TRUE(eventually([&] { return server->stats().headerTimeouts == 1; }));
  http::Stats stats = server->stats();
  EXPECT_EQ(stats.idleClosed, 0u);
  EXPECT_EQ(stats.bodyTimeouts, 0u);
}

TEST(HttpDeadline, UnfinishedBodyIsClosedAfterTheBodyDeadline) {
  std::atomic<int> handled{0};
  auto server = startServer(smallLimits(), [&](std::shared_ptr<http::Exchange> exchange) {
    ++handled;
    answerNow(exchange);
  });
  ASSERT_TRUE(server);
  Client client(server->port());
  ASSERT_TRUE(client.send("POST /upload HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n\r\n0123"));
  Clock::time_point t0 = Clock::now();
  // A byte of the body every 200 ms: the deadline is for the whole body, not each read.
  while (!client.eof && msSince(t0) < 5000) {
    if (!client.send("5", 1000ms))
      break;
    Clock::time_point sent = Clock::now();
    while (!client.eof && msSince(sent) < 200)
      client.receive(milliseconds(std::max<long long>(1, 200 - msSince(sent))));
  }
  long long elapsed = msSince(t0);
  EXPECT_TRUE(client.eof || client.waitClosed(1000ms)) << "an unfinished body was not cut off";
  EXPECT_GE(elapsed, 800);
  EXPECT_LE(elapsed, 2500);
  EXPECT_EQ(handled.load(), 0);
  EXPECT_TRUE(eventually([&] { return server->stats().bodyTimeouts == 1; }));
  EXPECT_EQ(server->stats().headerTimeouts, 0u);
}

TEST(HttpDeadline, IdleAndSlowConnectionsDoNotDelayOthers) {
  auto server = startServer(smallLimits(), answerNow);
  ASSERT_TRUE(server);
  std::vector<std::unique_ptr<Client>> idle, slow;
  for (int i = 0; i < 50; ++i) {
    idle.push_back(std::make_unique<Client>(server->port()));
    ASSERT_TRUE(idle.back()->ok());
  }
  for (int i = 0; i < 10; ++i) {
    slow.push_back(std::make_unique<Client>(server->port()));
    ASSERT_TRUE(slow.back()->send("POST /slow HTTP/1.1\r\nHost: x\r\nContent-Le"));
  }
  ASSERT_TRUE(eventually([&] { return server->stats().open == 60; }, 2000ms))
      << server->stats().open;
  for (int i = 0; i < 3; ++i) {
    Clock::time_point t0 = Clock::now();
    Client client(server->port());
    ASSERT_TRUE(client.send("GET /quick HTTP/1.1\r\nHost: x\r\n\r\n"));
    ASSERT_RESPONSE(response, client, 2000ms);
    long long elapsed = msSince(t0);
    EXPECT_EQ(response.status, 200);
    EXPECT_LT(elapsed, 200) << "a GET took " << elapsed << " ms beside 60 idle or slow clients";
  }
  EXPECT_GE(server->stats().open, 60);
}

// ---- --max-connections -----------------------------------------------------------------------

http::Limits fourConnections() {
  http::Limits limits = smallLimits();
  limits.maxConnections = 4;
  limits.keepAlive = std::chrono::seconds(5); // the four stay while the test runs
  return limits;
}

TEST(HttpLimit, ConnectionsPastTheLimitGet503) {
  auto server = startServer(fourConnections(), answerNow);
  ASSERT_TRUE(server);
  EXPECT_EQ(server->maxConnections(), 4);
  std::vector<std::unique_ptr<Client>> open;
  for (int i = 0; i < 4; ++i) {
    open.push_back(std::make_unique<Client>(server->port()));
    ASSERT_TRUE(open.back()->ok());
  }
  ASSERT_TRUE(eventually([&] { return server->stats().open == 4; }, 2000ms));

  Clock::time_point t0 = Clock::now();
  Client fifth(server->port());
  ASSERT_TRUE(fifth.ok());
  ASSERT_RESPONSE(refused, fifth, 1000ms);
  EXPECT_EQ(refused.version + " " + std::to_string(refused.status), "HTTP/1.1 503");
  EXPECT_TRUE(iequals(refused.get("Connection"), "close"));
  EXPECT_EQ(refused.get("Retry-After"), "1");
  EXPECT_EQ(refused.get("Content-Length"), std::to_string(refused.body.size()));
  EXPECT_EQ(refused.body.find("{\"error\":{\"code\":503"), 0u) << refused.body;
  EXPECT_TRUE(fifth.waitClosed(1000ms));
  EXPECT_LT(msSince(t0), 500);
  EXPECT_EQ(server->stats().refused, 1u);
  EXPECT_EQ(server->stats().open, 4);

  // The four are still served.
  ASSERT_TRUE(open[1]->send("GET /still HTTP/1.1\r\nHost: x\r\n\r\n"));
  ASSERT_RESPONSE(still, *open[1]);
  EXPECT_EQ(still.status, 200);

  // One goes: a new one is served.
  open[0]->close();
  ASSERT_TRUE(eventually([&] { return server->stats().open == 3; }, 2000ms));
  Client next(server->port());
  ASSERT_TRUE(next.send("GET /next HTTP/1.1\r\nHost: x\r\n\r\n"));
  ASSERT_RESPONSE(served, next);
  EXPECT_EQ(served.status, 200);
  EXPECT_EQ(served.body, "you asked for /next");
  EXPECT_EQ(server->stats().refused, 1u);
}

// A client sends its request as soon as it connects (as every HTTP client does): the 503 must
// still reach it, and the connection end cleanly rather than by a reset.
TEST(HttpLimit, RefusedClientThatSentItsRequestReadsThe503) {
  auto server = startServer(fourConnections(), answerNow);
  ASSERT_TRUE(server);
  std::vector<std::unique_ptr<Client>> open;
  for (int i = 0; i < 4; ++i)
    open.push_back(std::make_unique<Client>(server->port()));
  ASSERT_TRUE(eventually([&] { return server->stats().open == 4; }, 2000ms));
  int resets = 0;
  for (int i = 0; i < 5; ++i) {
    Client fifth(server->port());
    ASSERT_TRUE(fifth.ok());
    fifth.send("POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Length: 2\r\n\r\n{}");
    std::this_thread::sleep_for(20ms);
    std::optional<Raw> refused = fifth.response(1000ms);
    bool closed = fifth.waitClosed(1000ms);
    if (!refused || fifth.reset) {
      ++resets;
      ADD_FAILURE() << "try " << i << ": " << (refused ? "a 503, then a reset" : fifth.failure);
      continue;
    }
    EXPECT_EQ(refused->status, 503);
    EXPECT_TRUE(closed) << "try " << i << ": the refused connection stayed open";
  }
  EXPECT_EQ(resets, 0);
  EXPECT_EQ(server->stats().refused, 5u);
}

// ---- Exchanges answered later ----------------------------------------------------------------

TEST(HttpExchange, AnsweredLaterFromAnotherThread) {
  Mailbox<std::shared_ptr<http::Exchange>> exchanges;
  auto server = startServer(smallLimits(), [&](std::shared_ptr<http::Exchange> exchange) {
    exchanges.put(std::move(exchange));
  });
  ASSERT_TRUE(server);
  Client client(server->port());
  Clock::time_point t0 = Clock::now();
  ASSERT_TRUE(client.send("GET /later HTTP/1.1\r\nHost: x\r\n\r\n"));
  std::optional<std::shared_ptr<http::Exchange>> exchange = exchanges.take();
  ASSERT_TRUE(exchange);
  EXPECT_EQ((*exchange)->request().path, "/later");
  EXPECT_EQ(server->stats().exchanges, 1);
  Joined answerer([exchange = *exchange] {
    std::this_thread::sleep_for(200ms);
    http::Response response;
    response.status = 201;
    response.headers.emplace_back("X-Later", "yes");
    response.body = "{\"later\":true}";
    exchange->respond(response);
    exchange->respond(response); // a second answer does nothing
  });
  ASSERT_RESPONSE(response, client);
  long long elapsed = msSince(t0);
  answerer.join();
  EXPECT_EQ(response.status, 201);
  EXPECT_EQ(response.reason, "Created");
  EXPECT_EQ(response.get("X-Later"), "yes");
  EXPECT_EQ(response.get("Content-Type"), "application/json");
  EXPECT_EQ(response.body, "{\"later\":true}");
  EXPECT_GE(elapsed, 200);
  EXPECT_LT(elapsed, 2000);
  EXPECT_FALSE(client.receive(100ms) > 0) << "bytes after the answer: " << client.in;
  EXPECT_TRUE(eventually([&] { return server->stats().exchanges == 0; }));
}

TEST(HttpExchange, StreamedFromAnotherThread) {
  Mailbox<std::shared_ptr<http::Exchange>> exchanges;
  auto server = startServer(smallLimits(), [&](std::shared_ptr<http::Exchange> exchange) {
    if (exchange->request().path == "/stream")
      exchanges.put(std::move(exchange));
    else
      answerNow(exchange);
  });
  ASSERT_TRUE(server);
  Client client(server->port());
  ASSERT_TRUE(client.send("GET /stream HTTP/1.1\r\nHost: x\r\n\r\n"));
  std::optional<std::shared_ptr<http::Exchange>> exchange = exchanges.take();
  ASSERT_TRUE(exchange);
  const std::vector<std::string> chunks{"data: first\n\n", "data: second\n\n",
                                        std::string(100000, 'x'), "\r\n0\r\n\r\n", "data: [DONE]\n\n"};
  std::atomic<bool> allSent{true};
  Joined streamer([&, exchange = *exchange] {
    http::Response head;
    head.contentType = "text/event-stream";
    head.headers.emplace_back("Cache-Control", "no-cache");
    head.body = "ignored";
    exchange->open(head);
    for (const std::string &chunk : chunks) {
      allSent = exchange->send(chunk) && allSent;
      allSent = exchange->send("") && allSent; // an empty chunk does not end the stream
      std::this_thread::sleep_for(20ms);
    }
    exchange->end();
    allSent = !exchange->send("after the end") && allSent;
  });
  ASSERT_RESPONSE(response, client);
  streamer.join();
  EXPECT_TRUE(allSent.load());
  EXPECT_EQ(response.status, 200);
  EXPECT_TRUE(response.chunked);
  EXPECT_EQ(response.get("Content-Type"), "text/event-stream");
  EXPECT_EQ(response.get("Cache-Control"), "no-cache");
  EXPECT_EQ(response.header("Content-Length"), nullptr);
  EXPECT_TRUE(response.lastChunk);
  EXPECT_EQ(response.chunks, chunks);
  // The framing ended where it should: the connection serves the next request.
  ASSERT_TRUE(client.send("GET /next HTTP/1.1\r\nHost: x\r\n\r\n"));
  ASSERT_RESPONSE(next, client);
  EXPECT_EQ(next.body, "you asked for /next");
  EXPECT_TRUE(eventually([&] { return server->stats().exchanges == 0; }));
}

// RFC 9112 6.1 (RFC 7230 3.3.1): a server must not send Transfer-Encoding in answer to an
// HTTP/1.0 request, whose client cannot decode it. A stream to such a client is its bytes as
// they are, ended by closing the connection.
TEST(HttpExchange, StreamToAnHttp10ClientIsNotChunked) {
  Mailbox<std::shared_ptr<http::Exchange>> exchanges;
  auto server = startServer(smallLimits(), [&](std::shared_ptr<http::Exchange> exchange) {
    exchanges.put(std::move(exchange));
  });
  ASSERT_TRUE(server);
  Client client(server->port());
  ASSERT_TRUE(client.send("GET /stream HTTP/1.0\r\n\r\n"));
  std::optional<std::shared_ptr<http::Exchange>> exchange = exchanges.take();
  ASSERT_TRUE(exchange);
  (*exchange)->open(http::Response());
  (*exchange)->send("data: one\n\n");
  (*exchange)->send("data: two\n\n");
  (*exchange)->end();
  ASSERT_TRUE(client.waitClosed(2000ms)) << "the stream did not end with the connection";
  ASSERT_RESPONSE(response, client, 100ms);
  EXPECT_EQ(response.status, 200);
  EXPECT_EQ(response.header("Transfer-Encoding"), nullptr)
      << "Transfer-Encoding: " << response.get("Transfer-Encoding") << " to an HTTP/1.0 client";
  EXPECT_EQ(response.body, "data: one\n\ndata: two\n\n");
}

// ---- Clients that go -------------------------------------------------------------------------

TEST(HttpGone, ClientClosingBeforeTheAnswerRunsOnGone) {
  Mailbox<std::shared_ptr<http::Exchange>> exchanges;
  Signal gone;
  auto server = startServer(smallLimits(), [&](std::shared_ptr<http::Exchange> exchange) {
    exchange->onGone([&] { gone.raise(); });
    exchanges.put(std::move(exchange));
  });
  ASSERT_TRUE(server);
  std::optional<std::shared_ptr<http::Exchange>> exchange;
  {
    Client client(server->port());
    ASSERT_TRUE(client.send("GET /held HTTP/1.1\r\nHost: x\r\n\r\n"));
    exchange = exchanges.take();
    ASSERT_TRUE(exchange);
    std::this_thread::sleep_for(50ms);
    EXPECT_EQ(gone.count(), 0);
  } // the client closes
  Clock::time_point t0 = Clock::now();
  ASSERT_TRUE(gone.wait(1000ms)) << "onGone did not run within 1 s of the client closing";
  EXPECT_LT(msSince(t0), 1000);
  // The exchange is over: its calls do nothing.
  (*exchange)->open(http::Response());
  EXPECT_FALSE((*exchange)->send("x"));
  (*exchange)->end();
  (*exchange)->respond(http::Response());
  std::this_thread::sleep_for(50ms);
  EXPECT_EQ(gone.count(), 1);
  EXPECT_TRUE(eventually([&] { return server->stats().exchanges == 0; }));
  EXPECT_TRUE(eventually([&] { return server->stats().open == 0; }));
}

// The same while a stream is open and quiet (its head and a chunk taken, the next not come).
TEST(HttpGone, ClientClosingAQuietStreamRunsOnGone) {
  Mailbox<std::shared_ptr<http::Exchange>> exchanges;
  Signal gone;
  auto server = startServer(smallLimits(), [&](std::shared_ptr<http::Exchange> exchange) {
    exchange->onGone([&] { gone.raise(); });
    exchange->open(http::Response());
    exchange->send("first");
    exchanges.put(std::move(exchange));
  });
  ASSERT_TRUE(server);
  std::optional<std::shared_ptr<http::Exchange>> exchange;
  {
    Client client(server->port());
    ASSERT_TRUE(client.send("GET /quiet HTTP/1.1\r\nHost: x\r\n\r\n"));
    exchange = exchanges.take();
    ASSERT_TRUE(exchange);
    // The head and the first chunk arrive; the stream stays open.
    Clock::time_point t0 = Clock::now();
    while (client.in.find("\r\n5\r\nfirst\r\n") == std::string::npos && msSince(t0) < 2000)
      client.receive(100ms);
    ASSERT_NE(client.in.find("\r\n5\r\nfirst\r\n"), std::string::npos) << client.in;
    EXPECT_FALSE(client.eof);
  }
  ASSERT_TRUE(gone.wait(1000ms)) << "onGone did not run within 1 s of the client closing";
  EXPECT_FALSE((*exchange)->send("late"));
  (*exchange)->end();
  EXPECT_TRUE(eventually([&] { return server->stats().open == 0; }));
}

// The same for a second request: sent after the first's answer on a kept-alive connection, or
// pipelined behind it; the client closes while the second is unanswered.
void expectGoneBehindAnAnswer(bool pipelined) {
  Mailbox<std::shared_ptr<http::Exchange>> exchanges;
  Signal gone;
  auto server = startServer(smallLimits(), [&](std::shared_ptr<http::Exchange> exchange) {
    if (exchange->request().path == "/now") {
      answerNow(exchange);
      return;
    }
    exchange->onGone([&] { gone.raise(); });
    exchanges.put(std::move(exchange));
  });
  ASSERT_TRUE(server);
  std::optional<std::shared_ptr<http::Exchange>> exchange;
  {
    Client client(server->port());
    const std::string held = "GET /held HTTP/1.1\r\nHost: x\r\n\r\n";
    ASSERT_TRUE(client.send("GET /now HTTP/1.1\r\nHost: x\r\n\r\n" +
                            (pipelined ? held : std::string())));
    ASSERT_RESPONSE(first, client);
    EXPECT_EQ(first.body, "you asked for /now");
    if (!pipelined) {
      ASSERT_TRUE(client.send(held));
    }
    exchange = exchanges.take();
    ASSERT_TRUE(exchange);
    EXPECT_EQ((*exchange)->request().path, "/held");
  }
  EXPECT_TRUE(gone.wait(1000ms)) << "onGone did not run within 1 s of the client closing";
  EXPECT_TRUE(eventually([&] { return server->stats().open == 0; }, 1000ms))
      << server->stats().open << " connection(s) still open";
  (*exchange)->respond(http::Response()); // after the client has gone: nothing
}

TEST(HttpGone, ClientClosingDuringItsSecondRequestRunsOnGone) {
  expectGoneBehindAnAnswer(/*pipelined=*/false);
}

TEST(HttpGone, ClientClosingBehindAPipelinedRequestRunsOnGone) {
  expectGoneBehindAnAnswer(/*pipelined=*/true);
}

TEST(HttpGone, ClientThatStopsReadingAStreamIsDropped) {
  Mailbox<std::shared_ptr<http::Exchange>> exchanges;
  Signal gone;
  auto server = startServer(smallLimits(), [&](std::shared_ptr<http::Exchange> exchange) {
    if (exchange->request().path != "/flood") {
      answerNow(exchange);
      return;
    }
    exchange->onGone([&] { gone.raise(); });
    http::Response head;
    head.contentType = "text/event-stream";
    exchange->open(head);
    exchanges.put(std::move(exchange));
  });
  ASSERT_TRUE(server);
  Client reader(server->port(), 4096); // a small window, and it never reads
  ASSERT_TRUE(reader.send("GET /flood HTTP/1.1\r\nHost: x\r\n\r\n"));
  std::optional<std::shared_ptr<http::Exchange>> exchange = exchanges.take();
  ASSERT_TRUE(exchange);

  std::atomic<long long> slowestSendUs{0}, sentBytes{0};
  std::atomic<bool> refused{false}, flooding{true};
  Clock::time_point t0 = Clock::now();
  Joined sender([&, exchange = *exchange] {
    const std::string chunk(64 << 10, 'f');
    while (Clock::now() - t0 < 10s) { // bounded, whatever happens
      Clock::time_point before = Clock::now();
      bool ok = exchange->send(chunk);
      long long us = std::chrono::duration_cast<std::chrono::microseconds>(Clock::now() - before)
                         .count();
      if (us > slowestSendUs.load())
        slowestSendUs = us;
      if (!ok) {
        refused = true;
        break;
      }
      sentBytes += chunk.size();
    }
    flooding = false;
  });

  // Meanwhile, another client is served promptly.
  std::this_thread::sleep_for(10ms);
  long long otherMs = -1;
  {
    Clock::time_point before = Clock::now();
    Client other(server->port());
    if (other.send("GET /other HTTP/1.1\r\nHost: x\r\n\r\n")) {
      std::optional<Raw> response = other.response(2000ms);
      EXPECT_TRUE(response) << other.failure;
      if (response) {
        EXPECT_EQ(response->status, 200);
      }
      otherMs = msSince(before);
    }
  }

  bool wentAway = gone.wait(5000ms);
  long long goneMs = msSince(t0);
  sender.join();
  EXPECT_TRUE(wentAway) << "onGone did not run within 5 s; " << sentBytes.load()
                        << " bytes sent to a client that reads nothing";
  EXPECT_TRUE(refused.load()) << "send() never returned false";
  EXPECT_LT(goneMs, 5000);
  EXPECT_LT(slowestSendUs.load(), 100000) << "one send() took " << slowestSendUs.load() << " us";
  EXPECT_GE(otherMs, 0);
  EXPECT_LT(otherMs, 250) << "another client's GET took " << otherMs << " ms";
  EXPECT_EQ(server->stats().writeTimeouts, 1u);
  EXPECT_EQ(gone.count(), 1);
  EXPECT_TRUE(eventually([&] { return server->stats().exchanges == 0; }));
}

// A client that stops reading with less than the queue's bound unread is dropped by the write
// deadline instead: a whole answer it does not take, and a stream paced below the bound.
TEST(HttpGone, StoppedReaderIsDroppedByTheWriteDeadline) {
  http::Limits limits = smallLimits();
  limits.maxQueuedBytes = size_t(256) << 20; // never reached here
  Mailbox<std::shared_ptr<http::Exchange>> exchanges;
  Signal gone;
  auto server = startServer(limits, [&](std::shared_ptr<http::Exchange> exchange) {
    if (exchange->request().path == "/whole") { // more than the kernel's buffers hold
      http::Response response;
      response.body = std::string(16 << 20, 'w');
      exchange->respond(std::move(response));
      return;
    }
    exchange->onGone([&] { gone.raise(); });
    exchange->open(http::Response());
    exchanges.put(std::move(exchange));
  });
  ASSERT_TRUE(server);
  Client whole(server->port(), 4096), stream(server->port(), 4096); // neither reads
  Clock::time_point t0 = Clock::now();
  ASSERT_TRUE(whole.send("GET /whole HTTP/1.1\r\nHost: x\r\n\r\n"));
  ASSERT_TRUE(stream.send("GET /stream HTTP/1.1\r\nHost: x\r\n\r\n"));
  std::optional<std::shared_ptr<http::Exchange>> exchange = exchanges.take();
  ASSERT_TRUE(exchange);
  std::atomic<bool> refused{false};
  std::atomic<long long> sentBytes{0};
  Joined sender([&, exchange = *exchange] {
    const std::string chunk(64 << 10, 's');
    while (Clock::now() - t0 < 8s) {
      if (!exchange->send(chunk)) {
        refused = true;
        break;
      }
      sentBytes += chunk.size();
      std::this_thread::sleep_for(5ms); // about 13 MB/s: the bound is not what stops it
    }
  });
  bool wentAway = gone.wait(6000ms);
  long long goneMs = msSince(t0);
  EXPECT_TRUE(wentAway) << "onGone did not run within 6 s; " << sentBytes.load() << " bytes sent";
  EXPECT_GE(goneMs, 900);
  EXPECT_LT(goneMs, 6000);
  EXPECT_TRUE(eventually([&] { return server->stats().writeTimeouts == 2; }, 3000ms))
      << server->stats().writeTimeouts << " write timeouts";
  EXPECT_TRUE(eventually([&] { return server->stats().open == 0; }, 1000ms));
  sender.join();
  EXPECT_TRUE(refused.load());
  EXPECT_LT(sentBytes.load(), 200ll << 20);
}

// ---- The server's end ------------------------------------------------------------------------

TEST(HttpLifetime, DestructionWithOpenConnectionsIsPromptAndLaterAnswersDoNothing) {
  Mailbox<std::shared_ptr<http::Exchange>> exchanges;
  Signal gone;
  std::vector<std::unique_ptr<Client>> clients;
  std::shared_ptr<http::Exchange> held, streaming;
  std::atomic<bool> streamerRunning{true};
  Joined streamer;
  {
    auto server = startServer(smallLimits(), [&](std::shared_ptr<http::Exchange> exchange) {
      exchange->onGone([&] { gone.raise(); });
      exchanges.put(std::move(exchange));
    });
    ASSERT_TRUE(server);
    for (int i = 0; i < 5; ++i) // idle
      clients.push_back(std::make_unique<Client>(server->port()));
    clients.push_back(std::make_unique<Client>(server->port())); // half a head
    clients.back()->send("GET / HTTP/1.1\r\nHo");
    clients.push_back(std::make_unique<Client>(server->port())); // a held exchange
    clients.back()->send("GET /held HTTP/1.1\r\nHost: x\r\n\r\n");
    auto first = exchanges.take();
    ASSERT_TRUE(first);
    held = *first;
    clients.push_back(std::make_unique<Client>(server->port())); // a stream, still sending
    clients.back()->send("GET /stream HTTP/1.1\r\nHost: x\r\n\r\n");
    auto second = exchanges.take();
    ASSERT_TRUE(second);
    streaming = *second;
    streaming->open(http::Response());
    streamer = Joined([&] {
      Clock::time_point began = Clock::now();
      while (Clock::now() - began < 5s && streaming->send("tick\n"))
        std::this_thread::sleep_for(1ms);
      streamerRunning = false;
    });
    EXPECT_TRUE(eventually([&] { return server->stats().open == 8; }, 2000ms));
    std::this_thread::sleep_for(50ms);

    Clock::time_point t0 = Clock::now();
    server.reset();
    long long destroyMs = msSince(t0);
    EXPECT_LT(destroyMs, 1000) << "the server took " << destroyMs << " ms to stop";
  }
  // Every client sees its connection end.
  for (auto &client : clients)
    EXPECT_TRUE(client->waitClosed(1000ms));
  // The stream's sender learns it (send() false) rather than sending forever.
  EXPECT_TRUE(eventually([&] { return !streamerRunning.load(); }, 2000ms));
  streamer.join();
  // Answers after the end do nothing, and do not crash.
  http::Response response;
  response.body = "too late";
  held->respond(response);
  held->open(response);
  EXPECT_FALSE(held->send("too late"));
  held->end();
  EXPECT_FALSE(streaming->send("too late"));
  streaming->end();
  held->describe("id", "words");
  EXPECT_LE(gone.count(), 2);
}

TEST(HttpLifetime, BindFailsOnAnAddressInUse) {
  auto first = startServer(smallLimits(), answerNow);
  ASSERT_TRUE(first);
  std::string error;
  auto second =
      http::Server::bind("127.0.0.1", first->port(), smallLimits(), "http-test", errorBody, error);
  // SO_REUSEADDR does not let two listeners share a port on Linux.
  EXPECT_FALSE(second);
  EXPECT_FALSE(error.empty());
  auto unresolvable = http::Server::bind("no such host.invalid", 0, smallLimits(), "http-test",
                                         errorBody, error);
  EXPECT_FALSE(unresolvable);
}

} // namespace
