// Helpers of the GGUF reader/writer tests (gguf_test.cpp, gguf_hostile_test.cpp): value
// builders, comparisons, temporary files, and small valid files to corrupt.
#pragma once

#include <gtest/gtest.h>

#include "engine/model/gguf.h"
#include <unistd.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <initializer_list>
#include <limits>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "tests/test_paths.h"

namespace kvserve::gguf_test {

// ---- Building values -----------------------------------------------------------------------

inline GgufValue Uint(GgufType type, uint64_t x) {
  GgufValue v;
  v.type = type;
  v.u64 = x;
  return v;
}
inline GgufValue Int(GgufType type, int64_t x) {
  GgufValue v;
  v.type = type;
  v.i64 = x;
  return v;
}
inline GgufValue Float(GgufType type, double x) {
  GgufValue v;
  v.type = type;
  v.f64 = x;
  return v;
}
inline GgufValue Bool(bool x) {
  GgufValue v;
  v.type = GgufType::kBool;
  v.b = x;
  return v;
}
inline GgufValue Str(std::string x) {
  GgufValue v;
  v.type = GgufType::kString;
  v.str = std::move(x);
  return v;
}
inline GgufValue Array(GgufType elem_type, std::vector<GgufValue> elements) {
  GgufValue v;
  v.type = GgufType::kArray;
  v.elem_type = elem_type;
  v.array = std::move(elements);
  return v;
}

inline bool IsUnsigned(GgufType t) {
  return t == GgufType::kUint8 || t == GgufType::kUint16 || t == GgufType::kUint32 ||
         t == GgufType::kUint64;
}
inline bool IsSigned(GgufType t) {
  return t == GgufType::kInt8 || t == GgufType::kInt16 || t == GgufType::kInt32 ||
         t == GgufType::kInt64;
}

// `got` (read back) carries what `want` (written) says, field by field for its type.
inline void ExpectSameValue(const GgufValue& want, const GgufValue& got, const std::string& where) {
  ASSERT_EQ(got.type, want.type) << where;
  if (IsUnsigned(want.type)) {
    EXPECT_EQ(got.u64, want.u64) << where;
    EXPECT_EQ(got.f64, static_cast<double>(want.u64)) << where;
  } else if (IsSigned(want.type)) {
    EXPECT_EQ(got.i64, want.i64) << where;
    EXPECT_EQ(got.f64, static_cast<double>(want.i64)) << where;
  } else if (want.type == GgufType::kFloat32) {
    EXPECT_EQ(got.f64, static_cast<double>(static_cast<float>(want.f64))) << where;
  } else if (want.type == GgufType::kFloat64) {
    EXPECT_EQ(got.f64, want.f64) << where;
  } else if (want.type == GgufType::kBool) {
    EXPECT_EQ(got.b, want.b) << where;
  } else if (want.type == GgufType::kString) {
    EXPECT_EQ(got.str, want.str) << where;
  } else {
    ASSERT_EQ(got.elem_type, want.elem_type) << where;
    ASSERT_EQ(got.array.size(), want.array.size()) << where;
    for (size_t i = 0; i < want.array.size(); ++i) {
      ExpectSameValue(want.array[i], got.array[i], where + "[" + std::to_string(i) + "]");
    }
  }
}

inline std::unique_ptr<GgufFile> ParseOk(std::string bytes) {
  StatusOr<std::unique_ptr<GgufFile>> file = GgufFile::FromBytes(std::move(bytes));
  EXPECT_TRUE(file.ok()) << file.status().ToString();
  return file.ok() ? std::move(file).value() : nullptr;
}

inline std::string ReadWholeFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

inline std::string TempPath(const std::string& name) {
  return ::testing::TempDir() + "gguf_test_" + std::to_string(::getpid()) + "_" + name;
}

// ---- Building raw (possibly hostile) files by hand -------------------------------------------

class RawFile {
 public:
  RawFile& U8(uint8_t x) { return Put(x); }
  RawFile& U32(uint32_t x) { return Put(x); }
  RawFile& U64(uint64_t x) { return Put(x); }
  RawFile& F32(float x) { return Put(x); }
  RawFile& Str(std::string_view s) {
    U64(s.size());
    bytes_.append(s);
    return *this;
  }
  RawFile& Bytes(std::string_view s) {
    bytes_.append(s);
    return *this;
  }
  RawFile& Header(uint32_t version, uint64_t n_tensors, uint64_t n_kv) {
    return Bytes("GGUF").U32(version).U64(n_tensors).U64(n_kv);
  }
  RawFile& KeyU32(std::string_view key, uint32_t value) {
    return Str(key).U32(static_cast<uint32_t>(GgufType::kUint32)).U32(value);
  }
  RawFile& Tensor(std::string_view name, std::initializer_list<uint64_t> dims, uint32_t type,
                  uint64_t offset) {
    Str(name).U32(static_cast<uint32_t>(dims.size()));
    for (uint64_t d : dims) U64(d);
    return U32(type).U64(offset);
  }
  RawFile& PadTo(uint64_t alignment) {
    bytes_.append((alignment - bytes_.size() % alignment) % alignment, '\0');
    return *this;
  }
  RawFile& Zeros(uint64_t n) {
    bytes_.append(n, '\0');
    return *this;
  }
  const std::string& bytes() const { return bytes_; }

