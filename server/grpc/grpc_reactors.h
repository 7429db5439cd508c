// gRPC callback reactors that carry one engine request each: GenerationStreamReactor
// (server streaming: GenerateStream, ChatStream) and GenerationUnaryReactor (Generate, Chat).
//
// Flow: the reactor owns the RequestStream of a submitted request and sets its listener.
// The listener runs on the engine thread whenever output arrives; it only posts the reactor
// to the ReactorExecutor (at most one post queued per reactor), whose thread drains the
// stream and starts the next write (streaming) or, once the request is over, finishes the
// call. So the engine thread never waits for a reactor's mutex, which gRPC's threads hold
// while they run the reactor's reactions. At most one write is in flight; deltas that
// arrive meanwhile are batched into the next message.
// A cancelled call (client cancel, deadline, server shutdown past its grace) or a failed
// write aborts the engine request (Engine::Abort), which frees its KV blocks within a step.
//
// Deferred submission: a request with a structured output waits for its grammar's compile
// inside Engine::Submit (up to the compile timeout), which must not hold one of gRPC's
// threads. Its reactor starts without a stream (StartDeferred); the service submits on a
// thread of its own and hands the result to the DeliverSubmission: the call goes on with the
// stream or ends with the refusal; if the call already ended, an accepted request is aborted.
//
// Messages travel as raw ByteBuffers (the service uses gRPC's raw callback methods so that it
// can answer undecodable requests itself, see grpc_server.cpp): the reactors build the
// protos and serialize them with SerializeMessage.
//
// Lifetime and threads: gRPC deletes nothing; each reactor deletes itself in OnDone. The
// listener and a posted task may still run after that, so they hold a shared `Link` (mutex
// + reactor pointer) that OnDone clears. All reactor state is guarded by
// Link::mu (recursive, so a reaction that gRPC ran inline from StartWrite/Finish on the same
// thread cannot deadlock); nothing touches the reactor after Finish() is called.
#pragma once

#include <grpcpp/grpcpp.h>

#include <atomic>
#include <chrono>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "common/check.h"
#include "common/status.h"
#include "engine/engine.h"
#include "generation.grpc.pb.h"
#include "server/grpc/reactor_executor.h"

namespace kvserve {

// Decodes a request (INVALID_ARGUMENT naming the message type when the bytes are not one:
// malformed protobuf, or a string field that is not valid UTF-8).
template <typename Message>
[[nodiscard]] grpc::Status ParseMessage(const grpc::ByteBuffer& in, Message* out) {
  grpc::ByteBuffer copy(in);  // Deserialize consumes its buffer; copies share the slices
  if (grpc::SerializationTraits<Message>::Deserialize(&copy, out).ok()) return grpc::Status::OK;
  return grpc::Status(grpc::StatusCode::INVALID_ARGUMENT,
                      "the request is not a valid " + out->GetTypeName() +
                          " (malformed protobuf, or a string field that is not valid UTF-8)");
}

template <typename Message>
void SerializeMessage(const Message& message, grpc::ByteBuffer* out) {
  bool own_buffer = false;
  out->Clear();  // the serializer wants an empty buffer
  const grpc::Status status = grpc::SerializationTraits<Message>::Serialize(message, out, &own_buffer);
  CHECK(status.ok()) << "serializing " << message.GetTypeName() << ": " << status.error_message();
}

// What every request reactor needs to report when it is done.
struct GrpcCallInfo {
  Engine* engine = nullptr;
  std::string id;       // "gen-<engine request id>"
  std::string model;    // the served model id (in responses)
  std::string method;   // e.g. "GenerateStream"
  std::string peer;
  std::chrono::steady_clock::time_point start = std::chrono::steady_clock::now();
  std::weak_ptr<ReactorExecutor> executor;  // the service's; gone once the service is
  std::shared_ptr<const int> in_flight;      // the service's count of running generation calls
};

// grpc::Status for a kvserve Status (code via server/error_mapping).
grpc::Status ToGrpcStatus(const Status& status);
// Logs one line for a finished generation call (id, method, peer, code, usage, duration).
void LogGrpcCall(const GrpcCallInfo& info, const grpc::Status& status, const RequestUsage* usage);

// Takes a deferred submission's result (see the top); called once, on any thread but the
// engine's.
using DeliverSubmission = std::function<void(StatusOr<std::shared_ptr<RequestStream>>)>;

// What a reactor's listener reaches it through; OnDone clears `reactor` under `mu`.
template <typename Reactor>
struct ReactorLink {
  std::recursive_mutex mu;
  Reactor* reactor = nullptr;
  std::atomic<bool> posted{false};  // a reaction is queued on the executor and has not started
};

// The stream listener of a reactor (run on the engine thread): posts `react` (Pump or
// Collect) to the executor unless a post is already queued, which will see this output (it
// clears `posted` before it drains). It never takes link->mu, so gRPC threads holding it
// cannot stall the engine.
template <typename Reactor>
std::function<void()> PostingListener(std::shared_ptr<ReactorLink<Reactor>> link,
                                      std::weak_ptr<ReactorExecutor> executor, void (Reactor::*react)()) {
  return [link = std::move(link), executor = std::move(executor), react] {
    if (link->posted.exchange(true)) return;
    std::shared_ptr<ReactorExecutor> e = executor.lock();
    if (e == nullptr) return;  // the service is gone (shut down)
    e->Post([link, react] {
      link->posted = false;
      std::lock_guard<std::recursive_mutex> lock(link->mu);
      if (link->reactor != nullptr) (link->reactor->*react)();
    });
  };
}

class GenerationStreamReactor final : public grpc::ServerWriteReactor<grpc::ByteBuffer> {
 public:
  // Creates the reactor (returned to gRPC by the method handler) and sets the stream's
  // listener; the first write may be started (queued by gRPC) before this returns.
  static GenerationStreamReactor* Start(GrpcCallInfo info, std::shared_ptr<RequestStream> stream);
  // A reactor whose request is submitted later, through *deliver.
  static GenerationStreamReactor* StartDeferred(GrpcCallInfo info, DeliverSubmission* deliver);

