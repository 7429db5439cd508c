// bench_long_context: the CPU backend at long context, where attention, not the weights,
// decides the speed (issue 17). synthetic:150m with F16 matrices, F16 KV cache, 2 threads,
// driven directly (CpuBackend + KvCacheManager + ModelRunner, no engine):
//
//   prefill: a C-token prompt in chunks of 512 tokens, as the server prefills (tokens/s);
//   decode:  32 single-token steps after it, one stream (tokens/s), against the roofline
//            bandwidth / (weight bytes + KV bytes read per token at that context);
//
// for C = 512, 2048 and 4096, in F32 and BF16 compute (--compute-dtype) in the same run; then
// at C = 4096 in F32 compute with the F16, INT8, INT4 and INT4C KV caches side by side (what
// decoding quantized blocks, reading keys per channel and the staged block cost attention); and
// prefill at C = 4096 with attention query tiles of 1, 4, 8 and 16 tokens.
//
// Usage: bench_long_context [--output FILE] [--quick] [--kv-only]  (--kv-only: the KV dtype table)
#include <omp.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <ctime>
#include <fmt/format.h>
#include <fstream>
#include <memory>
#include <string>
#include <vector>

#include <unistd.h>

#include "bench/bandwidth_probe.h"
#include "bench/bench_report.h"
#include "bench/single_stream.h"
#include "cache/kv_cache_manager.h"
#include "engine/backend/cpu/cpu_backend.h"
#include "engine/backend/cpu/kernels.h"
#include "engine/model_runner.h"

namespace kvserve {
namespace {

using Clock = std::chrono::steady_clock;
double Seconds(Clock::time_point since) { return std::chrono::duration<double>(Clock::now() - since).count(); }

constexpr int kChunk = 512, kDecode = 32, kThreads = 2;

struct Result {
  double prefill_tps = 0, decode_tps = 0;
};

// One prefill of `context` tokens and kDecode decode steps; the best of `reps` runs each.
Result Run(const Model& model, ComputeDtype compute, int context, int reps, KvDtype kv = KvDtype::kF16,
           int query_tile = CpuBackendOptions{}.attention_query_tile) {
  const ModelConfig& c = model.config();
  SingleStream s1(model, kThreads, kChunk, (context + kDecode) / 16 + 2, compute, kv, query_tile);
  KvCacheManager& cache = s1.cache;
  ModelRunner& runner = s1.runner;
  std::vector<float>& logits = s1.logits;
  Result best;
  for (int rep = 0; rep < reps; ++rep) {
    const SeqId seq = rep + 1;
    std::vector<int32_t> tokens = {1};
    for (int i = 1; i < context; ++i) tokens.push_back(3 + (i * 7919) % (c.vocab_size - 3));
    auto t0 = Clock::now();
    for (int start = 0; start < context; start += kChunk) {
      const int n = std::min(kChunk, context - start);
      CHECK(cache.AllocateSlots(seq, n).has_value());
      ScheduledSeq s{seq, std::span(tokens).subspan(start, n), start, start + n == context ? 1 : 0};
      CHECK(runner.Execute(std::span(&s, 1), logits).ok());
    }
    best.prefill_tps = std::max(best.prefill_tps, context / Seconds(t0));
    t0 = Clock::now();
    for (int i = 0; i < kDecode; ++i) {
      tokens.push_back(static_cast<int32_t>(std::max_element(logits.begin(), logits.end()) - logits.begin()));
      const int pos = static_cast<int>(tokens.size()) - 1;
      CHECK(cache.AllocateSlots(seq, 1).has_value());
      ScheduledSeq d{seq, std::span(tokens).subspan(pos, 1), pos, 1};
      CHECK(runner.Execute(std::span(&d, 1), logits).ok());
    }
    best.decode_tps = std::max(best.decode_tps, kDecode / Seconds(t0));
    cache.Free(seq);
  }
  return best;
}

int Main(int argc, char** argv) {
  std::string output, command = argv[0];
  bool quick = false, kv_only = false;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    command += " " + a;
    if (a == "--output" && i + 1 < argc) {
      output = argv[++i];
      command += std::string(" ") + argv[i];
    } else if (a == "--quick") {
      quick = true;
    } else if (a == "--kv-only") {
      kv_only = true;
    } else {
      std::fprintf(stderr, "usage: bench_long_context [--output FILE] [--quick] [--kv-only]\n");
      return 2;
    }
  }
  StatusOr<std::unique_ptr<Model>> loaded = Model::Load("synthetic:150m:f16");
  CHECK(loaded.ok()) << loaded.status().ToString();
  const Model& model = **loaded;
  const ModelConfig& c = model.config();
  const ModelWeights& w = model.weights();
  const double weight_bytes = static_cast<double>(w.total_bytes) -
                              (w.output.data != w.token_embd.data ? w.token_embd.nbytes() - w.token_embd.row_bytes : 0);
  const double kv_bytes_per_position = 2.0 * c.num_layers * c.kv_dim() * 2;  // K and V, F16

