// Chat sessions across a restart (--state-dir): StateDir's records (checksum, identity, key,
// bound), and conversations driven as OpenAI clients drive them (the whole history re-sent,
// rendered with a real chat template over a real vocabulary) on one engine that is stopped
// and a new one on the same state directory. References: the same conversation on an engine
// that never restarted gives the same greedy text; the turn after the restart reuses what
// the stopped engine had computed (>= 95 %, issue 36); a record that is corrupt, for another
// model or KV layout, or another tenant's is ignored and the turn gives the text of a cold
// start (a fresh engine without a state directory).
#include <gtest/gtest.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

#include "engine/state_dir.h"
#include "engine/tokenizer/chat_template.h"
#include "tests/chat_template_texts.h"
#include "tests/unit/engine/engine_test_util.h"
#include "tests/unit/engine/vocab_model_util.h"

namespace kvserve {
namespace session_restart_test {

namespace fs = std::filesystem;

class TempDir {
 public:
  TempDir() : path_(fs::temp_directory_path() / ("kvserve-state-" + std::to_string(getpid()) + "-" +
                                                  std::to_string(counter_++))) {
    fs::remove_all(path_);
  }
  ~TempDir() { fs::remove_all(path_); }
  std::string str() const { return path_.string(); }

 private:
  static inline int counter_ = 0;
  fs::path path_;
};

std::vector<fs::path> Records(const std::string& dir) {
  std::vector<fs::path> out;
  for (const auto& e : fs::recursive_directory_iterator(dir)) {
    if (e.path().extension() == ".rec") out.push_back(e.path());
  }
  return out;
}

// ---- StateDir ----------------------------------------------------------------------------------

const std::string kIdentity = Sha256("model A");

TEST(StateDirTest, ARecordReadsBackOnlyUnderItsKeyAndIdentity) {
  TempDir dir;
  auto state = StateDir::Open(dir.str(), 0);
  ASSERT_TRUE(state.ok());
  ASSERT_TRUE((*state)->Write("sessions", "tenant-a\nchat", kIdentity, "payload bytes").ok());
  EXPECT_EQ((*state)->Read("sessions", "tenant-a\nchat", kIdentity), "payload bytes");
  EXPECT_EQ((*state)->Read("sessions", "tenant-b\nchat", kIdentity), std::nullopt);  // another tenant
  EXPECT_EQ((*state)->Read("responses", "tenant-a\nchat", kIdentity), std::nullopt);  // another kind
  // Another model or KV layout: a file on disk (the write has landed) ignored and removed.
  (*state)->Flush();
  EXPECT_EQ((*state)->Read("sessions", "tenant-a\nchat", Sha256("model B")), std::nullopt);
  EXPECT_TRUE(Records(dir.str()).empty());
}

TEST(StateDirTest, ACorruptOrTruncatedRecordIsIgnoredAndRemoved) {
  TempDir dir;
  auto state = StateDir::Open(dir.str(), 0);
  ASSERT_TRUE(state.ok());
  const std::string payload(4096, 'x');
  for (const bool truncate : {false, true}) {
    ASSERT_TRUE((*state)->Write("sessions", "k", kIdentity, payload).ok());
    (*state)->Flush();
    const std::vector<fs::path> files = Records(dir.str());
    ASSERT_EQ(files.size(), 1u);
    if (truncate) {
      fs::resize_file(files[0], fs::file_size(files[0]) - 100);
    } else {
      std::fstream f(files[0], std::ios::in | std::ios::out | std::ios::binary);
      f.seekp(2000);
      f.put('y');
    }
    EXPECT_EQ((*state)->Read("sessions", "k", kIdentity), std::nullopt) << (truncate ? "truncated" : "corrupt");
    EXPECT_TRUE(Records(dir.str()).empty());
  }
}

TEST(StateDirTest, DiskUseStaysUnderTheBoundLeastRecentlyUsedFirst) {
  TempDir dir;
  auto state = StateDir::Open(dir.str(), 3 * 1200);
  ASSERT_TRUE(state.ok());
  const std::string payload(1000, 'p');
  for (const char* key : {"a", "b", "c"}) {
    ASSERT_TRUE((*state)->Write("sessions", key, kIdentity, payload).ok());
    std::this_thread::sleep_for(std::chrono::milliseconds(20));  // distinct mtimes
  }
  (*state)->Flush();
  ASSERT_TRUE((*state)->Read("sessions", "a", kIdentity).has_value());  // "a" is now the most recent
  std::this_thread::sleep_for(std::chrono::milliseconds(20));
  ASSERT_TRUE((*state)->Write("sessions", "d", kIdentity, payload).ok());
  (*state)->Flush();
  EXPECT_LE((*state)->used_bytes(), 3 * 1200);
  EXPECT_TRUE((*state)->Read("sessions", "a", kIdentity).has_value());
  EXPECT_FALSE((*state)->Read("sessions", "b", kIdentity).has_value());  // the least recently used
  EXPECT_TRUE((*state)->Read("sessions", "d", kIdentity).has_value());
  // A record larger than the bound is not kept.
  EXPECT_FALSE((*state)->Write("sessions", "big", kIdentity, std::string(8000, 'b')).ok());
}

// ---- Conversations across a restart ----------------------------------------------------------

const testing::VocabModelSpec kChatml = {"gpt-2", testing::kOpenHermesChatml, {"<|im_start|>", "<|im_end|>"}, "",
                                         "<|im_end|>"};

std::shared_ptr<const Model> ChatModel() {
  static std::shared_ptr<const Model> model = testing::LoadVocabModel(kChatml);
  return model;
}

std::string UserText(int turn) {
  static const char* kLines[] = {"Hello! Tell me a story about a dragon.", "What happened next?",
                                 "Why did the dragon do that?", "Tell me about the village.",
                                 "Who lived there?", "Give it a happy ending."};
  return kLines[turn % 6];
}

// A conversation as a client keeps it: the messages, and the last turn's usage.
struct Conversation {
  std::vector<ChatMessage> messages = {{"user", UserText(0)}};
  int turns = 0;
  RequestUsage last;
  std::string last_text;
};

// One turn (greedy, 24 tokens): what the client sends, rendered and tokenized as the server does.
RequestUsage Turn(Engine& engine, const Model& model, Conversation* c, const std::string& tenant = "key") {
  const Tokenizer& tok = model.tokenizer();
  const ChatTemplate tmpl = ChatTemplate::Detect(tok.vocab().chat_template, tok);
  StatusOr<RenderedChat> rendered = tmpl.RenderChat(c->messages, /*add_generation_prompt=*/true);
  EXPECT_TRUE(rendered.ok());
  GenerationRequest r;
  r.prompt_tokens = tmpl.Encode(*rendered, tok);
  r.session_id = "chat";
  r.tenant = tenant;
  r.sampling.temperature = 0;
  r.sampling.max_tokens = 24;
  const testing::RunResult res = testing::RunRequest(engine, r);
  EXPECT_TRUE(res.status.ok()) << res.status.ToString();
  c->last = res.usage;
  c->last_text = res.choices.empty() ? "" : res.choices[0].text;
  c->messages.push_back({"assistant", c->last_text});
  c->messages.push_back({"user", UserText(++c->turns)});
  return res.usage;
}

EngineConfig Config(const std::string& state_dir, bool window) {
  EngineConfig config = testing::TestConfig(512);
  if (window) config.chat_window_tokens = 96;  // the history outgrows it by the third turn
  if (!state_dir.empty()) {
    auto state = StateDir::Open(state_dir, 0);
    EXPECT_TRUE(state.ok());
    config.state = std::move(state).value();
  }
  return config;
}

// Three turns on an engine that is then stopped, the fourth on a new engine over the same
// directory; the same four turns on one engine without a state directory are the reference.
class SessionRestartTest : public ::testing::TestWithParam<bool> {
 protected:
  void SetUp() override {
    REQUIRE_SHARED_FILE(testing::VocabFile(kChatml.vocab));
    model_ = ChatModel();
    ASSERT_NE(model_, nullptr);
    auto reference = testing::MakeEngine(model_, Config("", GetParam()));
    for (int i = 0; i < 4; ++i) Turn(*reference, *model_, &reference_);
    if (GetParam()) {
      ASSERT_GT(reference->GetStats().cache.evicted_blocks[static_cast<int>(EvictionReason::kWindow)], 0)
          << "the window never evicted";
    }
  }
  // The first three turns, then the engine stops (and writes its sessions).
  Conversation FirstThree(const std::string& dir) {
    Conversation c;
    auto engine = testing::MakeEngine(model_, Config(dir, GetParam()));
    for (int i = 0; i < 3; ++i) Turn(*engine, *model_, &c);
    engine->Stop();
    return c;
  }

