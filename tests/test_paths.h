// Paths of reference material for tests. KVSERVE_SHARED_DIR is set by CMake (default
// ../shared next to the checkout). Tests that need a file missing there skip with a message,
// except on the GPU machine: with KVSERVE_GPU_REQUIRED=1 in the environment (tests/gpu/run.sh
// sets it when a GPU is present) every such skip is a failure, so a broken setup cannot
// report green.
#pragma once

#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <string>

namespace kvserve::testing {

inline bool GpuRunRequiresEverything() {
  const char* v = std::getenv("KVSERVE_GPU_REQUIRED");
  return v != nullptr && std::strcmp(v, "1") == 0;
}

inline std::string SharedPath(const std::string& relative) {
  return std::string(KVSERVE_SHARED_DIR) + "/" + relative;
}

inline bool SharedFileExists(const std::string& relative) {
  return std::filesystem::exists(SharedPath(relative));
}

}  // namespace kvserve::testing

// Skips the current test when a reference file is absent (e.g. a checkout without ../shared);
// fails it instead under KVSERVE_GPU_REQUIRED=1.
#define REQUIRE_SHARED_FILE(relative)                                                            \
  do {                                                                                           \
    if (!::kvserve::testing::SharedFileExists(relative)) {                                       \
      if (::kvserve::testing::GpuRunRequiresEverything()) {                                      \
        FAIL() << "reference file missing (KVSERVE_GPU_REQUIRED=1): "                            \
               << ::kvserve::testing::SharedPath(relative);                                      \
      }                                                                                          \
      GTEST_SKIP() << "reference file missing: " << ::kvserve::testing::SharedPath(relative);    \
    }                                                                                            \
  } while (0)
