// The soak workload: request plans, the client loop and outcome classification (see
// soak_workload.h).
#include "tools/soak/soak_workload.h"

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <atomic>
#include <random>
#include <thread>

#include "tools/http_client/http_client.h"
#include "tools/soak/soak_client.h"

namespace kvserve::soak {
namespace {

using json = nlohmann::json;

const char* const kPrompts[] = {
    "Once upon a time", "The little dog", "Lily wanted to", "One day, a boy named Tom", "The sun was",
    "Once upon a time, there was a little girl named Lily. She loved to play outside in the park with her friends",
    "Once upon a time, there was a little girl named Lily. She had a red ball",
    "Mom said", "In the big forest", "The cat and the bird were friends."};
const char* const kWords[] = {"the", "a", "ball", "happy", "tree", "said", ".", "and", "ran", "sun"};

struct Plan {
  std::string path;
  json body;
  std::string raw_body;  // invalid requests: sent as is
  bool stream = false;
  bool chat = false;
  bool invalid = false;
  int session_slot = -1;          // index into the worker's sessions
  std::string greedy_key;         // non-empty: compare with the first complete output
  enum class Cut { kNone, kWhileSending, kBeforeReading, kAfterHead, kAfterEvents } cut = Cut::kNone;
  double cut_fraction = 0;        // kWhileSending: part of the request sent
  int cut_events = 0;             // kAfterEvents
};

struct Conversation {
  std::string id;
  json messages = json::array();
};

}  // namespace

class Workload::Impl {
 public:
  Impl(const WorkloadOptions& o, std::string host, int port, std::string model_id)
      : o_(o), host_(std::move(host)), port_(port), model_id_(std::move(model_id)) {}

  void Run() {
    std::vector<std::thread> workers;
    for (int w = 0; w < o_.concurrency; ++w) workers.emplace_back([this, w] { Worker(w); });
    for (std::thread& t : workers) t.join();
  }

  int completed() const { return completed_.load(); }
  Figures& figures() { return figures_; }

 private:
  std::string Prompt(std::mt19937_64& rng) {
    std::string p = kPrompts[rng() % std::size(kPrompts)];
    const int extra = static_cast<int>(rng() % 4 == 0 ? rng() % 200 : rng() % 8);
    for (int i = 0; i < extra; ++i) p += std::string(" ") + kWords[rng() % std::size(kWords)];
    return p;
  }

  void RandomSampling(std::mt19937_64& rng, json* b) {
    std::uniform_real_distribution<double> u(0, 1);
    json& j = *b;
    j["temperature"] = rng() % 3 == 0 ? 0.0 : u(rng) * 1.5;
    if (rng() % 2) j["top_p"] = 0.05 + 0.95 * u(rng);
    if (rng() % 3 == 0) j["top_k"] = static_cast<int>(rng() % 60) - 1;
    if (rng() % 4 == 0) j["min_p"] = 0.2 * u(rng);
    if (rng() % 4 == 0) j["presence_penalty"] = 4 * u(rng) - 2;
    if (rng() % 4 == 0) j["frequency_penalty"] = 4 * u(rng) - 2;
    if (rng() % 4 == 0) j["repetition_penalty"] = 0.5 + u(rng);
    if (rng() % 3 == 0) j["seed"] = rng() % 1000;
    if (rng() % 4 == 0) j["stop"] = json::array({kWords[rng() % std::size(kWords)], "\n\n"});
    if (rng() % 5 == 0) j["logit_bias"] = json{{std::to_string(rng() % 256), 10 * u(rng) - 5}};
    if (rng() % 6 == 0) j["ignore_eos"] = true;
    if (rng() % 5 == 0) j["cache_salt"] = fmt::format("tenant-{}", rng() % 3);
    const int max_tokens = 1 + static_cast<int>(rng() % static_cast<uint64_t>(o_.max_tokens));
    j["max_tokens"] = max_tokens;
    if (rng() % 5 == 0) j["min_tokens"] = static_cast<int>(rng() % static_cast<uint64_t>(max_tokens + 1));
  }

