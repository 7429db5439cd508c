// bench_forward: forward-pass speed of the CPU backend, driven directly (CpuBackend +
// KvCacheManager + ModelRunner, no engine, greedy argmax, F16 KV cache, block 16).
//
//   prefill: one 64-token prompt in one step (tokens/s)
//   decode:  128 single-token steps after a 16-token prompt, one stream (tokens/s)
//
// on stories260K (from the shared folder; skipped with a note when absent) and synthetic:150m
// with F16, Q8_0 and Q4_0 matrices, each with 1 and 2 threads. Decode is compared with the memory
// roofline: measured read bandwidth (2 threads over a 1 GiB buffer) / weight bytes read per
// token. A second table times the F32 matrix products of the stories260K prefill (and decode)
// on the model's real shapes with our kernels and with OpenBLAS cblas_sgemm, one thread each.
//
// Usage: bench_forward [--output FILE] [--shared DIR] [--quick] [--compute-dtype f32|bf16|int8]
//                      [--model SPEC]...
// --model (repeatable): time these models (GGUF files or synthetic specs) instead of the
// default list, without the OpenBLAS table; e.g. files larger than the CPU's last-level cache,
// whose decode is bound by memory bandwidth. Compute dtype: f32 unless named.
// Prints markdown; --output also writes it (with the command line) to FILE.
#include <cblas.h>
#include <omp.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fmt/format.h>
#include <memory>
#include <string>
#include <vector>

#include <unistd.h>

#include "cache/kv_cache_manager.h"
#include "engine/backend/compute_dtype.h"
#include "engine/backend/cpu/cpu_backend.h"
#include "engine/backend/cpu/kernels.h"
#include "engine/model/weights.h"
#include "engine/model_runner.h"
#include "bench/bandwidth_probe.h"
#include "bench/bench_report.h"
#include "bench/single_stream.h"

