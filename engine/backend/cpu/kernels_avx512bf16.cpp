// AVX-512 with AVX512-BF16 and AVX512-VNNI: the AVX-512 table with its BF16 pair products on
// vdpbf16ps and its integer dots on vpdpbusd. This file is compiled with the AVX-512 flags
// plus -mavx512bf16 -mavx512vnni (engine/backend/CMakeLists.txt) and only called after a CPU
// feature check; the emulated products of the plain AVX-512 table give the same bits
// (kernels_test compares them).
#include <immintrin.h>

#include <algorithm>
#include <bit>
#include <chrono>
#include <cmath>
#include <cstring>
#include <limits>
#include <type_traits>
#include <utility>

#include "common/fp16.h"
#include "engine/backend/cpu/kernels.h"
#include "engine/model/ggml_decoders.h"  // kIq4Values

namespace kvserve::cpu {
namespace avx512bf16 {

#include "engine/backend/cpu/kernels_avx512_isa.h"

#include "engine/backend/cpu/kernels_impl.h"

// Seconds for `reps` rounds of 12 independent accumulations with `step` (registers only).
template <class Step>
double TimeChains(long reps, Step step) {
  __m512 acc[12];
  for (int i = 0; i < 12; ++i) acc[i] = _mm512_set1_ps(1e-3f * static_cast<float>(i));
  const auto start = std::chrono::steady_clock::now();
  for (long n = 0; n < reps; ++n) {
    for (int i = 0; i < 12; ++i) acc[i] = step(acc[i]);
    __asm__ volatile("" : "+v"(acc[0]));  // keeps the loop from being folded
  }
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  float sink[16];
  __m512 total = acc[0];
  for (int i = 1; i < 12; ++i) total = _mm512_add_ps(total, acc[i]);
  _mm512_storeu_ps(sink, total);
  __asm__ volatile("" : : "r"(sink) : "memory");
  return s;
}

}  // namespace avx512bf16

double Bf16DotSpeedup() {
  const __m512i pair = _mm512_set1_epi32(0x3F7F3F7F);  // (0.996, 0.996)
  const __m512 w = _mm512_set1_ps(0.999f), x = _mm512_set1_ps(1e-4f);
  constexpr long kReps = 100000;  // 1.2 M instructions of each kind: about a millisecond
  double best = 0;
  for (int trial = 0; trial < 3; ++trial) {
    const double dot = avx512bf16::TimeChains(kReps, [&](__m512 a) {
      return _mm512_dpbf16_ps(a, reinterpret_cast<__m512bh>(pair), reinterpret_cast<__m512bh>(pair));
    });
    const double fma = avx512bf16::TimeChains(kReps, [&](__m512 a) { return _mm512_fmadd_ps(a, w, x); });
    best = std::max(best, 2.0 * fma / dot);  // a vdpbf16ps does twice an FMA's multiply-adds
  }
  return best;
}

const KernelTable& Avx512Bf16Kernels() {
  static const KernelTable table = avx512bf16::MakeTable("avx512bf16");
  return table;
}

}  // namespace kvserve::cpu