 private:
  template <typename T>
  RawFile& Put(T x) {
    char b[sizeof(T)];
    std::memcpy(b, &x, sizeof(T));
    bytes_.append(b, sizeof(T));
    return *this;
  }
  std::string bytes_;
};

constexpr uint32_t kF32 = static_cast<uint32_t>(GgmlType::kF32);

inline void ExpectParseError(const std::string& bytes, StatusCode code, const std::string& needle) {
  StatusOr<std::unique_ptr<GgufFile>> file = GgufFile::FromBytes(bytes);
  ASSERT_FALSE(file.ok()) << "expected an error containing: " << needle;
  EXPECT_EQ(file.status().code(), code) << file.status().ToString();
  EXPECT_NE(file.status().message().find(needle), std::string::npos)
      << "message: " << file.status().ToString() << "\nexpected to contain: " << needle;
}

// A file with one F32 tensor "t" of 8 values and the given extra key/value bytes.
inline std::string OneTensorFileWithKv(uint64_t n_kv, std::string_view kv_bytes) {
  RawFile f;
  f.Header(3, 1, n_kv).Bytes(kv_bytes).Tensor("t", {8}, kF32, 0).PadTo(32).Zeros(32);
  return f.bytes();
}

// Touches every byte of every value (so a sanitizer sees any bad pointer).
inline uint64_t Checksum(const GgufValue& v) {
  uint64_t sum = v.u64 + static_cast<uint64_t>(v.i64) + static_cast<uint64_t>(v.b);
  for (char c : v.str) sum += static_cast<unsigned char>(c);
  for (const GgufValue& e : v.array) sum += Checksum(e);
  return sum;
}

// A small valid file: metadata of several types (including nested and empty arrays) and two
// tensors; the last tensor's bytes end exactly at the end of the file.
inline std::string SmallValidFile() {
  GgufWriter w;
  w.AddString("general.architecture", "llama");
  w.AddUint32("llama.block_count", 2);
  w.AddStringArray("tokenizer.ggml.tokens", {"<unk>", "", "hello"});
  w.AddValue("nested", Array(GgufType::kArray, {Array(GgufType::kInt16, {Int(GgufType::kInt16, -3)}),
                                                Array(GgufType::kInt16, {})}));
  w.AddBool("flag", true);
  std::string a(5 * 4, '\0');
  const float a_values[5] = {1, 2, 3, 4, 5};
  std::memcpy(a.data(), a_values, sizeof(a_values));
  w.AddTensor("a", GgmlType::kF32, {5}, a);
  w.AddTensor("b", GgmlType::kF16, {16}, std::string(32, '\x3c'));
  return w.Serialize();
}

}  // namespace kvserve::gguf_test
