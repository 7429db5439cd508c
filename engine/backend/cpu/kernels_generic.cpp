// Portable C++ kernels: the fallback for CPUs without AVX2, and the reference the SIMD
// tables are tested against.
#include <algorithm>
#include <bit>
#include <cmath>
#include <cstring>
#include <limits>
#include <type_traits>
#include <utility>

#include "common/fp16.h"
#include "engine/backend/cpu/kernels.h"
#include "engine/model/ggml_decoders.h"  // kIq4Values

namespace kvserve::cpu {
namespace generic {

struct Isa {
  using V = float;
  static constexpr int L = 1;
  static constexpr int kTokenTile = 1;
  static constexpr int kFloatTokenTile = kTokenTile;
  static constexpr int kPanelTile = 1;
  static constexpr int kPanelTileDecode = 1;
  static constexpr int kBf16TokenTile = 1;
  static constexpr int kBf16PanelTile = 1;
  static V Zero() { return 0.0f; }
  static V Set1(float x) { return x; }
  static V Load(const float* p) { return *p; }
  static void Store(float* p, V v) { *p = v; }
  static V LoadF16(const uint16_t* p) { return F16ToF32(*p); }
  static void StoreF16(uint16_t* p, V v) { *p = F32ToF16(v); }
  static V LoadBf16(const uint16_t* p) { return Bf16ToF32(*p); }
  static V LoadI8(const int8_t* p) { return static_cast<float>(*p); }
  static V LoadU4Lo(const uint8_t* p) { return static_cast<float>((*p & 0xF) - 8); }
  static V LoadU4Hi(const uint8_t* p) { return static_cast<float>((*p >> 4) - 8); }
  static V Fma(V a, V b, V c) { return a * b + c; }
  static V Mul(V a, V b) { return a * b; }
  static float Reduce(V v) { return v; }
  // Partial vectors through a zero-padded copy.
  static V LoadN(const float* p, int n) {
    alignas(64) float buf[L] = {};
    std::memcpy(buf, p, sizeof(float) * n);
    return Load(buf);
  }
  static V LoadF16N(const uint16_t* p, int n) {
    alignas(64) uint16_t buf[L] = {};
    std::memcpy(buf, p, sizeof(uint16_t) * n);
    return LoadF16(buf);
  }
  static V LoadBf16N(const uint16_t* p, int n) {
    alignas(64) uint16_t buf[L] = {};
    std::memcpy(buf, p, sizeof(uint16_t) * n);
    return LoadBf16(buf);
  }
  static V LoadI8N(const int8_t* p, int n) {
    alignas(64) int8_t buf[L] = {};
    std::memcpy(buf, p, n);
    return LoadI8(buf);
  }
  static void StoreN(float* p, V v, int n) {
    alignas(64) float buf[L];
    Store(buf, v);
    std::memcpy(p, buf, sizeof(float) * n);
  }
  static float F16(uint16_t h) { return F16ToF32(h); }
  static V Add(V a, V b) { return a + b; }
  static V Max(V a, V b) { return a > b ? a : b; }
  static V Div(V a, V b) { return a / b; }
  static V IfNonNegative(V x, V a, V b) { return x >= 0.0f ? a : b; }
  static float ReduceMax(V v) { return v; }
  static V RoundNearest(V x) { return std::nearbyint(x); }
  static V Scale2(V y, V n) { return std::ldexp(y, static_cast<int>(n)); }
  static V ZeroWhereLess(V y, V x, float bound) { return x >= bound ? y : 0.0f; }
  static V ReduceRows(const V (&rows)[L]) { return rows[0]; }
  // Integer dots: a row's 4 codes (or 4 activations) in one 32-bit word, byte j column j.
  using VI = int32_t;
  static VI ZeroI() { return 0; }
  static void AddBits(const uint8_t* mask, int v, int bit, VI* w) {
    const int bits = (mask[v / 2] >> (4 * (v % 2))) & 0xF;
    uint32_t u = static_cast<uint32_t>(*w);
    for (int j = 0; j < 4; ++j) u += ((bits >> j) & 1) ? static_cast<uint32_t>(bit) << (8 * j) : 0;
    *w = static_cast<VI>(u);
  }
  static void AddCrumbs(const uint8_t* c, int v, VI* lo, VI* hi) {
    uint32_t l = static_cast<uint32_t>(*lo), h = static_cast<uint32_t>(*hi);
    for (int j = 0; j < 4; ++j) {
      const int i = v * 4 + j, bits = c[i % 32] >> (4 * (i / 32));
      l += static_cast<uint32_t>(bits & 3) << (8 * j + 4);
      h += static_cast<uint32_t>(bits >> 2 & 3) << (8 * j + 4);
    }
    *lo = static_cast<VI>(l);
    *hi = static_cast<VI>(h);
  }
  static VI AddI(VI a, VI b) { return a + b; }
  static VI MulI(VI a, VI b) { return a * b; }
  static VI Pairs(const uint8_t* a, const uint8_t* b) {
    const auto half = [](const uint8_t* x) {
      return static_cast<uint32_t>(static_cast<uint16_t>(static_cast<int8_t>(*x)));
    };
    return static_cast<VI>(half(a) | half(b) << 16);
  }
  // acc += the products of the int16 halves.
  static VI MaddI(VI acc, VI a, VI b) {
    const auto lo = [](VI x) { return static_cast<int16_t>(static_cast<uint32_t>(x) & 0xFFFF); };
    const auto hi = [](VI x) { return static_cast<int16_t>(static_cast<uint32_t>(x) >> 16); };
    return acc + lo(a) * lo(b) + hi(a) * hi(b);
  }
  using VT = const uint8_t*;
  static VT Table16(const uint8_t* t) { return t; }
  static VI Lookup16(VT table, VI idx) {
    uint32_t u = 0;
    for (int j = 0; j < 4; ++j) u |= static_cast<uint32_t>(table[(static_cast<uint32_t>(idx) >> (8 * j)) & 0xF]) << (8 * j);
    return static_cast<VI>(u);
  }
  static VI SetI(int32_t v) { return v; }
  static VI SubI(VI a, VI b) { return a - b; }
  static VI LoadCodes(const uint8_t* p) {
    VI w;
    std::memcpy(&w, p, 4);
    return w;
  }
  static void LoadNibbles(const uint8_t* p, VI* lo, VI* hi) {
    const uint32_t w = static_cast<uint32_t>(LoadCodes(p));
    *lo = static_cast<VI>(w & 0x0F0F0F0Fu);
    *hi = static_cast<VI>((w >> 4) & 0x0F0F0F0Fu);
  }
  static void LoadCrumbs(const uint8_t* p, VI* w) {
    const uint32_t b = static_cast<uint32_t>(LoadCodes(p));
    for (int h = 0; h < 4; ++h) w[h] = static_cast<VI>((b >> (2 * h)) & 0x03030303u);
  }
  static VI Set4(const int8_t* x) { return LoadCodes(reinterpret_cast<const uint8_t*>(x)); }
  // Four products of unsigned bytes of any size per int32 sum.
  using VS = VI;
  static constexpr int kShortMax = 2147483647;
  static constexpr int kShortProducts = 4;
  static VS DotS(VS s, VI w, VI x) {
    for (int j = 0; j < 4; ++j) {
      s += static_cast<int32_t>((static_cast<uint32_t>(w) >> (8 * j)) & 0xFF) *
           static_cast<int8_t>(static_cast<uint32_t>(x) >> (8 * j));
    }
    return s;
  }
  static VS MulS(VI w, VI x) { return DotS(0, w, x); }
  static VI Widen(VI acc, VS s) { return acc + s; }
  static VI ScaleOf(const uint8_t* p) { return static_cast<int8_t>(*p); }
  static VI WidenBy(VI acc, VS s, VI scale) { return acc + s * scale; }
  using Wide = VI;
  static constexpr int kWideOffset = 0;
  static Wide PrepareWide(VI w) { return w; }
  static VS MulWideS(Wide w, VI x) { return MulS(w, x); }
  static VS DotWideS(VS s, Wide w, VI x) { return DotS(s, w, x); }
  static constexpr bool kActivationSign = false;
  static V ToFloat(VI v) { return static_cast<float>(v); }
  // BF16 pairs as 32-bit words: value 2i in the low half, 2i + 1 in the high half.
  using VP = uint32_t;
  static VP LoadPairs(const uint16_t* p) {
    VP w;
    std::memcpy(&w, p, 4);
    return w;
  }
  static VP SetPair(const uint16_t* p) { return LoadPairs(p); }
  // Each product of two BF16 values is exact in F32: one rounding per addition, as an FMA.
  static V DotPairs(V acc, VP w, VP x) {
    acc += F32FromBits(w & 0xFFFF0000u) * F32FromBits(x & 0xFFFF0000u);
    return acc + F32FromBits(w << 16) * F32FromBits(x << 16);
  }
};

#include "engine/backend/cpu/kernels_impl.h"

}  // namespace generic

const KernelTable& GenericKernels() {
  static const KernelTable table = generic::MakeTable("generic");
  return table;
}

}  // namespace kvserve::cpu
