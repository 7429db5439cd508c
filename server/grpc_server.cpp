// GrpcServer (front_ends.h): kvserve.v1.Generation on gRPC's callback API, the standard
// grpc.health.v1 service and server reflection.
//
// Every Generation call first passes Admit(): the `authorization: Bearer <key>` metadata is
// checked with ApiKeyAuth (constant-time, names the tenant) -> UNAUTHENTICATED, then
// readiness -> UNAVAILABLE. Generation calls build an engine request (grpc_convert), submit
// it and hand the RequestStream to a reactor (grpc_reactors); requests refused before the
// engine took them are counted in ServerContext::requests_rejected. Tokenize, Detokenize and
// GetModelInfo answer inline on gRPC's thread.
//
// Health: SERVING for "" and "kvserve.v1.Generation" while ServerContext::Ready(), else
// NOT_SERVING; a watcher thread re-reads readiness every 100 ms. Shutdown() marks both
// NOT_SERVING for good, stops accepting calls and gives running ones `grace_seconds` before
// cancelling them (which aborts their engine requests).
//
// Threads: handlers and reactions run on gRPC's threads, listeners on the engine thread;
// the service itself is immutable after construction except the lazily detected template.
#include <grpcpp/ext/proto_server_reflection_plugin.h>
#include <grpcpp/grpcpp.h>
#include <grpcpp/health_check_service_interface.h>

#include <algorithm>
#include <condition_variable>
#include <limits>
#include <fmt/format.h>
#include <mutex>
#include <optional>
#include <thread>

#include "cache/kv_spec.h"
#include "common/log.h"
#include "server/auth.h"
#include "server/front_ends.h"
#include "server/grpc_convert.h"
#include "server/grpc_reactors.h"
#include "server/session_header.h"

namespace kvserve {
namespace {

constexpr char kServiceName[] = "kvserve.v1.Generation";

class GenerationService final : public v1::Generation::CallbackService {
 public:
  explicit GenerationService(ServerContext* ctx) : ctx_(ctx), auth_(ctx->options.api_keys) {}

  grpc::ServerUnaryReactor* Generate(grpc::CallbackServerContext* call, const v1::GenerateRequest* request,
                                     v1::GenerateResponse* response) override {
    return Unary(call, "Generate", response, [&](const GrpcRequestEnv& env) {
      return BuildGenerateRequest(*request, env);
    });
  }

  grpc::ServerWriteReactor<v1::GenerateStreamResponse>* GenerateStream(grpc::CallbackServerContext* call,
                                                                        const v1::GenerateRequest* request) override {
    return Streaming(call, "GenerateStream", [&](const GrpcRequestEnv& env) {
      return BuildGenerateRequest(*request, env);
    });
  }

  grpc::ServerUnaryReactor* Chat(grpc::CallbackServerContext* call, const v1::ChatRequest* request,
                                 v1::GenerateResponse* response) override {
    return Unary(call, "Chat", response, [&](const GrpcRequestEnv& env) { return BuildChatRequest(*request, env); });
  }

  grpc::ServerWriteReactor<v1::GenerateStreamResponse>* ChatStream(grpc::CallbackServerContext* call,
                                                                    const v1::ChatRequest* request) override {
    return Streaming(call, "ChatStream", [&](const GrpcRequestEnv& env) { return BuildChatRequest(*request, env); });
  }

