// GrpcServer (grpc_server.h): kvserve.v1.Generation on gRPC's callback API, the standard
// grpc.health.v1 service and server reflection.
//
// The Generation methods that take strings are gRPC "raw" methods: they receive the request
// bytes and decode them here, so a request gRPC's own decoding would refuse (a string field
// that is not valid UTF-8, as proto3 requires) is answered INVALID_ARGUMENT with a message
// instead of gRPC's bare UNIMPLEMENTED.
//
// Every Generation call first passes Authenticate(): the `authorization: Bearer <key>`
// metadata is checked with ApiKeyAuth (constant-time, names the tenant) -> UNAUTHENTICATED.
// Generation calls then go through the RequestBuilder that the HTTP API uses too (readiness,
// model, session merged with the `x-session-id` metadata, template, tenant isolation,
// limits, rejection accounting) and hand the RequestStream to a reactor (grpc_reactors).
// Tokenize, Detokenize and GetModelInfo answer inline on gRPC's thread once the model is
// loaded; the pin methods (CreatePin, ListPins, DeletePin: Engine::PinPrefix and friends)
// block, so they answer from two threads of the service's own. A generation request with a
// structured output is submitted from a pool of the service's own too (its grammar may take
// up to the compile timeout), its reactor started before (grpc_reactors.h: deferred).
//
// Health: SERVING for "" and "kvserve.v1.Generation" while ServerContext::Ready(), else
// NOT_SERVING; a watcher thread re-reads readiness every 100 ms. Shutdown() marks both
// NOT_SERVING for good, refuses new generation calls, waits up to `grace_seconds` for the
// running ones, then stops accepting calls and cancels what is left at that deadline (which
// aborts their engine requests).
//
// Threads: handlers and reactions run on gRPC's threads, listeners on the engine thread
// (they post to the service's ReactorExecutor, whose thread drains the streams and starts
// writes); the service itself is immutable after construction except the builder's lazily
// detected template.
#include <boost/asio/post.hpp>
#include <boost/asio/thread_pool.hpp>
#include <grpcpp/ext/proto_server_reflection_plugin.h>
#include <grpcpp/grpcpp.h>
#include <grpcpp/health_check_service_interface.h>

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <limits>
#include <fmt/format.h>
#include <mutex>
#include <optional>
#include <thread>

#include "cache/kv_spec.h"
#include "common/log.h"
#include "server/api/auth.h"
#include "server/grpc/grpc_server.h"
#include "server/grpc/grpc_convert.h"
#include "server/grpc/grpc_reactors.h"
#include "server/api/session_header.h"

namespace kvserve {
namespace {

constexpr char kServiceName[] = "kvserve.v1.Generation";

// Long prompts take a while to prefill on a busy server.
constexpr double kPinTimeoutSeconds = 600;
constexpr double kPinListTimeoutSeconds = 10;

using GenerationServiceBase = v1::Generation::WithRawCallbackMethod_Generate<
    v1::Generation::WithRawCallbackMethod_GenerateStream<v1::Generation::WithRawCallbackMethod_Chat<
        v1::Generation::WithRawCallbackMethod_ChatStream<v1::Generation::WithRawCallbackMethod_Tokenize<
            v1::Generation::WithRawCallbackMethod_Detokenize<v1::Generation::WithCallbackMethod_GetModelInfo<
                v1::Generation::WithRawCallbackMethod_CreatePin<v1::Generation::WithRawCallbackMethod_ListPins<
                    v1::Generation::WithRawCallbackMethod_DeletePin<
                        v1::Generation::WithRawCallbackMethod_EndSession<v1::Generation::Service>>>>>>>>>>>;
using StreamReactor = grpc::ServerWriteReactor<grpc::ByteBuffer>;

// A write reactor that only finishes (a refused streaming call); deletes itself when done.
class RefusedStream final : public StreamReactor {
 public:
  explicit RefusedStream(const grpc::Status& status) { Finish(status); }
  void OnDone() override { delete this; }
};

class GenerationService final : public GenerationServiceBase {
 public:
  explicit GenerationService(ServerContext* ctx)
      : ctx_(ctx), auth_(ctx->options.api_keys), builder_(ctx),
        submit_pool_(static_cast<size_t>(std::max(1, ctx->options.grammar_compile_slots))) {}

  grpc::ServerUnaryReactor* Generate(grpc::CallbackServerContext* call, const grpc::ByteBuffer* request,
                                     grpc::ByteBuffer* response) override {
    return Unary<v1::GenerateRequest>(call, "Generate", *request, response);
  }

