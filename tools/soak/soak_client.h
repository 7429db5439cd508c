// Plumbing for `kvserve soak` (cli/cli_soak.cpp): a minimal blocking HTTP/1.1 client over
// POSIX sockets that can stop at any byte (to play a client that disconnects), a child
// `kvserve serve` process, and readers for /metrics samples and /proc/<pid>/status VmRSS.
//
// SoakConnection is used by one thread at a time; SoakServerProcess by the thread that
// started it.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace kvserve::soak {

struct ResponseHead {
  int status = 0;
  std::map<std::string, std::string> headers;  // names lower-case
  bool chunked = false;
  int64_t content_length = -1;
  bool keep_alive = true;
};

class SoakConnection {
 public:
  SoakConnection() = default;
  ~SoakConnection() { Close(); }
  SoakConnection(const SoakConnection&) = delete;
  SoakConnection& operator=(const SoakConnection&) = delete;

  // Connects to host:port (IPv4 or a name); every read and write times out after
  // `timeout_seconds`.
  [[nodiscard]] bool Connect(const std::string& host, int port, double timeout_seconds);
  [[nodiscard]] bool SendAll(std::string_view bytes);
  // Reads the status line and headers.
  [[nodiscard]] bool ReadHead(ResponseHead* head);
  // Reads the body (de-chunked) and passes each piece to `on_data`; when it returns false the
  // read stops there (the caller then closes: a client going away). False on a read error.
  [[nodiscard]] bool ReadBody(const ResponseHead& head, const std::function<bool(std::string_view)>& on_data);
  void Close();
  bool open() const { return fd_ >= 0; }

 private:
  bool Fill();  // one recv() into buffer_
  bool ReadLine(std::string* line);

  int fd_ = -1;
  std::string buffer_;
};

// Builds a request: method, path, optional JSON body and bearer key; keep-alive.
std::string BuildRequest(const std::string& method, const std::string& path, std::string_view body,
                         const std::string& host, const std::string& api_key);

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
