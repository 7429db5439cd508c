// Plumbing for `kvserve soak` (cli/cli_soak.cpp): one-shot requests over the tools' HTTP
// client (tools/http_client), a child `kvserve serve` process, and readers for /metrics
// samples and /proc/<pid>/status VmRSS.
//
// SoakServerProcess is used by the thread that started it.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace kvserve::soak {

// The Authorization header lines for `api_key` (none when it is empty).
std::vector<std::string> AuthHeaders(const std::string& api_key);

// One complete exchange on a fresh connection (GET /metrics, /debug/cache): nullopt on a
// transport error.
struct SimpleResponse {
  int status = 0;
  std::string body;
};
std::optional<SimpleResponse> Fetch(const std::string& host, int port, const std::string& method,
                                    const std::string& path, std::string_view body, const std::string& api_key);

// The value of one sample of a Prometheus text exposition ("name{labels}" exactly as
// written), or nullopt.
std::optional<double> MetricValue(std::string_view exposition, std::string_view sample);

// VmRSS of a process in KiB (from /proc/<pid>/status), or -1.
int64_t ResidentKib(pid_t pid);

// A `kvserve serve` child process on a free port (this binary, /proc/self/exe). Its stdout
// is read for the "HTTP on http://host:port" line; its stderr goes to `log_path`.
class SoakServerProcess {
 public:
  ~SoakServerProcess();
  // `args` follow "serve". Returns false (with *error set) when it exits or prints no
  // address within `timeout_seconds`.
  [[nodiscard]] bool Start(const std::vector<std::string>& args, const std::string& log_path,
                           double timeout_seconds, std::string* error);
  pid_t pid() const { return pid_; }
  int port() const { return port_; }
  // SIGTERM and wait: the exit status (or 128 + signal), -1 if not started.
  int Stop(double timeout_seconds);

 private:
  pid_t pid_ = -1;
  int port_ = 0;
  int stdout_fd_ = -1;
};

}  // namespace kvserve::soak
