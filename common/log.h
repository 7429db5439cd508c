// Logging: a thin wrapper over spdlog so the rest of the code names one header.
//
// LOG_INFO("loaded {} tensors", n); formats with fmt. Configure once at start-up from main
// (level, text or JSON lines); InitLogging may be called again to switch format (e.g. the
// `serve` command's --log-format), which replaces the logger. The default logger is
// thread-safe.
//
// JSON format: one object per line, {"ts":..,"level":..,"thread":..,"msg":".."}; the message
// text is escaped. LogEvent() adds structured fields: in JSON they become members of the same
// object ({"ts":..,"level":..,"thread":..,"msg":"request","id":"cmpl-1","status":200,...}), in
// text they are appended as `key=value` pairs.
#pragma once

#include <cstdint>
#include <initializer_list>
#include <string>
#include <string_view>
#include <variant>

#include <spdlog/spdlog.h>

namespace kvserve {

struct LogConfig {
  std::string level = "info";  // trace, debug, info, warn, error, off
  bool json = false;           // one JSON object per line instead of text
};

// Installs the process-wide stderr logger. Returns false (and keeps the old one) when the
// level name is unknown.
[[nodiscard]] bool InitLogging(const LogConfig& config);

// One structured field of a log event. Strings are quoted and escaped in JSON.
struct LogField {
  std::string_view key;
  std::variant<std::string_view, int64_t, double> value;

  LogField(std::string_view k, std::string_view v) : key(k), value(v) {}
  LogField(std::string_view k, const char* v) : key(k), value(std::string_view(v)) {}
  LogField(std::string_view k, const std::string& v) : key(k), value(std::string_view(v)) {}
  LogField(std::string_view k, int v) : key(k), value(static_cast<int64_t>(v)) {}
  LogField(std::string_view k, int64_t v) : key(k), value(v) {}
  LogField(std::string_view k, uint64_t v) : key(k), value(static_cast<int64_t>(v)) {}
  LogField(std::string_view k, double v) : key(k), value(v) {}
};

// Logs `message` with `fields` at `level` (see the format above). Thread-safe.
void LogEvent(spdlog::level::level_enum level, std::string_view message,
              std::initializer_list<LogField> fields);

// Appends `s` to `out` as the inside of a JSON string (quotes, backslashes, control
// characters escaped; invalid UTF-8 bytes become U+FFFD).
void AppendJsonEscaped(std::string_view s, std::string* out);

}  // namespace kvserve

#define LOG_TRACE(...) SPDLOG_TRACE(__VA_ARGS__)
#define LOG_DEBUG(...) ::spdlog::debug(__VA_ARGS__)
#define LOG_INFO(...) ::spdlog::info(__VA_ARGS__)
#define LOG_WARN(...) ::spdlog::warn(__VA_ARGS__)
#define LOG_ERROR(...) ::spdlog::error(__VA_ARGS__)
