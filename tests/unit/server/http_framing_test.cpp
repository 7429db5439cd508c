// FramingError (RFC 9112): every ambiguous framing is refused with the status the server
// answers before closing the connection; plain requests and exactly "chunked" pass.
#include "server/http/http_framing.h"

#include <gtest/gtest.h>

#include <optional>
#include <string>
#include <vector>

namespace kvserve {
namespace http_framing_test {

namespace http = boost::beast::http;

struct Header {
  std::string name;
  std::string value;
};

std::optional<int> StatusFor(unsigned version, const std::vector<Header>& headers) {
  http::request_header<> req;
  req.method(http::verb::post);
  req.target("/v1/completions");
  req.version(version);
  for (const Header& h : headers) req.insert(h.name, h.value);
  const auto error = FramingError(req);
  if (!error) return std::nullopt;
  EXPECT_FALSE(error->second.empty());
  return error->first;
}

TEST(HttpFramingTest, PlainRequestsAndChunkedPass) {
  EXPECT_EQ(StatusFor(11, {{"Host", "x"}, {"Content-Length", "3"}}), std::nullopt);
  EXPECT_EQ(StatusFor(11, {{"Host", "x"}, {"Transfer-Encoding", "chunked"}}), std::nullopt);
  EXPECT_EQ(StatusFor(11, {{"Host", "x"}, {"Transfer-Encoding", " Chunked\t"}}), std::nullopt);
  EXPECT_EQ(StatusFor(10, {{"Content-Length", "3"}}), std::nullopt);  // HTTP/1.0 needs no Host
}

TEST(HttpFramingTest, HostIsRequiredOnceOnHttp11) {
  EXPECT_EQ(StatusFor(11, {{"Content-Length", "3"}}), 400);
  EXPECT_EQ(StatusFor(11, {{"Host", "a"}, {"Host", "b"}}), 400);
}

TEST(HttpFramingTest, AmbiguousTransferEncodingsAreRefused) {
  EXPECT_EQ(StatusFor(11, {{"Host", "x"}, {"Transfer-Encoding", "gzip"}}), 400);
  EXPECT_EQ(StatusFor(11, {{"Host", "x"}, {"Transfer-Encoding", "xchunked"}}), 400);
  EXPECT_EQ(StatusFor(11, {{"Host", "x"}, {"Transfer-Encoding", "chunked, gzip"}}), 400);
  // A coding before chunked is well-formed but not implemented: never decoded as chunked.
  EXPECT_EQ(StatusFor(11, {{"Host", "x"}, {"Transfer-Encoding", "gzip, chunked"}}), 501);
  EXPECT_EQ(StatusFor(11, {{"Host", "x"}, {"Transfer-Encoding", "chunked"}, {"Transfer-Encoding", "chunked"}}), 400);
  EXPECT_EQ(StatusFor(11, {{"Host", "x"}, {"Transfer-Encoding", "chunked"}, {"Content-Length", "3"}}), 400);
  EXPECT_EQ(StatusFor(10, {{"Transfer-Encoding", "chunked"}}), 400);
}

}  // namespace http_framing_test
}  // namespace kvserve
