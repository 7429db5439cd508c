// Kernel templates shared by every instruction set. Include this file exactly once per
// kernels_<isa>.cpp, inside that file's own namespace, after defining a traits struct `Isa`:
//
//   using V;                      // a vector of L floats
//   static constexpr int L;       // lanes (1, 8 or 16)
//   static constexpr int kRowTile;// weight rows per register tile
//   V Zero(); V Set1(float); V Load(const float*); void Store(float*, V);
//   V LoadF16(const uint16_t*); V LoadBf16(const uint16_t*); V LoadI8(const int8_t*);
//   V LoadU4Lo(const uint8_t*), LoadU4Hi(const uint8_t*);  // (nibble - 8) of L bytes
//   V Fma(V a, V b, V c) /* a*b + c */; V Mul(V, V); float Reduce(V); float F16(uint16_t);
//
// Tails shorter than L go through a zero-padded copy, so every function handles any length.
// (No include guard on purpose.)

using V = Isa::V;
constexpr int L = Isa::L;

// ---- Weight rows: chunk loaders by GGUF type --------------------------------------------

struct RowF32 {
  static V Load(const uint8_t* row, int64_t k) { return Isa::Load(reinterpret_cast<const float*>(row) + k); }
  static V LoadTail(const uint8_t* row, int64_t k, int n) {
    alignas(64) float buf[L] = {};
    std::memcpy(buf, reinterpret_cast<const float*>(row) + k, sizeof(float) * n);
    return Isa::Load(buf);
  }
};

struct RowF16 {
  static V Load(const uint8_t* row, int64_t k) { return Isa::LoadF16(reinterpret_cast<const uint16_t*>(row) + k); }
  static V LoadTail(const uint8_t* row, int64_t k, int n) {
    alignas(64) uint16_t buf[L] = {};
    std::memcpy(buf, reinterpret_cast<const uint16_t*>(row) + k, sizeof(uint16_t) * n);
    return Isa::LoadF16(buf);
  }
};

struct RowBf16 {
  static V Load(const uint8_t* row, int64_t k) { return Isa::LoadBf16(reinterpret_cast<const uint16_t*>(row) + k); }
  static V LoadTail(const uint8_t* row, int64_t k, int n) {
    alignas(64) uint16_t buf[L] = {};
    std::memcpy(buf, reinterpret_cast<const uint16_t*>(row) + k, sizeof(uint16_t) * n);
    return Isa::LoadBf16(buf);
  }
};

// Q8_0 rows are whole 32-value blocks, so there is never a tail (32 % L == 0).
struct RowQ8 {
  static V Load(const uint8_t* row, int64_t k) {
    const BlockQ8_0* b = reinterpret_cast<const BlockQ8_0*>(row) + k / 32;
    return Isa::Mul(Isa::LoadI8(b->qs + k % 32), Isa::Set1(Isa::F16(b->d)));
  }
  static V LoadTail(const uint8_t* row, int64_t k, int n) { return Load(row, k); }
};

static_assert(32 % L == 0, "Q8_0 blocks must split into whole vectors");

// ---- Matrix products ------------------------------------------------------------------

inline V LoadXTail(const float* x, int n) {
  alignas(64) float buf[L] = {};
  std::memcpy(buf, x, sizeof(float) * n);
  return Isa::Load(buf);
}

// RT tokens x RN weight rows, accumulated in registers over the whole row.
template <class W, int RT, int RN>
inline void MatMulTile(const MatMulArgs& a, int t0, int64_t r0) {
  const int64_t K = a.w->cols;
  const uint8_t* rows[RN];
  for (int n = 0; n < RN; ++n) rows[n] = a.w->row(r0 + n);
  const float* xs[RT];
  for (int t = 0; t < RT; ++t) xs[t] = a.x + (t0 + t) * a.ldx;
  V acc[RT][RN];
  for (int t = 0; t < RT; ++t)
    for (int n = 0; n < RN; ++n) acc[t][n] = Isa::Zero();
  const int64_t full = K / L * L;
  for (int64_t k = 0; k < full; k += L) {
    V wv[RN];
    for (int n = 0; n < RN; ++n) wv[n] = W::Load(rows[n], k);
    for (int t = 0; t < RT; ++t) {
      const V xv = Isa::Load(xs[t] + k);
      for (int n = 0; n < RN; ++n) acc[t][n] = Isa::Fma(wv[n], xv, acc[t][n]);
    }
  }
  if (full < K) {
    const int rest = static_cast<int>(K - full);
    V wv[RN];
    for (int n = 0; n < RN; ++n) wv[n] = W::LoadTail(rows[n], full, rest);
    for (int t = 0; t < RT; ++t) {
      const V xv = LoadXTail(xs[t] + full, rest);
      for (int n = 0; n < RN; ++n) acc[t][n] = Isa::Fma(wv[n], xv, acc[t][n]);
    }
  }
  for (int t = 0; t < RT; ++t)
    for (int n = 0; n < RN; ++n) a.y[(t0 + t) * a.ldy + r0 + n] = Isa::Reduce(acc[t][n]);
}

