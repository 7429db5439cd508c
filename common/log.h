// Logging: a thin wrapper over spdlog so the rest of the code names one header.
//
// LOG_INFO("loaded {} tensors", n); formats with fmt. Configure once at start-up from main
// (level, text or JSON lines); the default logger is thread-safe.
#pragma once

#include <string>

#include <spdlog/spdlog.h>

namespace kvserve {

struct LogConfig {
  std::string level = "info";  // trace, debug, info, warn, error, off
  bool json = false;           // one JSON object per line instead of text
};

// Installs the process-wide stderr logger. Returns false (and keeps the old one) when the
// level name is unknown.
[[nodiscard]] bool InitLogging(const LogConfig& config);

}  // namespace kvserve

#define LOG_TRACE(...) SPDLOG_TRACE(__VA_ARGS__)
#define LOG_DEBUG(...) ::spdlog::debug(__VA_ARGS__)
#define LOG_INFO(...) ::spdlog::info(__VA_ARGS__)
#define LOG_WARN(...) ::spdlog::warn(__VA_ARGS__)
#define LOG_ERROR(...) ::spdlog::error(__VA_ARGS__)
