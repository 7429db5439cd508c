// The AVX-512 traits struct `Isa` for kernels_impl.h (see there), shared by kernels_avx512.cpp
// and kernels_avx512bf16.cpp: include it inside the file's own namespace, in a file compiled
// with AVX-512 F + BW + VL, F16C and FMA (and AVX512-BF16 for the native BF16 products).
// (No include guard on purpose.)

struct Isa {
  using V = __m512;
  static constexpr int L = 16;
  static constexpr int kTokenTile = 4;
  // F32/F16/BF16 panels: 8 tokens x 2 panels of accumulators, so each weight vector's
  // conversion to F32 serves 8 FMAs (4 left the conversions a third of the FMA ports' work).
  static constexpr int kFloatTokenTile = 8;
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
  static void StoreF16(uint16_t* p, V v) {
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(p), _mm512_cvtps_ph(v, _MM_FROUND_TO_NEAREST_INT));
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
  static V Add(V a, V b) { return _mm512_add_ps(a, b); }
  static V Max(V a, V b) { return _mm512_max_ps(a, b); }
  static V Div(V a, V b) { return _mm512_div_ps(a, b); }
  static V IfNonNegative(V x, V a, V b) { return _mm512_mask_blend_ps(_mm512_cmp_ps_mask(x, Zero(), _CMP_GE_OQ), b, a); }
  static float ReduceMax(V v) { return _mm512_reduce_max_ps(v); }
  static V RoundNearest(V x) { return _mm512_roundscale_ps(x, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC); }
  static V Scale2(V y, V n) { return _mm512_scalef_ps(y, n); }
  static V ZeroWhereLess(V y, V x, float bound) {
    return _mm512_maskz_mov_ps(_mm512_cmp_ps_mask(x, _mm512_set1_ps(bound), _CMP_GE_OQ), y);
  }
  // 16 rows -> one vector of their sums: halve the partial sums per row three times with
  // 128-bit-lane shuffles, then a permute puts row r in lane r.
  static V ReduceRows(const V (&rows)[L]) {
    V s[8];  // rows 2i, 2i+1: quarters [2i: q0+q2, q1+q3 | 2i+1: q0+q2, q1+q3]
    for (int i = 0; i < 8; ++i) {
      s[i] = _mm512_add_ps(_mm512_shuffle_f32x4(rows[2 * i], rows[2 * i + 1], 0x44),
                           _mm512_shuffle_f32x4(rows[2 * i], rows[2 * i + 1], 0xEE));
    }
    V u[4];  // quarter k = row 4i + k, 4 partial sums
    for (int i = 0; i < 4; ++i) {
      u[i] = _mm512_add_ps(_mm512_shuffle_f32x4(s[2 * i], s[2 * i + 1], 0x88),
                           _mm512_shuffle_f32x4(s[2 * i], s[2 * i + 1], 0xDD));
    }
    // Quarter k: [row k, row 4+k, row k, row 4+k] (two partials each), then rows 8+k, 12+k.
    const V w0 = _mm512_add_ps(_mm512_unpacklo_ps(u[0], u[1]), _mm512_unpackhi_ps(u[0], u[1]));
    const V w1 = _mm512_add_ps(_mm512_unpacklo_ps(u[2], u[3]), _mm512_unpackhi_ps(u[2], u[3]));
    // Quarter k: rows k, 4+k, 8+k, 12+k: lane 4k + j holds row 4j + k.
    const V x = _mm512_add_ps(_mm512_castpd_ps(_mm512_unpacklo_pd(_mm512_castps_pd(w0), _mm512_castps_pd(w1))),
                              _mm512_castpd_ps(_mm512_unpackhi_pd(_mm512_castps_pd(w0), _mm512_castps_pd(w1))));
    const __m512i order = _mm512_setr_epi32(0, 4, 8, 12, 1, 5, 9, 13, 2, 6, 10, 14, 3, 7, 11, 15);
    return _mm512_permutexvar_ps(order, x);
  }
  // Integer dots (kernels_impl.h): vpdpbusd where the file is compiled for AVX512-VNNI, else
  // vpmaddubsw (exact for codes below 128: a pair's sum stays within int16) and vpmaddwd.
  using VI = __m512i;
  static VI ZeroI() { return _mm512_setzero_si512(); }
  static void AddBits(const uint8_t* mask, int v, int bit, VI* w) {
    uint64_t m;
    std::memcpy(&m, mask + v * 8, 8);
    *w = _mm512_mask_add_epi8(*w, _cvtu64_mask64(m), *w, _mm512_set1_epi8(static_cast<char>(bit)));
  }
  // As kernels_avx2_isa.h's, for 64 bytes: the 32 bytes, then their high nibbles. With GFNI
  // one affine bit transform per field moves each byte's two bits to bits 4-5 (output bit i
  // takes the input bits set in byte 7 - i of the qword's matrix).
  static void AddCrumbs(const uint8_t* c, int, VI* lo, VI* hi) {
    __m512i y = _mm512_broadcast_i64x4(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(c)));
#ifdef __GFNI__
    const __m512i to_lo = _mm512_set_epi64(0x10200000, 0x10200000, 0x10200000, 0x10200000, 0x01020000, 0x01020000,
                                           0x01020000, 0x01020000);
    const __m512i to_hi = _mm512_set_epi64(0x40800000, 0x40800000, 0x40800000, 0x40800000, 0x04080000, 0x04080000,
                                           0x04080000, 0x04080000);
    *lo = _mm512_add_epi8(*lo, _mm512_gf2p8affine_epi64_epi8(y, to_lo, 0));
    *hi = _mm512_add_epi8(*hi, _mm512_gf2p8affine_epi64_epi8(y, to_hi, 0));
#else
    y = _mm512_mask_srli_epi16(y, 0xFFFF0000u, y, 4);
    const __m512i m = _mm512_set1_epi8(0x30);
    *lo = _mm512_add_epi8(*lo, _mm512_and_si512(_mm512_slli_epi16(y, 4), m));
    *hi = _mm512_add_epi8(*hi, _mm512_and_si512(_mm512_slli_epi16(y, 2), m));
#endif
  }
  static VI AddI(VI a, VI b) { return _mm512_add_epi32(a, b); }
  static VI MulI(VI a, VI b) { return _mm512_mullo_epi32(a, b); }
  static __m128i Load16(const uint8_t* p) { return _mm_loadu_si128(reinterpret_cast<const __m128i*>(p)); }
  // Lane r: the int16 pair (a[r], b[r]).
  static VI Pairs(const uint8_t* a, const uint8_t* b) {
    const __m128i x = Load16(a), y = Load16(b);
    return _mm512_cvtepi8_epi16(_mm256_set_m128i(_mm_unpackhi_epi8(x, y), _mm_unpacklo_epi8(x, y)));
  }
  using VT = __m512i;
  static VT Table16(const uint8_t* t) { return _mm512_broadcast_i32x4(_mm_loadu_si128(reinterpret_cast<const __m128i*>(t))); }
  static VI Lookup16(VT table, VI idx) { return _mm512_shuffle_epi8(table, idx); }
  static VI SetI(int32_t v) { return _mm512_set1_epi32(v); }
  static VI SubI(VI a, VI b) { return _mm512_sub_epi32(a, b); }
  static VI LoadCodes(const uint8_t* p) { return _mm512_loadu_si512(p); }
  static void LoadNibbles(const uint8_t* p, VI* lo, VI* hi) {
    const __m512i b = _mm512_loadu_si512(p), m = _mm512_set1_epi8(0x0F);
    *lo = _mm512_and_si512(b, m);
    *hi = _mm512_and_si512(_mm512_srli_epi16(b, 4), m);
  }
  // The 2-bit fields of each byte: w[h] = bits 2h, 2h + 1.
  static void LoadCrumbs(const uint8_t* p, VI* w) {
    const __m512i b = _mm512_loadu_si512(p), m = _mm512_set1_epi8(0x03);
    w[0] = _mm512_and_si512(b, m);
    w[1] = _mm512_and_si512(_mm512_srli_epi16(b, 2), m);
    w[2] = _mm512_and_si512(_mm512_srli_epi16(b, 4), m);
    w[3] = _mm512_and_si512(_mm512_srli_epi16(b, 6), m);
  }
  static VI Set4(const int8_t* x) {
    int32_t w;
    std::memcpy(&w, x, 4);
    return _mm512_set1_epi32(w);
  }