  StreamReactor* GenerateStream(grpc::CallbackServerContext* call, const grpc::ByteBuffer* request) override {
    return Streaming<v1::GenerateRequest>(call, "GenerateStream", *request);
  }

  grpc::ServerUnaryReactor* Chat(grpc::CallbackServerContext* call, const grpc::ByteBuffer* request,
                                 grpc::ByteBuffer* response) override {
    return Unary<v1::ChatRequest>(call, "Chat", *request, response);
  }

  StreamReactor* ChatStream(grpc::CallbackServerContext* call, const grpc::ByteBuffer* request) override {
    return Streaming<v1::ChatRequest>(call, "ChatStream", *request);
  }

  grpc::ServerUnaryReactor* Tokenize(grpc::CallbackServerContext* call, const grpc::ByteBuffer* request_bytes,
                                     grpc::ByteBuffer* response_bytes) override {
    return Answer<v1::TokenizeRequest, v1::TokenizeResponse>(
        call, *request_bytes, response_bytes, nullptr,
        [&](const std::string&, const v1::TokenizeRequest& request, v1::TokenizeResponse* response) {
          RETURN_IF_ERROR(builder_.CheckModel(request.model()));
          std::vector<int32_t> ids;
          if (request.messages_size() > 0) {
            ASSIGN_OR_RETURN(RenderedPrompt rendered, builder_.RenderChat(ToChatMessages(request.messages()),
                                                                          /*add_generation_prompt=*/true));
            ids = std::move(rendered.tokens);
            response->set_rendered_prompt(std::move(rendered.text));
          } else {
            const bool add_special = !request.has_add_special_tokens() || request.add_special_tokens();
            ids = ctx_->engine->model().tokenizer().Encode(request.text(), add_special, request.parse_special());
          }
          response->mutable_token_ids()->Add(ids.begin(), ids.end());
          return OkStatus();
        });
  }

  grpc::ServerUnaryReactor* Detokenize(grpc::CallbackServerContext* call, const grpc::ByteBuffer* request_bytes,
                                       grpc::ByteBuffer* response_bytes) override {
    return Answer<v1::DetokenizeRequest, v1::DetokenizeResponse>(
        call, *request_bytes, response_bytes, nullptr,
        [&](const std::string&, const v1::DetokenizeRequest& request, v1::DetokenizeResponse* response) -> Status {
          RETURN_IF_ERROR(builder_.CheckModel(request.model()));
          const Tokenizer& tok = ctx_->engine->model().tokenizer();
          for (int i = 0; i < request.token_ids_size(); ++i) {
            const int32_t id = request.token_ids(i);
            if (id < 0 || id >= tok.vocab_size()) {
              return InvalidArgumentError(
                  fmt::format("token_ids[{}] = {} is outside the vocabulary [0, {})", i, id, tok.vocab_size()));
            }
          }
          const std::vector<int32_t> ids(request.token_ids().begin(), request.token_ids().end());
          response->set_text(tok.Decode(ids, /*strip_leading_space=*/true, request.render_special()));
          return OkStatus();
        });
  }

  grpc::ServerUnaryReactor* GetModelInfo(grpc::CallbackServerContext* call, const v1::GetModelInfoRequest*,
                                         v1::ModelInfo* info) override {
    grpc::ServerUnaryReactor* reactor = call->DefaultReactor();
    std::string tenant;
    Status status = Authenticate(call, &tenant);
    if (status.ok()) status = ModelLoaded();
    if (status.ok()) {
      const Engine& engine = *ctx_->engine;
      const Tokenizer& tok = engine.model().tokenizer();
      info->set_model_id(ctx_->model_id);
      info->set_context_length(builder_.max_model_len());
      info->set_vocab_size(tok.vocab_size());
      info->set_kv_dtype(std::string(KvDtypeName(engine.config().kv.dtype)));
      info->set_block_size(engine.config().kv.block_size);
      info->set_backend(ctx_->backend_name);
      info->set_architecture(engine.model().config().architecture);
      info->set_chat_template(std::string(builder_.chat_template().name()));
      info->set_num_kv_blocks(engine.config().num_blocks);
      info->set_bos_token_id(tok.bos_id());
      info->set_eos_token_id(tok.eos_id());
    }
    reactor->Finish(ToGrpcStatus(status));
    return reactor;
  }

