// Soak plumbing: one-shot requests, child server process, metric and RSS readers.
#include "tools/soak/soak_client.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <fmt/format.h>

#include <chrono>
#include <cstring>
#include <fstream>
#include <thread>

#include "tools/http_client/http_client.h"

extern char** environ;

namespace kvserve::soak {

std::vector<std::string> AuthHeaders(const std::string& api_key) {
  if (api_key.empty()) return {};
  return {fmt::format("Authorization: Bearer {}", api_key)};
}

std::optional<SimpleResponse> Fetch(const std::string& host, int port, const std::string& method,
                                    const std::string& path, std::string_view body, const std::string& api_key) {
  bench::HttpConnection c(bench::Url{host, port, ""}, /*timeout_seconds=*/30);
  SimpleResponse r;
  StatusOr<bench::HttpConnection::Response> response =
      c.Request(method, path, body, AuthHeaders(api_key), [&](int, std::string_view d) { r.body += d; });
  if (!response.ok()) return std::nullopt;
  r.status = response->status;
  return r;
}

std::optional<double> MetricValue(std::string_view text, std::string_view sample) {
  while (!text.empty()) {
    const size_t eol = text.find('\n');
    std::string_view line = text.substr(0, eol);
    text = eol == std::string_view::npos ? std::string_view() : text.substr(eol + 1);
    if (line.empty() || line.front() == '#') continue;
    const size_t space = line.rfind(' ');
    if (space == std::string_view::npos || line.substr(0, space) != sample) continue;
    return std::strtod(std::string(line.substr(space + 1)).c_str(), nullptr);
  }
  return std::nullopt;
}

int64_t ResidentKib(pid_t pid) {
  std::ifstream in(fmt::format("/proc/{}/status", pid));
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind("VmRSS:", 0) == 0) return std::atoll(line.c_str() + 6);
  }
  return -1;
}

SoakServerProcess::~SoakServerProcess() {
  if (pid_ > 0) Stop(5);
  if (stdout_fd_ >= 0) ::close(stdout_fd_);
}

bool SoakServerProcess::Start(const std::vector<std::string>& args, const std::string& log_path,
                              double timeout_seconds, std::string* error) {
  int out[2];
  if (pipe2(out, O_CLOEXEC) != 0) {
    *error = "pipe failed";
    return false;
  }
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_adddup2(&actions, out[1], STDOUT_FILENO);
  posix_spawn_file_actions_addopen(&actions, STDERR_FILENO, log_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  std::vector<std::string> all = {"kvserve", "serve"};
  all.insert(all.end(), args.begin(), args.end());
  std::vector<char*> argv;
  for (std::string& a : all) argv.push_back(a.data());
  argv.push_back(nullptr);
  const int rc = posix_spawn(&pid_, "/proc/self/exe", &actions, nullptr, argv.data(), environ);
  posix_spawn_file_actions_destroy(&actions);
  ::close(out[1]);
  stdout_fd_ = out[0];
  if (rc != 0) {
    pid_ = -1;
    *error = fmt::format("cannot start kvserve serve: {}", std::strerror(rc));
    return false;
  }
  std::string text;
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(timeout_seconds);
  while (std::chrono::steady_clock::now() < deadline) {
    pollfd p{stdout_fd_, POLLIN, 0};
    if (poll(&p, 1, 100) > 0) {
      char chunk[4096];
      const ssize_t n = ::read(stdout_fd_, chunk, sizeof(chunk));
      if (n <= 0) break;
      text.append(chunk, static_cast<size_t>(n));
      const size_t at = text.find("HTTP on http://");
      const size_t eol = at == std::string::npos ? at : text.find('\n', at);
      if (eol != std::string::npos) {
        const std::string_view address(text.data() + at, eol - at);
        port_ = std::atoi(std::string(address.substr(address.rfind(':') + 1)).c_str());
        return port_ > 0;
      }
    }
    int status = 0;
    if (waitpid(pid_, &status, WNOHANG) == pid_) {
      pid_ = -1;
      *error = fmt::format("kvserve serve exited ({}) before listening; see {}", WEXITSTATUS(status), log_path);
      return false;
    }
  }
  *error = "kvserve serve printed no 'HTTP on' line in time; see " + log_path;
  return false;
}

int SoakServerProcess::Stop(double timeout_seconds) {
  if (pid_ <= 0) return -1;
  kill(pid_, SIGTERM);
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(timeout_seconds);
  int status = 0;
  for (;;) {
    const pid_t r = waitpid(pid_, &status, WNOHANG);
    if (r == pid_) break;
    if (std::chrono::steady_clock::now() > deadline) {
      kill(pid_, SIGKILL);
      waitpid(pid_, &status, 0);
      break;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  pid_ = -1;
  return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

}  // namespace kvserve::soak
