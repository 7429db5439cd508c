// The AVX2 (+ F16C, FMA) instruction set for kernels_impl.h, shared by kernels_avx2.cpp and
// kernels_avxvnni.cpp, which also has AVX-VNNI's vpdpbusd for the integer dots (compiled with
// -mavxvnni: __AVXVNNI__). Included inside the table's namespace, after <immintrin.h>.
// (No include guard on purpose.)

struct Isa {
  using V = __m256;
  static constexpr int L = 8;
  static constexpr int kTokenTile = 4;
  static constexpr int kFloatTokenTile = 6;  // 12 accumulators of 16 registers
  static constexpr int kPanelTile = 1;
  static constexpr int kPanelTileDecode = 4;
  static constexpr int kBf16TokenTile = 2;
  static constexpr int kBf16PanelTile = 1;
  static V Zero() { return _mm256_setzero_ps(); }
  static V Set1(float x) { return _mm256_set1_ps(x); }
  static V Load(const float* p) { return _mm256_loadu_ps(p); }
  static void Store(float* p, V v) { _mm256_storeu_ps(p, v); }
  static V LoadF16(const uint16_t* p) {
    return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
  }
  static void StoreF16(uint16_t* p, V v) {
    _mm_storeu_si128(reinterpret_cast<__m128i*>(p), _mm256_cvtps_ph(v, _MM_FROUND_TO_NEAREST_INT));
  }
  static V LoadBf16(const uint16_t* p) {
    const __m256i w = _mm256_cvtepu16_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
    return _mm256_castsi256_ps(_mm256_slli_epi32(w, 16));
  }
  static V LoadI8(const int8_t* p) {
    return _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(p))));
  }
  static V LoadU4Lo(const uint8_t* p) {
    const __m256i b = _mm256_cvtepu8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(p)));
    const __m256i lo = _mm256_and_si256(b, _mm256_set1_epi32(0xF));
    return _mm256_cvtepi32_ps(_mm256_sub_epi32(lo, _mm256_set1_epi32(8)));
  }
  static V LoadU4Hi(const uint8_t* p) {
    const __m256i b = _mm256_cvtepu8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(p)));
    const __m256i hi = _mm256_srli_epi32(b, 4);
    return _mm256_cvtepi32_ps(_mm256_sub_epi32(hi, _mm256_set1_epi32(8)));
  }
  static V Fma(V a, V b, V c) { return _mm256_fmadd_ps(a, b, c); }
  static V Mul(V a, V b) { return _mm256_mul_ps(a, b); }
  static float Reduce(V v) {
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    s = _mm_add_ss(s, _mm_movehdup_ps(s));
    return _mm_cvtss_f32(s);
  }
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
  static float F16(uint16_t h) { return _cvtsh_ss(h); }
  static V Add(V a, V b) { return _mm256_add_ps(a, b); }
  static V Max(V a, V b) { return _mm256_max_ps(a, b); }
  static V Div(V a, V b) { return _mm256_div_ps(a, b); }
  static V IfNonNegative(V x, V a, V b) { return _mm256_blendv_ps(b, a, _mm256_cmp_ps(x, Zero(), _CMP_GE_OQ)); }
  static float ReduceMax(V v) {
    __m128 m = _mm_max_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    m = _mm_max_ps(m, _mm_movehl_ps(m, m));
    return _mm_cvtss_f32(_mm_max_ss(m, _mm_movehdup_ps(m)));
  }
  static V RoundNearest(V x) { return _mm256_round_ps(x, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC); }
  static V Scale2(V y, V n) {
    const __m256i e = _mm256_slli_epi32(_mm256_add_epi32(_mm256_cvtps_epi32(n), _mm256_set1_epi32(127)), 23);
    return _mm256_mul_ps(y, _mm256_castsi256_ps(e));
  }
  static V ZeroWhereLess(V y, V x, float bound) {
    return _mm256_and_ps(y, _mm256_cmp_ps(x, _mm256_set1_ps(bound), _CMP_GE_OQ));
  }
  // Pairwise horizontal adds: lane r ends up with the sum of rows[r].
  static V ReduceRows(const V (&rows)[L]) {
    const V t0 = _mm256_hadd_ps(rows[0], rows[1]), t1 = _mm256_hadd_ps(rows[2], rows[3]);
    const V t2 = _mm256_hadd_ps(rows[4], rows[5]), t3 = _mm256_hadd_ps(rows[6], rows[7]);
    const V u0 = _mm256_hadd_ps(t0, t1), u1 = _mm256_hadd_ps(t2, t3);  // per 128-bit half: rows 0-3, 4-7
    return _mm256_add_ps(_mm256_permute2f128_ps(u0, u1, 0x20), _mm256_permute2f128_ps(u0, u1, 0x31));
  }
  // Integer dots (kernels_impl.h). Without AVX-VNNI (below), vpmaddubsw sums two products per
  // int16 lane, exactly while they stay within int16, so runs of them add up in int16 and
  // vpmaddwd widens them to int32 once per run (4-bit codes: a whole group of 32 columns). Byte
  // codes (up to 255) take the sign trick: s = w - 128 in int8 and |s| <= 128 unsigned, times x
  // with s's sign (vpsignb), so two products stay within 2 * 128 * 127 = 32512; each widened
  // at once.
  using VI = __m256i;
  static VI ZeroI() { return _mm256_setzero_si256(); }
  // Byte i takes bit i of the 32-bit mask: each byte gets its mask byte, then its bit.
  static void AddBits(const uint8_t* mask, int v, int bit, VI* w) {
    int32_t m;
    std::memcpy(&m, mask + v * 4, 4);
    const __m256i bytes = _mm256_shuffle_epi8(
        _mm256_set1_epi32(m), _mm256_setr_epi8(0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1, 2, 2, 2, 2, 2, 2, 2, 2, 3,
                                               3, 3, 3, 3, 3, 3, 3));
    const __m256i select = _mm256_set1_epi64x(static_cast<int64_t>(0x8040201008040201ull));
    const __m256i set = _mm256_cmpeq_epi8(_mm256_and_si256(bytes, select), select);
    *w = _mm256_add_epi8(*w, _mm256_and_si256(set, _mm256_set1_epi8(static_cast<char>(bit))));
  }
  // Vector v's crumbs are the low (v = 0) or high nibbles of the 32 bytes: the two fields' in
  // bits 0-1 and 2-3 of every byte.
  static void AddCrumbs(const uint8_t* c, int v, VI* lo, VI* hi) {
    __m256i y = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(c));
    if (v == 1) y = _mm256_srli_epi16(y, 4);
    const __m256i m = _mm256_set1_epi8(0x30);
    *lo = _mm256_add_epi8(*lo, _mm256_and_si256(_mm256_slli_epi16(y, 4), m));
    *hi = _mm256_add_epi8(*hi, _mm256_and_si256(_mm256_slli_epi16(y, 2), m));
  }
  static VI AddI(VI a, VI b) { return _mm256_add_epi32(a, b); }
  static VI MulI(VI a, VI b) { return _mm256_mullo_epi32(a, b); }
  static __m128i Load8(const uint8_t* p) { return _mm_loadl_epi64(reinterpret_cast<const __m128i*>(p)); }
  // Lane r: the int16 pair (a[r], b[r]).
  static VI Pairs(const uint8_t* a, const uint8_t* b) {
    return _mm256_cvtepi8_epi16(_mm_unpacklo_epi8(Load8(a), Load8(b)));
  }
  using VT = __m256i;
  static VT Table16(const uint8_t* t) { return _mm256_broadcastsi128_si256(_mm_loadu_si128(reinterpret_cast<const __m128i*>(t))); }
  static VI Lookup16(VT table, VI idx) { return _mm256_shuffle_epi8(table, idx); }
  static VI SetI(int32_t v) { return _mm256_set1_epi32(v); }
  static VI SubI(VI a, VI b) { return _mm256_sub_epi32(a, b); }
  static VI LoadCodes(const uint8_t* p) { return _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)); }
  static void LoadNibbles(const uint8_t* p, VI* lo, VI* hi) {
    const __m256i b = LoadCodes(p), m = _mm256_set1_epi8(0x0F);
    *lo = _mm256_and_si256(b, m);
    *hi = _mm256_and_si256(_mm256_srli_epi16(b, 4), m);
  }
  static void LoadCrumbs(const uint8_t* p, VI* w) {
    const __m256i b = LoadCodes(p), m = _mm256_set1_epi8(0x03);
    w[0] = _mm256_and_si256(b, m);
    w[1] = _mm256_and_si256(_mm256_srli_epi16(b, 2), m);
    w[2] = _mm256_and_si256(_mm256_srli_epi16(b, 4), m);
    w[3] = _mm256_and_si256(_mm256_srli_epi16(b, 6), m);
  }
  static VI Set4(const int8_t* x) {
    int32_t w;
    std::memcpy(&w, x, 4);
    return _mm256_set1_epi32(w);
  }
