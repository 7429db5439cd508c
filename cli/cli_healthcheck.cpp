// `kvserve healthcheck [PATH]`: the container's health probe (the Dockerfile's HEALTHCHECK).
// GET /health (or PATH, e.g. /ready) from the local server; exit 0 on HTTP 200, 1 otherwise
// with the reason on stderr. It reads the same environment as `kvserve serve`, so the probe
// follows the server's settings without flags:
//   KVSERVE_HTTP_PORT            port (8080; the probe cannot follow --http-port 0)
//   KVSERVE_HOST                 used when it names one address (not 0.0.0.0 / ::)
//   KVSERVE_TLS_CERT_FILE        set: HTTPS. The certificate is not verified: the probe talks
//                                to its own container's server (as kubelet's HTTPS probes do).
//   KVSERVE_TLS_CLIENT_CA_FILE   set (mutual TLS): the probe has no client certificate, so it
//                                only checks that the port accepts TCP connections
//   KVSERVE_API_KEY              the first key is sent, for --protect-observability
// and its own: KVSERVE_HEALTHCHECK_HOST (address; default 127.0.0.1), _TIMEOUT (seconds for
// connect + answer; 3) and _API_KEY (overrides the key).
#include <CLI/CLI.hpp>
#include <fmt/format.h>

#include <cstdio>
#include <cstdlib>
#include <string>

#include "cli/cli.h"
#include "tools/http_client/http_client.h"

namespace kvserve::cli {
namespace healthcheck_command {

constexpr char kCommand[] = "healthcheck";

std::string Env(const char* name, const std::string& fallback = "") {
  const char* value = std::getenv(name);
  return value != nullptr && *value != '\0' ? value : fallback;
}

int Unhealthy(const std::string& why) {
  std::fprintf(stderr, "kvserve healthcheck: %s\n", why.c_str());
  return kExitRuntimeError;
}

int RunHealthcheck(const std::string& path) {
  bench::Url url;
  const std::string host = Env("KVSERVE_HOST");
  url.host = Env("KVSERVE_HEALTHCHECK_HOST",
                 host.empty() || host == "0.0.0.0" || host == "::" || host == "[::]" ? "127.0.0.1" : host);
  const std::string port = Env("KVSERVE_HTTP_PORT", "8080");
  url.port = std::atoi(port.c_str());
  if (url.port <= 0 || url.port > 65535) return Unhealthy(fmt::format("KVSERVE_HTTP_PORT '{}' is not a port", port));
  url.tls = !Env("KVSERVE_TLS_CERT_FILE").empty();
  url.verify_peer = false;
  const double timeout = std::atof(Env("KVSERVE_HEALTHCHECK_TIMEOUT", "3").c_str());
  const std::string where = fmt::format("{}://{}:{}{}", url.tls ? "https" : "http", url.host, url.port, path);
  if (url.tls && !Env("KVSERVE_TLS_CLIENT_CA_FILE").empty()) {
    url.tls = false;  // TCP only: a TLS handshake would need a client certificate
    bench::HttpConnection connection(url, timeout > 0 ? timeout : 3);
    if (Status s = connection.Connect(); !s.ok()) return Unhealthy(fmt::format("{}: {}", where, s.message()));
    return kExitOk;
  }
  std::string key = Env("KVSERVE_HEALTHCHECK_API_KEY", Env("KVSERVE_API_KEY"));
  key = key.substr(0, key.find(','));
  std::vector<std::string> headers;
  if (!key.empty()) headers.push_back("Authorization: Bearer " + key);
  headers.push_back("Connection: close");
  bench::HttpConnection connection(url, timeout > 0 ? timeout : 3);
  StatusOr<bench::HttpConnection::Response> response =
      connection.Request("GET", path, "", headers, [](int, std::string_view) {});
  if (!response.ok()) return Unhealthy(fmt::format("no answer from {}: {}", where, response.status().message()));
  if (response->status != 200) return Unhealthy(fmt::format("{} answered HTTP {}", where, response->status));
  return kExitOk;
}

}  // namespace healthcheck_command

void RegisterHealthcheckCommand(CommandRegistry& registry) {
  using namespace healthcheck_command;
  auto path = std::make_shared<std::string>("/health");
  CLI::App* sub = registry.Add(kCommand, "Probe the local server's /health (or PATH) for a container health check "
                                         "(exit 0: HTTP 200)",
                               [path] { return RunHealthcheck(*path); });
  sub->add_option("path", *path, "Path to GET: /health (liveness, default) or /ready");
  sub->footer("Reads KVSERVE_HTTP_PORT, KVSERVE_HOST, KVSERVE_TLS_CERT_FILE, KVSERVE_TLS_CLIENT_CA_FILE and "
              "KVSERVE_API_KEY like `kvserve serve`, and KVSERVE_HEALTHCHECK_HOST, _TIMEOUT, _API_KEY.");
}

}  // namespace kvserve::cli