namespace kvserve {
namespace {

using Clock = std::chrono::steady_clock;

double Seconds(Clock::time_point since) { return std::chrono::duration<double>(Clock::now() - since).count(); }

// Median of the seconds `fn()` reports, over at least `min_reps` runs and `min_seconds` in all.
template <typename Fn>
double MedianSeconds(Fn&& fn, int min_reps, double min_seconds) {
  std::vector<double> times;
  const auto start = Clock::now();
  while (static_cast<int>(times.size()) < min_reps || (Seconds(start) < min_seconds && times.size() < 10000)) {
    times.push_back(fn());
  }
  std::sort(times.begin(), times.end());
  return times[times.size() / 2];
}

// Bytes of weights one decode step reads: every matrix and vector, but only one row of the
// embedding table (unless it doubles as the output matrix).
double WeightBytesPerToken(const Model& model) {
  const ModelWeights& w = model.weights();
  double bytes = static_cast<double>(w.total_bytes);
  if (w.output.data != w.token_embd.data) bytes -= w.token_embd.nbytes() - w.token_embd.row_bytes;
  return bytes;
}

// A deterministic prompt of `n` ids in [3, vocab) (no BOS/EOS inside).
std::vector<int32_t> PromptTokens(const Model& model, int n) {
  std::vector<int32_t> ids = {model.tokenizer().bos_id() >= 0 ? model.tokenizer().bos_id() : 3};
  for (int i = 1; i < n; ++i) ids.push_back(3 + (i * 7919) % (model.config().vocab_size - 3));
  return ids;
}

struct ForwardResult {
  double prefill_tps = 0;
  double decode_tps = 0;
};

// Prefill of 64 tokens and decode of 128 tokens on `threads` threads.
ForwardResult RunForward(const Model& model, int threads, bool quick, ComputeDtype compute) {
  constexpr int kPrefill = 64, kDecodePrompt = 16, kDecode = 128;
  SingleStream s1(model, threads, kPrefill, /*blocks=*/32, compute);
  KvCacheManager& cache = s1.cache;
  ModelRunner& runner = s1.runner;
  std::vector<float>& logits = s1.logits;
  SeqId next_seq = 1;

  const std::vector<int32_t> prompt = PromptTokens(model, kPrefill);
  ForwardResult r;
  const double prefill_s = MedianSeconds([&] {
    const SeqId seq = next_seq++;
    const auto t0 = Clock::now();
    CHECK(cache.AllocateSlots(seq, kPrefill).has_value());
    ScheduledSeq s{seq, prompt, 0, true};
    CHECK(runner.Execute(std::span(&s, 1), logits).ok());
    const double seconds = Seconds(t0);
    cache.Free(seq);
    return seconds;
  }, 3, quick ? 0.2 : 1.0);
  r.prefill_tps = kPrefill / prefill_s;

  std::vector<int32_t> tokens;
  const double decode_s = MedianSeconds([&] {
    const SeqId seq = next_seq++;
    tokens.assign(prompt.begin(), prompt.begin() + kDecodePrompt);
    CHECK(cache.AllocateSlots(seq, kDecodePrompt).has_value());
    ScheduledSeq s{seq, tokens, 0, true};
    CHECK(runner.Execute(std::span(&s, 1), logits).ok());
    const auto t0 = Clock::now();
    for (int i = 0; i < kDecode; ++i) {
      tokens.push_back(static_cast<int32_t>(std::max_element(logits.begin(), logits.end()) - logits.begin()));
      const int pos = static_cast<int>(tokens.size()) - 1;
      CHECK(cache.AllocateSlots(seq, 1).has_value());
      ScheduledSeq d{seq, std::span(tokens).subspan(pos, 1), pos, true};
      CHECK(runner.Execute(std::span(&d, 1), logits).ok());
    }
    const double seconds = Seconds(t0);
    cache.Free(seq);
    return seconds;
  }, quick ? 1 : 3, quick ? 0.2 : 1.0);
  r.decode_tps = kDecode / decode_s;
  return r;
}

// ---- F32 GEMM: our kernels vs OpenBLAS -------------------------------------------------------

struct GemmShape {
  std::string name;
  WeightMatrix w;  // F32
  int count;       // times one forward pass uses it
};

struct GemmTimes {
  double ours_s = 0;
  double blas_s = 0;
  float max_diff = 0;
};

// y[T][rows] = x[T][cols] * W^T, one thread each, median of many runs.
GemmTimes TimeGemm(const WeightMatrix& w, int tokens, bool quick) {
  const int64_t rows = w.rows, cols = w.cols;
  std::vector<float> x(static_cast<size_t>(tokens) * cols), y_ours(static_cast<size_t>(tokens) * rows),
      y_blas(y_ours.size());
  for (size_t i = 0; i < x.size(); ++i) x[i] = static_cast<float>((i * 2654435761u) % 1000) / 1000.0f - 0.5f;
  const auto* wf = reinterpret_cast<const float*>(w.data);
  const cpu::PackedMatrix packed(w);  // the layout the backend computes with
  cpu::MatMulArgs args;
  args.w = &packed;
  args.x = x.data();
  args.ldx = cols;
  args.num_tokens = tokens;
  args.y = y_ours.data();
  args.ldy = rows;
  const cpu::MatMulRangeFn matmul = cpu::Kernels().matmul[cpu::WeightKind(GgmlType::kF32)];
  const double min_s = quick ? 0.05 : 0.3;
  GemmTimes t;
  t.ours_s = MedianSeconds([&] {
    const auto t0 = Clock::now();
    matmul(args, 0, packed.num_panels());
    return Seconds(t0);
  }, 5, min_s);
  t.blas_s = MedianSeconds([&] {
    const auto t0 = Clock::now();
    if (tokens == 1) {
      cblas_sgemv(CblasRowMajor, CblasNoTrans, static_cast<int>(rows), static_cast<int>(cols), 1.0f, wf,
                  static_cast<int>(cols), x.data(), 1, 0.0f, y_blas.data(), 1);
    } else {
      cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, tokens, static_cast<int>(rows), static_cast<int>(cols),
                  1.0f, x.data(), static_cast<int>(cols), wf, static_cast<int>(cols), 0.0f, y_blas.data(),
                  static_cast<int>(rows));
    }
    return Seconds(t0);
  }, 5, min_s);
  for (size_t i = 0; i < y_ours.size(); ++i) t.max_diff = std::max(t.max_diff, std::abs(y_ours[i] - y_blas[i]));
  return t;
}

std::vector<GemmShape> StoriesShapes(const Model& model) {
  const ModelWeights& w = model.weights();
  const LayerWeights& l = w.layers[0];
  const int n = static_cast<int>(w.layers.size());
  return {{"attn_q", l.wq, n},        {"attn_k", l.wk, n},      {"attn_v", l.wv, n},
          {"attn_output", l.wo, n},   {"ffn_gate", l.w_gate, n}, {"ffn_up", l.w_up, n},
          {"ffn_down", l.w_down, n},  {"output", w.output, 1}};
}

// Prints one table row per shape and the whole-pass total; returns the markdown.
std::string GemmTable(const std::vector<GemmShape>& shapes, int tokens, bool quick) {
  std::string out = fmt::format("| matrix (rows x cols) | uses | ours µs | OpenBLAS µs | faster | max abs diff |\n"
                                "|---|---|---|---|---|---|\n");
  double ours_total = 0, blas_total = 0;
  for (const GemmShape& s : shapes) {
    CHECK(s.w.type == GgmlType::kF32);
    const GemmTimes t = TimeGemm(s.w, tokens, quick);
    ours_total += t.ours_s * s.count;
    blas_total += t.blas_s * s.count;
    out += fmt::format("| {} ({} x {}) | {} | {:.2f} | {:.2f} | {} | {:.1e} |\n", s.name, s.w.rows, s.w.cols,
                       s.count, t.ours_s * 1e6, t.blas_s * 1e6, t.ours_s <= t.blas_s ? "ours" : "OpenBLAS",
                       t.max_diff);
  }
  out += fmt::format("| **all matrix products of one pass** | | **{:.1f}** | **{:.1f}** | **{}** ({:.2f}x) | |\n",
                     ours_total * 1e6, blas_total * 1e6, ours_total <= blas_total ? "ours" : "OpenBLAS",
                     std::max(ours_total, blas_total) / std::min(ours_total, blas_total));
  return out;
}

// Whole-pass totals for a range of token counts: where OpenBLAS starts to win.
std::string GemmCrossover(const std::vector<GemmShape>& shapes, bool quick) {
  std::string out = "| T | ours µs | OpenBLAS µs | faster |\n|---|---|---|---|\n";
  for (int tokens : {1, 2, 4, 8, 16, 32, 64, 128}) {
    double ours = 0, blas = 0;
    for (const GemmShape& s : shapes) {
      const GemmTimes t = TimeGemm(s.w, tokens, quick);
      ours += t.ours_s * s.count;
      blas += t.blas_s * s.count;
    }
    out += fmt::format("| {} | {:.1f} | {:.1f} | {} ({:.2f}x) |\n", tokens, ours * 1e6, blas * 1e6,
                       ours <= blas ? "ours" : "OpenBLAS", std::max(ours, blas) / std::min(ours, blas));
  }
  return out;
}

// ---- Report ----------------------------------------------------------------------------------

struct Options {
  std::string output;
  std::string shared = KVSERVE_SHARED_DIR;
  bool quick = false;
  ComputeDtype compute = ComputeDtype::kF32;
  std::vector<std::string> models;  // --model: instead of the default list
  std::string command;
};

Options ParseArgs(int argc, char** argv) {
  Options o;
  o.command = argv[0];
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    o.command += " " + a;
    if ((a == "--output" || a == "--shared") && i + 1 < argc) {
      (a == "--output" ? o.output : o.shared) = argv[++i];
      o.command += std::string(" ") + argv[i];
    } else if (a == "--quick") {
      o.quick = true;
    } else if (a == "--model" && i + 1 < argc) {
      o.models.push_back(argv[++i]);
      o.command += std::string(" ") + argv[i];
    } else if (a == "--compute-dtype" && i + 1 < argc && ParseComputeDtype(argv[i + 1]).has_value()) {
      o.compute = *ParseComputeDtype(argv[++i]);
      o.command += std::string(" ") + argv[i];
    } else {
      std::fprintf(stderr,
                   "usage: bench_forward [--output FILE] [--shared DIR] [--quick] [--compute-dtype f32|bf16|int8] "
                   "[--model SPEC]...\n");
      std::exit(2);
    }
  }
  return o;
}

