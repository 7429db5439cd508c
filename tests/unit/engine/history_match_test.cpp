// MatchHistory on real vocabularies (../shared/tokenizer: SentencePiece and byte-level BPE):
// a chat history whose replies were generated token by token, against the prompt a client
// builds from the reply's text. Each case checks the reuse point against what the texts say:
// the history's tokens before `keep` spell the prompt's text before `resume` (up to the
// whitespace a template trims or adds around a reply), and the rest of the prompt is the new
// text.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "engine/history_match.h"
#include "tests/shared_tokenizer.h"

namespace kvserve {
namespace history_match_test {

std::string NoSpace(std::string s) {
  std::erase_if(s, [](char c) { return c == ' ' || c == '\n'; });
  return s;
}

class HistoryMatchTest : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override {
    const std::string file = "tokenizer/ggml-vocab-" + GetParam() + ".gguf";
    REQUIRE_SHARED_FILE(file);
    tok_ = testing::LoadSharedTokenizer(GetParam());
    ASSERT_NE(tok_, nullptr);
  }
  std::vector<int32_t> Encode(const std::string& text) const { return tok_->Encode(text, false); }
  // One token per byte where the vocabulary has it: a reply generated piece by piece, as no
  // tokenizer would split it.
  std::vector<int32_t> ByPieces(const std::string& text) const {
    std::vector<int32_t> out;
    for (char c : text) {
      int32_t id = -1;
      for (int32_t t = 0; t < tok_->vocab_size() && id < 0; ++t) {
        if (tok_->TokenToPiece(t) == std::string(1, c)) id = t;
      }
      EXPECT_GE(id, 0) << "no token for '" << c << "'";
      out.push_back(id);
    }
    return out;
  }
  std::string Text(std::span<const int32_t> ids) const { return tok_->Decode(ids, false); }

  // history = Encode(before) + generated; returns the match against Encode(prompt).
  HistoryReuse Match(const std::string& before, const std::vector<int32_t>& generated, const std::string& prompt,
                     std::vector<int32_t>* history, std::vector<int32_t>* prompt_ids) const {
    *history = Encode(before);
    const int begin = static_cast<int>(history->size());
    history->insert(history->end(), generated.begin(), generated.end());
    const TokenRange range{begin, static_cast<int>(history->size())};
    *prompt_ids = Encode(prompt);
    return MatchHistory(*history, std::span(&range, 1), *prompt_ids, *tok_);
  }