#ifdef __AVXVNNI__
  // AVX-VNNI: vpdpbusd (VEX) sums four products of unsigned bytes of any size per int32 lane.
  using VS = VI;
  static constexpr int kShortMax = 2147483647;
  static constexpr int kShortProducts = 4;
  static VS DotS(VS s, VI w, VI x) { return _mm256_dpbusd_avx_epi32(s, w, x); }
  static VS MulS(VI w, VI x) { return DotS(ZeroI(), w, x); }
  static VI Widen(VI acc, VS s) { return _mm256_add_epi32(acc, s); }
  static VI ScaleOf(const uint8_t* p) { return _mm256_cvtepi8_epi32(Load8(p)); }
  static VI WidenBy(VI acc, VS s, VI scale) { return _mm256_add_epi32(acc, _mm256_mullo_epi32(s, scale)); }
  static VI MaddI(VI acc, VI a, VI b) { return _mm256_dpwssd_avx_epi32(acc, a, b); }
  using Wide = VI;
  static constexpr int kWideOffset = 0;
  static Wide PrepareWide(VI w) { return w; }
  static VS MulWideS(Wide w, VI x) { return MulS(w, x); }
  static VS DotWideS(VS s, Wide w, VI x) { return DotS(s, w, x); }
  static constexpr bool kActivationSign = false;