int Main(int argc, char** argv) {
  const Options o = ParseArgs(argc, argv);
  std::string md = "# Forward pass on the CPU backend\n\n";
  md += fmt::format("Command (Release build, run alone on the machine): `{}`\n\n", o.command);
  md += fmt::format("Machine: {}, {} cores visible, {} MiB L3; kernels: {}; compute dtype: {}; OpenBLAS: {}.\n",
                    bench_report::CpuModelName(), omp_get_num_procs(), sysconf(_SC_LEVEL3_CACHE_SIZE) >> 20,
                    cpu::Kernels().isa, ComputeDtypeName(o.compute), openblas_get_config());
  std::printf("%s", md.c_str());
  std::fflush(stdout);
  BandwidthProbe probe(2);
  const BandwidthProbe::Result bw = probe.Measure(9);
  std::string text = fmt::format(
      "Memory read bandwidth (2 threads summing a 1 GiB buffer, median of 9 passes): **{:.1f} GB/s** "
      "(passes ranged {:.1f}-{:.1f}). The table's bandwidth column is measured again (median of 5) right "
      "before each row's runs.\n\n"
      "CpuBackend + KvCacheManager + ModelRunner driven directly (no engine), greedy, F16 KV cache, block 16. "
      "Prefill: one 64-token prompt in one step. Decode: 128 single-token steps after a 16-token prompt, "
      "one stream. Medians of repeated runs. Roofline = bandwidth / weight bytes read per decoded token "
      "(all matrices, one embedding row).\n\n"
      "| model | matrices | threads | prefill tok/s (64) | decode tok/s (128) | weights MiB/token | "
      "bandwidth GB/s | roofline tok/s | decode / roofline |\n|---|---|---|---|---|---|---|---|---|\n",
      bw.median, bw.min, bw.max);
  std::printf("%s", text.c_str());
  std::fflush(stdout);
  md += text;

  struct Entry {
    std::string label, spec;
  };
  std::vector<Entry> entries;
  const std::string stories = o.shared + "/models/stories260K.gguf";
  std::string notes;
  if (!o.models.empty()) {
    for (const std::string& m : o.models) entries.push_back({std::filesystem::path(m).filename().string(), m});
  } else if (std::filesystem::exists(stories)) {
    entries.push_back({"stories260K", stories});
  } else {
    notes += fmt::format("- stories260K skipped: {} not found (pass --shared DIR).\n", stories);
  }
  if (o.models.empty()) {
    entries.push_back({"synthetic:150m", "synthetic:150m:f16"});
    entries.push_back({"synthetic:150m", "synthetic:150m:q8_0"});
    entries.push_back({"synthetic:150m", "synthetic:150m:q4_0"});
  }

  std::unique_ptr<Model> stories_model;
  for (const Entry& e : entries) {
    auto t0 = Clock::now();
    StatusOr<std::unique_ptr<Model>> model = Model::Load(e.spec);
    if (!model.ok()) {
      std::fprintf(stderr, "cannot load %s: %s\n", e.spec.c_str(), model.status().ToString().c_str());
      return 1;
    }
    std::fprintf(stderr, "loaded %s in %.1f s\n", e.spec.c_str(), Seconds(t0));
    const double bytes = WeightBytesPerToken(**model);
    for (int threads : {1, 2}) {
      const double bandwidth = probe.Measure(5).median;
      const ForwardResult r = RunForward(**model, threads, o.quick, o.compute);
      const double roofline = bandwidth * 1e9 / bytes;
      const std::string row = fmt::format(
          "| {} | {} | {} | {:.0f} | {:.1f} | {:.2f} | {:.1f} | {:.0f} | {:.0f}% |\n", e.label,
          GgmlTypeName((*model)->weights().layers[0].wq.type), threads, r.prefill_tps, r.decode_tps,
          bytes / 1048576.0, bandwidth, roofline, 100.0 * r.decode_tps / roofline);
      std::printf("%s", row.c_str());
      std::fflush(stdout);
      md += row;
    }
    if (e.label == "stories260K") stories_model = std::move(model).value();
  }
  if (o.models.empty()) notes +=
      "- Reference, llama.cpp on this machine type (../shared/docs/BASELINE.md): stories260K decode 7930 tok/s "
      "(1 thread), 5448 (2 threads), prefill ~28k tok/s; 150m F16 decode 75 tok/s (2 threads), prefill "
      "~740 tok/s.\n"
      "- stories260K's weights (1 MiB) stay in the CPU caches, so memory bandwidth does not bound its decode; "
      "its roofline column is only an upper bound. Small steps run on one thread (a parallel region costs "
      "more than the work), so its decode speed does not change with the thread count.\n"
      "- Memory bandwidth on these shared virtual machines varies from pass to pass and run to run (see the "
      "range above); the roofline fractions move with it, and a prefill figure far below its neighbours means "
      "another process took a core during the run (OpenMP barriers then wait for a descheduled thread).\n";
  md += "\n" + notes;
  std::printf("\n%s", notes.c_str());

  if (stories_model) {
    openblas_set_num_threads(1);
    std::string g = "\n## F32 matrix products: our kernels vs OpenBLAS (stories260K shapes, 1 thread)\n\n"
                    "y[T][rows] = x[T][cols] * W^T with the model's real matrices; `uses` = times per forward "
                    "pass. OpenBLAS: cblas_sgemm (T = 64), cblas_sgemv (T = 1).\n\n### Prefill, T = 64\n\n";
    g += GemmTable(StoriesShapes(*stories_model), 64, o.quick);
    g += "\n### Decode, T = 1\n\n";
    g += GemmTable(StoriesShapes(*stories_model), 1, o.quick);
    g += "\n### All matrix products of one pass by tokens per step (T)\n\n";
    g += GemmCrossover(StoriesShapes(*stories_model), o.quick);
    std::printf("%s", g.c_str());
    md += g;
  }
  if (probe.sink() == 42) std::printf(" ");  // keeps the sums alive
  return bench_report::WriteMarkdown(o.output, md);
}

}  // namespace
}  // namespace kvserve

int main(int argc, char** argv) { return kvserve::Main(argc, argv); }
