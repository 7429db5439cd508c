// Soak plumbing: blocking HTTP/1.1 client, child server process, metric and RSS readers.
#include "tools/soak/soak_client.h"

#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <fmt/format.h>

#include <algorithm>
#include <cctype>
#include <charconv>
#include <chrono>
#include <cstring>
#include <fstream>
#include <thread>

extern char** environ;

namespace kvserve::soak {
namespace {

std::string Lower(std::string s) {
  for (char& c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return s;
}

std::string_view Trim(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t' || s.back() == '\r')) s.remove_suffix(1);
  return s;
}

}  // namespace

bool SoakConnection::Connect(const std::string& host, int port, double timeout_seconds) {
  Close();
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* found = nullptr;
  if (getaddrinfo(host.c_str(), std::to_string(port).c_str(), &hints, &found) != 0) return false;
  for (addrinfo* a = found; a != nullptr && fd_ < 0; a = a->ai_next) {
    fd_ = socket(a->ai_family, a->ai_socktype | SOCK_CLOEXEC, a->ai_protocol);
    if (fd_ < 0) continue;
    if (connect(fd_, a->ai_addr, a->ai_addrlen) != 0) Close();
  }
  freeaddrinfo(found);
  if (fd_ < 0) return false;
  timeval tv{};
  tv.tv_sec = static_cast<time_t>(timeout_seconds);
  tv.tv_usec = static_cast<suseconds_t>((timeout_seconds - static_cast<double>(tv.tv_sec)) * 1e6);
  setsockopt(fd_, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
  setsockopt(fd_, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv));
  const int one = 1;
  setsockopt(fd_, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
  buffer_.clear();
  return true;
}

void SoakConnection::Close() {
  if (fd_ >= 0) ::close(fd_);
  fd_ = -1;
  buffer_.clear();
}

bool SoakConnection::SendAll(std::string_view bytes) {
  while (!bytes.empty()) {
    const ssize_t n = ::send(fd_, bytes.data(), bytes.size(), MSG_NOSIGNAL);
    if (n <= 0) {
      if (n < 0 && errno == EINTR) continue;
      return false;
    }
    bytes.remove_prefix(static_cast<size_t>(n));
  }
  return true;
}

bool SoakConnection::Fill() {
  char chunk[16384];
  for (;;) {
    const ssize_t n = ::recv(fd_, chunk, sizeof(chunk), 0);
    if (n > 0) {
      buffer_.append(chunk, static_cast<size_t>(n));
      return true;
    }
    if (n < 0 && errno == EINTR) continue;
    return false;  // EOF, timeout or error
  }
}

bool SoakConnection::ReadLine(std::string* line) {
  for (;;) {
    const size_t eol = buffer_.find("\r\n");
    if (eol != std::string::npos) {
      *line = buffer_.substr(0, eol);
      buffer_.erase(0, eol + 2);
      return true;
    }
    if (buffer_.size() > (64 << 10) || !Fill()) return false;
  }
}

bool SoakConnection::ReadHead(ResponseHead* head) {
  std::string line;
  if (!ReadLine(&line)) return false;
  // HTTP/1.1 200 OK
  if (line.size() < 12 || line.compare(0, 5, "HTTP/") != 0) return false;
  head->status = std::atoi(line.c_str() + 9);
  head->keep_alive = line.compare(0, 8, "HTTP/1.1") == 0;
  for (;;) {
    if (!ReadLine(&line)) return false;
    if (line.empty()) break;
    const size_t colon = line.find(':');
    if (colon == std::string::npos) return false;
    const std::string name = Lower(line.substr(0, colon));
    const std::string value(Trim(std::string_view(line).substr(colon + 1)));
    head->headers[name] = value;
    if (name == "transfer-encoding" && Lower(value).find("chunked") != std::string::npos) head->chunked = true;
    if (name == "content-length") head->content_length = std::atoll(value.c_str());
    if (name == "connection") head->keep_alive = Lower(value) != "close";
  }
  return true;
}

bool SoakConnection::ReadBody(const ResponseHead& head, const std::function<bool(std::string_view)>& on_data) {
  if (head.chunked) {
    for (;;) {
      std::string line;
      if (!ReadLine(&line)) return false;
      size_t size = 0;
      const auto [ptr, ec] = std::from_chars(line.data(), line.data() + line.size(), size, 16);
      if (ec != std::errc() || ptr == line.data()) return false;
      if (size == 0) {
        if (!ReadLine(&line)) return false;  // the blank line after the last chunk
        return true;
      }
      while (buffer_.size() < size + 2) {
        if (!Fill()) return false;
      }
      const std::string data = buffer_.substr(0, size);
      buffer_.erase(0, size + 2);
      if (!on_data(data)) return true;
    }
  }
  if (head.content_length >= 0) {
    size_t left = static_cast<size_t>(head.content_length);
    while (left > 0) {
      if (buffer_.empty() && !Fill()) return false;
      const size_t take = std::min(left, buffer_.size());
      const std::string data = buffer_.substr(0, take);
      buffer_.erase(0, take);
      left -= take;
      if (!on_data(data)) return true;
    }
    return true;
  }
  // Until the server closes.
  for (;;) {
    if (!buffer_.empty()) {
      const std::string data = std::move(buffer_);
      buffer_.clear();
      if (!on_data(data)) return true;
    }
    if (!Fill()) return true;
  }
}

std::string BuildRequest(const std::string& method, const std::string& path, std::string_view body,
                         const std::string& host, const std::string& api_key) {
  std::string r = fmt::format("{} {} HTTP/1.1\r\nHost: {}\r\n", method, path, host);
  if (!api_key.empty()) r += fmt::format("Authorization: Bearer {}\r\n", api_key);
  if (method == "POST") {
    r += fmt::format("Content-Type: application/json\r\nContent-Length: {}\r\n", body.size());
  }
  r += "\r\n";
  r += body;
  return r;
}

std::optional<SimpleResponse> Fetch(const std::string& host, int port, const std::string& method,
                                    const std::string& path, std::string_view body, const std::string& api_key) {
  SoakConnection c;
  if (!c.Connect(host, port, 30) || !c.SendAll(BuildRequest(method, path, body, host, api_key))) return std::nullopt;
  ResponseHead head;
  if (!c.ReadHead(&head)) return std::nullopt;
  SimpleResponse r;
  r.status = head.status;
  if (!c.ReadBody(head, [&](std::string_view d) {
        r.body += d;
        return true;
      })) {
    return std::nullopt;
  }
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
