// EngineCore: chat sessions on the engine thread: attaching a session request to its
// session's cache (a turn whose session is busy waits up to session_busy_wait_seconds for it,
// parked, unless it asked to run without it: session_if_free; a turn whose session's cache is
// being read from the state directory waits parked for the read, which runs on the
// directory's thread), and ending a session (Engine::EndSession).
#include "engine/chat_session_store.h"
#include "engine/engine_core.h"
#include "engine/output_processor.h"
#include "engine/scheduler.h"

namespace kvserve {

bool EngineCore::QueueSessionRequest(Request* r, bool may_wait) {
  Sequence* first = r->seqs[0].get();
  Status st = sessions_->Attach(r->params.tenant, r->params.session_id, first);
  if (st.code() == StatusCode::kUnavailable) return false;  // read from disk meanwhile: parked
  const bool fits = static_cast<int64_t>(first->tokens.size()) + r->params.sampling.max_tokens <= max_model_len_;
  if (st.code() == StatusCode::kFailedPrecondition && r->params.session_if_free && fits) {
    r->params.session_id.clear();  // a fork of a busy conversation runs on its own
    scheduler_->AddWaiting(first);
    return true;
  }
  if (st.code() == StatusCode::kFailedPrecondition && may_wait) return false;
  if (!st.ok()) {
    output_->FailRequest(r, st);
    return true;
  }
  first->session_attached = true;
  for (auto& s : r->seqs) s->window = first->window;
  scheduler_->AddWaiting(first);
  return true;
}

void EngineCore::RetryParked() {
  if (parked_.empty()) return;
  const Clock::time_point now = Clock::now();
  std::vector<std::pair<uint64_t, Clock::time_point>> still;
  for (const auto& [id, deadline] : parked_) {
    auto it = requests_.find(id);
    if (it == requests_.end() || it->second->done) continue;  // aborted while it waited
    if (!QueueSessionRequest(it->second.get(), now < deadline)) still.emplace_back(id, deadline);
  }
  parked_.swap(still);
}

Status EngineCore::EndSession(const std::string& tenant, const std::string& session_id, double timeout_seconds) {
  StatusOr<bool> found = RunOnEngineThread<bool>(
      [this, tenant, session_id] {
        // Requests of the session end first: the one using it hands its cache back, those
        // waiting for it would start it again.
        for (auto& [id, r] : requests_) {
          if (!r->done && r->params.tenant == tenant && r->params.session_id == session_id) {
            AbortRequest(id, CancelledError("the chat session was ended"));
          }
        }
        ReapFinished();
        return sessions_->Drop(tenant, session_id);
      },
      timeout_seconds);
  if (!found.ok()) return found.status();
  return *found ? OkStatus() : NotFoundError("no chat session with this id");
}

}  // namespace kvserve
