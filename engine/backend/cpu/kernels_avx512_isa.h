// The AVX-512 traits struct `Isa` for kernels_impl.h (see there), shared by kernels_avx512.cpp
// and kernels_avx512bf16.cpp: include it inside the file's own namespace, in a file compiled
// with AVX-512 F + BW + VL, F16C and FMA (and AVX512-BF16 for the native BF16 products).
// (No include guard on purpose.)

struct Isa {
  using V = __m512;
  static constexpr int L = 16;
  static constexpr int kTokenTile = 4;
  static constexpr int kPanelTile = 2;
  static constexpr int kPanelTileDecode = 4;
  static constexpr int kBf16TokenTile = 8;
  static constexpr int kBf16PanelTile = 2;
  static V Zero() { return _mm512_setzero_ps(); }
  static V Set1(float x) { return _mm512_set1_ps(x); }
  static V Load(const float* p) { return _mm512_loadu_ps(p); }
  static void Store(float* p, V v) { _mm512_storeu_ps(p, v); }
  static V LoadF16(const uint16_t* p) {
    return _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)));
  }
  static V LoadBf16(const uint16_t* p) {
    const __m512i w = _mm512_cvtepu16_epi32(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)));
    return _mm512_castsi512_ps(_mm512_slli_epi32(w, 16));
  }
  static V LoadI8(const int8_t* p) {
    return _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p))));
  }
  static V LoadU4Lo(const uint8_t* p) {
    const __m512i b = _mm512_cvtepu8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
    const __m512i lo = _mm512_and_si512(b, _mm512_set1_epi32(0xF));
    return _mm512_cvtepi32_ps(_mm512_sub_epi32(lo, _mm512_set1_epi32(8)));
  }
  static V LoadU4Hi(const uint8_t* p) {
    const __m512i b = _mm512_cvtepu8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
    const __m512i hi = _mm512_srli_epi32(b, 4);
    return _mm512_cvtepi32_ps(_mm512_sub_epi32(hi, _mm512_set1_epi32(8)));
  }
  static V Fma(V a, V b, V c) { return _mm512_fmadd_ps(a, b, c); }
  static V Mul(V a, V b) { return _mm512_mul_ps(a, b); }
  static float Reduce(V v) { return _mm512_reduce_add_ps(v); }
  // Partial vectors with masked loads and stores.
  static __mmask16 Mask(int n) { return static_cast<__mmask16>((1u << n) - 1); }
  static V LoadN(const float* p, int n) { return _mm512_maskz_loadu_ps(Mask(n), p); }
  static V LoadF16N(const uint16_t* p, int n) { return _mm512_cvtph_ps(_mm256_maskz_loadu_epi16(Mask(n), p)); }
  static V LoadBf16N(const uint16_t* p, int n) {
    const __m512i w = _mm512_cvtepu16_epi32(_mm256_maskz_loadu_epi16(Mask(n), p));
    return _mm512_castsi512_ps(_mm512_slli_epi32(w, 16));
  }
  static V LoadI8N(const int8_t* p, int n) {
    return _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm_maskz_loadu_epi8(Mask(n), p)));
  }
  static void StoreN(float* p, V v, int n) { _mm512_mask_storeu_ps(p, Mask(n), v); }
  static float F16(uint16_t h) { return _cvtsh_ss(h); }
  // BF16 pairs (kernels_impl.h): vdpbf16ps where the file is compiled for it, else two FMAs
  // (each product is exact, so they round as the instruction does).
  using VP = __m512i;
  static VP LoadPairs(const uint16_t* p) { return _mm512_loadu_si512(p); }
  static VP SetPair(const uint16_t* p) {
    int32_t w;
    std::memcpy(&w, p, 4);
    return _mm512_set1_epi32(w);
  }
  static V DotPairs(V acc, VP w, VP x) {
#ifdef __AVX512BF16__
    return _mm512_dpbf16_ps(acc, reinterpret_cast<__m512bh>(w), reinterpret_cast<__m512bh>(x));
#else
    const __m512i hi = _mm512_set1_epi32(static_cast<int32_t>(0xFFFF0000u));
    acc = _mm512_fmadd_ps(_mm512_castsi512_ps(_mm512_and_si512(w, hi)), _mm512_castsi512_ps(_mm512_and_si512(x, hi)),
                          acc);
    return _mm512_fmadd_ps(_mm512_castsi512_ps(_mm512_slli_epi32(w, 16)), _mm512_castsi512_ps(_mm512_slli_epi32(x, 16)),
                           acc);
#endif
  }
};
