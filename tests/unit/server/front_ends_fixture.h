// FrontEndsTest: both front ends (HTTP and gRPC) over one engine with a test model, the
// fixture of front_ends_test.cpp and front_ends_chat_test.cpp.
#pragma once

#include <boost/asio/connect.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <grpcpp/generic/generic_stub.h>
#include <grpcpp/grpcpp.h>

#include <fmt/format.h>
#include <gtest/gtest.h>

#include <sys/socket.h>

#include <future>
#include <string>
#include <vector>
#include <nlohmann/json.hpp>

#include "generation.grpc.pb.h"
#include "server/api/auth.h"
#include "server/http/http_server.h"
#include "server/grpc/grpc_server.h"
#include "server/grpc/grpc_convert.h"
#include "server/http/http_router.h"
#include "server/api/request_builder.h"
#include "tests/unit/engine/engine_test_util.h"

namespace kvserve {
namespace front_ends_test {

using json = nlohmann::json;
using ::kvserve::testing::WaitFor;

class FrontEndsTest : public ::testing::Test {
 protected:
  void Start(EngineConfig config, std::vector<std::string> keys = {}) {
    model_ = ::kvserve::testing::LoadModel(::kvserve::testing::SharedFileExists("models/stories260K.gguf")
                                               ? ::kvserve::testing::SharedPath("models/stories260K.gguf")
                                               : "synthetic:tiny");
    ASSERT_NE(model_, nullptr);
    engine_ = ::kvserve::testing::MakeEngine(model_, config);
    ctx_.engine = engine_.get();
    ctx_.model_id = "m";
    ctx_.backend_name = "cpu";
    ctx_.options.host = "127.0.0.1";
    ctx_.options.grpc_port = 0;
    ctx_.options.http_port = 0;
    ctx_.options.http_threads = 1;
    ctx_.options.api_keys = keys;
    ctx_.options.chat_template = chat_template_;
    ctx_.loading = false;
    router_ = std::make_unique<HttpRouter>(&ctx_);
    auto grpc_server = GrpcServer::Start(&ctx_);
    ASSERT_TRUE(grpc_server.ok()) << grpc_server.status().ToString();
    grpc_ = std::move(grpc_server).value();
    channel_ = grpc::CreateChannel(fmt::format("127.0.0.1:{}", grpc_->port()), grpc::InsecureChannelCredentials());
    stub_ = v1::Generation::NewStub(channel_);
  }
  // Stops both front ends and the engine (Start may follow).
  void Stop() {
    if (http_) http_->Stop();
    if (grpc_) grpc_->Shutdown(0);
    if (engine_) engine_->Stop();
    stub_.reset();
    channel_.reset();
    http_.reset();
    grpc_.reset();
    router_.reset();
    engine_.reset();
  }
  void TearDown() override { Stop(); }

  // POST/GET through the router; returns (status, body) once the job (if any) finished.
  std::pair<int, json> Http(const std::string& method, const std::string& target, const json& body = {},
                            const std::string& key = "") {
    HttpRequestInfo r;
    r.method = method;
    r.target = target;
    r.body = body.is_null() ? "" : body.dump();
    if (!key.empty()) r.authorization = "Bearer " + key;
    HttpRouter::Result result = router_->Handle(r);
    std::string text;
    int status = 200;
    if (result.reply) {
      text = result.reply->body;
      status = result.reply->status;
    } else {
      EXPECT_TRUE(WaitFor([&] {
        GenerationJob::Output out = result.job->Poll();
        if (out.reply) {
          text = out.reply->body;
          status = out.reply->status;
        }
        return out.finished;
      }, 60));
    }
    return {status, json::parse(text, nullptr, false)};
  }

  // A streaming request through the router: the SSE bytes, once the job finished.
  std::string Stream(const std::string& target, json body) {
    body["stream"] = true;
    HttpRequestInfo r;
    r.method = "POST";
    r.target = target;
    r.body = body.dump();
    HttpRouter::Result result = router_->Handle(r);
    std::string sse;
    EXPECT_TRUE(result.job);
    if (!result.job) return sse;
    EXPECT_TRUE(WaitFor([&] {
      GenerationJob::Output out = result.job->Poll();
      sse += out.body;
      return out.finished;
    }, 60));
    return sse;
  }

  // The JSON of each `data:` line of an SSE stream.
  static std::vector<json> Events(const std::string& sse) {
    std::vector<json> events;
    for (size_t at = sse.find("data: "); at != std::string::npos; at = sse.find("data: ", at + 1)) {
      json event = json::parse(sse.substr(at + 6, sse.find('\n', at) - at - 6), nullptr, false);
      if (event.is_object()) events.push_back(std::move(event));
    }
    return events;
  }

  std::unique_ptr<grpc::ClientContext> Context(const std::string& key = "", double seconds = 60) {
    auto c = std::make_unique<grpc::ClientContext>();
    c->set_deadline(std::chrono::system_clock::now() + std::chrono::milliseconds(static_cast<int64_t>(seconds * 1e3)));
    if (!key.empty()) c->AddMetadata("authorization", "Bearer " + key);
    return c;
  }

  static v1::GenerateRequest GrpcGreedy(const std::string& prompt, int max_tokens) {
    v1::GenerateRequest r;
    r.set_prompt(prompt);
    r.mutable_sampling()->set_temperature(0);
    r.mutable_sampling()->set_max_tokens(max_tokens);
    r.mutable_sampling()->set_ignore_eos(true);
    return r;
  }

  std::string chat_template_;  // --chat-template (set before Start)
  std::shared_ptr<const Model> model_;
  std::unique_ptr<Engine> engine_;
  ServerContext ctx_;
  std::unique_ptr<HttpRouter> router_;
  std::unique_ptr<GrpcServer> grpc_;
  std::unique_ptr<HttpServer> http_;
  std::shared_ptr<grpc::Channel> channel_;
  std::unique_ptr<v1::Generation::Stub> stub_;
};

}  // namespace front_ends_test
}  // namespace kvserve
