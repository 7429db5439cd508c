// The workload of `kvserve soak` (cli/cli_soak.cpp): `concurrency` client threads send
// `requests` requests over HTTP/1.1 keep-alive connections (tools/soak/soak_client.h) and classify
// every outcome. Seeded: the same options give the same requests.
//
// Mix: completions and chat, streamed or not, n up to 3, chat sessions (session_id; each
// conversation resends its whole history every turn and moves to a new session id after a
// disconnect), random valid sampling parameters, prompts with shared prefixes and a few
// salts, greedy repeats of four fixed requests (their outputs must all be equal),
// `invalid_fraction` invalid requests (a 4xx is expected), and `disconnect_fraction` clients
// that leave while sending the request, before reading, after the response head or after a
// few SSE events.
//
// Run() blocks until all requests are done; completed() and figures() may be read meanwhile
// (figures under its mutex).
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

namespace kvserve::soak {

struct WorkloadOptions {
  int requests = 500;
  int concurrency = 8;
  double disconnect_fraction = 0.3;
  double invalid_fraction = 0.05;
  uint64_t seed = 1;
  int max_tokens = 64;
  bool faults_injected = false;  // 500s saying "the forward pass failed" are expected
  std::string api_key;
};

// Outcome classes of one request.
enum class Outcome { kOk, kRejectedAsExpected, kDisconnected, kTooMany, kInjectedFault, kUnexpected };

struct Figures {
  std::mutex mu;
  std::map<Outcome, int64_t> outcomes;
  std::map<int, int64_t> statuses;  // HTTP status of requests read to the end
  std::vector<std::string> unexpected;  // first few descriptions
  int64_t injected_5xx = 0;  // injected faults that came as a 5xx status (not an in-stream error)
  int64_t greedy_checks = 0;
  int64_t greedy_mismatches = 0;
  std::map<std::string, std::string> greedy_reference;
  int64_t streamed = 0, chat = 0, session_turns = 0, invalid = 0, disconnect_planned = 0;

  void Add(Outcome o, int status, const std::string& what) {
    std::lock_guard<std::mutex> lock(mu);
    ++outcomes[o];
    if (status > 0) ++statuses[status];
    if (o == Outcome::kInjectedFault && status >= 500) ++injected_5xx;
    if (o == Outcome::kUnexpected && unexpected.size() < 20) unexpected.push_back(what);
  }
};

class Workload {
 public:
  Workload(const WorkloadOptions& options, std::string host, int port, std::string model_id);
  ~Workload();
  void Run();
  int completed() const;
  Figures& figures();

 private:
  class Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace kvserve::soak