  // Pins block for a prefill (CreatePin) or an engine step (ListPins, DeletePin), so they run
  // on the service's own threads, not gRPC's; CreatePin polls the call's cancellation.
  grpc::ServerUnaryReactor* CreatePin(grpc::CallbackServerContext* call, const grpc::ByteBuffer* request_bytes,
                                      grpc::ByteBuffer* response_bytes) override {
    return Answer<v1::CreatePinRequest, v1::Pin>(
        call, *request_bytes, response_bytes, &pin_worker_,
        [this, call](const std::string& tenant, const v1::CreatePinRequest& request, v1::Pin* response) -> Status {
          ASSIGN_OR_RETURN(GenerationInput input, ToGenerationInput(request));
          GenerationRequest pin_request;
          ApiError error;
          if (!builder_.BuildPin(input, Caller{tenant, SessionHeader(call)}, &pin_request, &error)) {
            return error.status;
          }
          ASSIGN_OR_RETURN(PinnedPrefix pin, ctx_->engine->PinPrefix(std::move(pin_request), kPinTimeoutSeconds,
                                                                      [call] { return call->IsCancelled(); }));
          FillPin(pin, response);
          return OkStatus();
        });
  }

  grpc::ServerUnaryReactor* ListPins(grpc::CallbackServerContext* call, const grpc::ByteBuffer* request_bytes,
                                     grpc::ByteBuffer* response_bytes) override {
    return Answer<v1::ListPinsRequest, v1::ListPinsResponse>(
        call, *request_bytes, response_bytes, &pin_admin_,
        [this](const std::string& tenant, const v1::ListPinsRequest&, v1::ListPinsResponse* response) -> Status {
          ASSIGN_OR_RETURN(PinList list, ctx_->engine->ListPins(tenant, kPinListTimeoutSeconds));
          for (const PinnedPrefix& pin : list.pins) FillPin(pin, response->add_pins());
          response->set_pinned_bytes(list.pinned_bytes);
          response->set_max_pinned_bytes(list.max_pinned_bytes);
          return OkStatus();
        });
  }

  grpc::ServerUnaryReactor* DeletePin(grpc::CallbackServerContext* call, const grpc::ByteBuffer* request_bytes,
                                      grpc::ByteBuffer* response_bytes) override {
    return Answer<v1::DeletePinRequest, v1::DeletePinResponse>(
        call, *request_bytes, response_bytes, &pin_admin_,
        [this](const std::string& tenant, const v1::DeletePinRequest& request, v1::DeletePinResponse*) {
          return ctx_->engine->Unpin(tenant, request.id(), kPinListTimeoutSeconds);
        });
  }

  // Ends the caller's chat session (HTTP: DELETE /v1/sessions/{id}); waits about one step.
  grpc::ServerUnaryReactor* EndSession(grpc::CallbackServerContext* call, const grpc::ByteBuffer* request_bytes,
                                       grpc::ByteBuffer* response_bytes) override {
    return Answer<v1::EndSessionRequest, v1::EndSessionResponse>(
        call, *request_bytes, response_bytes, &pin_admin_,
        [this](const std::string& tenant, const v1::EndSessionRequest& request, v1::EndSessionResponse*) {
          if (request.session_id().empty()) return InvalidArgumentError("session_id is required");
          return ctx_->engine->EndSession(tenant, request.session_id(), kPinListTimeoutSeconds);
        });
  }

