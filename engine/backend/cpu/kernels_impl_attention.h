// Attention kernels shared by every instruction set: dot products of a query with KV rows,
// weighted sums of value rows, the block softmax's exp and max, and what else uses that exp or
// writes KV rows (the SiLU gate, F16 conversion). Included by
// kernels_impl.h (same rules: inside the ISA's namespace, after its `Isa`, `V` and `L`).
// (No include guard on purpose.)

// ---- KV rows: dot products and weighted sums --------------------------------------------

// Loads L (or `n` < L) values of a float-typed KV row starting at value k.
template <KvDtype D>
inline V LoadKvFloat(const uint8_t* row, int k, int n) {
  if constexpr (D == KvDtype::kF32) {
    return n == L ? RowF32::Load(row, k) : RowF32::LoadTail(row, k, n);
  } else if constexpr (D == KvDtype::kF16) {
    return n == L ? RowF16::Load(row, k) : RowF16::LoadTail(row, k, n);
  } else {
    return n == L ? RowBf16::Load(row, k) : RowBf16::LoadTail(row, k, n);
  }
}

inline V LoadI8Tail(const int8_t* p, int n) { return Isa::LoadI8N(p, n); }

// Stores the first n <= L lanes of v.
inline void StoreX(float* p, V v, int n) {
  if (n == L) {
    Isa::Store(p, v);
  } else {
    Isa::StoreN(p, v, n);
  }
}

// exp(x) for x <= 0 (Cephes' expf: x = n ln2 + r, |r| <= ln2 / 2, a degree-7 polynomial in r,
// then scaled by 2^n); x < -87 (e^-87 = 1.6e-38, the smallest normal range) gives 0.
inline V ExpNonPositive(V x) {
  const V xc = Isa::Max(x, Isa::Set1(-87.0f));
  const V n = Isa::RoundNearest(Isa::Mul(xc, Isa::Set1(1.44269504088896341f)));
  V r = Isa::Fma(n, Isa::Set1(-0.693359375f), xc);
  r = Isa::Fma(n, Isa::Set1(2.12194440e-4f), r);
  V p = Isa::Set1(1.9875691500e-4f);
  p = Isa::Fma(p, r, Isa::Set1(1.3981999507e-3f));
  p = Isa::Fma(p, r, Isa::Set1(8.3334519073e-3f));
  p = Isa::Fma(p, r, Isa::Set1(4.1665795894e-2f));
  p = Isa::Fma(p, r, Isa::Set1(1.6666665459e-1f));
  p = Isa::Fma(p, r, Isa::Set1(5.0000001201e-1f));
  const V y = Isa::Add(Isa::Fma(Isa::Mul(p, r), r, r), Isa::Set1(1.0f));  // 1 + r + r^2 p(r)
  return Isa::ZeroWhereLess(Isa::Scale2(y, n), x, -87.0f);
}

inline float MaxOf(const float* x, int n) {
  V m = Isa::Set1(-INFINITY);
  int j = 0;
  for (; j + L <= n; j += L) m = Isa::Max(m, Isa::Load(x + j));
  float out = Isa::ReduceMax(m);
  for (; j < n; ++j) out = x[j] > out ? x[j] : out;
  return out;
}

// silu(g) * u = g * sigmoid(g) * u, sigmoid(g) = 1 / (1 + t) for g >= 0, t / (1 + t) below,
// with t = e^-|g| <= 1 (ExpNonPositive; no overflow for any g).
inline V SiluMulV(V g, V u) {
  const V neg_abs = Isa::Mul(Isa::Max(g, Isa::Mul(g, Isa::Set1(-1.0f))), Isa::Set1(-1.0f));
  const V t = ExpNonPositive(neg_abs);
  const V sigmoid = Isa::Div(Isa::IfNonNegative(g, Isa::Set1(1.0f), t), Isa::Add(Isa::Set1(1.0f), t));
  return Isa::Mul(Isa::Mul(g, sigmoid), u);
}

inline void SiluMul(float* gate, const float* up, int64_t n) {
  int64_t i = 0;
  for (; i + L <= n; i += L) Isa::Store(gate + i, SiluMulV(Isa::Load(gate + i), Isa::Load(up + i)));
  if (i < n) {
    const int m = static_cast<int>(n - i);
    Isa::StoreN(gate + i, SiluMulV(Isa::LoadN(gate + i, m), Isa::LoadN(up + i, m)), m);
  }
}

inline void ToF16(const float* x, int n, uint16_t* out) {
  int i = 0;
  for (; i + L <= n; i += L) Isa::StoreF16(out + i, Isa::Load(x + i));
  if (i < n) {
    alignas(64) uint16_t buf[L];
    Isa::StoreF16(buf, Isa::LoadN(x + i, n - i));
    std::memcpy(out + i, buf, sizeof(uint16_t) * (n - i));
  }
}

