// StateDir against what an operator's disk can hold (issue 54): files and directories private
// to the server's user (D12), nothing touched that kvserve did not write (D8), and a record
// path holding a FIFO, a directory or a huge sparse file neither blocks nor allocates it (D6).
// The record format itself: session_restart_test.cpp.
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <chrono>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "engine/state_dir.h"

namespace kvserve {
namespace state_dir_test {

namespace fs = std::filesystem;

struct ScratchDir {
  ScratchDir() : path(fs::temp_directory_path() / ("kvserve-statedir-" + std::to_string(getpid()) + "-" + std::to_string(n++))) {
    fs::remove_all(path);
  }
  ~ScratchDir() { fs::remove_all(path); }
  static inline int n = 0;
  fs::path path;
};

const std::string kId = Sha256("identity");

std::vector<fs::path> RecordFiles(const fs::path& dir) {
  std::vector<fs::path> out;
  for (const auto& e : fs::recursive_directory_iterator(dir)) {
    if (e.path().extension() == ".rec") out.push_back(e.path());
  }
  return out;
}

unsigned Mode(const fs::path& p) {
  struct stat st;
  EXPECT_EQ(::lstat(p.c_str(), &st), 0) << p;
  return st.st_mode & 0777;
}

TEST(StateDirFilesTest, RecordsAreTheServersUsersAlone) {
  ScratchDir dir;
  auto state = StateDir::Open(dir.path.string(), 0);
  ASSERT_TRUE(state.ok()) << state.status().ToString();
  ASSERT_TRUE((*state)->Write("sessions", "t\nchat", kId, "a conversation").ok());
  (*state)->Flush();
  const std::vector<fs::path> files = RecordFiles(dir.path);
  ASSERT_EQ(files.size(), 1u);
  EXPECT_EQ(Mode(dir.path), 0700u);
  EXPECT_EQ(Mode(files[0].parent_path()), 0700u);
  EXPECT_EQ(Mode(files[0]), 0600u);
}

TEST(StateDirFilesTest, AForeignDirectoryIsRefusedAndForeignFilesAreNeverTouched) {
  ScratchDir dir;
  fs::create_directories(dir.path);
  std::ofstream(dir.path / "notes.txt") << "the operator's";
  auto refused = StateDir::Open(dir.path.string(), 0);
  ASSERT_FALSE(refused.ok());
  EXPECT_EQ(refused.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(refused.status().message().find("notes.txt"), std::string::npos) << refused.status().message();
  fs::remove(dir.path / "notes.txt");

  // Once kvserve's, files it did not write stay, whatever the bound says.
  auto state = StateDir::Open(dir.path.string(), 3000);
  ASSERT_TRUE(state.ok()) << state.status().ToString();
  state->reset();
  fs::create_directories(dir.path / "sessions" / "backup");
  std::ofstream(dir.path / "sessions" / "keep.rec") << std::string(5000, 'k');
  std::ofstream(dir.path / "sessions" / "backup" / "old.rec") << std::string(5000, 'k');
  state = StateDir::Open(dir.path.string(), 3000);
  ASSERT_TRUE(state.ok()) << state.status().ToString();
  for (const char* key : {"a", "b", "c", "d", "e"}) ASSERT_TRUE((*state)->Write("sessions", key, kId, std::string(1000, 'p')).ok());
  (*state)->Flush();
  EXPECT_LE((*state)->used_bytes(), 3000);
  EXPECT_TRUE(fs::exists(dir.path / "sessions" / "keep.rec"));
  EXPECT_TRUE(fs::exists(dir.path / "sessions" / "backup" / "old.rec"));
  EXPECT_TRUE((*state)->Read("sessions", "e", kId).has_value());
  EXPECT_FALSE((*state)->Read("sessions", "a", kId).has_value());
}

TEST(StateDirFilesTest, ARecordPathThatIsNotARegularFileIsIgnored) {
  ScratchDir dir;
  auto state = StateDir::Open(dir.path.string(), 1 << 20);
  ASSERT_TRUE(state.ok()) << state.status().ToString();
  for (const char* what : {"fifo", "directory", "sparse", "symlink"}) {
    ASSERT_TRUE((*state)->Write("sessions", what, kId, "payload").ok());
    (*state)->Flush();
    const std::vector<fs::path> files = RecordFiles(dir.path);
    ASSERT_EQ(files.size(), 1u);
    const fs::path p = files[0];
    fs::remove(p);
    if (std::string(what) == "fifo") {
      ASSERT_EQ(::mkfifo(p.c_str(), 0600), 0);  // opened blocking, a read would wait forever
    } else if (std::string(what) == "directory") {
      fs::create_directory(p);
    } else if (std::string(what) == "sparse") {
      std::ofstream(p).close();
      fs::resize_file(p, uintmax_t{1} << 34);  // 16 GiB of holes: read whole, a bad_alloc
    } else {
      std::ofstream(dir.path / "elsewhere") << "x";
      fs::create_symlink(dir.path / "elsewhere", p);
    }
    EXPECT_EQ((*state)->Read("sessions", what, kId), std::nullopt) << what;
    fs::remove_all(p);
  }
}

// The engine thread must not wait for the disk (issue 54, item 1): Prefetch has the writer
// thread read a record into memory, and Read then answers without the disk. The proof: the
// file is gone by the time Read runs, and Read still has the payload.
TEST(StateDirFilesTest, APrefetchedRecordIsReadFromMemory) {
  ScratchDir dir;
  {
    auto state = StateDir::Open(dir.path.string(), 0);
    ASSERT_TRUE(state.ok());
    ASSERT_TRUE((*state)->Write("sessions", "t\nchat", kId, std::string(1 << 20, 'k')).ok());
  }  // landed on disk
  auto state = StateDir::Open(dir.path.string(), 0);
  ASSERT_TRUE(state.ok());
  StateDir& d = **state;
  EXPECT_TRUE(d.Prefetch("sessions", "t\nnone", kId));  // no record: nothing to read
  EXPECT_FALSE(d.Read("sessions", "t\nnone", kId));
  bool ready = d.Prefetch("sessions", "t\nchat", kId);
  EXPECT_FALSE(ready);  // on disk only: the writer thread reads it
  for (int i = 0; i < 1000 && !ready; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
    ready = d.Prefetch("sessions", "t\nchat", kId);
  }
  ASSERT_TRUE(ready);
  for (const fs::path& f : RecordFiles(dir.path)) fs::remove(f);
  const std::optional<std::string> payload = d.Read("sessions", "t\nchat", kId);
  ASSERT_TRUE(payload.has_value());
  EXPECT_EQ(*payload, std::string(1 << 20, 'k'));
  // Taken: a read ahead is used once, then the index (the file is gone) answers.
  EXPECT_FALSE(d.Read("sessions", "t\nchat", kId).has_value());
  // A write after a read ahead is newer: Read answers with the write.
  ASSERT_TRUE(d.Write("sessions", "t\nnew", kId, "first").ok());
  d.Flush();
  auto reopened = StateDir::Open(dir.path.string(), 0);
  ASSERT_TRUE(reopened.ok());
  while (!(*reopened)->Prefetch("sessions", "t\nnew", kId)) std::this_thread::sleep_for(std::chrono::milliseconds(5));
  ASSERT_TRUE((*reopened)->Write("sessions", "t\nnew", kId, "second").ok());
  EXPECT_EQ((*reopened)->Read("sessions", "t\nnew", kId).value_or(""), "second");
}

}  // namespace state_dir_test
}  // namespace kvserve
