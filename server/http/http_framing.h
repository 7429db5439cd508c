// The framing checks of an HTTP/1.x request header. A request whose framing is ambiguous must
// be refused and its connection closed (RFC 9112 6.1, 6.3, 3.2): otherwise its body could be
// read as the next request (smuggling). Pure function; thread-safe.
#pragma once

#include <boost/beast/http.hpp>

#include <optional>
#include <string>
#include <utility>

namespace kvserve {

// The status to answer (400, or 501 for a transfer coding kvserve does not implement) and a
// message, or nullopt when the framing is unambiguous: HTTP/1.1 needs exactly one Host;
// Transfer-Encoding is refused in HTTP/1.0, twice, together with Content-Length, or as
// anything but exactly "chunked".
[[nodiscard]] std::optional<std::pair<int, std::string>> FramingError(
    const boost::beast::http::request_header<>& req);

}  // namespace kvserve