template <class W, int RT>
inline void MatMulRows(const MatMulArgs& a, int t0, int64_t r0, int64_t r1) {
  int64_t r = r0;
  for (; r + Isa::kRowTile <= r1; r += Isa::kRowTile) MatMulTile<W, RT, Isa::kRowTile>(a, t0, r);
  for (; r < r1; ++r) MatMulTile<W, RT, 1>(a, t0, r);
}

template <class W>
void MatMulRange(const MatMulArgs& a, int64_t r0, int64_t r1) {
  constexpr int kTokenTile = 4;
  int t = 0;
  for (; t + kTokenTile <= a.num_tokens; t += kTokenTile) MatMulRows<W, kTokenTile>(a, t, r0, r1);
  switch (a.num_tokens - t) {
    case 3: MatMulRows<W, 3>(a, t, r0, r1); break;
    case 2: MatMulRows<W, 2>(a, t, r0, r1); break;
    case 1: MatMulRows<W, 1>(a, t, r0, r1); break;
    default: break;
  }
}

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

inline V LoadI8Tail(const int8_t* p, int n) {
  alignas(64) int8_t buf[L] = {};
  std::memcpy(buf, p, n);
  return Isa::LoadI8(buf);
}

template <KvDtype D>
void KvDot(const float* q, const KvRows& rows, int head_dim, int group_size, float* scores) {
  const size_t row_bytes = KvRowDataBytes(D, head_dim);
  const int groups = head_dim / group_size;
  for (int j = 0; j < rows.n; ++j) {
    const uint8_t* row = rows.data + j * row_bytes;
    if constexpr (D == KvDtype::kF32 || D == KvDtype::kF16 || D == KvDtype::kBF16) {
      V acc = Isa::Zero();
      for (int k = 0; k < head_dim; k += L) {
        const int n = head_dim - k < L ? head_dim - k : L;
        const V qv = n == L ? Isa::Load(q + k) : LoadXTail(q + k, n);
        acc = Isa::Fma(qv, LoadKvFloat<D>(row, k, n), acc);
      }
      scores[j] = Isa::Reduce(acc);
    } else if constexpr (D == KvDtype::kInt8) {
      const int8_t* r8 = reinterpret_cast<const int8_t*>(row);
      const uint16_t* sc = rows.scales + j * groups;
      float s = 0.0f;
      for (int g = 0; g < groups; ++g) {
        V acc = Isa::Zero();
        for (int k = g * group_size; k < (g + 1) * group_size; k += L) {
          const int n = (g + 1) * group_size - k < L ? (g + 1) * group_size - k : L;
          const V qv = n == L ? Isa::Load(q + k) : LoadXTail(q + k, n);
          const V kv = n == L ? Isa::LoadI8(r8 + k) : LoadI8Tail(r8 + k, n);
          acc = Isa::Fma(qv, kv, acc);
        }
        s += Isa::Reduce(acc) * Isa::F16(sc[g]);
      }
      scores[j] = s;
    } else {  // INT4
      const uint16_t* sc = rows.scales + j * groups;
      const int half = group_size / 2;
      float s = 0.0f;
      for (int g = 0; g < groups; ++g) {
        const uint8_t* bytes = row + g * half;
        const float* qg = q + g * group_size;
        V acc = Isa::Zero();
        int i = 0;
        for (; i + L <= half; i += L) {
          acc = Isa::Fma(Isa::Load(qg + i), Isa::LoadU4Lo(bytes + i), acc);
          acc = Isa::Fma(Isa::Load(qg + half + i), Isa::LoadU4Hi(bytes + i), acc);
        }
        float tail = 0.0f;
        for (; i < half; ++i) {
          tail += qg[i] * ((bytes[i] & 0xF) - 8) + qg[half + i] * ((bytes[i] >> 4) - 8);
        }
        s += (Isa::Reduce(acc) + tail) * Isa::F16(sc[g]);
      }
      scores[j] = s;
    }
  }
}