  // The fourth turn of `c` on a fresh engine of `config` without a state directory: a
  // conversation that re-prefills (prefill and decode round differently, so on random
  // weights only the same computation gives the same text).
  std::string ColdTurn(Conversation c, EngineConfig config) {
    config.state = nullptr;
    auto engine = testing::MakeEngine(model_, config);
    Turn(*engine, *model_, &c);
    return c.last_text;
  }

  std::shared_ptr<const Model> model_;
  Conversation reference_;
};

TEST_P(SessionRestartTest, AConversationContinuesAfterARestartWithItsCache) {
  TempDir dir;
  Conversation c = FirstThree(dir.str());
  EXPECT_EQ(Records(dir.str()).size(), 1u);
  const int before = c.last.prompt_tokens + c.last.completion_tokens;
  const EngineConfig config = Config(dir.str(), GetParam());
  auto engine = testing::MakeEngine(model_, config);
  const RequestUsage u = Turn(*engine, *model_, &c);
  EXPECT_GE(u.cached_prompt_tokens, before * 95 / 100)
      << "reused " << u.cached_prompt_tokens << " of the " << before << " tokens computed before the restart";
  EXPECT_EQ(c.last_text, reference_.last_text) << "the restored cache gave another reply";
  std::printf("%s: after the restart, %d of the %d tokens computed before reused\n",
              GetParam() ? "window" : "no window", u.cached_prompt_tokens, before);
  config.state->Flush();  // files are removed on the state directory's writer thread
  EXPECT_TRUE(Records(dir.str()).empty()) << "a record read back stays on disk";
}

TEST_P(SessionRestartTest, ACorruptRecordIsIgnoredAndTheTurnGivesTheTextOfAColdStart) {
  TempDir dir;
  Conversation c = FirstThree(dir.str());
  const std::vector<fs::path> files = Records(dir.str());
  ASSERT_EQ(files.size(), 1u);
  {
    std::fstream f(files[0], std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(static_cast<std::streamoff>(fs::file_size(files[0]) / 2));
    f.put('\x5a');
  }
  const std::string cold = ColdTurn(c, Config("", GetParam()));
  auto engine = testing::MakeEngine(model_, Config(dir.str(), GetParam()));
  const RequestUsage u = Turn(*engine, *model_, &c);
  EXPECT_EQ(u.cached_prompt_tokens, 0);
  EXPECT_EQ(c.last_text, cold);
}

TEST_P(SessionRestartTest, AnotherTenantsSessionOfTheSameIdStartsEmpty) {
  TempDir dir;
  Conversation c = FirstThree(dir.str());
  auto engine = testing::MakeEngine(model_, Config(dir.str(), GetParam()));
  Conversation other = c;
  const RequestUsage u = Turn(*engine, *model_, &other, "another key");
  EXPECT_EQ(u.cached_prompt_tokens, 0);
  EXPECT_EQ(Records(dir.str()).size(), 1u) << "the owner's record must stay";
}

TEST_P(SessionRestartTest, ARecordOfAnotherKvLayoutIsIgnored) {
  TempDir dir;
  Conversation c = FirstThree(dir.str());
  EngineConfig config = Config(dir.str(), GetParam());
  config.kv.dtype = KvDtype::kF16;  // the record holds F32 blocks (TestConfig)
  const std::string cold = ColdTurn(c, config);
  auto engine = testing::MakeEngine(model_, config);
  const RequestUsage u = Turn(*engine, *model_, &c);
  EXPECT_EQ(u.cached_prompt_tokens, 0);
  EXPECT_EQ(c.last_text, cold);
  config.state->Flush();
  EXPECT_EQ(Records(dir.str()).size(), 0u) << "the record of the other layout must be removed";
}

INSTANTIATE_TEST_SUITE_P(Window, SessionRestartTest, ::testing::Bool(),
                         [](const auto& info) { return info.param ? "window" : "no_window"; });

// A session that leaves memory (here: the session limit) goes to disk and its next turn reads
// it back, without a restart.
TEST(SessionDiskTest, ASessionDroppedForTheLimitComesBackFromDisk) {
  REQUIRE_SHARED_FILE(testing::VocabFile(kChatml.vocab));
  std::shared_ptr<const Model> model = ChatModel();
  ASSERT_NE(model, nullptr);
  TempDir dir;
  EngineConfig config = Config(dir.str(), false);
  config.max_sessions = 1;
  auto engine = testing::MakeEngine(model, config);
  Conversation a;
  Turn(*engine, *model, &a, "key a");
  Turn(*engine, *model, &a, "key a");
  Conversation b;
  Turn(*engine, *model, &b, "key b");  // a's session leaves memory
  config.state->Flush();  // the record is written on the state directory's writer thread
  EXPECT_EQ(Records(dir.str()).size(), 1u);
  const int before = a.last.prompt_tokens + a.last.completion_tokens;
  const RequestUsage u = Turn(*engine, *model, &a, "key a");
  EXPECT_GE(u.cached_prompt_tokens, before * 95 / 100);
}

// Ending a session that is only on disk (after a restart) removes its record; another
// tenant's call finds nothing.
TEST(SessionDiskTest, EndingASessionAfterARestartRemovesItsRecord) {
  REQUIRE_SHARED_FILE(testing::VocabFile(kChatml.vocab));
  std::shared_ptr<const Model> model = ChatModel();
  ASSERT_NE(model, nullptr);
  TempDir dir;
  {
    auto engine = testing::MakeEngine(model, Config(dir.str(), false));
    Conversation c;
    Turn(*engine, *model, &c);
    engine->Stop();
  }
  ASSERT_EQ(Records(dir.str()).size(), 1u);
  auto engine = testing::MakeEngine(model, Config(dir.str(), false));
  EXPECT_EQ(engine->EndSession("another key", "chat", 10).code(), StatusCode::kNotFound);
  EXPECT_EQ(Records(dir.str()).size(), 1u);
  EXPECT_TRUE(engine->EndSession("key", "chat", 10).ok());
  // The file goes on the state directory's writer thread, at once but not on this one.
  EXPECT_TRUE(testing::WaitFor([&] { return Records(dir.str()).empty(); }));
  EXPECT_EQ(engine->EndSession("key", "chat", 10).code(), StatusCode::kNotFound);
}

// An idle session the TTL moved to the host tier is written from there at shutdown.
TEST(SessionDiskTest, ASessionInTheHostTierIsSavedFromThere) {
  REQUIRE_SHARED_FILE(testing::VocabFile(kChatml.vocab));
  std::shared_ptr<const Model> model = ChatModel();
  ASSERT_NE(model, nullptr);
  TempDir dir;
  EngineConfig config = Config(dir.str(), false);
  config.num_host_blocks = 64;
  // Expiry passes run about every second: one falls in [ttl, 2 ttl), where it offloads.
  config.session_ttl_seconds = 1.5;
  Conversation c;
  {
    auto engine = testing::MakeEngine(model, config);
    Turn(*engine, *model, &c);
    Turn(*engine, *model, &c);
    ASSERT_TRUE(testing::WaitFor([&] { return engine->GetStats().cache.host_used_blocks > 0; }, 8))
        << "the session never went to the host tier";
    engine->Stop();
  }
  EXPECT_EQ(Records(dir.str()).size(), 1u);
  config.session_ttl_seconds = 600;
  auto engine = testing::MakeEngine(model, config);
  const int before = c.last.prompt_tokens + c.last.completion_tokens;
  const RequestUsage u = Turn(*engine, *model, &c);
  EXPECT_GE(u.cached_prompt_tokens, before * 95 / 100);
}

}  // namespace session_restart_test
}  // namespace kvserve