  grpc::ServerUnaryReactor* Tokenize(grpc::CallbackServerContext* call, const v1::TokenizeRequest* request,
                                     v1::TokenizeResponse* response) override {
    return Inline(call, [&]() -> Status {
      RETURN_IF_ERROR(CheckModel(request->model(), ctx_->model_id));
      const Tokenizer& tok = ctx_->engine->model().tokenizer();
      std::vector<int32_t> ids;
      if (request->messages_size() > 0) {
        std::vector<ChatMessage> messages;
        for (const v1::ChatMessage& m : request->messages()) messages.push_back({m.role(), m.content()});
        StatusOr<std::string> rendered = chat_template().Render(messages, /*add_generation_prompt=*/true);
        if (!rendered.ok()) return rendered.status();
        ids = chat_template().Encode(*rendered, tok);
        response->set_rendered_prompt(*rendered);
      } else {
        const bool add_special = !request->has_add_special_tokens() || request->add_special_tokens();
        ids = tok.Encode(request->text(), add_special, request->parse_special());
      }
      response->mutable_token_ids()->Add(ids.begin(), ids.end());
      return OkStatus();
    });
  }

  grpc::ServerUnaryReactor* Detokenize(grpc::CallbackServerContext* call, const v1::DetokenizeRequest* request,
                                       v1::DetokenizeResponse* response) override {
    return Inline(call, [&]() -> Status {
      RETURN_IF_ERROR(CheckModel(request->model(), ctx_->model_id));
      const Tokenizer& tok = ctx_->engine->model().tokenizer();
      for (int i = 0; i < request->token_ids_size(); ++i) {
        const int32_t id = request->token_ids(i);
        if (id < 0 || id >= tok.vocab_size()) {
          return InvalidArgumentError(
              fmt::format("token_ids[{}] = {} is outside the vocabulary [0, {})", i, id, tok.vocab_size()));
        }
      }
      const std::vector<int32_t> ids(request->token_ids().begin(), request->token_ids().end());
      response->set_text(tok.Decode(ids, /*strip_leading_space=*/true, request->render_special()));
      return OkStatus();
    });
  }

  grpc::ServerUnaryReactor* GetModelInfo(grpc::CallbackServerContext* call, const v1::GetModelInfoRequest*,
                                         v1::ModelInfo* info) override {
    return Inline(call, [&]() -> Status {
      const Engine& engine = *ctx_->engine;
      const Tokenizer& tok = engine.model().tokenizer();
      info->set_model_id(ctx_->model_id);
      info->set_context_length(MaxModelLen(engine));
      info->set_vocab_size(tok.vocab_size());
      info->set_kv_dtype(std::string(KvDtypeName(engine.config().kv.dtype)));
      info->set_block_size(engine.config().kv.block_size);
      info->set_backend(ctx_->backend_name);
      info->set_architecture(engine.model().config().architecture);
      info->set_chat_template(std::string(chat_template().name()));
      info->set_num_kv_blocks(engine.config().num_blocks);
      info->set_bos_token_id(tok.bos_id());
      info->set_eos_token_id(tok.eos_id());
      return OkStatus();
    });
  }

 private:
  // Authentication, then readiness (`generation`: Ready(); otherwise a loaded model).
  Status Admit(grpc::CallbackServerContext* call, bool generation, std::string* tenant) const {
    std::string_view authorization;
    const auto& metadata = call->client_metadata();
    if (auto it = metadata.find("authorization"); it != metadata.end()) {
      authorization = std::string_view(it->second.data(), it->second.size());
    }
    std::optional<std::string> who = auth_.Authenticate(authorization);
    if (!who) return UnauthenticatedError("missing or invalid API key (metadata 'authorization: Bearer <key>')");
    *tenant = std::move(*who);
    if (ctx_->loading || ctx_->engine == nullptr) return UnavailableError("the model is loading");
    if (!generation) return OkStatus();
    if (ctx_->draining) return UnavailableError("the server is shutting down");
    if (!ctx_->engine->Healthy()) return UnavailableError("the engine is not healthy");
    return OkStatus();
  }

  const ChatTemplate& chat_template() {
    std::call_once(template_once_, [this] {
      const Tokenizer& tok = ctx_->engine->model().tokenizer();
      template_ = ChatTemplate::Detect(tok.vocab().chat_template, tok);
    });
    return *template_;
  }