  json InvalidBody(std::mt19937_64& rng, bool* chat, std::string* raw) {
    const json m = model_id_;
    switch (rng() % 12) {
      case 0: *raw = "{\"model\": "; return nullptr;
      case 1: return {{"model", m}, {"prompt", "x"}, {"temperature", "hot"}};
      case 2: return {{"model", m}, {"prompt", "x"}, {"max_tokens", -1}};
      case 3: return {{"model", m}};
      case 4: return {{"model", m}, {"prompt", json::array({999999})}};
      case 5: return {{"model", "no-such-model"}, {"prompt", "x"}};
      case 6: *chat = true; return {{"model", m}, {"messages", json::array()}};
      case 7: return {{"model", m}, {"prompt", "x"}, {"top_p", 0}};
      case 8: return {{"model", m}, {"prompt", "x"}, {"n", 100}};
      case 9: {
        json stops = json::array();
        for (int i = 0; i < 17; ++i) stops.push_back(fmt::format("s{}", i));
        return {{"model", m}, {"prompt", "x"}, {"stop", stops}};
      }
      case 10: return {{"model", m}, {"prompt", "x"}, {"max_tokens", 1 << 24}};
      default:
        *chat = true;
        return {{"model", m}, {"messages", json::array({{{"role", "wizard"}, {"content", "x"}}})}};
    }
  }

  Plan MakePlan(std::mt19937_64& rng, std::vector<Conversation>& sessions, int worker) {
    std::uniform_real_distribution<double> u(0, 1);
    Plan p;
    if (u(rng) < o_.invalid_fraction) {
      p.invalid = true;
      p.body = InvalidBody(rng, &p.chat, &p.raw_body);
    } else if (u(rng) < 0.1) {  // greedy repeats: the same output every time
      const int k = static_cast<int>(rng() % 4);
      p.greedy_key = fmt::format("g{}", k);
      p.body = {{"model", model_id_}, {"prompt", kPrompts[5 + k]}, {"temperature", 0}, {"max_tokens", 24},
                {"ignore_eos", true}};
    } else if (u(rng) < 0.3) {  // chat, half of it in sessions
      p.chat = true;
      p.body = {{"model", model_id_}};
      RandomSampling(rng, &p.body);
      p.body["max_tokens"] = std::min(p.body["max_tokens"].get<int>(), 32);
      p.body.erase("min_tokens");
      if (rng() % 2) {
        p.session_slot = static_cast<int>(rng() % sessions.size());
        Conversation& c = sessions[p.session_slot];
        if (c.id.empty() || c.messages.size() > 8) {
          c.id = fmt::format("soak-{}-{}", worker, rng());
          c.messages = json::array();
        }
        c.messages.push_back({{"role", "user"}, {"content", Prompt(rng)}});
        p.body["messages"] = c.messages;
        p.body["session_id"] = c.id;
        p.body.erase("cache_salt");
      } else {
        p.body["messages"] = json::array({{{"role", "user"}, {"content", Prompt(rng)}}});
        if (rng() % 3 == 0) {
          p.body["logprobs"] = true;
          p.body["top_logprobs"] = static_cast<int>(rng() % 5);
        }
      }
    } else {
      p.body = {{"model", model_id_}};
      RandomSampling(rng, &p.body);
      if (rng() % 5 == 0) {
        p.body["prompt"] = json::array({1, 400, 401, 402, 403});
      } else {
        p.body["prompt"] = Prompt(rng);
      }
      if (rng() % 4 == 0) p.body["n"] = 1 + static_cast<int>(rng() % 3);
      if (rng() % 5 == 0) p.body["logprobs"] = static_cast<int>(rng() % 5);
      if (rng() % 8 == 0) p.body["echo"] = true;
    }
    p.path = p.chat ? "/v1/chat/completions" : "/v1/completions";
    if (!p.invalid && rng() % 2) {
      p.stream = true;
      p.body["stream"] = true;
      if (rng() % 2) p.body["stream_options"] = {{"include_usage", true}};
    }
    if (u(rng) < o_.disconnect_fraction) {
      const double r = u(rng);
      p.cut = r < 0.15 ? Plan::Cut::kWhileSending
              : r < 0.4 ? Plan::Cut::kBeforeReading
              : r < 0.55 || !p.stream ? Plan::Cut::kAfterHead
                                     : Plan::Cut::kAfterEvents;
      p.cut_fraction = u(rng);
      p.cut_events = 1 + static_cast<int>(rng() % 8);
    }
    return p;
  }

