// FramingError: the RFC 9112 framing checks of a request header (see http_framing.h).
#include "server/http/http_framing.h"

#include <cctype>
#include <vector>

namespace kvserve {

namespace http = boost::beast::http;

std::optional<std::pair<int, std::string>> FramingError(const http::request_header<>& req) {
  const unsigned version = req.version();
  if (version >= 11 && req.count(http::field::host) != 1) {
    return std::pair{400, std::string("an HTTP/1.1 request needs exactly one Host header")};
  }
  const size_t te_lines = req.count(http::field::transfer_encoding);
  if (te_lines == 0) return std::nullopt;
  if (version < 11) return std::pair{400, std::string("Transfer-Encoding in an HTTP/1.0 request")};
  if (te_lines > 1) return std::pair{400, std::string("more than one Transfer-Encoding header")};
  if (req.count(http::field::content_length) > 0) {
    return std::pair{400, std::string("both Transfer-Encoding and Content-Length")};
  }
  // The codings, in order; only exactly "chunked" is accepted.
  std::vector<std::string> codings;
  const boost::beast::string_view field = req[http::field::transfer_encoding];
  const std::string_view value(field.data(), field.size());
  for (size_t pos = 0; pos <= value.size();) {
    size_t comma = value.find(',', pos);
    if (comma == std::string_view::npos) comma = value.size();
    std::string_view item = value.substr(pos, comma - pos);
    while (!item.empty() && (item.front() == ' ' || item.front() == '\t')) item.remove_prefix(1);
    while (!item.empty() && (item.back() == ' ' || item.back() == '\t')) item.remove_suffix(1);
    std::string lower(item);
    for (char& c : lower) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    codings.push_back(std::move(lower));
    pos = comma + 1;
  }
  if (codings.back() != "chunked") {
    return std::pair{400, std::string("the last Transfer-Encoding must be chunked")};
  }
  if (codings.size() > 1) {
    return std::pair{501, std::string("Transfer-Encoding other than chunked is not supported")};
  }
  return std::nullopt;
}

}  // namespace kvserve