template <KvDtype D>
void KvAxpy(const float* p, const KvRows& rows, int head_dim, int group_size, float* acc) {
  const size_t row_bytes = KvRowDataBytes(D, head_dim);
  const int groups = head_dim / group_size;
  if constexpr (D == KvDtype::kF32 || D == KvDtype::kF16 || D == KvDtype::kBF16) {
    for (int k = 0; k < head_dim; k += L) {
      const int n = head_dim - k < L ? head_dim - k : L;
      V a = n == L ? Isa::Load(acc + k) : LoadXTail(acc + k, n);
      for (int j = 0; j < rows.n; ++j) {
        a = Isa::Fma(Isa::Set1(p[j]), LoadKvFloat<D>(rows.data + j * row_bytes, k, n), a);
      }
      if (n == L) {
        Isa::Store(acc + k, a);
      } else {
        alignas(64) float buf[L];
        Isa::Store(buf, a);
        std::memcpy(acc + k, buf, sizeof(float) * n);
      }
    }
  } else if constexpr (D == KvDtype::kInt8) {
    for (int g = 0; g < groups; ++g) {
      for (int k = g * group_size; k < (g + 1) * group_size; k += L) {
        const int n = (g + 1) * group_size - k < L ? (g + 1) * group_size - k : L;
        V a = n == L ? Isa::Load(acc + k) : LoadXTail(acc + k, n);
        for (int j = 0; j < rows.n; ++j) {
          const int8_t* r8 = reinterpret_cast<const int8_t*>(rows.data + j * row_bytes);
          const V w = Isa::Set1(p[j] * Isa::F16(rows.scales[j * groups + g]));
          a = Isa::Fma(w, n == L ? Isa::LoadI8(r8 + k) : LoadI8Tail(r8 + k, n), a);
        }
        if (n == L) {
          Isa::Store(acc + k, a);
        } else {
          alignas(64) float buf[L];
          Isa::Store(buf, a);
          std::memcpy(acc + k, buf, sizeof(float) * n);
        }
      }
    }
  } else {  // INT4
    const int half = group_size / 2;
    for (int g = 0; g < groups; ++g) {
      float* ag = acc + g * group_size;
      int i = 0;
      for (; i + L <= half; i += L) {
        V lo = Isa::Load(ag + i);
        V hi = Isa::Load(ag + half + i);
        for (int j = 0; j < rows.n; ++j) {
          const uint8_t* bytes = rows.data + j * row_bytes + g * half;
          const V w = Isa::Set1(p[j] * Isa::F16(rows.scales[j * groups + g]));
          lo = Isa::Fma(w, Isa::LoadU4Lo(bytes + i), lo);
          hi = Isa::Fma(w, Isa::LoadU4Hi(bytes + i), hi);
        }
        Isa::Store(ag + i, lo);
        Isa::Store(ag + half + i, hi);
      }
      for (; i < half; ++i) {
        for (int j = 0; j < rows.n; ++j) {
          const uint8_t b = rows.data[j * row_bytes + g * half + i];
          const float w = p[j] * Isa::F16(rows.scales[j * groups + g]);
          ag[i] += w * ((b & 0xF) - 8);
          ag[half + i] += w * ((b >> 4) - 8);
        }
      }
    }
  }
}

inline KernelTable MakeTable(std::string_view isa) {
  KernelTable t{};
  t.isa = isa;
  t.matmul[0] = &MatMulRange<RowF32>;
  t.matmul[1] = &MatMulRange<RowF16>;
  t.matmul[2] = &MatMulRange<RowBf16>;
  t.matmul[3] = &MatMulRange<RowQ8>;
  t.kv_dot[static_cast<int>(KvDtype::kF32)] = &KvDot<KvDtype::kF32>;
  t.kv_dot[static_cast<int>(KvDtype::kF16)] = &KvDot<KvDtype::kF16>;
  t.kv_dot[static_cast<int>(KvDtype::kBF16)] = &KvDot<KvDtype::kBF16>;
  t.kv_dot[static_cast<int>(KvDtype::kInt8)] = &KvDot<KvDtype::kInt8>;
  t.kv_dot[static_cast<int>(KvDtype::kInt4)] = &KvDot<KvDtype::kInt4>;
  t.kv_axpy[static_cast<int>(KvDtype::kF32)] = &KvAxpy<KvDtype::kF32>;
  t.kv_axpy[static_cast<int>(KvDtype::kF16)] = &KvAxpy<KvDtype::kF16>;
  t.kv_axpy[static_cast<int>(KvDtype::kBF16)] = &KvAxpy<KvDtype::kBF16>;
  t.kv_axpy[static_cast<int>(KvDtype::kInt8)] = &KvAxpy<KvDtype::kInt8>;
  t.kv_axpy[static_cast<int>(KvDtype::kInt4)] = &KvAxpy<KvDtype::kInt4>;
  return t;
}
