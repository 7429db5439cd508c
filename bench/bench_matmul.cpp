// bench_matmul: the batched matrix products of synthetic:150m (dim 1024, 8 layers, 16 heads,
// 8 KV heads of 64, FFN 2816, vocab 32000) with our kernels, OpenBLAS and oneDNN, 2 threads.
//
// y[T][rows] = x[T][cols] * W^T for T = 1, 4, 16, 64 tokens per step, with
//   ours f16 / ours bf16: cpu::PackedMatrix + Kernels().matmul, split over panel chunks with
//                         OpenMP as CpuBackend::MatMuls does (F32 compute);
//   ours bf16 compute:    the F16 weights packed for --compute-dtype bf16 (BF16 pair panels);
//                         the rounding of x to BF16 is timed;
//   OpenBLAS f32:         cblas_sgemm (cblas_sgemv at T = 1) on the weights converted to F32;
//   oneDNN bf16:          matmul primitive, bf16 src + bf16 weights (reordered once into the
//                         layout oneDNN asks for), f32 dst; the f32 -> bf16 reorder of x is timed;
//   oneDNN f16:           the same with f16, when this oneDNN has a non-reference CPU kernel.
// Weights are k/1024 with |k| <= 64, exact in F16, BF16 and F32, so every method multiplies the
// same matrix; the max abs difference against a double-precision product is printed for one.
//
// Usage: bench_matmul [--output FILE] [--quick]
#include <cblas.h>
#include <omp.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <fmt/format.h>
#include <map>
#include <oneapi/dnnl/dnnl.hpp>
#include <optional>
#include <string>
#include <vector>

#include "engine/backend/cpu/kernels.h"
#include "engine/model/weights.h"
#include "bench/bench_report.h"

