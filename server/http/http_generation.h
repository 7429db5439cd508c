// GenerationJob: the output side of one /v1/completions or /v1/chat/completions request: the
// engine streams of its prompts (one RequestStream per prompt; choice c of prompt p is
// response index p * n + c, as OpenAI orders a batch), turned into either one JSON response
// or SSE events. Beast-free: the connection asks Poll() for bytes whenever the listener says
// output arrived, and writes what it gets.
//
// Streaming protocol (Poll results, in order):
//   * nothing (start == false, reply empty) until the first output or the end: so an
//     immediate engine error (e.g. a session busy, the engine stopping) still becomes a
//     proper status instead of a 200 stream;
//   * `reply` set: an error before anything was sent — the whole response, the job is over;
//   * `start` once, then `body` bytes (SSE events) as output arrives; the last Poll has
//     `finished` and ends with "data: [DONE]\n\n" (after a usage event with include_usage,
//     or an error event when a request failed after the stream began).
// Non-streaming: `reply` once, when every stream is done.
//
// Thread-compatible: the owning connection calls everything on its strand; only the listener
// passed to SetListener runs on the engine thread (it must only post).
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "engine/engine.h"
#include "server/http/http_types.h"
#include "server/api/reasoning.h"
#include "server/http/openai_format.h"

namespace kvserve {

class GenerationJob {
 public:
  struct Output {
    std::optional<HttpReply> reply;  // complete response (non-streaming, or error before start)
    bool start = false;              // streaming: send the SSE response head now
    std::string body;                // streaming: SSE bytes to send
    bool finished = false;           // no more output will come (reply set, or stream ended)
  };

  // `echo[p]` is prepended to each choice of prompt p (empty: no echo); `prompt_lengths[p]`
  // counts its prompt tokens for usage() while the request has not finished. Prompt logprobs
  // (a delta's prompt_logprobs) go in front of each choice's logprobs, and its text offsets
  // then count from the start of the echoed prompt.
  GenerationJob(Engine* engine, const Tokenizer* tokenizer, ResponseMeta meta, bool stream, int n,
                std::vector<std::shared_ptr<RequestStream>> streams, std::vector<std::string> echo,
                std::vector<int> prompt_lengths = {});
  ~GenerationJob();
  GenerationJob(const GenerationJob&) = delete;
  GenerationJob& operator=(const GenerationJob&) = delete;

  // Installs `notify` as the listener of every stream (called on the engine thread whenever
  // output arrives; at once if some is pending).
  void SetListener(const std::function<void()>& notify);
  // Takes what arrived since the last call.
  [[nodiscard]] Output Poll();
  // Aborts every request still running (the client went away); their blocks are freed within
  // one engine step.
  void Abort();

  bool finished() const { return finished_; }
  // Sum over the prompts (time to first token: the earliest). A request that has not
  // finished (e.g. aborted when the client left) counts its prompt and the tokens seen so far.
  RequestUsage usage() const;
  // The status the client got (200, or the error's).
  int http_status() const { return http_status_; }
  const std::string& id() const { return meta_.id; }

 private:
  struct Choice {
    std::string text;
    std::vector<TokenLogprob> logprobs;
    std::optional<FinishReason> finish;
    bool started = false;    // streaming: the first chunk was sent
    int text_offset = 0;     // bytes of text sent so far (echo included)
    std::unique_ptr<ToolCallParser> tools;  // chat with tools: reads calls out of the text
    std::unique_ptr<ReasoningParser> reasoning;  // chat: takes the <think> part apart first
    int reasoning_tokens = 0;  // tokens whose text went to the reasoning alone
  };

  // Moves new deltas into pending_ and updates done flags; returns whether all are done.
  bool Collect();
  // The first failure seen (not an abort it caused in the other prompts), or nullopt.
  std::optional<ApiError> Failure() const;
  void EmitStreamed(const StreamDelta& delta, int index, std::string* out);
  HttpReply FinalReply();

  Engine* engine_;
  const Tokenizer* tok_;
  ResponseMeta meta_;
  bool stream_;
  int n_;
  std::vector<std::shared_ptr<RequestStream>> streams_;
  std::vector<bool> done_;
  std::vector<size_t> failed_order_;  // failed streams, in the order their failure was seen
  std::vector<std::string> echo_;
  std::vector<int> prompt_lengths_;
  std::vector<int> tokens_seen_;  // per stream
  std::vector<std::vector<TokenLogprob>> prompt_logprobs_;  // per stream (when requested)
  std::vector<Choice> choices_;
  std::vector<std::pair<int, StreamDelta>> pending_;  // (response index, delta), not yet sent
  bool started_ = false;
  bool finished_ = false;
  int http_status_ = 200;
};

}  // namespace kvserve