  // REQUIRES: link_->mu held. Goes on with a deferred submission's stream, or finishes with its
  // refusal; false when the call had already ended (the stream is left to the caller).
  bool Attach(StatusOr<std::shared_ptr<RequestStream>>& submitted);

  void OnWriteDone(bool ok) override;
  void OnCancel() override;
  void OnDone() override;

 private:
  using Link = ReactorLink<GenerationStreamReactor>;

  GenerationStreamReactor(GrpcCallInfo info, std::shared_ptr<RequestStream> stream);
  // REQUIRES: link_->mu held. Writes pending output, or finishes when the request is over.
  void Pump();
  // REQUIRES: link_->mu held. The last thing a caller does with `this`.
  void FinishCall(const grpc::Status& status);

  GrpcCallInfo info_;                     // id set when a deferred submission arrives
  std::shared_ptr<RequestStream> stream_;  // null until a deferred submission arrives
  std::shared_ptr<Link> link_;
  v1::GenerateStreamResponse message_;
  grpc::ByteBuffer buffer_;  // message_ serialized, in flight until OnWriteDone
  std::vector<StreamDelta> deltas_;
  bool writing_ = false;
  bool usage_sent_ = false;
  bool cancelled_ = false;
  bool finished_ = false;
};

class GenerationUnaryReactor final : public grpc::ServerUnaryReactor {
 public:
  // `response` is gRPC's (valid until OnDone); it receives the serialized GenerateResponse.
  static GenerationUnaryReactor* Start(GrpcCallInfo info, std::shared_ptr<RequestStream> stream,
                                       grpc::ByteBuffer* response);
  static GenerationUnaryReactor* StartDeferred(GrpcCallInfo info, grpc::ByteBuffer* response,
                                               DeliverSubmission* deliver);

  // As GenerationStreamReactor::Attach.
  bool Attach(StatusOr<std::shared_ptr<RequestStream>>& submitted);

  void OnCancel() override;
  void OnDone() override;

 private:
  using Link = ReactorLink<GenerationUnaryReactor>;

  GenerationUnaryReactor(GrpcCallInfo info, std::shared_ptr<RequestStream> stream, grpc::ByteBuffer* response);
  // REQUIRES: link_->mu held. Collects output; finishes when the request is over.
  void Collect();
  // REQUIRES: link_->mu held. The last thing a caller does with `this`.
  void FinishCall(const grpc::Status& status);

  GrpcCallInfo info_;
  std::shared_ptr<RequestStream> stream_;  // as GenerationStreamReactor's
  grpc::ByteBuffer* const response_;
  v1::GenerateResponse message_;
  std::shared_ptr<Link> link_;
  std::vector<StreamDelta> deltas_;
  bool finished_ = false;
};

}  // namespace kvserve