inline float ExpSubSum(float* s, int n, float max) {
  const V neg_max = Isa::Set1(-max);
  V total = Isa::Zero();
  for (int j = 0; j < n; j += L) {
    const int m = n - j < L ? n - j : L;
    V x;
    if (m == L) {
      x = Isa::Load(s + j);
    } else {  // lanes past n: -inf, so they add 0
      alignas(64) float buf[L];
      for (int i = 0; i < L; ++i) buf[i] = i < m ? s[j + i] : -INFINITY;
      x = Isa::Load(buf);
    }
    const V e = ExpNonPositive(Isa::Add(x, neg_max));
    total = Isa::Add(total, e);
    StoreX(s + j, e, m);
  }
  return Isa::Reduce(total);
}

// Row accessors for the unrolled kernels below: at.row(r)(c) is vector c (values c * L ..
// c * L + L - 1) of row r. Float rows load (and widen) the values; quantized rows (INT8/INT4,
// one group per row of C * L values) decode them in registers as fma(code, scale, bias), the
// bits KvDecode stores, so a kernel on QuantRowsAt computes exactly what it computes on
// KvDecode's F32 rows.
template <KvDtype D>
struct FloatRowsAt {
  const uint8_t* data;
  size_t row_bytes;
  struct Row {
    const uint8_t* p;
    V operator()(int c) const { return LoadKvFloat<D>(p, c * L, L); }
  };
  Row row(int r) const { return {data + r * row_bytes}; }
};

template <KvDtype D, int C>
struct QuantRowsAt {
  const uint8_t* data;
  const uint16_t* scales;  // {scale, bias} per row
  static constexpr int kHalf = C * L / 2;
  static constexpr size_t kRowBytes = D == KvDtype::kInt8 ? C * L : kHalf;
  struct Row {
    const uint8_t* p;
    V scale, bias;
    V operator()(int c) const {
      if constexpr (D == KvDtype::kInt8) {
        return Isa::Fma(Isa::LoadI8(reinterpret_cast<const int8_t*>(p) + c * L), scale, bias);
      } else {  // value i in the low nibble of byte i, value half + i in its high nibble
        const int i = c * L;
        return Isa::Fma(i < kHalf ? Isa::LoadU4Lo(p + i) : Isa::LoadU4Hi(p + i - kHalf), scale, bias);
      }
    }
  };
  Row row(int r) const {
    const uint16_t* params = scales + static_cast<size_t>(r) * kKvParamsPerGroup;
    return {data + r * kRowBytes, Isa::Set1(Isa::F16(params[0])), Isa::Set1(Isa::F16(params[1]))};
  }
};

// scores[r] = dot(q, row r) for the m <= L rows of `at`, head_dim = C * L: per row a vector of
// partial sums (unrolled, q in registers), then one transposing reduction for all of them.
// (q is loaded where it is used: an array of its vectors was copied as a block through 16-byte
// moves, then read back 32 bytes at a time, and every read waited on the failed forwarding.)
template <int C, class Rows>
inline void KvDotRowsFixed(const float* q, const Rows& at, int m, float* scores) {
  V acc[L];
#pragma GCC unroll 16
  for (int r = 0; r < L; ++r) {
    V a = Isa::Zero();
    if (r < m) {
      const auto row = at.row(r);
      for (int c = 0; c < C; ++c) a = Isa::Fma(Isa::Load(q + c * L), row(c), a);
    }
    acc[r] = a;
  }
  StoreX(scores, Isa::ReduceRows(acc), m);
}

// The same for float rows of any head_dim.
template <KvDtype D>
inline void KvDotFloatRowsAny(const float* q, const uint8_t* row, size_t row_bytes, int m, int head_dim, float* scores) {
  V acc[L];
  for (int r = 0; r < L; ++r) {
    V a = Isa::Zero();
    for (int k = 0; r < m && k < head_dim; k += L) {
      const int n = head_dim - k < L ? head_dim - k : L;
      const V qv = n == L ? Isa::Load(q + k) : LoadXTail(q + k, n);
      a = Isa::Fma(qv, LoadKvFloat<D>(row + r * row_bytes, k, n), a);
    }
    acc[r] = a;
  }
  StoreX(scores, Isa::ReduceRows(acc), m);
}

