// Request reactors of the gRPC service (see grpc_reactors.h for the flow and the locking).
#include "server/grpc/grpc_reactors.h"

#include <fmt/format.h>

#include "common/log.h"
#include "server/api/error_mapping.h"
#include "server/grpc/grpc_convert.h"

namespace kvserve {

grpc::Status ToGrpcStatus(const Status& status) {
  if (status.ok()) return grpc::Status::OK;
  // The message travels in the trailers, which clients cap at 8 KiB: a longer one would turn
  // the status into the client's own RESOURCE_EXHAUSTED.
  return grpc::Status(static_cast<grpc::StatusCode>(GrpcCodeFor(status.code())), Abbreviated(status.message(), 2048));
}

void LogGrpcCall(const GrpcCallInfo& info, const grpc::Status& status, const RequestUsage* usage) {
  const double ms =
      std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - info.start).count();
  const int code = static_cast<int>(status.error_code());
  const auto level = status.ok() || status.error_code() == grpc::StatusCode::CANCELLED ? spdlog::level::info
                                                                                        : spdlog::level::warn;
  const std::string method = "grpc " + info.method;
  if (usage == nullptr) {
    LogEvent(level, "request", {{"id", info.id}, {"method", method}, {"status", code}, {"client", info.peer},
                                {"duration_ms", ms}});
    return;
  }
  LogEvent(level, "request",
           {{"id", info.id}, {"method", method}, {"status", code}, {"client", info.peer},
            {"prompt_tokens", usage->prompt_tokens}, {"cached_tokens", usage->cached_prompt_tokens},
            {"completion_tokens", usage->completion_tokens}, {"ttft_ms", usage->time_to_first_token_s * 1e3},
            {"duration_ms", ms}});
}

namespace {

// The common end of a reactor's OnDone: the listener can no longer reach it, and a request
// that is still running (the call ended first) is aborted so its blocks are freed.
// (`stream` is null when a deferred submission never arrived: its DeliverSubmission aborts it.)
template <typename Reactor>
void DetachReactor(ReactorLink<Reactor>& link, const GrpcCallInfo& info, RequestStream* stream) {
  {
    std::lock_guard<std::recursive_mutex> lock(link.mu);
    link.reactor = nullptr;
  }
  if (stream == nullptr) return;
  if (!stream->done()) info.engine->Abort(stream->id());
  stream->SetListener(nullptr);
}

// LogGrpcCall with the usage when the request finished (none for a refused deferred one).
void LogFinishedCall(const GrpcCallInfo& info, const grpc::Status& status, const RequestStream* stream) {
  if (stream == nullptr) {
    LogGrpcCall(info, status, nullptr);
    return;
  }
  const bool done = stream->done();  // before usage(): a finished request's usage is final
  const RequestUsage usage = stream->usage();
  LogGrpcCall(info, status, done ? &usage : nullptr);
}

// The DeliverSubmission of the reactor `link` reaches.
template <typename Reactor>
DeliverSubmission Deliverer(std::shared_ptr<ReactorLink<Reactor>> link, Engine* engine) {
  return [link = std::move(link), engine](StatusOr<std::shared_ptr<RequestStream>> submitted) {
    std::lock_guard<std::recursive_mutex> lock(link->mu);
    if (link->reactor != nullptr && link->reactor->Attach(submitted)) return;
    if (submitted.ok()) engine->Abort((*submitted)->id());  // the call is over
  };
}

// A deferred reactor's call id once its request is accepted.
std::string CallId(const RequestStream& stream) { return fmt::format("gen-{}", stream.id()); }

}  // namespace

// ------------------------------------------------------------------ streaming

GenerationStreamReactor::GenerationStreamReactor(GrpcCallInfo info, std::shared_ptr<RequestStream> stream)
    : info_(std::move(info)), stream_(std::move(stream)), link_(std::make_shared<Link>()) {
  link_->reactor = this;
}

GenerationStreamReactor* GenerationStreamReactor::Start(GrpcCallInfo info, std::shared_ptr<RequestStream> stream) {
  auto* reactor = new GenerationStreamReactor(std::move(info), std::move(stream));
  // gRPC binds the reactor only after the handler returns it, so OnDone cannot run (and
  // delete it) before this returns.
  reactor->stream_->SetListener(
      PostingListener(reactor->link_, reactor->info_.executor, &GenerationStreamReactor::Pump));
  return reactor;
}

GenerationStreamReactor* GenerationStreamReactor::StartDeferred(GrpcCallInfo info, DeliverSubmission* deliver) {
  auto* reactor = new GenerationStreamReactor(std::move(info), nullptr);
  *deliver = Deliverer(reactor->link_, reactor->info_.engine);
  return reactor;
}

bool GenerationStreamReactor::Attach(StatusOr<std::shared_ptr<RequestStream>>& submitted) {
  if (finished_) return false;  // cancelled while it waited
  if (!submitted.ok()) {
    FinishCall(ToGrpcStatus(submitted.status()));
    return true;
  }
  stream_ = std::move(submitted).value();
  info_.id = CallId(*stream_);
  stream_->SetListener(PostingListener(link_, info_.executor, &GenerationStreamReactor::Pump));
  Pump();
  return true;
}