#ifdef __AVX512VNNI__
  // vpdpbusd sums four products of unsigned bytes of any size per int32 lane.
  using VS = VI;
  static constexpr int kShortMax = 2147483647;
  static constexpr int kShortProducts = 4;
  static VS DotS(VS s, VI w, VI x) { return _mm512_dpbusd_epi32(s, w, x); }
  static VS MulS(VI w, VI x) { return DotS(ZeroI(), w, x); }
  static VI Widen(VI acc, VS s) { return _mm512_add_epi32(acc, s); }
  static VI ScaleOf(const uint8_t* p) { return _mm512_cvtepi8_epi32(Load16(p)); }
  static VI WidenBy(VI acc, VS s, VI scale) { return _mm512_add_epi32(acc, _mm512_mullo_epi32(s, scale)); }
  static VI MaddI(VI acc, VI a, VI b) { return _mm512_dpwssd_epi32(acc, a, b); }
  using Wide = VI;
  static constexpr int kWideOffset = 0;
  static Wide PrepareWide(VI w) { return w; }
  static VS MulWideS(Wide w, VI x) { return MulS(w, x); }
  static VS DotWideS(VS s, Wide w, VI x) { return DotS(s, w, x); }
  static constexpr bool kActivationSign = false;
#else
  // vpmaddubsw in int16 runs, and the sign trick for byte codes (kernels_avx2.cpp): |w - 128|
  // times x negated where w < 128.
  using VS = VI;
  static constexpr int kShortMax = 32767;
  static constexpr int kShortProducts = 2;
  static VS MulS(VI w, VI x) { return _mm512_maddubs_epi16(w, x); }
  static VS DotS(VS s, VI w, VI x) { return _mm512_add_epi16(s, MulS(w, x)); }
  static VI Widen(VI acc, VS s) { return _mm512_add_epi32(acc, _mm512_madd_epi16(s, _mm512_set1_epi16(1))); }
  // The scale in both int16 halves of its lane: the widening multiplies by it for free.
  static VI ScaleOf(const uint8_t* p) { return Pairs(p, p); }
  static VI WidenBy(VI acc, VS s, VI scale) { return _mm512_add_epi32(acc, _mm512_madd_epi16(s, scale)); }
  static VI MaddI(VI acc, VI a, VI b) { return _mm512_add_epi32(acc, _mm512_madd_epi16(a, b)); }
  struct Wide {
    __m512i abs;
    __mmask64 negative;
  };
  static constexpr int kWideOffset = 128;
  static Wide PrepareWide(VI w) {
    const __m512i s = _mm512_xor_si512(w, _mm512_set1_epi8(static_cast<char>(0x80)));
    return {_mm512_abs_epi8(s), _mm512_movepi8_mask(s)};
  }
  static VI SignedBy(const Wide& w, VI x) { return _mm512_mask_sub_epi8(x, w.negative, _mm512_setzero_si512(), x); }
  static VS MulWideS(const Wide& w, VI x) { return MulS(w.abs, SignedBy(w, x)); }
  static VS DotWideS(VS s, const Wide& w, VI x) { return DotS(s, w.abs, SignedBy(w, x)); }
  static constexpr bool kActivationSign = false;  // no vpsignb in AVX-512
#endif

  static V ToFloat(VI v) { return _mm512_cvtepi32_ps(v); }
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