  GrpcRequestEnv Env(std::string tenant) {
    GrpcRequestEnv env;
    env.engine = ctx_->engine;
    env.chat_template = &chat_template();
    env.model_id = ctx_->model_id;
    env.default_max_tokens = ctx_->options.default_max_tokens;
    env.tenant = std::move(tenant);
    return env;
  }

  // Admits, builds and submits; on failure returns the status (counted as rejected unless
  // it is an authentication failure).
  template <typename Build>
  StatusOr<std::shared_ptr<RequestStream>> Submit(grpc::CallbackServerContext* call, Build build) {
    std::string tenant;
    Status admitted = Admit(call, /*generation=*/true, &tenant);
    if (!admitted.ok()) {
      if (admitted.code() != StatusCode::kUnauthenticated) ctx_->CountRejected();
      return admitted;
    }
    StatusOr<GenerationRequest> request = build(Env(std::move(tenant)));
    if (request.ok()) {
      const auto& metadata = call->client_metadata();
      if (auto it = metadata.find(std::string(kSessionHeader)); it != metadata.end()) {
        Status merged = MergeSessionHeader(std::string_view(it->second.data(), it->second.size()),
                                           &request->session_id);
        if (!merged.ok()) request = merged;
      }
    }
    if (!request.ok()) {
      ctx_->CountRejected();
      return request.status();
    }
    StatusOr<std::shared_ptr<RequestStream>> stream = ctx_->engine->Submit(std::move(request).value());
    if (!stream.ok()) ctx_->CountRejected();
    return stream;
  }

  GrpcCallInfo CallInfo(grpc::CallbackServerContext* call, const char* method, uint64_t request_id) const {
    GrpcCallInfo info;
    info.engine = ctx_->engine;
    info.id = fmt::format("gen-{}", request_id);
    info.method = method;
    info.peer = call->peer();
    return info;
  }

  template <typename Build>
  grpc::ServerUnaryReactor* Unary(grpc::CallbackServerContext* call, const char* method,
                                  v1::GenerateResponse* response, Build build) {
    StatusOr<std::shared_ptr<RequestStream>> stream = Submit(call, build);
    if (!stream.ok()) return Refuse(call, method, stream.status());
    GrpcCallInfo info = CallInfo(call, method, (*stream)->id());
    response->set_id(info.id);
    response->set_model(ctx_->model_id);
    return GenerationUnaryReactor::Start(std::move(info), std::move(stream).value(), response);
  }

  template <typename Build>
  grpc::ServerWriteReactor<v1::GenerateStreamResponse>* Streaming(grpc::CallbackServerContext* call,
                                                                   const char* method, Build build) {
    StatusOr<std::shared_ptr<RequestStream>> stream = Submit(call, build);
    if (!stream.ok()) {
      // A write reactor that only finishes: deletes itself when done.
      class Refused final : public grpc::ServerWriteReactor<v1::GenerateStreamResponse> {
       public:
        explicit Refused(const grpc::Status& status) { Finish(status); }
        void OnDone() override { delete this; }
      };
      const grpc::Status status = ToGrpcStatus(stream.status());
      LogGrpcCall(CallInfo(call, method, 0), status, nullptr);
      return new Refused(status);
    }
    GrpcCallInfo info = CallInfo(call, method, (*stream)->id());
    return GenerationStreamReactor::Start(std::move(info), std::move(stream).value());
  }

  grpc::ServerUnaryReactor* Refuse(grpc::CallbackServerContext* call, const char* method, const Status& status) {
    const grpc::Status grpc_status = ToGrpcStatus(status);
    LogGrpcCall(CallInfo(call, method, 0), grpc_status, nullptr);
    grpc::ServerUnaryReactor* reactor = call->DefaultReactor();
    reactor->Finish(grpc_status);
    return reactor;
  }