#else
  using VS = __m256i;
  static constexpr int kShortMax = 32767;
  static constexpr int kShortProducts = 2;
  static VS MulS(VI w, VI x) { return _mm256_maddubs_epi16(w, x); }
  // The product and its add in one asm block: GCC would otherwise reassociate a run's adds
  // into a tree after all its products, whose results then spill (16 registers): a Q4_K tile
  // of 4 tokens ran 1.45x slower that way.
  static VS DotS(VS s, VI w, VI x) {
    __m256i p;
    asm("vpmaddubsw %3, %2, %1\n\tvpaddw %1, %0, %0" : "+x"(s), "=&x"(p) : "x"(w), "x"(x));
    return s;
  }
  static VI Widen(VI acc, VS s) { return _mm256_add_epi32(acc, _mm256_madd_epi16(s, _mm256_set1_epi16(1))); }
  // The scale in both int16 halves of its lane: the widening multiplies by it for free.
  static VI ScaleOf(const uint8_t* p) { return Pairs(p, p); }
  static VI WidenBy(VI acc, VS s, VI scale) { return _mm256_add_epi32(acc, _mm256_madd_epi16(s, scale)); }
  static VI MaddI(VI acc, VI a, VI b) { return _mm256_add_epi32(acc, _mm256_madd_epi16(a, b)); }
  struct Wide {
    __m256i abs, sign;  // |w - 128| as unsigned bytes; w - 128
  };
  static constexpr int kWideOffset = 128;
  static Wide PrepareWide(VI w) {
    const __m256i s = _mm256_xor_si256(w, _mm256_set1_epi8(static_cast<char>(0x80)));
    return {_mm256_abs_epi8(s), s};
  }
  static VS MulWideS(const Wide& w, VI x) { return MulS(w.abs, _mm256_sign_epi8(x, w.sign)); }
  static VS DotWideS(VS s, const Wide& w, VI x) { return DotS(s, w.abs, _mm256_sign_epi8(x, w.sign)); }
  // One token's products where no code is 0 (w - 128 within +-127: PackedMatrix::
  // codes_symmetric): |x| times w - 128 with x's sign. |x| serves every weight vector, so each
  // takes a sign, not an abs and a sign (the weights are used once).
  static constexpr bool kActivationSign = true;
  static VI AbsBytes(VI x) { return _mm256_abs_epi8(x); }
  static VS MulActS(const Wide& w, VI x, VI absx) { return MulS(absx, _mm256_sign_epi8(w.sign, x)); }
#endif
  static V ToFloat(VI v) { return _mm256_cvtepi32_ps(v); }
  // BF16 pairs (kernels_impl.h), emulated: each product is exact, so two FMAs round as
  // vdpbf16ps does.
  using VP = __m256i;
  static VP LoadPairs(const uint16_t* p) { return _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)); }
  static VP SetPair(const uint16_t* p) {
    int32_t w;
    std::memcpy(&w, p, 4);
    return _mm256_set1_epi32(w);
  }
  static V DotPairs(V acc, VP w, VP x) {
    const __m256i hi = _mm256_set1_epi32(static_cast<int32_t>(0xFFFF0000u));
    acc = _mm256_fmadd_ps(_mm256_castsi256_ps(_mm256_and_si256(w, hi)), _mm256_castsi256_ps(_mm256_and_si256(x, hi)),
                          acc);
    return _mm256_fmadd_ps(_mm256_castsi256_ps(_mm256_slli_epi32(w, 16)), _mm256_castsi256_ps(_mm256_slli_epi32(x, 16)),
                           acc);
  }
};