namespace kvserve {
namespace {

using Clock = std::chrono::steady_clock;
constexpr int kThreads = 2;

double Seconds(Clock::time_point since) { return std::chrono::duration<double>(Clock::now() - since).count(); }

// Evicts the weights from the caches (L3 is 32 MiB here) by reading 2x that, so every run
// reads its matrix from memory as a forward pass does (it streams ~240 MiB of weights a step).
volatile uint64_t g_sink = 0;
void FlushCaches() {
  static std::vector<uint64_t> buf(64u << 20 >> 3, 1);
  uint64_t sum = 0;
  for (size_t i = 0; i < buf.size(); i += 8) sum += buf[i];
  g_sink = g_sink + sum;
}

// Median seconds of `fn()` over at least `min_reps` runs and `min_seconds` in all (one warm-up);
// the caches are flushed, untimed, before each run.
template <typename Fn>
double MedianSeconds(Fn&& fn, int min_reps, double min_seconds) {
  fn();
  std::vector<double> times;
  const auto start = Clock::now();
  while (static_cast<int>(times.size()) < min_reps || (Seconds(start) < min_seconds && times.size() < 10000)) {
    FlushCaches();
    const auto t0 = Clock::now();
    fn();
    times.push_back(Seconds(t0));
  }
  std::sort(times.begin(), times.end());
  return times[times.size() / 2];
}

std::string DnnlIsaName(dnnl::cpu_isa isa) {
  switch (isa) {
    case dnnl::cpu_isa::sse41: return "sse41";
    case dnnl::cpu_isa::avx: return "avx";
    case dnnl::cpu_isa::avx2: return "avx2";
    case dnnl::cpu_isa::avx2_vnni: return "avx2_vnni";
    case dnnl::cpu_isa::avx512_core: return "avx512_core";
    case dnnl::cpu_isa::avx512_core_vnni: return "avx512_core_vnni";
    case dnnl::cpu_isa::avx512_core_bf16: return "avx512_core_bf16";
    case dnnl::cpu_isa::avx512_core_amx: return "avx512_core_amx";
    default: return fmt::format("isa {}", static_cast<int>(isa));
  }
}

uint32_t Bits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
}
// Exact for the values used here (normal, at most 8 significant bits).
uint16_t ToBf16(float f) { return static_cast<uint16_t>(Bits(f) >> 16); }
uint16_t ToF16(float f) {
  const uint32_t u = Bits(f);
  if ((u & 0x7fffffffu) == 0) return static_cast<uint16_t>(u >> 16);
  const uint32_t exp = ((u >> 23) & 0xff) - 127 + 15;
  return static_cast<uint16_t>(((u >> 16) & 0x8000u) | (exp << 10) | ((u >> 13) & 0x3ffu));
}

struct Shape {
  const char* name;
  int64_t rows, cols;
  int uses;  // per forward pass
};
// CpuBackend packs q/k/v and gate/up separately but runs each group in one parallel region;
// here each group is one matrix with the rows stacked, for every method alike.
const Shape kShapes[] = {{"qkv", 1024 + 512 + 512, 1024, 8},
                         {"attn_out", 1024, 1024, 8},
                         {"gate_up", 2 * 2816, 1024, 8},
                         {"down", 1024, 2816, 8},
                         {"output", 32000, 1024, 1}};
const int kTokens[] = {1, 4, 16, 64, 256};
enum Method { kOursF16, kOursBf16, kOursDot, kBlas, kDnnlBf16, kDnnlF16, kNumMethods };
const char* const kMethodNames[kNumMethods] = {"ours f16", "ours bf16", "ours bf16 compute", "OpenBLAS f32",
                                               "oneDNN bf16", "oneDNN f16"};

struct Weights {
  std::vector<float> f32;
  std::vector<uint16_t> f16, bf16;
  cpu::PackedMatrix packed_f16, packed_bf16, packed_dot;
};

Weights MakeWeights(const Shape& s) {
  Weights w;
  const size_t n = static_cast<size_t>(s.rows * s.cols);
  w.f32.resize(n);
  w.f16.resize(n);
  w.bf16.resize(n);
  for (size_t i = 0; i < n; ++i) {
    const float v = static_cast<float>(static_cast<int>((i * 2654435761u >> 7) % 129) - 64) / 1024.0f;
    w.f32[i] = v;
    w.f16[i] = ToF16(v);
    w.bf16[i] = ToBf16(v);
  }
  WeightMatrix m;
  m.rows = s.rows;
  m.cols = s.cols;
  m.row_bytes = static_cast<size_t>(s.cols) * 2;
  m.type = GgmlType::kF16;
  m.data = reinterpret_cast<const uint8_t*>(w.f16.data());
  w.packed_f16 = cpu::PackedMatrix(m);
  w.packed_dot = cpu::PackedMatrix(m, ComputeDtype::kBF16);
  m.type = GgmlType::kBF16;
  m.data = reinterpret_cast<const uint8_t*>(w.bf16.data());
  w.packed_bf16 = cpu::PackedMatrix(m);
  return w;
}

// Our kernel over all panels, chunked over the threads like CpuBackend::MatMuls.
void OursMatMul(const cpu::PackedMatrix& w, const float* x, int tokens, float* y) {
  static std::vector<uint16_t> xb;
  cpu::MatMulArgs args;
  if (w.takes_bf16()) {
    args.ldxb = w.cols() + w.cols() % 2;
    xb.resize(static_cast<size_t>(tokens * args.ldxb));
    cpu::RoundToBf16(x, w.cols(), tokens, w.cols(), xb.data(), args.ldxb);
    args.xb = xb.data();
  }
  args.w = &w;
  args.x = x;
  args.ldx = w.cols();
  args.num_tokens = tokens;
  args.y = y;
  args.ldy = w.rows();
  const cpu::MatMulRangeFn fn = cpu::Kernels().matmul[w.kind()];
  const int64_t panels = w.num_panels();
  const int64_t chunk = std::max<int64_t>(4, (panels / (kThreads * 4) + 3) / 4 * 4);
  const int64_t num_chunks = (panels + chunk - 1) / chunk;
#pragma omp parallel for schedule(dynamic, 1) num_threads(kThreads)
  for (int64_t c = 0; c < num_chunks; ++c) fn(args, c * chunk, std::min(panels, (c + 1) * chunk));
}

// One oneDNN matmul for (weights, T): weights reordered once; run() converts x and multiplies.
class DnnlMatMul {
 public:
  static std::optional<DnnlMatMul> Create(dnnl::engine& eng, dnnl::stream& strm, dnnl::memory::data_type dt,
                                          const Shape& s, uint16_t* w_bits, float* x, int tokens, float* y,
                                          std::string* why_not) {
    using dnnl::memory;
    using tag = memory::format_tag;
    const memory::dim T = tokens, K = s.cols, N = s.rows;
    try {
      const memory::desc src_md({T, K}, dt, tag::ab), w_any({K, N}, dt, tag::any),
          dst_md({T, N}, memory::data_type::f32, tag::ab);
      dnnl::matmul::primitive_desc pd(dnnl::matmul::desc(src_md, w_any, dst_md), eng);
      const std::string impl = pd.impl_info_str();
      if (impl.rfind("ref", 0) == 0) {
        *why_not = "only the reference implementation (" + impl + ")";
        return std::nullopt;
      }
      DnnlMatMul m;
      m.strm_ = &strm;
      m.impl_ = impl;
      m.matmul_ = dnnl::matmul(pd);
      memory w_user({{K, N}, dt, tag::ba}, eng, w_bits);  // W^T: element (k, n) at n * K + k
      m.w_ = memory(pd.weights_desc(), eng);
      dnnl::reorder(w_user, m.w_).execute(strm, w_user, m.w_);
      strm.wait();
      m.x_f32_ = memory({{T, K}, memory::data_type::f32, tag::ab}, eng, x);
      m.x_ = memory(src_md, eng);
      m.x_reorder_ = dnnl::reorder(m.x_f32_, m.x_);
      m.y_ = memory(dst_md, eng, y);
      return m;
    } catch (const dnnl::error& e) {
      *why_not = fmt::format("not supported on this CPU ({})", e.what());
      return std::nullopt;
    }
  }
  void Run() {
    x_reorder_.execute(*strm_, x_f32_, x_);
    matmul_.execute(*strm_, {{DNNL_ARG_SRC, x_}, {DNNL_ARG_WEIGHTS, w_}, {DNNL_ARG_DST, y_}});
    strm_->wait();
  }
  const std::string& impl() const { return impl_; }

