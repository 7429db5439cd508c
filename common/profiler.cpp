#include "common/profiler.h"

#include <fmt/format.h>

#include <ctime>

namespace kvserve {

int64_t Profiler::ThreadCpuNanos() {
  timespec ts{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return int64_t{ts.tv_sec} * 1000000000 + ts.tv_nsec;
}

const char* ProfileOpName(ProfileOp op) {
  switch (op) {
    case ProfileOp::kSchedule: return "schedule";
    case ProfileOp::kBatchBuild: return "batch build";
    case ProfileOp::kSample: return "sample";
    case ProfileOp::kDetokenize: return "detokenize + stop strings";
    case ProfileOp::kPublish: return "publish (streams, stats)";
    case ProfileOp::kEmbed: return "forward: embedding";
    case ProfileOp::kNorm: return "forward: rms norm";
    case ProfileOp::kQkv: return "forward: q/k/v projections";
    case ProfileOp::kRope: return "forward: rope";
    case ProfileOp::kKvWrite: return "forward: kv cache write";
    case ProfileOp::kAttention: return "forward: attention";
    case ProfileOp::kAttnOut: return "forward: attention output projection";
    case ProfileOp::kGateUp: return "forward: ffn gate/up";
    case ProfileOp::kSwiGlu: return "forward: swiglu";
    case ProfileOp::kDown: return "forward: ffn down";
    case ProfileOp::kLogits: return "forward: final norm + logits";
    case ProfileOp::kNetworkWrite: return "network writes (server threads)";
    case ProfileOp::kCount: break;
  }
  return "unknown";
}

bool IsForwardOp(ProfileOp op) { return op >= ProfileOp::kEmbed && op <= ProfileOp::kLogits; }

void Profiler::Reset() {
  for (auto& n : ns_) n.store(0, std::memory_order_relaxed);
  steps_.store(0, std::memory_order_relaxed);
  step_ns_.store(0, std::memory_order_relaxed);
}

std::string Profiler::Report() const {
  const int64_t steps = steps_.load(std::memory_order_relaxed);
  const double step_ms = steps ? step_ns_.load(std::memory_order_relaxed) / 1e6 / steps : 0;
  std::string out = fmt::format("{} steps, {:.3f} ms per step\n\n| part | ms/step | share of step |\n|---|---|---|\n",
                                steps, step_ms);
  double forward_ms = 0;
  for (int i = 0; i < static_cast<int>(ProfileOp::kCount); ++i) {
    const auto op = static_cast<ProfileOp>(i);
    const double ms = steps ? ns_[i].load(std::memory_order_relaxed) / 1e6 / steps : 0;
    if (IsForwardOp(op)) forward_ms += ms;
    out += fmt::format("| {} | {:.4f} | {:.1f}% |\n", ProfileOpName(op), ms, step_ms > 0 ? 100 * ms / step_ms : 0);
  }
  out += fmt::format("| **forward pass** | **{:.4f}** | **{:.1f}%** |\n", forward_ms,
                     step_ms > 0 ? 100 * forward_ms / step_ms : 0);
  out += fmt::format("| **engine step outside the forward pass** | **{:.4f}** | **{:.1f}%** |\n",
                     step_ms - forward_ms, step_ms > 0 ? 100 * (step_ms - forward_ms) / step_ms : 0);
  return out;
}

}  // namespace kvserve