  void Worker(int worker) {
    std::mt19937_64 rng(o_.seed * 1000003 + static_cast<uint64_t>(worker));
    std::vector<Conversation> sessions(4);
    bench::HttpConnection conn(bench::Url{host_, port_, ""}, /*timeout_seconds=*/120);
    for (;;) {
      const int index = next_.fetch_add(1);
      if (index >= o_.requests) break;
      Plan plan = MakePlan(rng, sessions, worker);
      Execute(plan, &conn, sessions);
      completed_.fetch_add(1);
    }
  }

  void Execute(Plan& plan, bench::HttpConnection* conn, std::vector<Conversation>& sessions) {
    {
      std::lock_guard<std::mutex> lock(figures_.mu);
      figures_.streamed += plan.stream;
      figures_.chat += plan.chat;
      figures_.session_turns += plan.session_slot >= 0;
      figures_.invalid += plan.invalid;
      figures_.disconnect_planned += plan.cut != Plan::Cut::kNone;
    }
    const std::string body = plan.raw_body.empty() ? plan.body.dump() : plan.raw_body;
    const std::string request = conn->FormatRequest("POST", plan.path, body, AuthHeaders(o_.api_key));
    const std::string what = fmt::format("{} {}", plan.path, body.substr(0, 300));
    auto forget_session = [&] {
      if (plan.session_slot >= 0) sessions[plan.session_slot].id.clear();  // start a new conversation
    };
    if (!conn->open() && !conn->Connect().ok()) {
      figures_.Add(Outcome::kUnexpected, 0, "connect failed: " + what);
      return;
    }
    if (plan.cut == Plan::Cut::kWhileSending) {
      const size_t n = static_cast<size_t>(plan.cut_fraction * static_cast<double>(request.size()));
      (void)conn->Send(std::string_view(request).substr(0, n));
      conn->Close();
      forget_session();
      figures_.Add(Outcome::kDisconnected, 0, "");
      return;
    }
    if (!conn->Send(request).ok()) {  // a kept-alive connection the server closed: retry once
      if (!conn->Connect().ok() || !conn->Send(request).ok()) {
        conn->Close();
        figures_.Add(Outcome::kUnexpected, 0, "send failed: " + what);
        return;
      }
    }
    if (plan.cut == Plan::Cut::kBeforeReading) {
      conn->Close();
      forget_session();
      figures_.Add(Outcome::kDisconnected, 0, "");
      return;
    }
    StatusOr<bench::ResponseHead> read_head = conn->ReadHead();
    if (!read_head.ok()) {
      conn->Close();
      figures_.Add(Outcome::kUnexpected, 0, "no response head: " + what);
      return;
    }
    const bench::ResponseHead& head = *read_head;
    const bool sse = head.content_type.starts_with("text/event-stream");
    // A 5xx is read to the end even by a client about to leave, so that it can be classified.
    const bool leave = head.status < 500 || sse;
    if (leave && (plan.cut == Plan::Cut::kAfterHead || (plan.cut == Plan::Cut::kAfterEvents && !sse))) {
      conn->Close();
      forget_session();
      figures_.Add(Outcome::kDisconnected, head.status, "");
      return;
    }
    std::string text;
    int events = 0;
    bool cut = false;
    const bool read = conn->ReadBody(head, [&](std::string_view d) {
      text += d;
      if (sse && plan.cut == Plan::Cut::kAfterEvents) {
        events = static_cast<int>(std::count(text.begin(), text.end(), '\n')) / 2;
        if (events >= plan.cut_events) cut = true;
      }
      return !cut;
    }).ok();
    if (cut || !read) conn->Close();  // ReadBody closes when the server does
    if (cut) {
      forget_session();
      figures_.Add(Outcome::kDisconnected, head.status, "");
      return;
    }
    if (!read) {
      figures_.Add(Outcome::kUnexpected, head.status, "body read failed: " + what);
      return;
    }
    Classify(plan, head, text, what, sessions);
  }