 private:
  dnnl::stream* strm_ = nullptr;
  std::string impl_;
  dnnl::matmul matmul_;
  dnnl::reorder x_reorder_;
  dnnl::memory w_, x_f32_, x_, y_;
};

struct Options {
  std::string output, command;
  bool quick = false;
};

int Main(int argc, char** argv) {
  Options o;
  o.command = argv[0];
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    o.command += " " + a;
    if (a == "--output" && i + 1 < argc) {
      o.output = argv[++i];
      o.command += std::string(" ") + argv[i];
    } else if (a == "--quick") {
      o.quick = true;
    } else {
      std::fprintf(stderr, "usage: bench_matmul [--output FILE] [--quick]\n");
      return 2;
    }
  }
  omp_set_num_threads(kThreads);
  openblas_set_num_threads(kThreads);
  dnnl::engine eng(dnnl::engine::kind::cpu, 0);
  dnnl::stream strm(eng);
  const dnnl_version_t* v = dnnl_version();

  std::string md = "# Batched matrix products: our kernels vs OpenBLAS vs oneDNN (synthetic:150m shapes)\n\n";
  md += fmt::format("Command (Release build, run alone on the machine): `{}`\n\n", o.command);
  char date[16];
  const std::time_t now = std::time(nullptr);
  std::strftime(date, sizeof date, "%Y-%m-%d", std::gmtime(&now));
  md += fmt::format("Date: {}. Machine: {}, {} cores visible, {} threads for every method; our kernels: {}; "
                    "OpenBLAS: {}; oneDNN {}.{}.{} ({}), effective ISA **{}**.\n\n",
                    date, bench_report::CpuModelName(), omp_get_num_procs(), kThreads,
                    cpu::Kernels().isa, openblas_get_config(), v->major, v->minor, v->patch,
                    v->cpu_runtime == DNNL_RUNTIME_OMP ? "OpenMP" : "other runtime",
                    DnnlIsaName(dnnl::get_effective_cpu_isa()));
  md += "y[T][rows] = x[T][cols] * W^T, medians of repeated runs in µs, each run with the weights evicted "
        "from the caches first (a 64 MiB read, untimed), as in a forward pass. `qkv` is wq, wk, wv stacked "
        "(1024+512+512 rows) and `gate_up` is w_gate, w_up stacked: CpuBackend runs each group in one "
        "parallel region. oneDNN times include the f32 -> bf16/f16 reorder of x (its dst is f32); its "
        "weights are reordered once, outside the timing, into the layout it picks (as ours are packed). "
        "`pass` = sum over matrices x uses (8 layers, output once). `vs ours` = best of ours / fastest.\n\n";
  std::printf("%s", md.c_str());
  std::fflush(stdout);

