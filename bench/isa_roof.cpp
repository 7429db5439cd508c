// bench_isa_roof: the multiply-add rate an AVX2 core can issue at all, per instruction sequence a
// matrix product can use, on 1 and on every visible core: the roof any AVX2 kernel (kvserve's or
// llama.cpp's) stays under (results: bench/results/isa_roof.md). Each sequence runs on 12
// (float) or 8 (integer) independent accumulators in registers: throughput, not latency.
//   f32 fma        vfmadd231ps                                   8 multiply-adds
//   f16 fma        vcvtph2ps (per 2 FMAs) + vfmadd231ps x 2      16, F16 weights widened
//   u8 x s8        vpmaddubsw + vpaddw                           32, codes below 128 (4-6 bits)
//   sign trick     vpsignb + vpmaddubsw + vpmaddwd + vpaddd      32, any byte code (Q8_0)
// Usage: bench_isa_roof
#include <immintrin.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <thread>
#include <vector>

namespace {

constexpr int kAcc = 12;     // float sequences (FMA latency 4 on 2-4 pipes)
constexpr int kAccInt = 8;   // integer ones (their temporaries need registers too)
constexpr int kAccSign = 6;
constexpr long kSteps = 1 << 20;  // per timed run

using Clock = std::chrono::steady_clock;

// Each kernel returns a value depending on every accumulator, so no work is dead.
__attribute__((target("avx2,fma"))) float F32Fma(long steps) {
  __m256 acc[kAcc];
  for (int i = 0; i < kAcc; ++i) acc[i] = _mm256_set1_ps(0.001f * i);
  const __m256 a = _mm256_set1_ps(0.999f), b = _mm256_set1_ps(1e-7f);
  for (long s = 0; s < steps; ++s) {
    for (int i = 0; i < kAcc; ++i) acc[i] = _mm256_fmadd_ps(a, acc[i], b);
  }
  __m256 sum = acc[0];
  for (int i = 1; i < kAcc; ++i) sum = _mm256_add_ps(sum, acc[i]);
  return _mm256_cvtss_f32(sum);
}

__attribute__((target("avx2,fma,f16c"))) float F16Fma(long steps) {
  __m256 acc[kAcc];
  for (int i = 0; i < kAcc; ++i) acc[i] = _mm256_set1_ps(0.001f * i);
  __m128i h = _mm_set1_epi16(0x3C00);  // 1.0
  const __m256 b = _mm256_set1_ps(1e-7f);
  for (long s = 0; s < steps; ++s) {
    for (int i = 0; i < kAcc; i += 2) {
      __asm__ volatile("" : "+x"(h));  // a new weight vector each time: no hoisting
      const __m256 w = _mm256_cvtph_ps(h);
      acc[i] = _mm256_fmadd_ps(w, acc[i], b);
      acc[i + 1] = _mm256_fmadd_ps(w, acc[i + 1], b);
    }
  }
  __m256 sum = acc[0];
  for (int i = 1; i < kAcc; ++i) sum = _mm256_add_ps(sum, acc[i]);
  return _mm256_cvtss_f32(sum);
}

__attribute__((target("avx2"))) float U8S8(long steps) {
  __m256i acc[kAccInt];
  for (int i = 0; i < kAccInt; ++i) acc[i] = _mm256_set1_epi16(static_cast<short>(i));
  __m256i w = _mm256_set1_epi8(3), x = _mm256_set1_epi8(-2);
  for (long s = 0; s < steps; ++s) {
    for (int i = 0; i < kAccInt; ++i) {
      __asm__ volatile("" : "+x"(x));  // another token's activations each time
      acc[i] = _mm256_add_epi16(acc[i], _mm256_maddubs_epi16(w, x));
    }
    __asm__ volatile("" : "+x"(w));
  }
  __m256i sum = acc[0];
  for (int i = 1; i < kAccInt; ++i) sum = _mm256_add_epi16(sum, acc[i]);
  return static_cast<float>(_mm256_extract_epi16(sum, 0));
}

__attribute__((target("avx2"))) float SignTrick(long steps) {
  __m256i acc[kAccSign];
  for (int i = 0; i < kAccSign; ++i) acc[i] = _mm256_set1_epi32(i);
  __m256i w = _mm256_set1_epi8(-3), x = _mm256_set1_epi8(5);
  const __m256i ones = _mm256_set1_epi16(1);
  for (long s = 0; s < steps; ++s) {
    const __m256i aw = _mm256_abs_epi8(w);  // once per weight vector, shared by the tokens
    for (int i = 0; i < kAccSign; ++i) {
      __asm__ volatile("" : "+x"(x));
      const __m256i p = _mm256_maddubs_epi16(aw, _mm256_sign_epi8(x, w));
      acc[i] = _mm256_add_epi32(acc[i], _mm256_madd_epi16(p, ones));
    }
    __asm__ volatile("" : "+x"(w));
  }
  __m256i sum = acc[0];
  for (int i = 1; i < kAccSign; ++i) sum = _mm256_add_epi32(sum, acc[i]);
  return static_cast<float>(_mm256_extract_epi32(sum, 0));
}

struct Sequence {
  const char* name;
  float (*run)(long);
  double macs_per_step;  // multiply-adds per step of the loop above
};

// GMAC/s of `threads` copies of the sequence running at once: median of 5 runs.
double Rate(const Sequence& q, int threads) {
  std::vector<double> rates;
  volatile float sink = 0.0f;
  for (int r = 0; r < 6; ++r) {  // the first warms the clocks up
    std::vector<std::thread> pool;
    std::vector<float> out(threads);
    const auto t0 = Clock::now();
    for (int i = 0; i < threads; ++i) pool.emplace_back([&, i] { out[i] = q.run(kSteps); });
    for (auto& t : pool) t.join();
    const double s = std::chrono::duration<double>(Clock::now() - t0).count();
    for (float f : out) sink = sink + f;
    if (r > 0) rates.push_back(q.macs_per_step * kSteps * threads / s / 1e9);
  }
  std::sort(rates.begin(), rates.end());
  return rates[rates.size() / 2];
}

}  // namespace

int main() {
  if (!__builtin_cpu_supports("avx2") || !__builtin_cpu_supports("fma") || !__builtin_cpu_supports("f16c")) {
    std::printf("no AVX2/FMA/F16C on this CPU\n");
    return 0;
  }
  const int cores = static_cast<int>(std::thread::hardware_concurrency());
  const Sequence seqs[] = {
      {"f32 fma (vfmadd231ps)", F32Fma, 8.0 * kAcc},
      {"f16 fma (vcvtph2ps per 2 vfmadd231ps)", F16Fma, 8.0 * kAcc},
      {"u8 x s8, int16 sums (vpmaddubsw + vpaddw)", U8S8, 32.0 * kAccInt},
      {"sign trick (vpsignb + vpmaddubsw + vpmaddwd + vpaddd)", SignTrick, 32.0 * kAccSign},
  };
  std::printf("| sequence (AVX2, 256-bit) | GMAC/s, 1 thread | GMAC/s, %d threads |\n|---|---|---|\n", cores);
  for (const Sequence& q : seqs) std::printf("| %s | %.1f | %.1f |\n", q.name, Rate(q, 1), Rate(q, cores));
  return 0;
}