template <KvDtype D>
void KvDot(const float* q, const KvRows& rows, int head_dim, float* scores) {
  static_assert(!IsQuantized(D), "quantized rows: KvDotQuant");
  const size_t row_bytes = KvRowDataBytes(D, head_dim);
  // L rows at a time; the head dims models use most get unrolled code.
  for (int j = 0; j < rows.n; j += L) {
    const uint8_t* row = rows.data + j * row_bytes;
    const int m = rows.n - j < L ? rows.n - j : L;
    if (head_dim == 64 && 64 % L == 0) {
      KvDotRowsFixed<64 / L>(q, FloatRowsAt<D>{row, row_bytes}, m, scores + j);
    } else if (head_dim == 128 && 128 % L == 0) {
      KvDotRowsFixed<128 / L>(q, FloatRowsAt<D>{row, row_bytes}, m, scores + j);
    } else {
      KvDotFloatRowsAny<D>(q, row, row_bytes, m, head_dim, scores + j);
    }
  }
}

// acc += sum_j p[j] * row j for the n rows of `at`, C * L values each: even and odd rows
// accumulate apart (independent chains in registers), then add. At most kAxpyVecs vectors of
// acc at a time, so the 2 * kAxpyVecs chains stay in registers (AVX2 has 16: with head dim 64
// all 16 chains at once spilled); each value's arithmetic is the same either way.
inline constexpr int kAxpyVecs = L == 8 ? 4 : 8;

template <int C, class Rows>
inline void KvAxpyRowsFixed(const float* p, const Rows& at, int n, float* acc) {
  constexpr int kPart = C < kAxpyVecs ? C : kAxpyVecs;
  static_assert(C % kPart == 0);
  for (int c0 = 0; c0 < C; c0 += kPart) {
    V even[kPart], odd[kPart];
    for (int c = 0; c < kPart; ++c) {
      even[c] = Isa::Load(acc + (c0 + c) * L);
      odd[c] = Isa::Zero();
    }
    int j = 0;
    for (; j + 2 <= n; j += 2) {
      const V pe = Isa::Set1(p[j]), po = Isa::Set1(p[j + 1]);
      const auto re = at.row(j), ro = at.row(j + 1);
      for (int c = 0; c < kPart; ++c) {
        even[c] = Isa::Fma(pe, re(c0 + c), even[c]);
        odd[c] = Isa::Fma(po, ro(c0 + c), odd[c]);
      }
    }
    if (j < n) {
      const V pe = Isa::Set1(p[j]);
      const auto re = at.row(j);
      for (int c = 0; c < kPart; ++c) even[c] = Isa::Fma(pe, re(c0 + c), even[c]);
    }
    for (int c = 0; c < kPart; ++c) Isa::Store(acc + (c0 + c) * L, Isa::Add(even[c], odd[c]));
  }
}

template <KvDtype D>
void KvAxpy(const float* p, const KvRows& rows, int head_dim, float* acc) {
  static_assert(!IsQuantized(D), "quantized rows: KvAxpyQuant");
  const size_t row_bytes = KvRowDataBytes(D, head_dim);
  if (head_dim == 64 && 64 % L == 0) return KvAxpyRowsFixed<64 / L>(p, FloatRowsAt<D>{rows.data, row_bytes}, rows.n, acc);
  if (head_dim == 128 && 128 % L == 0) return KvAxpyRowsFixed<128 / L>(p, FloatRowsAt<D>{rows.data, row_bytes}, rows.n, acc);
  for (int k = 0; k < head_dim; k += L) {
    const int n = head_dim - k < L ? head_dim - k : L;
    V a = n == L ? Isa::Load(acc + k) : LoadXTail(acc + k, n);
    for (int j = 0; j < rows.n; ++j) {
      a = Isa::Fma(Isa::Set1(p[j]), LoadKvFloat<D>(rows.data + j * row_bytes, k, n), a);
    }
    StoreX(acc + k, a, n);
  }
}

// ---- Quantized rows decoded to F32 ------------------------------------------------------
// A code q stands for fma(q, scale, bias) (cache/kv_codec.h), so these give the codec's bits.