  const double min_s = o.quick ? 0.03 : 0.12;
  double us[std::size(kShapes)][std::size(kTokens)][kNumMethods];
  bool have[kNumMethods] = {true, true, true, true, false, false};
  std::string dnnl_notes[kNumMethods];
  std::map<std::string, std::vector<std::string>> impls;  // oneDNN impl -> "matrix T"
  std::string accuracy;

  for (size_t si = 0; si < std::size(kShapes); ++si) {
    const Shape& s = kShapes[si];
    Weights w = MakeWeights(s);
    for (size_t ti = 0; ti < std::size(kTokens); ++ti) {
      const int T = kTokens[ti];
      std::vector<float> x(static_cast<size_t>(T * s.cols));
      for (size_t i = 0; i < x.size(); ++i) x[i] = static_cast<float>((i * 2654435761u) % 1000) / 1000.0f - 0.5f;
      std::vector<std::vector<float>> y(kNumMethods, std::vector<float>(static_cast<size_t>(T * s.rows)));
      for (int m = 0; m < kNumMethods; ++m) us[si][ti][m] = NAN;
      for (const Method m : {kOursF16, kOursBf16, kOursDot}) {
        const cpu::PackedMatrix& p = m == kOursF16 ? w.packed_f16 : m == kOursBf16 ? w.packed_bf16 : w.packed_dot;
        us[si][ti][m] = 1e6 * MedianSeconds([&] { OursMatMul(p, x.data(), T, y[m].data()); }, 5, min_s);
      }
      const int R = static_cast<int>(s.rows), K = static_cast<int>(s.cols);
      us[si][ti][kBlas] = 1e6 * MedianSeconds([&] {
        if (T == 1) {
          cblas_sgemv(CblasRowMajor, CblasNoTrans, R, K, 1.0f, w.f32.data(), K, x.data(), 1, 0.0f, y[kBlas].data(), 1);
        } else {
          cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, T, R, K, 1.0f, x.data(), K, w.f32.data(), K, 0.0f,
                      y[kBlas].data(), R);
        }
      }, 5, min_s);
      for (const Method m : {kDnnlBf16, kDnnlF16}) {
        const bool bf = m == kDnnlBf16;
        std::string why;
        auto mm = DnnlMatMul::Create(eng, strm, bf ? dnnl::memory::data_type::bf16 : dnnl::memory::data_type::f16, s,
                                     bf ? w.bf16.data() : w.f16.data(), x.data(), T, y[m].data(), &why);
        if (!mm) {
          dnnl_notes[m] = why;
          continue;
        }
        have[m] = true;
        impls[mm->impl()].push_back(fmt::format("{} T={}", s.name, T));
        us[si][ti][m] = 1e6 * MedianSeconds([&] { mm->Run(); }, 5, min_s);
      }
      if (si == 0 && T == 16) {  // accuracy against a double-precision product
        double d_max[kNumMethods] = {}, ref_max = 0;
        for (int t = 0; t < T; ++t) {
          for (int64_t r = 0; r < s.rows; ++r) {
            double ref = 0;
            for (int64_t k = 0; k < s.cols; ++k) ref += static_cast<double>(x[t * s.cols + k]) * w.f32[r * s.cols + k];
            ref_max = std::max(ref_max, std::abs(ref));
            for (int m = 0; m < kNumMethods; ++m) d_max[m] = std::max(d_max[m], std::abs(ref - y[m][t * s.rows + r]));
          }
        }
        accuracy = fmt::format("Max abs difference vs a double-precision product ({}, T = {}; max |y| = {:.2f}):",
                               s.name, T, ref_max);
        for (int m = 0; m < kNumMethods; ++m) {
          if (!std::isnan(us[si][ti][m])) accuracy += fmt::format(" {} {:.2g};", kMethodNames[m], d_max[m]);
        }
        accuracy.back() = '.';
        accuracy += " oneDNN and ours bf16 compute round x to bf16 (8 significant bits); the others keep x in "
                    "f32.\n\n";
      }
      std::fprintf(stderr, "%s T=%d done\n", s.name, T);
    }
  }

  // Per-matrix table, then the weighted sums per pass.
  std::string head = "| T | matrix | rows x cols | uses |", rule = "|---|---|---|---|";
  for (int m = 0; m < kNumMethods; ++m) {
    if (!have[m]) continue;
    head += fmt::format(" {} |", kMethodNames[m]);
    rule += "---|";
  }
  head += " fastest | vs ours |\n";
  rule += "---|---|\n";
  auto row_cells = [&](const double* t, std::string* out) {
    int best = 0;
    for (int m = 0; m < kNumMethods; ++m) {
      if (!have[m]) continue;
      *out += fmt::format(" {:.0f} |", t[m]);
      if (t[m] < t[best]) best = m;
    }
    *out += fmt::format(" {} | {:.2f}x |\n", kMethodNames[best],
                        std::min({t[kOursF16], t[kOursBf16], t[kOursDot]}) / t[best]);
  };
  std::string table = accuracy + head + rule;
  std::string summary = "\n### Whole pass (all matrix products of one forward step), µs\n\n| T |";
  std::string summary_rule = "|---|";
  for (int m = 0; m < kNumMethods; ++m) {
    if (!have[m]) continue;
    summary += fmt::format(" {} |", kMethodNames[m]);
    summary_rule += "---|";
  }
  summary += " fastest | vs ours |\n" + summary_rule + "---|---|\n";
  for (size_t ti = 0; ti < std::size(kTokens); ++ti) {
    double pass[kNumMethods] = {};
    for (size_t si = 0; si < std::size(kShapes); ++si) {
      const Shape& s = kShapes[si];
      table += fmt::format("| {} | {} | {}x{} | {} |", kTokens[ti], s.name, s.rows, s.cols, s.uses);
      row_cells(us[si][ti], &table);
      for (int m = 0; m < kNumMethods; ++m) pass[m] += us[si][ti][m] * s.uses;
    }
    table += fmt::format("| **{}** | **pass** | | |", kTokens[ti]);
    row_cells(pass, &table);
    summary += fmt::format("| {} |", kTokens[ti]);
    row_cells(pass, &summary);
  }
  std::string notes = "\noneDNN implementations chosen:\n";
  for (const auto& [impl, where] : impls) {
    notes += fmt::format("- `{}`: {} (matrix, T) cases, e.g. {}\n", impl, where.size(), where.front());
  }
  for (const Method m : {kDnnlBf16, kDnnlF16}) {
    if (!have[m]) notes += fmt::format("- {}: skipped, {}.\n", kMethodNames[m], dnnl_notes[m]);
  }
  const std::string body = table + summary + notes;
  std::printf("%s", body.c_str());
  md += body;
  return bench_report::WriteMarkdown(o.output, md);
}

}  // namespace
}  // namespace kvserve

int main(int argc, char** argv) { return kvserve::Main(argc, argv); }