void GenerationStreamReactor::Pump() {
  if (finished_ || writing_) return;
  if (cancelled_) {
    FinishCall(grpc::Status::CANCELLED);
    return;
  }
  // done() first: once it is true, the drain below sees every delta the request produced.
  const bool done = stream_->done();
  deltas_.clear();
  if (stream_->TryDrain(&deltas_)) {
    message_.Clear();
    message_.set_id(info_.id);
    AppendDeltas(deltas_, &message_);
    SerializeMessage(message_, &buffer_);
    writing_ = true;
    StartWrite(&buffer_);
    return;
  }
  if (!done) return;  // the listener runs again when output arrives or the request ends
  const Status status = stream_->status();
  if (!status.ok()) {
    FinishCall(ToGrpcStatus(status));
    return;
  }
  if (!usage_sent_) {
    usage_sent_ = true;
    message_.Clear();
    message_.set_id(info_.id);
    FillUsage(stream_->usage(), message_.mutable_usage());
    SerializeMessage(message_, &buffer_);
    writing_ = true;
    StartWrite(&buffer_);
    return;
  }
  FinishCall(grpc::Status::OK);
}

void GenerationStreamReactor::OnWriteDone(bool ok) {
  const std::shared_ptr<Link> link = link_;
  std::lock_guard<std::recursive_mutex> lock(link->mu);
  writing_ = false;
  if (!ok) {  // the client is gone (or the call was cancelled)
    cancelled_ = true;
    info_.engine->Abort(stream_->id());
    FinishCall(grpc::Status::CANCELLED);
    return;
  }
  Pump();
}

void GenerationStreamReactor::OnCancel() {
  const std::shared_ptr<Link> link = link_;
  std::lock_guard<std::recursive_mutex> lock(link->mu);
  cancelled_ = true;
  if (stream_ != nullptr) info_.engine->Abort(stream_->id());  // unknown (finished) ids are ignored
  if (!writing_) FinishCall(grpc::Status::CANCELLED);  // else OnWriteDone(false) finishes
}

void GenerationStreamReactor::OnDone() {
  DetachReactor(*link_, info_, stream_.get());
  delete this;
}

void GenerationStreamReactor::FinishCall(const grpc::Status& status) {
  if (finished_) return;
  finished_ = true;
  LogFinishedCall(info_, status, stream_.get());
  Finish(status);
}

// ------------------------------------------------------------------ unary

GenerationUnaryReactor::GenerationUnaryReactor(GrpcCallInfo info, std::shared_ptr<RequestStream> stream,
                                               grpc::ByteBuffer* response)
    : info_(std::move(info)), stream_(std::move(stream)), response_(response), link_(std::make_shared<Link>()) {
  link_->reactor = this;
  message_.set_id(info_.id);
  message_.set_model(info_.model);
}

GenerationUnaryReactor* GenerationUnaryReactor::Start(GrpcCallInfo info, std::shared_ptr<RequestStream> stream,
                                                      grpc::ByteBuffer* response) {
  auto* reactor = new GenerationUnaryReactor(std::move(info), std::move(stream), response);
  reactor->stream_->SetListener(
      PostingListener(reactor->link_, reactor->info_.executor, &GenerationUnaryReactor::Collect));
  return reactor;
}

GenerationUnaryReactor* GenerationUnaryReactor::StartDeferred(GrpcCallInfo info, grpc::ByteBuffer* response,
                                                              DeliverSubmission* deliver) {
  auto* reactor = new GenerationUnaryReactor(std::move(info), nullptr, response);
  *deliver = Deliverer(reactor->link_, reactor->info_.engine);
  return reactor;
}

bool GenerationUnaryReactor::Attach(StatusOr<std::shared_ptr<RequestStream>>& submitted) {
  if (finished_) return false;
  if (!submitted.ok()) {
    FinishCall(ToGrpcStatus(submitted.status()));
    return true;
  }
  stream_ = std::move(submitted).value();
  info_.id = CallId(*stream_);
  message_.set_id(info_.id);
  stream_->SetListener(PostingListener(link_, info_.executor, &GenerationUnaryReactor::Collect));
  Collect();
  return true;
}

void GenerationUnaryReactor::Collect() {
  if (finished_) return;
  const bool done = stream_->done();
  deltas_.clear();
  stream_->TryDrain(&deltas_);
  for (const StreamDelta& d : deltas_) MergeDelta(d, &message_);
  if (!done) return;
  const Status status = stream_->status();
  if (!status.ok()) {
    FinishCall(ToGrpcStatus(status));
    return;
  }
  FillUsage(stream_->usage(), message_.mutable_usage());
  SerializeMessage(message_, response_);
  FinishCall(grpc::Status::OK);
}

void GenerationUnaryReactor::OnCancel() {
  const std::shared_ptr<Link> link = link_;
  std::lock_guard<std::recursive_mutex> lock(link->mu);
  if (stream_ != nullptr) info_.engine->Abort(stream_->id());
  FinishCall(grpc::Status::CANCELLED);
}

void GenerationUnaryReactor::OnDone() {
  DetachReactor(*link_, info_, stream_.get());
  delete this;
}

void GenerationUnaryReactor::FinishCall(const grpc::Status& status) {
  if (finished_) return;
  finished_ = true;
  LogFinishedCall(info_, status, stream_.get());
  Finish(status);
}

}  // namespace kvserve