  // Admits (without the readiness of the engine loop) and runs `work` on this thread.
  template <typename Work>
  grpc::ServerUnaryReactor* Inline(grpc::CallbackServerContext* call, Work work) {
    std::string tenant;
    Status status = Admit(call, /*generation=*/false, &tenant);
    if (status.ok()) status = work();
    grpc::ServerUnaryReactor* reactor = call->DefaultReactor();
    reactor->Finish(ToGrpcStatus(status));
    return reactor;
  }

  ServerContext* const ctx_;
  const ApiKeyAuth auth_;
  std::once_flag template_once_;
  std::optional<ChatTemplate> template_;
};

class GrpcServerImpl final : public GrpcServer {
 public:
  explicit GrpcServerImpl(ServerContext* ctx) : ctx_(ctx), service_(ctx) {}
  ~GrpcServerImpl() override { Shutdown(0); }

  Status Init() {
    grpc::EnableDefaultHealthCheckService(true);
    grpc::reflection::InitProtoReflectionServerBuilderPlugin();
    grpc::ServerBuilder builder;
    const std::string& host = ctx_->options.host;
    const bool ipv6 = host.find(':') != std::string::npos && host.front() != '[';
    const std::string address = ipv6 ? fmt::format("[{}]:{}", host, ctx_->options.grpc_port)
                                     : fmt::format("{}:{}", host, ctx_->options.grpc_port);
    builder.AddListeningPort(address, grpc::InsecureServerCredentials(), &port_);
    builder.SetMaxReceiveMessageSize(
        static_cast<int>(std::min<size_t>(ctx_->options.max_body_bytes, std::numeric_limits<int>::max())));
    builder.RegisterService(&service_);
    server_ = builder.BuildAndStart();
    if (!server_ || port_ == 0) {
      server_.reset();
      return UnavailableError(fmt::format("gRPC could not listen on {}", address));
    }
    health_ = server_->GetHealthCheckService();
    SetServing(ctx_->Ready());
    watcher_ = std::thread([this] { WatchReadiness(); });
    return OkStatus();
  }

  int port() const override { return port_; }

  void Shutdown(double grace_seconds) override {
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (shut_down_ || !server_) return;
      shut_down_ = true;
    }
    cv_.notify_all();
    if (watcher_.joinable()) watcher_.join();
    if (health_ != nullptr) health_->Shutdown();  // NOT_SERVING for good
    const auto deadline = std::chrono::system_clock::now() +
                          std::chrono::microseconds(static_cast<int64_t>(std::max(grace_seconds, 0.0) * 1e6));
    server_->Shutdown(deadline);  // refuses new calls; cancels the rest at the deadline
    server_->Wait();
  }

 private:
  void SetServing(bool serving) {
    health_->SetServingStatus(serving);
    health_->SetServingStatus(kServiceName, serving);
    serving_ = serving;
  }

  void WatchReadiness() {
    std::unique_lock<std::mutex> lock(mu_);
    while (!shut_down_) {
      cv_.wait_for(lock, std::chrono::milliseconds(100));
      if (shut_down_) break;
      const bool ready = ctx_->Ready();
      if (ready != serving_) SetServing(ready);
    }
  }

  ServerContext* const ctx_;
  GenerationService service_;
  std::unique_ptr<grpc::Server> server_;
  grpc::HealthCheckServiceInterface* health_ = nullptr;
  int port_ = 0;
  std::mutex mu_;
  std::condition_variable cv_;
  bool shut_down_ = false;
  bool serving_ = false;
  std::thread watcher_;
};

}  // namespace

StatusOr<std::unique_ptr<GrpcServer>> GrpcServer::Start(ServerContext* ctx) {
  auto server = std::make_unique<GrpcServerImpl>(ctx);
  RETURN_IF_ERROR(server->Init());
  LOG_INFO("gRPC listening on {}:{} (kvserve.v1.Generation, grpc.health.v1, reflection)", ctx->options.host,
           server->port());
  return std::unique_ptr<GrpcServer>(std::move(server));
}

}  // namespace kvserve