  // Shutdown's first phase: new generation calls are refused, and this waits until the
  // running ones have finished (each reactor holds a copy of `in_flight_` until its OnDone) or
  // `deadline` has passed. Returns whether any was running.
  bool DrainGenerationCalls(std::chrono::system_clock::time_point deadline) {
    draining_ = true;
    const bool any = in_flight_.use_count() > 1;
    while (in_flight_.use_count() > 1 && std::chrono::system_clock::now() < deadline) {
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
    return any;
  }

 private:
  static std::string SessionHeader(grpc::CallbackServerContext* call) {
    const auto& metadata = call->client_metadata();
    auto it = metadata.find(std::string(kSessionHeader));
    return it == metadata.end() ? std::string() : std::string(it->second.data(), it->second.size());
  }

  // The caller's tenant, or UNAUTHENTICATED.
  Status Authenticate(grpc::CallbackServerContext* call, std::string* tenant) const {
    std::string_view authorization;
    const auto& metadata = call->client_metadata();
    if (auto it = metadata.find("authorization"); it != metadata.end()) {
      authorization = std::string_view(it->second.data(), it->second.size());
    }
    std::optional<std::string> who = auth_.Authenticate(authorization);
    if (!who) return UnauthenticatedError("missing or invalid API key (metadata 'authorization: Bearer <key>')");
    *tenant = std::move(*who);
    return OkStatus();
  }

  Status ModelLoaded() const {
    if (ctx_->loading || ctx_->engine == nullptr) return UnavailableError("the model is loading");
    return OkStatus();
  }

  // A generation call's request, decoded and authenticated.
  struct Decoded {
    GenerationInput input;
    Caller caller;
  };

  // Authenticates and decodes (undecodable requests are counted as rejected here; the
  // RequestBuilder counts the refusals it makes).
  template <typename Request>
  StatusOr<Decoded> Decode(grpc::CallbackServerContext* call, const grpc::ByteBuffer& bytes) {
    Decoded out;
    RETURN_IF_ERROR(Authenticate(call, &out.caller.tenant));
    if (draining_) return UnavailableError("the server is shutting down");
    Request request;
    if (grpc::Status parsed = ParseMessage(bytes, &request); !parsed.ok()) {
      ctx_->CountRejected();
      return InvalidArgumentError(parsed.error_message());
    }
    StatusOr<GenerationInput> input = ToGenerationInput(request);
    if (!input.ok()) {
      ctx_->CountRejected();
      return input.status();
    }
    out.input = std::move(input).value();
    out.caller.session_header = SessionHeader(call);
    return out;
  }

  // Submits through the RequestBuilder (which waits for a structured output's compile).
  StatusOr<std::shared_ptr<RequestStream>> Submit(const Decoded& decoded) {
    SubmittedRequests submitted;
    ApiError error;
    if (!builder_.Submit(decoded.input, decoded.caller, &submitted, &error)) return error.status;
    return std::move(submitted.streams.front());
  }

  // Submits on a submit thread and hands the result to `deliver` (grpc_reactors.h).
  void SubmitDeferred(Decoded decoded, DeliverSubmission deliver) {
    boost::asio::post(submit_pool_, [this, decoded = std::move(decoded), deliver = std::move(deliver)] {
      deliver(Submit(decoded));
    });
  }

  GrpcCallInfo CallInfo(grpc::CallbackServerContext* call, const char* method, uint64_t request_id) const {
    GrpcCallInfo info;
    info.engine = ctx_->engine;
    info.id = fmt::format("gen-{}", request_id);
    info.model = ctx_->model_id;
    info.method = method;
    info.peer = call->peer();
    info.executor = executor_;
    info.in_flight = in_flight_;
    return info;
  }

  // A request with a structured output is submitted off gRPC's thread (its grammar may have to
  // compile first); others inline.
  template <typename Request>
  grpc::ServerUnaryReactor* Unary(grpc::CallbackServerContext* call, const char* method, const grpc::ByteBuffer& bytes,
                                  grpc::ByteBuffer* response) {
    StatusOr<Decoded> decoded = Decode<Request>(call, bytes);
    if (decoded.ok() && decoded->input.structured.active()) {
      DeliverSubmission deliver;
      auto* reactor = GenerationUnaryReactor::StartDeferred(CallInfo(call, method, 0), response, &deliver);
      SubmitDeferred(std::move(decoded).value(), std::move(deliver));
      return reactor;
    }
    StatusOr<std::shared_ptr<RequestStream>> stream = decoded.ok() ? Submit(*decoded) : decoded.status();
    if (!stream.ok()) {
      const grpc::Status status = ToGrpcStatus(stream.status());
      LogGrpcCall(CallInfo(call, method, 0), status, nullptr);
      grpc::ServerUnaryReactor* reactor = call->DefaultReactor();
      reactor->Finish(status);
      return reactor;
    }
    GrpcCallInfo info = CallInfo(call, method, (*stream)->id());
    return GenerationUnaryReactor::Start(std::move(info), std::move(stream).value(), response);
  }

  template <typename Request>
  StreamReactor* Streaming(grpc::CallbackServerContext* call, const char* method, const grpc::ByteBuffer& bytes) {
    StatusOr<Decoded> decoded = Decode<Request>(call, bytes);
    if (decoded.ok() && decoded->input.structured.active()) {
      DeliverSubmission deliver;
      auto* reactor = GenerationStreamReactor::StartDeferred(CallInfo(call, method, 0), &deliver);
      SubmitDeferred(std::move(decoded).value(), std::move(deliver));
      return reactor;
    }
    StatusOr<std::shared_ptr<RequestStream>> stream = decoded.ok() ? Submit(*decoded) : decoded.status();
    if (!stream.ok()) {
      const grpc::Status status = ToGrpcStatus(stream.status());
      LogGrpcCall(CallInfo(call, method, 0), status, nullptr);
      return new RefusedStream(status);
    }
    GrpcCallInfo info = CallInfo(call, method, (*stream)->id());
    return GenerationStreamReactor::Start(std::move(info), std::move(stream).value());
  }

  // Authenticates, decodes and, once the model is loaded, runs `work(tenant, request,
  // &response)` and answers with its response or status: on this thread, or on `worker`'s
  // when given (work that may block). `work` must then not capture by reference.
  template <typename Request, typename Response, typename Work>
  grpc::ServerUnaryReactor* Answer(grpc::CallbackServerContext* call, const grpc::ByteBuffer& request_bytes,
                                   grpc::ByteBuffer* response_bytes, ReactorExecutor* worker, Work work) {
    grpc::ServerUnaryReactor* reactor = call->DefaultReactor();
    std::string tenant;
    Status status = Authenticate(call, &tenant);
    if (status.ok()) status = ModelLoaded();
    if (!status.ok()) {
      reactor->Finish(ToGrpcStatus(status));
      return reactor;
    }
    Request request;
    if (grpc::Status parsed = ParseMessage(request_bytes, &request); !parsed.ok()) {
      reactor->Finish(parsed);
      return reactor;
    }
    auto answer = [reactor, response_bytes, tenant = std::move(tenant), request = std::move(request), work] {
      Response response;
      const Status done = work(tenant, request, &response);
      if (done.ok()) SerializeMessage(response, response_bytes);
      reactor->Finish(ToGrpcStatus(done));
    };
    if (worker == nullptr) {
      answer();
    } else {
      worker->Post(std::move(answer));
    }
    return reactor;
  }

  ServerContext* const ctx_;
  const ApiKeyAuth auth_;
  RequestBuilder builder_;
  // Reactors react to engine output on its thread (grpc_reactors.h); they hold weak
  // references, so it goes with the service, after the server has shut down.
  const std::shared_ptr<ReactorExecutor> executor_ = std::make_shared<ReactorExecutor>();
  // Pin calls (their tasks finish their calls, so the server's shutdown waits for them and
  // cancels them: none is left when these threads are joined). Creation has its own thread
  // so that a long prefill does not hold up listing or deleting pins.
  ReactorExecutor pin_worker_;
  ReactorExecutor pin_admin_;
  const std::shared_ptr<const int> in_flight_ = std::make_shared<const int>(0);
  std::atomic<bool> draining_{false};
  // Submits structured requests: as many threads as requests may wait for a compile at once
  // (ServerOptions::grammar_compile_slots). Last: joined first, while what its tasks use exists
  // (tasks still queued then are dropped; by then every call is done).
  boost::asio::thread_pool submit_pool_;
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
    builder.AddListeningPort(address, Credentials(ctx_->tls), &port_);
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
    // The running generation calls finish first, and their clients get a moment to read the
    // last frames: gRPC closes the connections as soon as its calls are done, and a client
    // still reading then lost its stream's end ("Broken pipe"; rare, seen under a loaded ctest).
    if (service_.DrainGenerationCalls(deadline)) std::this_thread::sleep_for(std::chrono::milliseconds(100));
    server_->Shutdown(deadline);  // refuses new calls; cancels the rest at the deadline
    server_->Wait();
  }

 private:
  // TLS on the HTTP server's certificate; with a client CA, clients must present a
  // certificate that chains to it.
  static std::shared_ptr<grpc::ServerCredentials> Credentials(const TlsMaterial& tls) {
    if (!tls.enabled()) return grpc::InsecureServerCredentials();
    grpc::SslServerCredentialsOptions options(tls.mutual() ? GRPC_SSL_REQUEST_AND_REQUIRE_CLIENT_CERTIFICATE_AND_VERIFY
                                                           : GRPC_SSL_DONT_REQUEST_CLIENT_CERTIFICATE);
    options.pem_root_certs = tls.client_ca_pem;
    options.pem_key_cert_pairs.push_back({tls.key_pem, tls.cert_chain_pem});
    return grpc::SslServerCredentials(options);
  }

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
