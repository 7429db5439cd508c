// ResponseStore (issue 54): stored responses as deltas whose chain gives the conversation,
// quotas per API key in bytes (D4), a response deleted while it runs never stored (D9), a
// state directory that cannot write said so ("store": false, counted: D10), and records that
// come back from the state directory after a restart.
#include <gtest/gtest.h>
#include <unistd.h>

#include <atomic>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "server/http/response_store.h"

namespace kvserve {
namespace response_store_test {

namespace fs = std::filesystem;

StoredResponse Response(const std::string& tenant, const std::string& id, const std::string& previous,
                        const std::string& text, size_t pad = 0) {
  StoredResponse r;
  r.id = id;
  r.tenant = tenant;
  r.session_id = "responses:" + (previous.empty() ? id : previous);
  r.previous_id = previous;
  r.input = {{"user", "question " + id}};
  r.output = text + std::string(pad, ' ');
  r.object = "{\"id\":\"" + id + "\"}";
  return r;
}

struct ScratchDir {
  ScratchDir() : path(fs::temp_directory_path() / ("kvserve-responses-" + std::to_string(getpid()) + "-" + std::to_string(n++))) {
    fs::remove_all(path);
  }
  ~ScratchDir() { fs::remove_all(path); }
  static inline int n = 0;
  fs::path path;
};

TEST(ResponseStoreTest, AChainsDeltasGiveItsConversation) {
  ResponseStore store;
  store.Put(Response("k", "r1", "", "one"));
  store.Put(Response("k", "r2", "r1", "two"));
  store.Put(Response("k", "r3", "r2", "three"));
  const std::optional<std::vector<ChatMessage>> c = store.Conversation("k", "r3");
  ASSERT_TRUE(c.has_value());
  const std::vector<std::string> want = {"question r1", "one", "question r2", "two", "question r3", "three"};
  ASSERT_EQ(c->size(), want.size());
  for (size_t i = 0; i < want.size(); ++i) EXPECT_EQ((*c)[i].content, want[i]) << i;
  EXPECT_FALSE(store.Conversation("other key", "r3").has_value());
  // A chain of N turns holds N turns' text, not N^2.
  ResponseStore chain;
  std::string previous;
  for (int i = 0; i < 200; ++i) {
    const std::string id = "c" + std::to_string(i);
    chain.Put(Response("k", id, previous, std::string(100, 'x')));
    previous = id;
  }
  EXPECT_LT(chain.bytes(), 200 * 1000);
  EXPECT_EQ(chain.Conversation("k", previous)->size(), 400u);
}

// D4: one key's thousands of responses evicted every other key's. Now a key past its quota
// loses its own oldest.
TEST(ResponseStoreTest, AKeyPastItsQuotaLosesOnlyItsOwnOldest) {
  ResponseStore store(ResponseStoreLimits{.max_bytes = 1 << 20, .max_bytes_per_key = 64 << 10});
  store.Put(Response("quiet", "q1", "", "kept"));
  for (int i = 0; i < 4200; ++i) store.Put(Response("noisy", "n" + std::to_string(i), "", "spam", 200));
  EXPECT_TRUE(store.Get("quiet", "q1").has_value());
  EXPECT_LE(store.bytes_of("noisy"), 64 << 10);
  EXPECT_FALSE(store.Get("noisy", "n0").has_value());
  EXPECT_TRUE(store.Get("noisy", "n4199").has_value());
  EXPECT_LE(store.bytes(), 1 << 20);
}

// D9: deleted while it ran: not stored when it completes.
TEST(ResponseStoreTest, AResponseDeletedWhileItRunsIsNeverStored) {
  ResponseStore store;
  store.Begin("k", "r1", "responses:r1");
  const std::optional<std::string> session = store.Delete("k", "r1");
  ASSERT_TRUE(session.has_value());
  EXPECT_EQ(*session, "responses:r1");  // the caller ends it (and so cancels the generation)
  EXPECT_FALSE(store.WillStore("k", "r1"));
  store.Put(Response("k", "r1", "", "late"));
  EXPECT_FALSE(store.Get("k", "r1").has_value());
  EXPECT_EQ(store.not_stored(), 1);
  EXPECT_FALSE(store.Delete("k", "nothing").has_value());
}

TEST(ResponseStoreTest, StoredResponsesComeBackFromTheStateDirectoryAndDeletedOnesDoNot) {
  ScratchDir dir;
  {
    auto disk = StateDir::Open(dir.path.string(), 0);
    ASSERT_TRUE(disk.ok());
    ResponseStore store({}, disk->get());
    store.Put(Response("k", "r1", "", "one"));
    store.Put(Response("k", "r2", "r1", "two"));
    store.Put(Response("k", "gone", "r1", "secret"));
    EXPECT_EQ(store.Delete("k", "gone"), "responses:r1");
  }  // the state directory drains its writes as it closes
  auto disk = StateDir::Open(dir.path.string(), 0);
  ASSERT_TRUE(disk.ok());
  ResponseStore restarted({}, disk->get());
  const std::optional<std::vector<ChatMessage>> c = restarted.Conversation("k", "r2");
  ASSERT_TRUE(c.has_value());
  EXPECT_EQ(c->back().content, "two");
  EXPECT_FALSE(restarted.Get("k", "gone").has_value());
  EXPECT_FALSE(restarted.Get("other", "r2").has_value());
}

// D10: a state directory that cannot write: the response says "store": false (WillStore) and
// the store counts it, instead of a 200 that a restart loses.
TEST(ResponseStoreTest, AStateDirectoryThatCannotWriteIsSaidAndCounted) {
  ScratchDir dir;
  auto disk = StateDir::Open(dir.path.string(), 0);
  ASSERT_TRUE(disk.ok());
  fs::remove_all(dir.path / "responses");
  std::ofstream(dir.path / "responses") << "a file where the records' directory goes";
  std::atomic<int64_t> exported{0};  // kvserve_responses_not_stored_total
  ResponseStore store({.not_stored_total = &exported}, disk->get());
  store.Begin("k", "r1", "responses:r1");
  ASSERT_TRUE(store.WillStore("k", "r1"));  // nothing has failed yet
  store.Put(Response("k", "r1", "", "one"));
  (*disk)->Flush();
  EXPECT_FALSE((*disk)->writing());
  EXPECT_GE((*disk)->write_failures(), 1);
  store.Begin("k", "r2", "responses:r2");
  EXPECT_FALSE(store.WillStore("k", "r2"));
  EXPECT_EQ(store.not_stored(), 1);
  EXPECT_EQ(exported.load(), 1);
}

}  // namespace response_store_test
}  // namespace kvserve
