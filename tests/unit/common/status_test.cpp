// Abbreviated: the excerpt of client input that error messages quote.
#include <gtest/gtest.h>

#include <string>

#include "common/status.h"

namespace kvserve {
namespace status_test {

TEST(Abbreviated, CutsLongTextAtACharacterBoundary) {
  EXPECT_EQ(Abbreviated("short", 80), "short");
  EXPECT_EQ(Abbreviated(std::string(100, 'a'), 10), std::string(10, 'a') + "...");
  // "é" is two bytes: a cut at byte 4 of "aaaé..." would split it, so the cut moves before it.
  const std::string text = "aaa\xC3\xA9" + std::string(20, 'b');
  EXPECT_EQ(Abbreviated(text, 4), "aaa...");
  EXPECT_EQ(Abbreviated(text, 5), "aaa\xC3\xA9...");
  // A 4-byte character (an emoji) at the cut.
  EXPECT_EQ(Abbreviated("\xF0\x9F\x98\x80\xF0\x9F\x98\x80", 6), "\xF0\x9F\x98\x80...");
}

}  // namespace status_test
}  // namespace kvserve
