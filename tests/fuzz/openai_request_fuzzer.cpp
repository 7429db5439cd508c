// Fuzz target: an OpenAI request body -> engine request, through the real HTTP router
// (server/http/http_router.cpp: server/http/openai_codec.cpp decoding, tokenization, chat-template
// rendering, Engine::Submit validation) into a real engine running the synthetic:tiny model,
// and the response formatting back (server/http/http_generation.cpp, openai_format.cpp).
//
// Input: byte 0 picks the route ('0' + n: 0 /v1/completions, 1 /v1/chat/completions,
// 2 /tokenize, 3 /detokenize; low 2 bits); the rest is the body. A generation is allowed to run
// for 50 ms, then aborted (as a client that goes away), and must end within 10 s.
//
// Checks: no crash / UB; no 5xx reply (every malformed body is a 4xx); every reply body and
// SSE event is valid JSON; the KV cache passes VerifyIntegrity after every engine step
// (EngineTestHooks::verify_integrity_each_step) and after every input.
#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <mutex>
#include <nlohmann/json.hpp>
#include <string>

#include "cli/engine_options.h"
#include "server/http/http_router.h"
#include "server/api/server_context.h"
#include "tests/fuzz/fuzz_util.h"

namespace kvserve::fuzz {
namespace {

struct World {
  std::shared_ptr<const Model> model;
  std::unique_ptr<Engine> engine;
  ServerContext ctx;
  std::unique_ptr<HttpRouter> router;
};

World& TheWorld() {
  static World* w = [] {
    auto* world = new World;
    StatusOr<std::unique_ptr<Model>> model = Model::Load("synthetic:tiny");
    FUZZ_CHECK(model.ok());
    world->model = std::move(model).value();
    EngineFlags flags;
    flags.model = "synthetic:tiny";
    flags.device = "cpu";
    flags.threads = 1;
    flags.max_num_seqs = 16;
    flags.max_num_batched_tokens = 256;
    flags.kv_cache_memory = 256 * 1024;
    flags.max_sessions = 32;
    StatusOr<EnginePlan> plan = PlanEngine(flags, *world->model);
    FUZZ_CHECK(plan.ok());
    plan->config.test_hooks.verify_integrity_each_step = true;
    StatusOr<std::unique_ptr<Engine>> engine = CreateEngine(&*plan, world->model);
    FUZZ_CHECK(engine.ok());
    world->engine = std::move(engine).value();
    world->ctx.engine = world->engine.get();
    world->ctx.model_id = "synthetic:tiny";
    world->ctx.backend_name = "cpu";
    world->ctx.loading = false;
    world->router = std::make_unique<HttpRouter>(&world->ctx);
    return world;
  }();
  return *w;
}

void CheckJson(std::string_view text) {
  FUZZ_CHECK(IsValidUtf8(text));
  FUZZ_CHECK(!nlohmann::json::parse(text, nullptr, false).is_discarded());
}

// Every "data: ..." event of an SSE body is JSON (or [DONE]).
void CheckSse(std::string_view body) {
  while (!body.empty()) {
    const size_t end = body.find("\n\n");
    FUZZ_CHECK(end != std::string_view::npos);
    std::string_view event = body.substr(0, end);
    body.remove_prefix(end + 2);
    FUZZ_CHECK(event.substr(0, 6) == "data: ");
    event.remove_prefix(6);
    if (event != "[DONE]") CheckJson(event);
  }
}

// Runs a job to its end (aborting it after 50 ms); returns the HTTP status.
int RunJob(GenerationJob* job) {
  struct Signal {
    std::mutex mu;
    std::condition_variable cv;
    bool fired = false;
  };
  auto signal = std::make_shared<Signal>();
  job->SetListener([signal] {
    std::lock_guard<std::mutex> lock(signal->mu);
    signal->fired = true;
    signal->cv.notify_one();
  });
  using Clock = std::chrono::steady_clock;
  Clock::time_point deadline = Clock::now() + std::chrono::milliseconds(50);
  bool aborted = false;
  int status = 200;
  std::string body;
  bool streamed = false;
  for (;;) {
    GenerationJob::Output out = job->Poll();
    if (out.reply) {
      status = out.reply->status;
      CheckJson(out.reply->body);
    }
    streamed = streamed || out.start;
    body += out.body;
    if (out.finished) break;
    {
      std::unique_lock<std::mutex> lock(signal->mu);
      signal->cv.wait_until(lock, deadline, [&] { return signal->fired; });
      signal->fired = false;
    }
    if (Clock::now() >= deadline) {
      FUZZ_CHECK(!aborted);  // an aborted request must end within 10 s
      job->Abort();
      aborted = true;
      deadline = Clock::now() + std::chrono::seconds(10);
    }
  }
  if (streamed) CheckSse(body);
  if (aborted && status == 499) return 200;  // cancelled by us: not the server's fault
  return status;
}

}  // namespace
}  // namespace kvserve::fuzz

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace kvserve;
  using namespace kvserve::fuzz;
  if (size == 0 || size > 16384) return 0;
  World& world = TheWorld();
  static constexpr const char* kRoutes[] = {"/v1/completions", "/v1/chat/completions", "/tokenize",
                                            "/detokenize"};
  HttpRequestInfo request;
  request.method = "POST";
  request.target = kRoutes[data[0] & 3];
  request.body.assign(reinterpret_cast<const char*>(data + 1), size - 1);
  request.remote = "fuzz";
  HttpRouter::Result result = world.router->Handle(request);
  int status = 0;
  if (result.reply) {
    status = result.reply->status;
    CheckJson(result.reply->body);
  } else {
    FUZZ_CHECK(result.job != nullptr);
    status = RunJob(result.job.get());
  }
  if (status >= 500) {
    std::fprintf(stderr, "status %d for a %s request\n", status, kRoutes[data[0] & 3]);
    FUZZ_CHECK(status < 500);
  }
  KvCacheStats stats;
  const Status integrity = world.engine->VerifyCacheIntegrity(10, &stats);
  if (!integrity.ok()) std::fprintf(stderr, "%s\n", integrity.ToString().c_str());
  FUZZ_CHECK(integrity.ok());
  return 0;
}
