// HttpConnection against a one-connection server on loopback: whole requests (keep-alive,
// Content-Length and chunked bodies, a server that closes), and the steps a client that
// leaves at any byte uses (ReadBody stopping where the callback says).
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <string>
#include <thread>
#include <vector>

#include "tools/http_client/http_client.h"

namespace kvserve::bench {
namespace http_connection_test {

// Accepts one connection; for each canned response, reads one request head (and the body
// its Content-Length announces) and writes the response; then closes.
class CannedServer {
 public:
  explicit CannedServer(std::vector<std::string> responses) : responses_(std::move(responses)) {
    fd_ = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    EXPECT_EQ(::bind(fd_, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)), 0);
    EXPECT_EQ(::listen(fd_, 1), 0);
    socklen_t len = sizeof(addr);
    ::getsockname(fd_, reinterpret_cast<sockaddr*>(&addr), &len);
    port_ = ntohs(addr.sin_port);
    thread_ = std::thread([this] { Serve(); });
  }
  ~CannedServer() {
    if (thread_.joinable()) thread_.join();
    ::close(fd_);
  }
  Url url() const { return Url{"127.0.0.1", port_, ""}; }
  // Waits for the server to close the connection; the requests as received.
  std::vector<std::string> Finish() {
    thread_.join();
    return requests_;
  }

 private:
  void Serve() {
    const int c = ::accept(fd_, nullptr, nullptr);
    std::string in;
    char buf[4096];
    for (const std::string& response : responses_) {
      size_t end;
      while ((end = in.find("\r\n\r\n")) == std::string::npos) {
        const ssize_t n = ::recv(c, buf, sizeof(buf), 0);
        if (n <= 0) return (void)::close(c);
        in.append(buf, static_cast<size_t>(n));
      }
      size_t length = 0;
      if (size_t at = in.find("Content-Length: "); at != std::string::npos && at < end) {
        length = std::stoul(in.substr(at + 16));
      }
      while (in.size() < end + 4 + length) {
        const ssize_t n = ::recv(c, buf, sizeof(buf), 0);
        if (n <= 0) return (void)::close(c);
        in.append(buf, static_cast<size_t>(n));
      }
      requests_.push_back(in.substr(0, end + 4 + length));
      in.erase(0, end + 4 + length);
      (void)::send(c, response.data(), response.size(), MSG_NOSIGNAL);
    }
    ::close(c);
  }

  std::vector<std::string> responses_;
  std::vector<std::string> requests_;
  int fd_ = -1;
  int port_ = 0;
  std::thread thread_;
};

TEST(HttpConnectionTest, RequestsShareAKeptAliveConnectionAndDecodeEveryBodyKind) {
  std::string body_a, body_b, body_c;
  {
    CannedServer server({"HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nhello",
                         "HTTP/1.1 201 Created\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n2\r\nde\r\n0\r\n\r\n",
                         "HTTP/1.1 500 Oops\r\nConnection: close\r\n\r\nuntil close"});
    HttpConnection conn(server.url(), 10);
    auto a = conn.Request("GET", "/a", "", {}, [&](int, std::string_view d) { body_a += d; });
    ASSERT_TRUE(a.ok()) << a.status().ToString();
    EXPECT_EQ(a->status, 200);
    auto b = conn.Request("POST", "/b", "{}", {"Authorization: Bearer k"},
                          [&](int, std::string_view d) { body_b += d; });
    ASSERT_TRUE(b.ok()) << b.status().ToString();
    EXPECT_EQ(b->status, 201);
    EXPECT_TRUE(conn.open());  // the same connection served both
    auto c = conn.Request("GET", "/c", "", {}, [&](int, std::string_view d) { body_c += d; });
    ASSERT_TRUE(c.ok()) << c.status().ToString();
    EXPECT_EQ(c->status, 500);
    EXPECT_FALSE(conn.open());  // the server closed it
    const std::vector<std::string> requests = server.Finish();
    ASSERT_EQ(requests.size(), 3u);
    EXPECT_TRUE(requests[1].starts_with("POST /b HTTP/1.1\r\n"));
    EXPECT_NE(requests[1].find("Authorization: Bearer k\r\n"), std::string::npos);
    EXPECT_TRUE(requests[1].ends_with("Content-Length: 2\r\n\r\n{}"));
  }
  EXPECT_EQ(body_a, "hello");
  EXPECT_EQ(body_b, "abcde");
  EXPECT_EQ(body_c, "until close");
}

TEST(HttpConnectionTest, ReadBodyStopsWhereTheCallerLeaves) {
  CannedServer server({"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n"
                       "6\r\ndata: \r\n2\r\n1\n\r\n0\r\n\r\n"});
  HttpConnection conn(server.url(), 10);
  ASSERT_TRUE(conn.Connect().ok());
  const std::string request = conn.FormatRequest("POST", "/v1/completions", "{\"x\":1}", {});
  ASSERT_TRUE(conn.Send(request).ok());
  StatusOr<ResponseHead> head = conn.ReadHead();
  ASSERT_TRUE(head.ok()) << head.status().ToString();
  EXPECT_EQ(head->content_type, "text/event-stream");
  std::vector<std::string> pieces;
  ASSERT_TRUE(conn.ReadBody(*head, [&](std::string_view d) {
                    pieces.emplace_back(d);
                    return false;  // the client leaves after the first piece
                  }).ok());
  ASSERT_EQ(pieces.size(), 1u);
  EXPECT_TRUE(std::string("data: 1\n").starts_with(pieces[0]));
  conn.Close();
  EXPECT_FALSE(conn.open());
}

}  // namespace http_connection_test
}  // namespace kvserve::bench
