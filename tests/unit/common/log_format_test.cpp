// common/log: JSON lines (escaped messages, structured fields) and text key=value events.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "common/log.h"

namespace kvserve {
namespace log_format_test {

std::vector<nlohmann::json> JsonLines(const std::string& text) {
  std::vector<nlohmann::json> out;
  size_t pos = 0;
  while (pos < text.size()) {
    const size_t nl = text.find('\n', pos);
    out.push_back(nlohmann::json::parse(text.substr(pos, nl - pos)));
    pos = nl + 1;
  }
  return out;
}

TEST(LogFormatTest, JsonLines) {
  ASSERT_TRUE(InitLogging({"info", true}));
  ::testing::internal::CaptureStderr();
  LOG_INFO("a \"quoted\" message\nwith a newline and \x01 and bad utf8 \xff");
  LogEvent(spdlog::level::info, "request",
           {{"id", "cmpl-1"}, {"status", 200}, {"ttft_ms", 1.5}, {"route", "/v1/\"x\""}});
  LogEvent(spdlog::level::debug, "hidden", {{"k", 1}});  // below the level
  const std::string text = ::testing::internal::GetCapturedStderr();
  ASSERT_TRUE(InitLogging({"warn", false}));
  std::vector<nlohmann::json> lines = JsonLines(text);
  ASSERT_EQ(lines.size(), 2u) << text;
  EXPECT_EQ(lines[0]["level"], "info");
  EXPECT_EQ(lines[0]["msg"], "a \"quoted\" message\nwith a newline and \x01 and bad utf8 \xEF\xBF\xBD");
  EXPECT_TRUE(lines[0].contains("ts"));
  EXPECT_EQ(lines[1]["msg"], "request");
  EXPECT_EQ(lines[1]["id"], "cmpl-1");
  EXPECT_EQ(lines[1]["status"], 200);
  EXPECT_EQ(lines[1]["ttft_ms"], 1.5);
  EXPECT_EQ(lines[1]["route"], "/v1/\"x\"");
}

TEST(LogFormatTest, TextKeyValues) {
  ASSERT_TRUE(InitLogging({"info", false}));
  ::testing::internal::CaptureStderr();
  LogEvent(spdlog::level::info, "request", {{"id", "cmpl-1"}, {"status", 404}, {"method", "grpc Generate"}});
  const std::string text = ::testing::internal::GetCapturedStderr();
  ASSERT_TRUE(InitLogging({"warn", false}));
  EXPECT_NE(text.find("[info] request id=cmpl-1 status=404 method=\"grpc Generate\"\n"), std::string::npos) << text;
}

TEST(LogFormatTest, UnknownLevelKeepsTheLogger) {
  EXPECT_FALSE(InitLogging({"loud", false}));
}

}  // namespace log_format_test
}  // namespace kvserve