  void Classify(const Plan& plan, const bench::ResponseHead& head, const std::string& text, const std::string& what,
                std::vector<Conversation>& sessions) {
    const int status = head.status;
    if (plan.invalid) {
      const bool ok = status >= 400 && status < 500 && status != 429;
      figures_.Add(ok ? Outcome::kRejectedAsExpected : Outcome::kUnexpected, status,
                   fmt::format("invalid request got {}: {}", status, what));
      return;
    }
    if (status == 429) return figures_.Add(Outcome::kTooMany, status, "");
    if (status >= 500 && o_.faults_injected && text.find("the forward pass failed") != std::string::npos) {
      return figures_.Add(Outcome::kInjectedFault, status, "");
    }
    if (status != 200) {
      return figures_.Add(Outcome::kUnexpected, status, fmt::format("status {}: {} -> {}", status, what, text));
    }
    std::string content;
    if (plan.stream) {
      if (text.size() < 14 || text.compare(text.size() - 14, 14, "data: [DONE]\n\n") != 0) {
        return figures_.Add(Outcome::kUnexpected, status, "stream without [DONE]: " + what);
      }
      size_t pos = 0;
      while (pos < text.size()) {
        const size_t end = text.find("\n\n", pos);
        const std::string event = text.substr(pos + 6, end - pos - 6);
        pos = end + 2;
        if (event == "[DONE]") break;
        const json e = json::parse(event, nullptr, false);
        if (e.is_discarded()) return figures_.Add(Outcome::kUnexpected, status, "bad SSE event: " + what);
        if (e.contains("error")) {
          const bool injected = o_.faults_injected && event.find("the forward pass failed") != std::string::npos;
          return figures_.Add(injected ? Outcome::kInjectedFault : Outcome::kUnexpected, status,
                              "error event: " + event + " for " + what);
        }
        for (const json& c : e.value("choices", json::array())) {
          if (c.value("index", 0) != 0) continue;
          if (plan.chat && c.contains("delta") && c["delta"].contains("content")) {
            content += c["delta"]["content"].get<std::string>();
          } else if (!plan.chat && c.contains("text")) {
            content += c["text"].get<std::string>();
          }
        }
      }
    } else {
      const json r = json::parse(text, nullptr, false);
      if (r.is_discarded() || !r.contains("choices") || !r.contains("usage") || r["choices"].empty()) {
        return figures_.Add(Outcome::kUnexpected, status, "malformed response: " + text.substr(0, 200));
      }
      const json& c = r["choices"][0];
      content = plan.chat ? c["message"]["content"].get<std::string>() : c["text"].get<std::string>();
    }
    if (!plan.greedy_key.empty()) {
      std::lock_guard<std::mutex> lock(figures_.mu);
      ++figures_.greedy_checks;
      auto [it, inserted] = figures_.greedy_reference.emplace(plan.greedy_key, content);
      if (!inserted && it->second != content) {
        ++figures_.greedy_mismatches;
        if (figures_.unexpected.size() < 20) {
          figures_.unexpected.push_back(fmt::format("greedy mismatch for {}: '{}' vs '{}'", plan.greedy_key,
                                                    it->second, content));
        }
      }
    }
    if (plan.session_slot >= 0) {
      sessions[plan.session_slot].messages.push_back({{"role", "assistant"}, {"content", content}});
    }
    figures_.Add(Outcome::kOk, status, "");
  }

  const WorkloadOptions o_;
  const std::string host_;
  const int port_;
  const std::string model_id_;
  std::atomic<int> next_{0};
  std::atomic<int> completed_{0};
  Figures figures_;
};

Workload::Workload(const WorkloadOptions& options, std::string host, int port, std::string model_id)
    : impl_(std::make_unique<Impl>(options, std::move(host), port, std::move(model_id))) {}
Workload::~Workload() = default;
void Workload::Run() { impl_->Run(); }
int Workload::completed() const { return impl_->completed(); }
Figures& Workload::figures() { return impl_->figures(); }

}  // namespace kvserve::soak
