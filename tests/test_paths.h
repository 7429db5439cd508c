// Paths of reference material for tests. KVSERVE_SHARED_DIR is set by CMake (default
// ../shared next to the checkout). Tests that need a file missing there skip with a message.
#pragma once

#include <filesystem>
#include <string>

namespace kvserve::testing {

inline std::string SharedPath(const std::string& relative) {
  return std::string(KVSERVE_SHARED_DIR) + "/" + relative;
}

inline bool SharedFileExists(const std::string& relative) {
  return std::filesystem::exists(SharedPath(relative));
}

}  // namespace kvserve::testing

// Skips the current test when a reference file is absent (e.g. a checkout without ../shared).
#define REQUIRE_SHARED_FILE(relative)                                                 \
  do {                                                                                \
    if (!::kvserve::testing::SharedFileExists(relative)) {                            \
      GTEST_SKIP() << "reference file missing: " << ::kvserve::testing::SharedPath(relative); \
    }                                                                                 \
  } while (0)
