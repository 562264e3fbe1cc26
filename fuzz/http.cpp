// Fuzzes tpc serve's HTTP/1.1 request parser (serve::http::RequestReader, runtime/serve/http.cpp):
// the input is a connection's bytes after a first byte that picks a split size of 1 to 64
// (seeds: fuzz/corpus/http/, a GET, a JSON POST, chunked bodies with extensions and trailers,
// pipelined requests, Expect: 100-continue, and heads the server must refuse), read with small
// limits (a body of 4 KiB, a head of 2 KiB). The bytes are fed twice, all at once and in pieces
// of the split size, parsing after each piece until the reader wants more, as the connection
// does; each request is taken, an error ends the connection. The oracle is differential: both
// feedings must give the same requests (method, target, path, headers, body, keep-alive,
// version), the same heads (declared length, 100-continue) and the same error status, since
// how the bytes arrive must not change what they mean. Besides: one Head before each Request, no body
// over the limit, a request line and fields that fit the head's limit (their parts' sizes
// summed, a bound below the bytes they came in; trailers, were they merged into the headers,
// count), a path that is a prefix of its target, no CR, LF or NUL inside a request line's
// parts or a field, errors of 400, 413 or 431 with a message, and a reader that waits for more
// holding no more than the head's limit unparsed (a head, a chunk's size line or trailers in
// progress: a client must not make it buffer without bound). Nothing may throw, crash or hang;
// at most 64 requests a connection.
#include "http.h"

#include <algorithm>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace {

using tpcrt::serve::http::Limits;
using tpcrt::serve::http::Parsed;
using tpcrt::serve::http::Request;
using tpcrt::serve::http::RequestReader;

constexpr size_t maxRequests = 64;

/// What one feeding of the bytes made: each head's declared length and 100-continue, each
/// request taken, and the error that ended the connection, if one did.
struct Outcome {
  std::vector<std::pair<std::optional<uint64_t>, bool>> heads;
  std::vector<Request> requests;
  std::optional<std::pair<int, std::string>> error;
};

bool sameRequest(const Request &a, const Request &b) {
  return a.method == b.method && a.target == b.target && a.path == b.path &&
         a.headers == b.headers && a.body == b.body && a.keepAlive == b.keepAlive &&
         a.version == b.version;
}

bool hasControl(std::string_view text) {
  return text.find_first_of(std::string_view("\r\n\0", 3)) != std::string_view::npos;
}

/// Checks one request taken on its own (what does not need the other feeding).
void checkRequest(const Request &request, const Limits &limits) {
  if (request.body.size() > limits.maxBodyBytes)
    __builtin_trap();
  if (request.target.compare(0, request.path.size(), request.path) != 0 ||
      request.path.size() > request.target.size())
    __builtin_trap();
  // The request line and the fields come from a head of at most maxHeaderBytes, which holds
  // their parts and more (separators, line ends).
  size_t head = request.method.size() + request.target.size();
  for (const auto &[name, value] : request.headers)
    head += name.size() + value.size();
  if (request.method.empty() || request.target.empty() || head > limits.maxHeaderBytes)
    __builtin_trap();
  if (hasControl(request.method) || hasControl(request.target) ||
      request.method.find(' ') != std::string::npos ||
      request.target.find(' ') != std::string::npos)
    __builtin_trap();
  for (const auto &[name, value] : request.headers)
    if (name.empty() || hasControl(name) || hasControl(value))
      __builtin_trap();
}

/// Feeds `bytes` to a new reader in pieces of `split` bytes (all at once when it is 0).
Outcome feed(std::string_view bytes, size_t split, const Limits &limits) {
  Outcome outcome;
  RequestReader reader(limits);
  bool headSeen = false; // a Head of the request being read, not yet taken
  size_t received = 0;
  size_t step = split == 0 ? std::max<size_t>(bytes.size(), 1) : split;
  size_t at = 0;
  do { // (an empty input too: parse() once)
    std::string_view piece = bytes.substr(at, step);
    at += piece.size();
    reader.receive(piece);
    received += piece.size();
    for (;;) {
      Parsed parsed = reader.parse();
      if (reader.buffered() > received)
        __builtin_trap();
      if (parsed == Parsed::More) {
        if (reader.buffered() > limits.maxHeaderBytes)
          __builtin_trap();
        break;
      }
      if (parsed == Parsed::Head) {
        if (headSeen) // once per request: a second Head would loop the connection forever
          __builtin_trap();
        headSeen = true;
        outcome.heads.emplace_back(reader.contentLength(), reader.expectsContinue());
        // A declared length past maxBodyBytes is refused by the reader (its 413) or by the
        // connection; either way no body past the limit may come out of take().
        continue;
      }
      if (parsed == Parsed::Request) {
        if (!headSeen)
          __builtin_trap();
        headSeen = false;
        Request request = reader.take();
        checkRequest(request, limits);
        outcome.requests.push_back(std::move(request));
        if (outcome.requests.size() >= maxRequests)
          return outcome;
        continue;
      }
      // Parsed::Error: the connection answers it and closes.
      std::pair<int, std::string> error = reader.error();
      if ((error.first != 400 && error.first != 413 && error.first != 431) ||
          error.second.empty())
        __builtin_trap();
      outcome.error = std::move(error);
      return outcome;
    }
  } while (at < bytes.size());
  return outcome;
}

} // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  if (size == 0)
    return 0;
  Limits limits;
  limits.maxBodyBytes = 4096;
  limits.maxHeaderBytes = 2048;
  size_t split = 1 + data[0] % 64;
  std::string_view bytes(reinterpret_cast<const char *>(data) + 1, size - 1);
  Outcome whole = feed(bytes, 0, limits);
  Outcome pieces = feed(bytes, split, limits);
  // The same error status (its message may name whichever fault a feeding met first).
  if (whole.heads != pieces.heads || whole.error.has_value() != pieces.error.has_value() ||
      (whole.error && whole.error->first != pieces.error->first) ||
      whole.requests.size() != pieces.requests.size())
    __builtin_trap();
  for (size_t i = 0; i < whole.requests.size(); ++i)
    if (!sameRequest(whole.requests[i], pieces.requests[i]))
      __builtin_trap();
  return 0;
}
