// ParseForwardFaultSpec: the hidden `serve --inject-forward-faults` test hook.
#include <gtest/gtest.h>

#include "cli/engine_options.h"

namespace kvserve {
namespace fault_spec_test {

TEST(ForwardFaultSpecTest, SinglePassesRangesAndOpenEnds) {
  auto f = ParseForwardFaultSpec("3,7-9,20-");
  ASSERT_TRUE(f.ok()) << f.status().ToString();
  std::vector<int64_t> failing;
  for (int64_t pass = 0; pass < 25; ++pass) {
    if ((*f)(pass)) failing.push_back(pass);
  }
  EXPECT_EQ(failing, (std::vector<int64_t>{3, 7, 8, 9, 20, 21, 22, 23, 24}));
  EXPECT_TRUE((*f)(INT64_MAX));
}

TEST(ForwardFaultSpecTest, MalformedSpecsAreRejected) {
  for (const char* bad : {"x", "1,,2", "-3", "5-2", "1-2-3", "1.5", " 1", "1,"}) {
    auto f = ParseForwardFaultSpec(bad);
    EXPECT_EQ(f.status().code(), StatusCode::kInvalidArgument) << bad;
  }
}

}  // namespace fault_spec_test
}  // namespace kvserve