  char date[16];
  const std::time_t now = std::time(nullptr);
  std::strftime(date, sizeof date, "%Y-%m-%d", std::gmtime(&now));
  std::string md = "# Long context on the CPU backend (synthetic:150m, F16 matrices, F16 KV cache)\n\n";
  md += fmt::format("Command (Release build, run alone on the machine): `{}`\n\n", command);
  md += fmt::format("Date: {}. Machine: {}, {} cores visible, {} threads; kernels: {}.\n\n", date, bench_report::CpuModelName(),
                    omp_get_num_procs(), kThreads, cpu::Kernels().isa);
  md += fmt::format(
      "Prefill: a C-token prompt in chunks of {} tokens (tokens/s). Decode: {} single-token steps after it "
      "(tokens/s). Best of the runs. Roofline = measured read bandwidth (2 OpenMP threads, 1 GiB, median of 5, "
      "measured before each row) / (weights {:.0f} MB + KV {:.0f} KB per context position).\n\n",
      kChunk, kDecode, weight_bytes / 1e6, kv_bytes_per_position / 1e3);
  const long l3 = sysconf(_SC_LEVEL3_CACHE_SIZE);
  if (l3 > 0 && static_cast<double>(l3) >= weight_bytes) {
    md += fmt::format(
        "**This CPU's L3 cache ({} MiB) holds the weights**, so decode reads them from L3 and beats the "
        "memory roofline: read its column as DRAM-bound reference only.\n\n",
        l3 >> 20);
  }
  if (!kv_only) {
    md += "| context | compute | prefill tok/s | decode tok/s | bandwidth GB/s | decode roofline tok/s | "
          "decode / roofline |\n|---|---|---|---|---|---|---|\n";
  }
  std::printf("%s", md.c_str());
  std::fflush(stdout);
  BandwidthProbe probe(kThreads);
  for (int context : {512, 2048, 4096}) {
    if (kv_only) break;
    for (ComputeDtype compute : {ComputeDtype::kF32, ComputeDtype::kBF16}) {
      const double bandwidth = probe.Measure(5).median;
      const Result r = Run(model, compute, context, quick ? 1 : 3);
      const double roofline = bandwidth * 1e9 / (weight_bytes + kv_bytes_per_position * context);
      const std::string row =
          fmt::format("| {} | {} | {:.0f} | {:.1f} | {:.1f} | {:.0f} | {:.0f}% |\n", context, ComputeDtypeName(compute),
                      r.prefill_tps, r.decode_tps, bandwidth, roofline, 100 * r.decode_tps / roofline);
      std::printf("%s", row.c_str());
      std::fflush(stdout);
      md += row;
    }
  }
  md += "\n## KV cache dtypes at 4096 tokens (F32 compute)\n\nThe caches in turn, twice; best of each.\n\n"
        "| kv cache | prefill tok/s | decode tok/s | prefill x f16 | decode x f16 |\n|---|---|---|---|---|\n";
  const KvDtype kvs[] = {KvDtype::kF16, KvDtype::kInt8, KvDtype::kInt4, KvDtype::kInt4C};
  constexpr int kNumKv = static_cast<int>(std::size(kvs));
  Result by_kv[kNumKv];
  for (int round = 0; round < 2; ++round) {
    for (int i = 0; i < kNumKv; ++i) {
      const Result r = Run(model, ComputeDtype::kF32, 4096, 1, kvs[i]);
      by_kv[i].prefill_tps = std::max(by_kv[i].prefill_tps, r.prefill_tps);
      by_kv[i].decode_tps = std::max(by_kv[i].decode_tps, r.decode_tps);
    }
  }
  for (int i = 0; i < kNumKv; ++i) {
    const std::string row = fmt::format("| {} | {:.0f} | {:.1f} | {:.2f} | {:.2f} |\n", KvDtypeName(kvs[i]),
                                        by_kv[i].prefill_tps, by_kv[i].decode_tps,
                                        by_kv[i].prefill_tps / by_kv[0].prefill_tps,
                                        by_kv[i].decode_tps / by_kv[0].decode_tps);
    std::printf("%s", row.c_str());
    md += row;
  }
  if (kv_only) return bench_report::WriteMarkdown(output, md);
  md += "\n## Attention query tiles at 4096 tokens (F16 KV, F32 compute)\n\nA prefill chunk's queries read each "
        "K/V block once per tile of consecutive queries (CpuBackendOptions::attention_query_tile; 1 = each query "
        "alone, the results are the same bits). Alternated twice; best of each.\n\n"
        "| query tile | prefill tok/s | prefill x tile 1 |\n|---|---|---|\n";
  const int tiles[] = {1, 4, 8, 16};
  double tile_tps[4] = {};
  for (int round = 0; round < 2; ++round) {
    for (int i = 0; i < 4; ++i) {
      tile_tps[i] = std::max(tile_tps[i], Run(model, ComputeDtype::kF32, 4096, 1, KvDtype::kF16, tiles[i]).prefill_tps);
    }
  }
  for (int i = 0; i < 4; ++i) {
    const std::string row = fmt::format("| {} | {:.0f} | {:.2f} |\n", tiles[i], tile_tps[i], tile_tps[i] / tile_tps[0]);
    std::printf("%s", row.c_str());
    md += row;
  }
  if (probe.sink() == 42) std::printf(" ");  // keeps the sums alive
  return bench_report::WriteMarkdown(output, md);
}

}  // namespace
}  // namespace kvserve

int main(int argc, char** argv) { return kvserve::Main(argc, argv); }
