#include "common/log.h"

#include <spdlog/sinks/stdout_color_sinks.h>

namespace kvserve {

bool InitLogging(const LogConfig& config) {
  spdlog::level::level_enum level = spdlog::level::from_str(config.level);
  // from_str maps unknown names to "off"; accept "off" only when asked for.
  if (level == spdlog::level::off && config.level != "off") return false;
  auto logger = spdlog::stderr_color_mt("kvserve");
  if (config.json) {
    // Message text is escaped by the caller where it may contain quotes (request logs build
    // their JSON fields themselves); the envelope here is fixed.
    logger->set_pattern(
        R"({"ts":"%Y-%m-%dT%H:%M:%S.%e%z","level":"%l","thread":%t,"msg":"%v"})");
  } else {
    logger->set_pattern("[%Y-%m-%d %H:%M:%S.%e] [%^%l%$] %v");
  }
  logger->set_level(level);
  spdlog::set_default_logger(logger);
  return true;
}

}  // namespace kvserve
