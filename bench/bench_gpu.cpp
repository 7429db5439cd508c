// bench_gpu: the CUDA backend on in-memory synthetic models (F16 weights generated on the
// device, so the 7B shape is ready in a second; quantized ones made on the host once per
// matrix shape and shared by the layers): device copy bandwidth, prefill tokens/s and decode
// tokens/s at several batch sizes with F16 vs INT8 KV and F16 vs quantized weights, and
// batch-1 decode as a fraction of the HBM roofline (bytes a step must read / measured
// bandwidth). Drives the backend directly
// with flat batches (no scheduler), so the figures are the backend's. Prints a Markdown table
// and optionally writes it to --out. Run by tests/gpu/run.sh.
//
//   bench_gpu [--models 1b,7b-shape] [--weights f16,q4_k] [--batches 1,16,64,128] [--kv f16,int8]
//             [--prompt 128] [--decode 64] [--bandwidth-mib 1024] [--out FILE]
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <optional>
#include <ctime>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "cache/kv_spec.h"
#include "engine/backend/cuda/cuda_backend.h"
#include "engine/model/ggml_types.h"
#include "engine/model/model_config.h"
#include "engine/model/synthetic.h"
#include "bench/bench_report.h"

namespace kvserve {
namespace {

using Clock = std::chrono::steady_clock;

struct Args {
  std::vector<std::string> models = {"1b", "7b-shape"};
  std::vector<std::string> weights = {"f16", "q4_k"};  // f16, or a type kvserve encodes
  std::vector<int> batches = {1, 16, 64, 128};
  std::vector<std::string> kv = {"f16", "int8"};
  int prompt = 128;
  int decode = 64;
  int bandwidth_mib = 1024;  // size of each buffer of the copy-bandwidth test
  std::string out;
};

std::vector<std::string> Split(const std::string& s) {
  std::vector<std::string> out;
  std::stringstream in(s);
  for (std::string item; std::getline(in, item, ',');) {
    if (!item.empty()) out.push_back(item);
  }
  return out;
}

bool ParseArgs(int argc, char** argv, Args* a) {
  for (int i = 1; i < argc; ++i) {
    const std::string k = argv[i];
    if (i + 1 >= argc) return false;
    const std::string v = argv[++i];
    if (k == "--models") {
      a->models = Split(v);
    } else if (k == "--weights") {
      a->weights = Split(v);
    } else if (k == "--batches") {
      a->batches.clear();
      for (const std::string& b : Split(v)) a->batches.push_back(std::atoi(b.c_str()));
    } else if (k == "--kv") {
      a->kv = Split(v);
    } else if (k == "--prompt") {
      a->prompt = std::atoi(v.c_str());
    } else if (k == "--decode") {
      a->decode = std::atoi(v.c_str());
    } else if (k == "--bandwidth-mib") {
      a->bandwidth_mib = std::atoi(v.c_str());
    } else if (k == "--out") {
      a->out = v;
    } else {
      return false;
    }
  }
  return a->prompt > 0 && a->decode > 4 && a->bandwidth_mib > 0 && !a->batches.empty();
}

ModelConfig ConfigOf(const SyntheticPreset& p) {
  ModelConfig c;
  c.name = std::string(p.name);
  c.vocab_size = p.vocab_size;
  c.dim = p.dim;
  c.num_layers = p.num_layers;
  c.num_heads = p.num_heads;
  c.num_kv_heads = p.num_kv_heads;
  c.head_dim = p.dim / p.num_heads;
  c.ffn_dim = p.ffn_dim;
  c.context_length = p.context_length;
  c.rope_dim = c.head_dim;
  return c;
}

// Flat batches over contiguous per-sequence blocks: sequence s owns blocks
// [s * blocks_per_seq, (s + 1) * blocks_per_seq).
struct BatchBuilder {
  int block_size = 16;
  int blocks_per_seq = 0;
  std::vector<int32_t> tokens, positions, query_start, seq_lens, tables, logits;
  std::vector<int64_t> slots;
  int max_blocks = 0;

