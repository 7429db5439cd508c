// Logging set-up: spdlog stderr logger with a text or JSON-lines pattern; structured events.
//
// JSON lines: the pattern is a fixed envelope whose last member is written by a custom flag
// ('*'): either `"msg":"<escaped text>"` for ordinary messages, or, for LogEvent, the
// members LogEvent rendered itself (marked by a leading kStructuredMarker byte, which is
// never shown).
#include "common/log.h"

#include <atomic>
#include <cstdio>
#include <memory>

#include <spdlog/pattern_formatter.h>
#include <spdlog/sinks/stdout_color_sinks.h>

namespace kvserve {
namespace {

constexpr char kLoggerName[] = "kvserve";
constexpr char kStructuredMarker = '\x1f';

// The format of the installed logger (LogEvent renders fields to match it).
std::atomic<bool> g_json{false};

// Length of the valid UTF-8 sequence at s[i], or 0 if the bytes there are not one.
size_t Utf8SequenceLength(std::string_view s, size_t i) {
  const auto b = static_cast<unsigned char>(s[i]);
  size_t n = 0;
  uint32_t cp = 0;
  if (b < 0x80) return 1;
  if ((b & 0xE0) == 0xC0) { n = 2; cp = b & 0x1F; }
  else if ((b & 0xF0) == 0xE0) { n = 3; cp = b & 0x0F; }
  else if ((b & 0xF8) == 0xF0) { n = 4; cp = b & 0x07; }
  else return 0;
  if (i + n > s.size()) return 0;
  for (size_t k = 1; k < n; ++k) {
    const auto c = static_cast<unsigned char>(s[i + k]);
    if ((c & 0xC0) != 0x80) return 0;
    cp = (cp << 6) | (c & 0x3F);
  }
  // Overlong forms, surrogates and values beyond U+10FFFF are invalid.
  if ((n == 2 && cp < 0x80) || (n == 3 && cp < 0x800) || (n == 4 && cp < 0x10000) || cp > 0x10FFFF ||
      (cp >= 0xD800 && cp <= 0xDFFF)) {
    return 0;
  }
  return n;
}

// Writes the message part of the JSON envelope.
class JsonMessageFlag final : public spdlog::custom_flag_formatter {
 public:
  void format(const spdlog::details::log_msg& msg, const std::tm&, spdlog::memory_buf_t& dest) override {
    std::string_view payload(msg.payload.data(), msg.payload.size());
    std::string out;
    if (!payload.empty() && payload.front() == kStructuredMarker) {
      out.assign(payload.substr(1));
    } else {
      out = "\"msg\":\"";
      AppendJsonEscaped(payload, &out);
      out += '"';
    }
    dest.append(out.data(), out.data() + out.size());
  }
  std::unique_ptr<spdlog::custom_flag_formatter> clone() const override {
    return std::make_unique<JsonMessageFlag>();
  }
};

bool NeedsQuotes(std::string_view s) {
  if (s.empty()) return true;
  for (char c : s) {
    if (c == ' ' || c == '"' || c == '=' || static_cast<unsigned char>(c) < 0x20) return true;
  }
  return false;
}

}  // namespace

void AppendJsonEscaped(std::string_view s, std::string* out) {
  for (size_t i = 0; i < s.size();) {
    const size_t n = Utf8SequenceLength(s, i);
    if (n == 0) {
      out->append("\\ufffd");
      ++i;
      continue;
    }
    if (n > 1) {
      out->append(s.substr(i, n));
      i += n;
      continue;
    }
    const char c = s[i++];
    switch (c) {
      case '"': out->append("\\\""); break;
      case '\\': out->append("\\\\"); break;
      case '\n': out->append("\\n"); break;
      case '\r': out->append("\\r"); break;
      case '\t': out->append("\\t"); break;
      default:
        if (static_cast<unsigned char>(c) < 0x20) {
          char buf[8];
          std::snprintf(buf, sizeof(buf), "\\u%04x", static_cast<unsigned>(c));
          out->append(buf);
        } else {
          out->push_back(c);
        }
    }
  }
}

bool InitLogging(const LogConfig& config) {
  spdlog::level::level_enum level = spdlog::level::from_str(config.level);
  // from_str maps unknown names to "off"; accept "off" only when asked for.
  if (level == spdlog::level::off && config.level != "off") return false;
  // Called again (e.g. by `serve` for --log-format): replace the logger of the same name.
  spdlog::drop(kLoggerName);
  auto logger = spdlog::stderr_color_mt(kLoggerName);
  if (config.json) {
    auto formatter = std::make_unique<spdlog::pattern_formatter>();
    formatter->add_flag<JsonMessageFlag>('*').set_pattern(
        R"({"ts":"%Y-%m-%dT%H:%M:%S.%e%z","level":"%l","thread":%t,%*})");
    logger->set_formatter(std::move(formatter));
  } else {
    logger->set_pattern("[%Y-%m-%d %H:%M:%S.%e] [%^%l%$] %v");
  }
  logger->set_level(level);
  spdlog::set_default_logger(logger);
  g_json = config.json;
  return true;
}

void LogEvent(spdlog::level::level_enum level, std::string_view message, std::initializer_list<LogField> fields) {
  if (!spdlog::default_logger_raw()->should_log(level)) return;
  std::string line;
  if (g_json) {
    line.push_back(kStructuredMarker);
    line += "\"msg\":\"";
    AppendJsonEscaped(message, &line);
    line += '"';
    for (const LogField& f : fields) {
      line += ",\"";
      AppendJsonEscaped(f.key, &line);
      line += "\":";
      if (const auto* s = std::get_if<std::string_view>(&f.value)) {
        line += '"';
        AppendJsonEscaped(*s, &line);
        line += '"';
      } else if (const auto* i = std::get_if<int64_t>(&f.value)) {
        line += std::to_string(*i);
      } else {
        char buf[32];
        std::snprintf(buf, sizeof(buf), "%.6g", std::get<double>(f.value));
        line += buf;
      }
    }
  } else {
    line.assign(message);
    for (const LogField& f : fields) {
      line += ' ';
      line.append(f.key);
      line += '=';
      if (const auto* s = std::get_if<std::string_view>(&f.value)) {
        if (NeedsQuotes(*s)) {
          line += '"';
          line.append(*s);
          line += '"';
        } else {
          line.append(*s);
        }
      } else if (const auto* i = std::get_if<int64_t>(&f.value)) {
        line += std::to_string(*i);
      } else {
        char buf[32];
        std::snprintf(buf, sizeof(buf), "%.6g", std::get<double>(f.value));
        line += buf;
      }
    }
  }
  spdlog::default_logger_raw()->log(level, "{}", line);
}

}  // namespace kvserve
