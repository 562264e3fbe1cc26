// Rank 0's TCP rendezvous store (runtime/comm/tcp_store.h): what a rank's client gets, and
// what the server does with clients that break the protocol. The hostile clients here write
// their bytes by hand, from the protocol as documented, not through the store's own framing.
#include "tcp_store.h"

#include <gtest/gtest.h>

#include <arpa/inet.h>
#include <cstring>
#include <netinet/in.h>
#include <string>
#include <sys/socket.h>
#include <unistd.h>

using namespace tpcrt;

namespace {

/// A server of run "job" and world 2 on a free loopback port.
struct Served {
  Endpoint at{"127.0.0.1", 0};
  std::unique_ptr<TcpStoreServer> server;

  Served() {
    for (int attempt = 0; attempt < 20 && !server; ++attempt) {
      at.port = 20000 + int((unsigned(getpid()) * 7919u + unsigned(attempt) * 104729u) % 40000u);
      std::string error;
      server = TcpStoreServer::start(at, "job", 2, error);
    }
  }

  std::unique_ptr<TcpStore> client(int rank, int world = 2, const std::string &run = "job") {
    std::string error;
    return TcpStore::connect(at, run, world, rank, std::chrono::seconds(5), error);
  }
};

/// A raw connection to the server.
int dial(const Endpoint &at) {
  int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(uint16_t(at.port));
  ::inet_pton(AF_INET, at.host.c_str(), &addr.sin_addr);
  timeval tv{5, 0};
  ::setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
  EXPECT_EQ(::connect(fd, reinterpret_cast<sockaddr *>(&addr), sizeof addr), 0);
  return fd;
}

/// Little-endian 32-bit length.
std::string le32(uint32_t n) {
  return std::string{char(n & 0xff), char((n >> 8) & 0xff), char((n >> 16) & 0xff),
                     char((n >> 24) & 0xff)};
}

/// Everything the server sends until it closes the connection (or 5 s pass).
std::string drain(int fd) {
  std::string got;
  char buffer[256];
  ssize_t n;
  while ((n = ::recv(fd, buffer, sizeof buffer, 0)) > 0)
    got.append(buffer, size_t(n));
  return got;
}

} // namespace

TEST(TcpStore, SetGetClaimBetweenRanks) {
  Served s;
  ASSERT_TRUE(s.server);
  auto zero = s.client(0), one = s.client(1);
  ASSERT_TRUE(zero && one);
  EXPECT_FALSE(one->tryGet("k"));
  zero->set("k", {'v', '1'});
  EXPECT_EQ(one->tryGet("k").value_or(""), "v1");
  std::vector<char> got = one->get("k");
  EXPECT_EQ(std::string(got.begin(), got.end()), "v1");
  std::string held;
  EXPECT_TRUE(zero->claim("c", "mine", held));
  EXPECT_FALSE(one->claim("c", "theirs", held));
  EXPECT_EQ(held, "mine");
  // A wait for a key nobody sets ends at its limit, naming the key.
  try {
    one->wait({"never"}, std::chrono::milliseconds(200));
    ADD_FAILURE() << "no timeout";
  } catch (const std::exception &e) {
    EXPECT_NE(std::string(e.what()).find("never"), std::string::npos) << e.what();
  }
}

TEST(TcpStore, OtherRunsAndWorldsAreTurnedAway) {
  Served s;
  ASSERT_TRUE(s.server);
  std::string error;
  EXPECT_FALSE(TcpStore::connect(s.at, "other", 2, 1, std::chrono::seconds(5), error));
  EXPECT_NE(error.find("belongs to run 'job', not 'other'"), std::string::npos) << error;
  EXPECT_FALSE(TcpStore::connect(s.at, "job", 3, 1, std::chrono::seconds(5), error));
  EXPECT_NE(error.find("rank 0 runs a world of 2 ranks, and rank 1 was given 3"),
            std::string::npos)
      << error;
  // Rank 0 can read why.
  auto zero = s.client(0);
  ASSERT_TRUE(zero);
  EXPECT_NE(zero->tryGet("tpc/refused").value_or("").find("was given 3"), std::string::npos);
}

TEST(TcpStore, NoStoreIsNamedAfterTheTimeout) {
  std::string error;
  auto start = std::chrono::steady_clock::now();
  EXPECT_FALSE(TcpStore::connect({"127.0.0.1", 1}, "job", 2, 1, std::chrono::seconds(1), error));
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(4));
  EXPECT_NE(error.find("no rendezvous store on 127.0.0.1:1 within 1 s"), std::string::npos)
      << error;
}

TEST(TcpStore, ClientsBreakingTheProtocolAreClosedAndOthersServed) {
  Served s;
  ASSERT_TRUE(s.server);
  // A request before the hello: refused (status 2) and closed.
  int fd = dial(s.at);
  std::string get = std::string(1, char(4)) + le32(1) + "k" + le32(0);
  ::send(fd, get.data(), get.size(), 0);
  std::string answer = drain(fd);
  ::close(fd);
  ASSERT_GE(answer.size(), 5u);
  EXPECT_EQ(answer[0], char(2));
  EXPECT_NE(answer.find("hello"), std::string::npos);
  // A key length of 4 GiB: refused at once, nothing allocated for it.
  fd = dial(s.at);
  std::string huge = std::string(1, char(1)) + le32(0xffffffffu);
  ::send(fd, huge.data(), huge.size(), 0);
  answer = drain(fd);
  ::close(fd);
  ASSERT_GE(answer.size(), 1u);
  EXPECT_EQ(answer[0], char(2));
  // A good hello, then an unknown request: the one answered, the other refused and closed.
  fd = dial(s.at);
  std::string hello = std::string(1, char(1)) + le32(3) + "job" + le32(3) + "2 1";
  std::string unknown = std::string(1, char(99)) + le32(0) + le32(0);
  std::string both = hello + unknown;
  ::send(fd, both.data(), both.size(), 0);
  answer = drain(fd);
  ::close(fd);
  ASSERT_GE(answer.size(), 10u);
  EXPECT_EQ(answer[0], char(0));
  EXPECT_EQ(answer[5], char(2));
  // A client that sends half a frame and goes quiet holds nobody up.
  int quiet = dial(s.at);
  ::send(quiet, hello.data(), 4, 0);
  auto one = s.client(1);
  ASSERT_TRUE(one);
  one->set("after", {'x'});
  EXPECT_EQ(one->tryGet("after").value_or(""), "x");
  ::close(quiet);
}