  std::unique_ptr<Tokenizer> tok_;
};

TEST_P(HistoryMatchTest, AnExactContinuationKeepsEverything) {
  const std::vector<int32_t> history = Encode("User: hi\nAssistant: Hello there, friend.");
  std::vector<int32_t> prompt = history;
  const std::vector<int32_t> more = Encode("\nUser: and now?");
  prompt.insert(prompt.end(), more.begin(), more.end());
  const HistoryReuse m = MatchHistory(history, {}, prompt, *tok_);
  EXPECT_EQ(m.keep, static_cast<int>(history.size()));
  EXPECT_EQ(m.resume, static_cast<int>(history.size()));
}

TEST_P(HistoryMatchTest, AReplyTokenizedOtherwiseIsKeptAsGenerated) {
  std::vector<int32_t> history, prompt;
  const HistoryReuse m = Match("User: hi\nAssistant:", ByPieces(" Hello world"),
                               "User: hi\nAssistant: Hello world\nUser: next", &history, &prompt);
  EXPECT_EQ(m.keep, static_cast<int>(history.size()));
  EXPECT_EQ(Text(std::span(prompt).subspan(static_cast<size_t>(m.resume))), "\nUser: next");
}

TEST_P(HistoryMatchTest, ALeadingSpaceTheTemplateTrimmedIsKept) {
  // Llama 3 renders `content | trim`: the model generated " Hello world", the client sends
  // "Hello world" back.
  std::vector<int32_t> history, prompt;
  const HistoryReuse m = Match("<header>assistant\n\n", Encode(" Hello world"),
                               "<header>assistant\n\nHello world.<end>", &history, &prompt);
  EXPECT_EQ(m.keep, static_cast<int>(history.size()));
  EXPECT_EQ(NoSpace(Text(std::span(prompt).subspan(static_cast<size_t>(m.resume)))), ".<end>");
}

TEST_P(HistoryMatchTest, ASpaceTheTemplateAddedIsSkipped) {
  // Llama 2 renders ' ' + content.strip(): a reply generated without a leading space.
  std::vector<int32_t> history, prompt;
  const HistoryReuse m = Match("[INST] hi [/INST]", ByPieces("Sure."), "[INST] hi [/INST] Sure. </s>", &history,
                               &prompt);
  EXPECT_EQ(m.keep, static_cast<int>(history.size()));
  EXPECT_EQ(NoSpace(Text(std::span(prompt).subspan(static_cast<size_t>(m.resume)))), "</s>");
}

TEST_P(HistoryMatchTest, AStopStringCutFromTheReplyEndsTheMatchBeforeIt) {
  // Generated "Fine, thanks.\nUser:" and stopped on "\nUser:"; the client got "Fine, thanks.".
  std::vector<int32_t> history, prompt;
  const std::vector<int32_t> reply = ByPieces(" Fine, thanks.\nUser:");
  const HistoryReuse m = Match("User: hi\nAssistant:", reply, "User: hi\nAssistant: Fine, thanks.<|im_end|>", &history,
                               &prompt);
  // Up to the last point where both token streams have a boundary: the reply's words, at
  // most its last character less (a tokenizer may merge the '.' with what follows it).
  const std::string kept = NoSpace(Text(std::span(history).first(static_cast<size_t>(m.keep))));
  const std::string received = NoSpace("User: hi\nAssistant: Fine, thanks.");
  EXPECT_TRUE(received.starts_with(kept) && kept.size() + 1 >= received.size()) << kept;
  EXPECT_EQ(NoSpace(Text(std::span(prompt).first(static_cast<size_t>(m.resume)))), kept);
}

TEST_P(HistoryMatchTest, InvalidUtf8TheClientGotAsReplacementCharactersMatches) {
  // A lone lead byte and a stray continuation byte, generated as byte pieces: the client
  // received "caf\uFFFD ok\uFFFD" and sends it back.
  std::vector<int32_t> history, prompt;
  const HistoryReuse m = Match("Q: hi\nA:", ByPieces(" caf\xC3 ok\x80"), "Q: hi\nA: caf\xEF\xBF\xBD ok\xEF\xBF\xBD\nQ: next",
                               &history, &prompt);
  EXPECT_EQ(m.keep, static_cast<int>(history.size()));
  EXPECT_EQ(Text(std::span(prompt).subspan(static_cast<size_t>(m.resume))), "\nQ: next");
}

TEST_P(HistoryMatchTest, TextOutsideRepliesMustBeEqual) {
  // Nothing generated: a changed word, or a changed space, ends the match where the token
  // ids part.
  for (const char* changed : {"User: hi\nAssistant: Goodbye", "User: hi \nAssistant: Hello"}) {
    const std::vector<int32_t> history = Encode("User: hi\nAssistant: Hello");
    const std::vector<int32_t> prompt = Encode(changed);
    const HistoryReuse m = MatchHistory(history, {}, prompt, *tok_);
    int common = 0;
    while (common < static_cast<int>(std::min(history.size(), prompt.size())) &&
           history[static_cast<size_t>(common)] == prompt[static_cast<size_t>(common)]) {
      ++common;
    }
    EXPECT_EQ(m.keep, common) << changed;
    EXPECT_EQ(m.resume, common) << changed;
  }
}

TEST_P(HistoryMatchTest, ControlTokensTheModelGeneratedInAReplyAreKept) {
  // A control token has no text: the client received " Yes indeed" and sends it back.
  std::vector<int32_t> history, prompt;
  std::vector<int32_t> reply = ByPieces(" Yes");
  reply.push_back(tok_->eos_id());
  const std::vector<int32_t> rest = ByPieces(" indeed");
  reply.insert(reply.end(), rest.begin(), rest.end());
  const HistoryReuse m = Match("Q: ok?\nA:", reply, "Q: ok?\nA: Yes indeed\nQ: sure?", &history, &prompt);
  EXPECT_EQ(m.keep, static_cast<int>(history.size()));
  EXPECT_EQ(NoSpace(Text(std::span(prompt).subspan(static_cast<size_t>(m.resume)))), "Q:sure?");
}

TEST_P(HistoryMatchTest, ControlTokensOutsideRepliesMatchOnlyThemselves) {
  // The template's own control tokens must be where the prompt has them.
  std::vector<int32_t> history = Encode("Q: ok?");
  history.push_back(tok_->eos_id());
  const std::vector<int32_t> more = Encode("A: yes");
  history.insert(history.end(), more.begin(), more.end());
  const std::vector<int32_t> prompt = Encode("Q: ok?A: yes");
  const HistoryReuse m = MatchHistory(history, {}, prompt, *tok_);
  EXPECT_LE(m.keep, static_cast<int>(Encode("Q: ok?").size()));
  EXPECT_EQ(NoSpace(Text(std::span(history).first(static_cast<size_t>(m.keep)))),
            NoSpace(Text(std::span(prompt).first(static_cast<size_t>(m.resume)))));
}

INSTANTIATE_TEST_SUITE_P(Vocabularies, HistoryMatchTest, ::testing::Values("llama-spm", "gpt-2", "phi-3"),
                         [](const auto& info) {
                           std::string n = info.param;
                           std::erase(n, '-');
                           return n;
                         });

}  // namespace history_match_test
}  // namespace kvserve