// Rows of INT8 or INT4 codes with per-token groups ({scale, bias} f16 per group).
template <KvDtype D>
void KvDecode(const KvRows& rows, int head_dim, int group_size, float* out) {
  const size_t row_bytes = KvRowDataBytes(D, head_dim);
  const int groups = head_dim / group_size;
  for (int j = 0; j < rows.n; ++j) {
    const uint8_t* row = rows.data + j * row_bytes;
    float* dst = out + static_cast<size_t>(j) * head_dim;
    for (int g = 0; g < groups; ++g) {
      const uint16_t* params = rows.scales + (static_cast<size_t>(j) * groups + g) * kKvParamsPerGroup;
      const V scale = Isa::Set1(Isa::F16(params[0])), bias = Isa::Set1(Isa::F16(params[1]));
      float* dg = dst + g * group_size;
      if constexpr (D == KvDtype::kInt8) {
        const int8_t* r8 = reinterpret_cast<const int8_t*>(row) + g * group_size;
        for (int k = 0; k < group_size; k += L) {
          const int n = group_size - k < L ? group_size - k : L;
          StoreX(dg + k, Isa::Fma(n == L ? Isa::LoadI8(r8 + k) : LoadI8Tail(r8 + k, n), scale, bias), n);
        }
      } else {  // INT4: value i in the low nibble of byte i, value half + i in its high nibble
        static_assert(D == KvDtype::kInt4);
        const int half = group_size / 2;
        const uint8_t* bytes = row + g * half;
        int i = 0;
        for (; i + L <= half; i += L) {
          Isa::Store(dg + i, Isa::Fma(Isa::LoadU4Lo(bytes + i), scale, bias));
          Isa::Store(dg + half + i, Isa::Fma(Isa::LoadU4Hi(bytes + i), scale, bias));
        }
        const float s = Isa::F16(params[0]), b = Isa::F16(params[1]);
        for (; i < half; ++i) {
          dg[i] = std::fma(static_cast<float>((bytes[i] & 0xF) - 8), s, b);
          dg[half + i] = std::fma(static_cast<float>((bytes[i] >> 4) - 8), s, b);
        }
      }
    }
  }
}

// INT4C keys of a full block (kv_spec.h): channel c's code q stands for fma(q, scale_c, bias_c).
inline void KvDecodeChannel(const uint8_t* data, int n, const uint16_t* params, int head_dim, int group_size,
                            float* out) {
  alignas(64) float scale[kMaxChannelKeyHeadDim], bias[kMaxChannelKeyHeadDim];
  for (int c = 0; c < head_dim; ++c) {
    scale[c] = Isa::F16(params[kKvParamsPerGroup * c]);
    bias[c] = Isa::F16(params[kKvParamsPerGroup * c + 1]);
  }
  const size_t row_bytes = KvRowDataBytes(KvDtype::kInt4, head_dim);
  const int half = group_size / 2;
  for (int j = 0; j < n; ++j) {
    float* dst = out + static_cast<size_t>(j) * head_dim;
    for (int g = 0; g < head_dim / group_size; ++g) {
      const uint8_t* bytes = data + j * row_bytes + g * half;
      const int c0 = g * group_size;
      int i = 0;
      for (; i + L <= half; i += L) {
        const int lo = c0 + i, hi = c0 + half + i;
        Isa::Store(dst + lo, Isa::Fma(Isa::LoadU4Lo(bytes + i), Isa::Load(scale + lo), Isa::Load(bias + lo)));
        Isa::Store(dst + hi, Isa::Fma(Isa::LoadU4Hi(bytes + i), Isa::Load(scale + hi), Isa::Load(bias + hi)));
      }
      for (; i < half; ++i) {
        const int lo = c0 + i, hi = c0 + half + i;
        dst[lo] = std::fma(static_cast<float>((bytes[i] & 0xF) - 8), scale[lo], bias[lo]);
        dst[hi] = std::fma(static_cast<float>((bytes[i] >> 4) - 8), scale[hi], bias[hi]);
      }
    }
  }
}

// ---- Quantized rows read in place --------------------------------------------------------
// KvDecode and then the F32 row kernels without the decode pass, for the shapes with such code
// (KvInPlaceShape: head dim 64 or 128 in one group): the same bits. For a single query
// (decode), where a decoded block would serve one query only.
inline bool KvInPlaceShape(int head_dim, int group_size) {
  return (head_dim == 64 || head_dim == 128) && group_size == head_dim && (head_dim / 2) % L == 0;
}

template <KvDtype D, int C>
inline void KvDotInPlace(const float* q, const KvRows& rows, float* scores) {
  using At = QuantRowsAt<D, C>;
  for (int j = 0; j < rows.n; j += L) {
    const int m = rows.n - j < L ? rows.n - j : L;
    KvDotRowsFixed<C>(q, At{rows.data + j * At::kRowBytes, rows.scales + static_cast<size_t>(j) * kKvParamsPerGroup}, m,
                      scores + j);
  }
}

template <KvDtype D>
void KvDotQuant(const float* q, const KvRows& rows, int head_dim, int /*group_size*/, float* scores) {
  if (head_dim == 64) return KvDotInPlace<D, 64 / L>(q, rows, scores);
  KvDotInPlace<D, 128 / L>(q, rows, scores);
}

template <KvDtype D>
void KvAxpyQuant(const float* p, const KvRows& rows, int head_dim, int /*group_size*/, float* acc) {
  if (head_dim == 64) return KvAxpyRowsFixed<64 / L>(p, QuantRowsAt<D, 64 / L>{rows.data, rows.scales}, rows.n, acc);
  KvAxpyRowsFixed<128 / L>(p, QuantRowsAt<D, 128 / L>{rows.data, rows.scales}, rows.n, acc);
}