  void Clear() {
    tokens.clear(), positions.clear(), query_start.assign(1, 0), seq_lens.clear(), tables.clear(), logits.clear();
    slots.clear();
  }
  // Sequence `seq` gets tokens at positions [start, start + n); logits for its last token.
  void Add(int seq, int start, int n, std::mt19937& rng, int vocab) {
    for (int i = 0; i < n; ++i) {
      const int pos = start + i;
      tokens.push_back(static_cast<int32_t>(3 + rng() % (vocab - 3)));
      positions.push_back(pos);
      slots.push_back(static_cast<int64_t>(seq) * blocks_per_seq * block_size + pos);
    }
    query_start.push_back(static_cast<int32_t>(tokens.size()));
    seq_lens.push_back(start + n);
    logits.push_back(static_cast<int32_t>(tokens.size()) - 1);
    max_blocks = std::max(max_blocks, (start + n + block_size - 1) / block_size);
  }
  ForwardBatch View() {
    tables.clear();
    const int S = static_cast<int>(seq_lens.size());
    for (int s = 0; s < S; ++s) {
      const int seq = seq_ids[s];
      for (int j = 0; j < max_blocks; ++j) tables.push_back(seq * blocks_per_seq + j);
    }
    ForwardBatch b;
    b.token_ids = tokens;
    b.positions = positions;
    b.slot_mapping = slots;
    b.query_start = query_start;
    b.seq_lens = seq_lens;
    b.block_tables = tables;
    b.max_blocks_per_seq = max_blocks;
    b.logits_indices = logits;
    return b;
  }
  std::vector<int> seq_ids;
};

struct Row {
  std::string model, weights, kv;
  int batch = 0;
  double prefill_tps = 0, decode_tps = 0, step_ms = 0, roofline = 0;
};

int Run(const Args& args) {
  if (!CudaDeviceAvailable()) {
    std::fprintf(stderr, "bench_gpu: %s\n", CudaUnavailableReason().c_str());
    return 2;
  }
  auto bw = MeasureCudaCopyBandwidth(static_cast<size_t>(args.bandwidth_mib) << 20);
  if (!bw.ok()) {
    std::fprintf(stderr, "bandwidth: %s\n", bw.status().ToString().c_str());
    return 1;
  }
  const double bandwidth = *bw;
  std::string device;
  std::vector<Row> rows;
  std::vector<std::string> notes;
  const int max_batch = *std::max_element(args.batches.begin(), args.batches.end());
  const int seq_tokens = args.prompt + args.decode;

  for (const std::string& name : args.models) {
    for (const std::string& weights : args.weights) {
      const auto preset = FindSyntheticPreset(name);
      const std::optional<GgmlType> wtype = ParseGgmlType(weights);
      if (!preset || !wtype) {
        std::fprintf(stderr, "unknown preset %s or weight type %s\n", name.c_str(), weights.c_str());
        return 1;
      }
      const ModelConfig config = ConfigOf(*preset);
      CudaBackendOptions o;
      o.limits.max_num_tokens = 2048;
      o.limits.max_num_seqs = std::max(max_batch, 16);
      o.limits.max_logits = std::max(max_batch, 16);
      o.max_model_len = seq_tokens + 16;
      const auto t0 = Clock::now();
      const std::optional<GgmlType> quantized = *wtype == GgmlType::kF16 ? std::nullopt : wtype;
      auto created = CreateCudaBackendWithRandomWeights(config, 1234, o, quantized);
      if (!created.ok()) {
        std::fprintf(stderr, "%s %s: %s\n", name.c_str(), weights.c_str(), created.status().ToString().c_str());
        return 1;
      }
      CudaBackend& backend = **created;
      device = backend.device_description();
      const double build_s = std::chrono::duration<double>(Clock::now() - t0).count();
      notes.push_back(fmt::format("{}: {} layers, dim {}, {} heads / {} kv heads, ffn {}; weights {:.2f} GB ({}) "
                                  "built in {:.2f} s",
                                  name, config.num_layers, config.dim, config.num_heads, config.num_kv_heads,
                                  config.ffn_dim, backend.weight_bytes() / 1e9, weights, build_s));
      // Bytes a batch-1 decode step must read: every matrix but the embedding table (one row).
      const double embd_bytes =
          static_cast<double>(config.vocab_size) * GgmlRowBytes(*wtype, static_cast<uint64_t>(config.dim)).value();
      const double step_weight_bytes = static_cast<double>(backend.weight_bytes()) - embd_bytes;

      for (const std::string& kv_name : args.kv) {
        KvSpecConfig kc;
        kc.num_layers = config.num_layers;
        kc.num_kv_heads = config.num_kv_heads;
        kc.head_dim = config.head_dim;
        kc.block_size = 16;
        kc.dtype = *ParseKvDtype(kv_name);
        auto spec = KvSpec::Create(kc);
        if (!spec.ok()) return 1;
        BatchBuilder bb;
        bb.blocks_per_seq = (seq_tokens + 15) / 16;
        const int num_blocks = max_batch * bb.blocks_per_seq + 1;
        Status st = backend.InitKvCache(*spec, num_blocks);
        if (!st.ok()) {
          std::fprintf(stderr, "kv cache: %s\n", st.ToString().c_str());
          return 1;
        }
        std::mt19937 rng(7);
        std::vector<float> logits(static_cast<size_t>(o.limits.max_logits) * config.vocab_size);
        auto forward = [&]() -> bool {
          const Status s = backend.Forward(bb.View(), logits);
          if (!s.ok()) std::fprintf(stderr, "forward: %s\n", s.ToString().c_str());
          return s.ok();
        };
        for (int B : args.batches) {
          // Prefill: whole prompts, as many per step as fit 2048 tokens. Once untimed (warm-up:
          // cuBLAS heuristics, lazy module loading), then timed over the same slots.
          const int per_step = std::max(1, o.limits.max_num_tokens / args.prompt);
          double prefill_s = 0;
          for (int pass = 0; pass < 2; ++pass) {
            const auto p0 = Clock::now();
            for (int first = 0; first < B; first += per_step) {
              bb.Clear();
              bb.seq_ids.clear();
              bb.max_blocks = 0;
              for (int s = first; s < std::min(B, first + per_step); ++s) {
                bb.seq_ids.push_back(s);
                bb.Add(s, 0, args.prompt, rng, config.vocab_size);
              }
              if (!forward()) return 1;
            }
            prefill_s = std::chrono::duration<double>(Clock::now() - p0).count();
          }
          // Decode: every sequence one token per step; the first steps warm the CUDA graph of
          // the bucket (eager, capture) and are not timed.
          constexpr int kWarmup = 4;
          Clock::time_point d0;
          for (int step = 0; step < args.decode; ++step) {
            if (step == kWarmup) d0 = Clock::now();
            bb.Clear();
            bb.seq_ids.clear();
            bb.max_blocks = 0;
            for (int s = 0; s < B; ++s) {
              bb.seq_ids.push_back(s);
              bb.Add(s, args.prompt + step, 1, rng, config.vocab_size);
            }
            if (!forward()) return 1;
          }
          const double decode_s = std::chrono::duration<double>(Clock::now() - d0).count();
          for (int i = 0; i < B * config.vocab_size; i += 997) {
            if (!std::isfinite(logits[i])) {
              std::fprintf(stderr, "non-finite logits (%s %s batch %d)\n", name.c_str(), kv_name.c_str(), B);
              return 1;
            }
          }
          Row r;
          r.model = name;
          r.weights = weights;
          r.kv = kv_name;
          r.batch = B;
          r.prefill_tps = B * args.prompt / prefill_s;
          const int timed = args.decode - kWarmup;
          r.step_ms = decode_s / timed * 1e3;
          r.decode_tps = B * timed / decode_s;
          if (B == 1) {
            const double ctx = args.prompt + kWarmup + timed / 2.0;
            const double bytes = step_weight_bytes + spec->bytes_per_token() * ctx;
            r.roofline = bytes / bandwidth / (decode_s / timed);
          }
          rows.push_back(r);
          std::fprintf(stderr, "%-9s %-5s %-5s batch %4d: prefill %9.0f tok/s, decode %8.0f tok/s (%.2f ms/step)\n",
                       name.c_str(), weights.c_str(), kv_name.c_str(), B, r.prefill_tps, r.decode_tps, r.step_ms);
        }
      }
      const CudaBackendStats st = backend.stats();
      notes.push_back(fmt::format("{} {}: {} steps, {} decode, {} CUDA graphs captured, {} replays, {} capture "
                                  "failures",
                                  name, weights, st.steps, st.decode_steps, st.graphs_captured, st.graph_replays,
                                  st.graph_capture_failures));
    }
  }

  std::ostringstream md;
  const std::time_t now = std::time(nullptr);
  char date[32];
  std::strftime(date, sizeof(date), "%Y-%m-%d %H:%M UTC", std::gmtime(&now));
  md << "# CUDA backend benchmark (" << date << ")\n\n";
  md << "Device: " << device << ". Measured copy bandwidth (read + write): " << fmt::format("{:.2f}", bandwidth / 1e12)
     << " TB/s (H200 nominal 4.8 TB/s).\n\n";
  md << fmt::format("Synthetic models (F16 weights generated on the device; quantized ones encoded on the host by "
                    "kvserve's encoder and read as stored), block 16. Prefill: {}-token prompts, up to "
                    "2048 tokens per step. Decode: {} steps per batch (first 4 untimed: graph warm-up), logits of every "
                    "sequence copied to the host each step (the Backend::Forward contract).\n\n",
                    args.prompt, args.decode);
  md << "| model | weights | KV | batch | prefill tok/s | decode tok/s | ms / decode step | batch-1 roofline |\n";
  md << "|---|---|---|---:|---:|---:|---:|---:|\n";
  for (const Row& r : rows) {
    md << fmt::format("| {} | {} | {} | {} | {:.0f} | {:.0f} | {:.2f} | {} |\n", r.model, r.weights, r.kv, r.batch,
                      r.prefill_tps,
                      r.decode_tps, r.step_ms, r.batch == 1 ? fmt::format("{:.0f}%", 100 * r.roofline) : "");
  }
  md << "\nBatch-1 roofline = (bytes one decode step must read: all weights except the embedding table, plus the "
        "KV cache at the mean context) / measured bandwidth, divided by the measured step time.\n\n";
  for (const std::string& n : notes) md << "- " << n << "\n";
  std::printf("%s", md.str().c_str());
  return bench_report::WriteMarkdown(args.out, md.str());
}

}  // namespace
}  // namespace kvserve

int main(int argc, char** argv) {
  kvserve::Args args;
  if (!kvserve::ParseArgs(argc, argv, &args)) {
    std::fprintf(stderr,
                 "usage: bench_gpu [--models 1b,7b-shape] [--weights f16,q4_k] [--batches 1,16,64,128] "
                 "[--kv f16,int8] [--prompt 128] [--decode 64] [--bandwidth-mib 1024] [--out FILE]\n");
    return 1;
  }
  return kvserve::Run(args);
}
