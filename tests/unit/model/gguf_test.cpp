// Tests of the GGUF reader and writer: writer->reader round trips of every metadata type and
// tensor type, v2/v3, alignments, typed getters, the real stories260K model, and hostile files
// (truncation at every length, random bit flips, one hand-crafted file per validation rule)
// that must fail with a status naming the problem and never read out of bounds.
#include "engine/model/gguf.h"

#include <gtest/gtest.h>
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

namespace kvserve {
namespace {

// ---- Building values -----------------------------------------------------------------------

GgufValue Uint(GgufType type, uint64_t x) {
  GgufValue v;
  v.type = type;
  v.u64 = x;
  return v;
}
GgufValue Int(GgufType type, int64_t x) {
  GgufValue v;
  v.type = type;
  v.i64 = x;
  return v;
}
GgufValue Float(GgufType type, double x) {
  GgufValue v;
  v.type = type;
  v.f64 = x;
  return v;
}
GgufValue Bool(bool x) {
  GgufValue v;
  v.type = GgufType::kBool;
  v.b = x;
  return v;
}
GgufValue Str(std::string x) {
  GgufValue v;
  v.type = GgufType::kString;
  v.str = std::move(x);
  return v;
}
GgufValue Array(GgufType elem_type, std::vector<GgufValue> elements) {
  GgufValue v;
  v.type = GgufType::kArray;
  v.elem_type = elem_type;
  v.array = std::move(elements);
  return v;
}

bool IsUnsigned(GgufType t) {
  return t == GgufType::kUint8 || t == GgufType::kUint16 || t == GgufType::kUint32 ||
         t == GgufType::kUint64;
}
bool IsSigned(GgufType t) {
  return t == GgufType::kInt8 || t == GgufType::kInt16 || t == GgufType::kInt32 ||
         t == GgufType::kInt64;
}

// `got` (read back) carries what `want` (written) says, field by field for its type.
void ExpectSameValue(const GgufValue& want, const GgufValue& got, const std::string& where) {
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

std::unique_ptr<GgufFile> ParseOk(std::string bytes) {
  StatusOr<std::unique_ptr<GgufFile>> file = GgufFile::FromBytes(std::move(bytes));
  EXPECT_TRUE(file.ok()) << file.status().ToString();
  return file.ok() ? std::move(file).value() : nullptr;
}

std::string ReadWholeFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

std::string TempPath(const std::string& name) {
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

void ExpectParseError(const std::string& bytes, StatusCode code, const std::string& needle) {
  StatusOr<std::unique_ptr<GgufFile>> file = GgufFile::FromBytes(bytes);
  ASSERT_FALSE(file.ok()) << "expected an error containing: " << needle;
  EXPECT_EQ(file.status().code(), code) << file.status().ToString();
  EXPECT_NE(file.status().message().find(needle), std::string::npos)
      << "message: " << file.status().ToString() << "\nexpected to contain: " << needle;
}

// A file with one F32 tensor "t" of 8 values and the given extra key/value bytes.
std::string OneTensorFileWithKv(uint64_t n_kv, std::string_view kv_bytes) {
  RawFile f;
  f.Header(3, 1, n_kv).Bytes(kv_bytes).Tensor("t", {8}, kF32, 0).PadTo(32).Zeros(32);
  return f.bytes();
}

// Touches every byte of every value (so a sanitizer sees any bad pointer).
uint64_t Checksum(const GgufValue& v) {
  uint64_t sum = v.u64 + static_cast<uint64_t>(v.i64) + static_cast<uint64_t>(v.b);
  for (char c : v.str) sum += static_cast<unsigned char>(c);
  for (const GgufValue& e : v.array) sum += Checksum(e);
  return sum;
}

// A small valid file: metadata of several types (including nested and empty arrays) and two
// tensors; the last tensor's bytes end exactly at the end of the file.
std::string SmallValidFile() {
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

// ---- Round trips ---------------------------------------------------------------------------

TEST(GgufRoundTripTest, EveryMetadataValueType) {
  const std::vector<std::pair<std::string, GgufValue>> values = {
      {"u8", Uint(GgufType::kUint8, 255)},
      {"i8", Int(GgufType::kInt8, -128)},
      {"u16", Uint(GgufType::kUint16, 65535)},
      {"i16", Int(GgufType::kInt16, -32768)},
      {"u32", Uint(GgufType::kUint32, 4294967295u)},
      {"i32", Int(GgufType::kInt32, std::numeric_limits<int32_t>::min())},
      {"u64", Uint(GgufType::kUint64, std::numeric_limits<uint64_t>::max())},
      {"i64", Int(GgufType::kInt64, std::numeric_limits<int64_t>::min())},
      {"f32", Float(GgufType::kFloat32, 0.1f)},
      {"f64", Float(GgufType::kFloat64, 3.141592653589793)},
      {"bool_true", Bool(true)},
      {"bool_false", Bool(false)},
      {"str", Str(std::string("h\xc3\xa9llo\0world", 12))},
      {"empty_str", Str("")},
      {"", Str("the empty key")},
      {"empty_array", Array(GgufType::kUint8, {})},
      {"strings", Array(GgufType::kString, {Str("a"), Str(""), Str("ccc")})},
      {"bools", Array(GgufType::kBool, {Bool(true), Bool(false)})},
      {"i8s", Array(GgufType::kInt8, {Int(GgufType::kInt8, -1), Int(GgufType::kInt8, 127)})},
      {"u64s", Array(GgufType::kUint64, {Uint(GgufType::kUint64, 1ull << 63)})},
      {"f64s", Array(GgufType::kFloat64, {Float(GgufType::kFloat64, -0.5)})},
      {"nested", Array(GgufType::kArray,
                       {Array(GgufType::kInt32, {Int(GgufType::kInt32, 1), Int(GgufType::kInt32, -2)}),
                        Array(GgufType::kInt32, {}),
                        Array(GgufType::kString, {Str("x")})})},
      {"deep", Array(GgufType::kArray,
                     {Array(GgufType::kArray, {Array(GgufType::kFloat32, {Float(GgufType::kFloat32, 2.5)}),
                                               Array(GgufType::kUint8, {})})})},
      {"empty_of_arrays", Array(GgufType::kArray, {})},
  };
  GgufWriter w;
  for (const auto& [key, value] : values) w.AddValue(key, value);
  w.AddString("conv.string", "s");
  w.AddUint32("conv.u32", 7);
  w.AddInt32("conv.i32", -7);
  w.AddFloat32("conv.f32", 0.25f);
  w.AddBool("conv.bool", false);
  w.AddStringArray("conv.strings", {"x", "", "yz"});
  w.AddFloat32Array("conv.floats", {1.5f, -2.0f});
  w.AddInt32Array("conv.ints", {-1, 0, 2147483647});
  w.AddStringArray("conv.no_strings", {});

  std::unique_ptr<GgufFile> file = ParseOk(w.Serialize());
  ASSERT_NE(file, nullptr);
  EXPECT_EQ(file->version(), 3u);
  EXPECT_EQ(file->alignment(), 32u);
  EXPECT_FALSE(file->Has("general.alignment"));
  EXPECT_EQ(file->metadata().size(), values.size() + 9);
  EXPECT_TRUE(file->tensors().empty());
  for (const auto& [key, value] : values) {
    const GgufValue* got = file->Find(key);
    ASSERT_NE(got, nullptr) << key;
    ExpectSameValue(value, *got, key);
  }
  // Widening: both integer views are set when representable.
  EXPECT_EQ(file->Find("u8")->i64, 255);
  EXPECT_EQ(file->Find("i8")->u64, 0u);  // negative: no unsigned view
  EXPECT_EQ(file->Find("u64")->i64, 0);  // > INT64_MAX: no signed view
  EXPECT_EQ(file->GetString("conv.string").value(), "s");
  EXPECT_EQ(file->GetUint("conv.u32").value(), 7u);
  EXPECT_EQ(file->GetInt("conv.i32").value(), -7);
  EXPECT_EQ(file->GetFloat("conv.f32").value(), 0.25);
  EXPECT_EQ(file->GetBool("conv.bool").value(), false);
  EXPECT_EQ(file->GetStringArray("conv.strings").value(), (std::vector<std::string>{"x", "", "yz"}));
  EXPECT_EQ(file->GetFloatArray("conv.floats").value(), (std::vector<float>{1.5f, -2.0f}));
  EXPECT_EQ(file->GetIntArray("conv.ints").value(), (std::vector<int64_t>{-1, 0, 2147483647}));
  EXPECT_TRUE(file->GetStringArray("conv.no_strings").value().empty());
}

TEST(GgufRoundTripTest, MetadataIsWrittenInInsertionOrder) {
  GgufWriter w;
  w.AddUint32("zeta", 1);
  w.AddUint32("alpha", 2);
  w.AddUint32("mid", 3);
  const std::string bytes = w.Serialize();
  const size_t zeta = bytes.find("zeta"), alpha = bytes.find("alpha"), mid = bytes.find("mid");
  EXPECT_EQ(zeta, 24u + 8u);  // right after the header and the key's length
  EXPECT_LT(zeta, alpha);
  EXPECT_LT(alpha, mid);
  // Exact bytes of the first key/value: length 4, "zeta", type 4 (u32), value 1.
  EXPECT_EQ(bytes.substr(24, 20), RawFile().Str("zeta").U32(4).U32(1).bytes());
  EXPECT_EQ(bytes.substr(0, 24), RawFile().Header(3, 0, 3).bytes());
  EXPECT_EQ(bytes.size() % 32, 0u);
}

// One tensor of each supported type, with 1 to 4 dims; offsets, sizes and bytes come back.
TEST(GgufRoundTripTest, TensorInfosAndDataForEveryType) {
  struct Case {
    std::string name;
    GgmlType type;
    std::vector<uint64_t> dims;
    uint64_t nbytes;
  };
  const std::vector<Case> cases = {
      {"f32", GgmlType::kF32, {3, 2}, 24},
      {"f16", GgmlType::kF16, {5}, 10},
      {"bf16", GgmlType::kBF16, {4, 1, 2}, 16},
      {"q8_0", GgmlType::kQ8_0, {64, 2}, 4 * 34},
      {"q4_0", GgmlType::kQ4_0, {32, 1, 1, 3}, 3 * 18},
      {"q4_k", GgmlType::kQ4_K, {256, 2}, 2 * 144},
      {"q6_k", GgmlType::kQ6_K, {512}, 2 * 210},
  };
  GgufWriter w;
  std::vector<std::vector<float>> originals;
  std::vector<std::string> encoded;
  for (const Case& c : cases) {
    uint64_t n = 1;
    for (uint64_t d : c.dims) n *= d;
    std::vector<float> values(n);
    for (uint64_t i = 0; i < n; ++i) values[i] = std::sin(static_cast<float>(i) * 0.37f) * 2.0f;
    std::string bytes(c.nbytes, '\0');
    const uint64_t rows = n / c.dims[0];
    const uint64_t row_bytes = c.nbytes / rows;
    for (uint64_t r = 0; r < rows; ++r) {
      QuantizeRow(c.type, values.data() + r * c.dims[0], bytes.data() + r * row_bytes,
                  static_cast<int64_t>(c.dims[0]));
    }
    w.AddTensor(c.name, c.type, c.dims, bytes);
    originals.push_back(values);
    encoded.push_back(bytes);
  }
  std::unique_ptr<GgufFile> file = ParseOk(w.Serialize());
  ASSERT_NE(file, nullptr);
  ASSERT_EQ(file->tensors().size(), cases.size());
  EXPECT_EQ(file->data_offset() % 32, 0u);
  uint64_t expected_offset = 0;
  for (size_t i = 0; i < cases.size(); ++i) {
    const Case& c = cases[i];
    const GgufTensorInfo& t = file->tensors()[i];
    EXPECT_EQ(t.name, c.name);
    EXPECT_EQ(file->FindTensor(c.name), &t);
    EXPECT_EQ(t.type, c.type) << c.name;
    EXPECT_EQ(t.dims, c.dims) << c.name;
    EXPECT_EQ(t.nbytes, c.nbytes) << c.name;
    EXPECT_EQ(t.num_elements, originals[i].size()) << c.name;
    EXPECT_EQ(t.row_length(), c.dims[0]) << c.name;
    EXPECT_EQ(t.rows(), originals[i].size() / c.dims[0]) << c.name;
    EXPECT_EQ(t.offset, expected_offset) << c.name;
    EXPECT_EQ(t.data, file->file_data() + file->data_offset() + t.offset) << c.name;
    EXPECT_EQ(std::string(reinterpret_cast<const char*>(t.data), t.nbytes), encoded[i]) << c.name;
    expected_offset += (c.nbytes + 31) / 32 * 32;
  }
  EXPECT_EQ(file->file_size(), file->data_offset() + expected_offset);  // last tensor padded
  EXPECT_EQ(file->FindTensor("missing"), nullptr);
  // The Q4_K tensor's first row decodes to its source within the codec's bound.
  const GgufTensorInfo* q4k = file->FindTensor("q4_k");
  std::vector<float> row(256);
  DequantizeRow(q4k->type, q4k->data, row.data(), 256);
  for (int i = 0; i < 256; ++i) EXPECT_NEAR(row[i], originals[5][i], 0.0683 * 2.0 * 1.0001) << i;
}

TEST(GgufRoundTripTest, NonDefaultAlignmentAddsTheKeyAndAlignsData) {
  for (uint64_t alignment : {1u, 64u, 4096u}) {
    GgufWriter w(alignment);
    w.AddString("general.name", "aligned");
    w.AddTensor("x", GgmlType::kF32, {3}, std::string(12, '\x01'));
    w.AddTensor("y", GgmlType::kF16, {7}, std::string(14, '\x02'));
    const std::string bytes = w.Serialize();
    // general.alignment is the first key, so it comes right after the 24-byte header.
    EXPECT_EQ(bytes.substr(24, 8 + 17 + 4 + 4),
              RawFile().KeyU32("general.alignment", static_cast<uint32_t>(alignment)).bytes());
    std::unique_ptr<GgufFile> file = ParseOk(bytes);
    ASSERT_NE(file, nullptr);
    EXPECT_EQ(file->alignment(), alignment);
    EXPECT_EQ(file->GetUint("general.alignment").value(), alignment);
    EXPECT_EQ(file->Find("general.alignment")->type, GgufType::kUint32);
    EXPECT_EQ(file->data_offset() % alignment, 0u);
    EXPECT_EQ(file->FindTensor("x")->offset, 0u);
    EXPECT_EQ(file->FindTensor("y")->offset, (12 + alignment - 1) / alignment * alignment);
    EXPECT_EQ(std::string(reinterpret_cast<const char*>(file->FindTensor("y")->data), 14),
              std::string(14, '\x02'));
    EXPECT_EQ(bytes.size() % alignment, 0u);
  }
}

// Version 2 has the same layout as version 3 for everything kvserve reads.
TEST(GgufRoundTripTest, Version2FilesParse) {
  std::string bytes = SmallValidFile();
  bytes[4] = 2;
  std::unique_ptr<GgufFile> v2 = ParseOk(bytes);
  ASSERT_NE(v2, nullptr);
  EXPECT_EQ(v2->version(), 2u);
  EXPECT_EQ(v2->GetString("general.architecture").value(), "llama");
  EXPECT_EQ(v2->tensors().size(), 2u);

  // And one written entirely by hand.
  RawFile f;
  f.Header(2, 1, 2).KeyU32("answer", 42);
  f.Str("name").U32(static_cast<uint32_t>(GgufType::kString)).Str("v2");
  f.Tensor("w", {2, 2}, kF32, 0).PadTo(32).F32(1).F32(2).F32(3).F32(4);
  std::unique_ptr<GgufFile> hand = ParseOk(f.bytes());
  ASSERT_NE(hand, nullptr);
  EXPECT_EQ(hand->version(), 2u);
  EXPECT_EQ(hand->GetUint("answer").value(), 42u);
  EXPECT_EQ(hand->GetString("name").value(), "v2");
  const GgufTensorInfo* w = hand->FindTensor("w");
  ASSERT_NE(w, nullptr);
  EXPECT_EQ(w->dims, (std::vector<uint64_t>{2, 2}));
  float values[4];
  std::memcpy(values, w->data, 16);
  EXPECT_EQ(values[3], 4.0f);
}

TEST(GgufRoundTripTest, WriteFileStreamsTheSameBytesAsSerialize) {
  GgufWriter w(64);
  w.AddString("general.architecture", "llama");
  w.AddTensor("big", GgmlType::kF32, {1000}, std::string(4000, '\x07'));
  w.AddTensor("small", GgmlType::kQ8_0, {32}, std::string(34, '\x01'));
  const std::string path = TempPath("write.gguf");
  ASSERT_TRUE(w.WriteFile(path).ok());
  EXPECT_EQ(ReadWholeFile(path), w.Serialize());
  EXPECT_FALSE(std::filesystem::exists(path + ".partial"));
  StatusOr<std::unique_ptr<GgufFile>> file = GgufFile::Open(path);
  ASSERT_TRUE(file.ok()) << file.status().ToString();
  EXPECT_EQ((*file)->alignment(), 64u);
  EXPECT_EQ((*file)->FindTensor("small")->offset, 4032u);
  std::filesystem::remove(path);
}

TEST(GgufRoundTripTest, WriteFileReportsIoErrors) {
  GgufWriter w;
  w.AddUint32("k", 1);
  const Status missing_dir = w.WriteFile("/nonexistent-kvserve-dir/model.gguf");
  EXPECT_EQ(missing_dir.code(), StatusCode::kNotFound) << missing_dir.ToString();
  EXPECT_NE(missing_dir.message().find("/nonexistent-kvserve-dir/model.gguf"), std::string::npos);

  const std::string dir = TempPath("a_directory");
  std::filesystem::create_directory(dir);
  const Status is_dir = w.WriteFile(dir);
  EXPECT_FALSE(is_dir.ok());
  EXPECT_NE(is_dir.message().find(dir), std::string::npos) << is_dir.ToString();
  EXPECT_FALSE(std::filesystem::exists(dir + ".partial"));
  EXPECT_TRUE(std::filesystem::is_directory(dir));
  std::filesystem::remove(dir);
}

// Misusing the writer is a programming error: it CHECK-fails instead of writing a file the
// reader would reject.
TEST(GgufWriterDeathTest, MisuseIsACheckFailure) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  EXPECT_DEATH(GgufWriter(48), "power of two");
  EXPECT_DEATH(
      {
        GgufWriter w;
        w.AddUint32("k", 1);
        w.AddBool("k", true);
      },
      "duplicate GGUF key 'k'");
  EXPECT_DEATH(
      {
        GgufWriter w(64);
        w.AddUint32("general.alignment", 32);
      },
      "duplicate GGUF key 'general.alignment'");
  EXPECT_DEATH(GgufWriter().AddValue("u8", Uint(GgufType::kUint8, 256)), "key u8");
  EXPECT_DEATH(GgufWriter().AddValue("a", Array(GgufType::kString, {Bool(true)})),
               "element of type bool in an array of string");
  GgufValue deep = Array(GgufType::kUint8, {});
  for (int d = 0; d < kGgufMaxArrayDepth; ++d) deep = Array(GgufType::kArray, {deep});
  EXPECT_DEATH(GgufWriter().AddValue("deep", deep), "arrays nested too deep");
  EXPECT_DEATH(GgufWriter().AddTensor("t", GgmlType::kF32, {4}, std::string(15, '\0')),
               "tensor 't' byte size");
  EXPECT_DEATH(GgufWriter().AddTensor("t", GgmlType::kQ4_K, {128}, std::string(72, '\0')),
               "block size");
  EXPECT_DEATH(GgufWriter().AddTensor("t", GgmlType::kF32, {1, 1, 1, 1, 1}, std::string(4, '\0')),
               "5 dimensions");
  EXPECT_DEATH(
      {
        GgufWriter w;
        w.AddTensor("t", GgmlType::kF32, {1}, std::string(4, '\0'));
        w.AddTensor("t", GgmlType::kF32, {1}, std::string(4, '\0'));
      },
      "duplicate tensor 't'");
}

// ---- Typed getters -------------------------------------------------------------------------

class GgufGettersTest : public ::testing::Test {
 protected:
  void SetUp() override {
    GgufWriter w;
    w.AddValue("u8", Uint(GgufType::kUint8, 200));
    w.AddValue("u16", Uint(GgufType::kUint16, 60000));
    w.AddValue("u32", Uint(GgufType::kUint32, 4000000000u));
    w.AddValue("u64_big", Uint(GgufType::kUint64, (1ull << 63) + 5));
    w.AddValue("i8_neg", Int(GgufType::kInt8, -5));
    w.AddValue("i16", Int(GgufType::kInt16, 1234));
    w.AddValue("i64_neg", Int(GgufType::kInt64, -(1ll << 40)));
    w.AddValue("f32", Float(GgufType::kFloat32, 0.5));
    w.AddValue("f64", Float(GgufType::kFloat64, 1e300));
    w.AddBool("bool", true);
    w.AddString("str", "text");
    w.AddValue("u16s", Array(GgufType::kUint16, {Uint(GgufType::kUint16, 7), Uint(GgufType::kUint16, 65535)}));
    w.AddValue("i8s", Array(GgufType::kInt8, {Int(GgufType::kInt8, -128)}));
    w.AddValue("u64s_big", Array(GgufType::kUint64, {Uint(GgufType::kUint64, 1), Uint(GgufType::kUint64, ~0ull)}));
    w.AddValue("f64s", Array(GgufType::kFloat64, {Float(GgufType::kFloat64, 0.25)}));
    w.AddStringArray("strs", {"a"});
    w.AddValue("nested", Array(GgufType::kArray, {Array(GgufType::kUint8, {})}));
    file_ = ParseOk(w.Serialize());
    ASSERT_NE(file_, nullptr);
  }

  void ExpectCode(const Status& status, StatusCode code, const std::string& key) {
    EXPECT_EQ(status.code(), code) << status.ToString();
    EXPECT_NE(status.message().find("'" + key + "'"), std::string::npos) << status.ToString();
  }

  std::unique_ptr<GgufFile> file_;
};

TEST_F(GgufGettersTest, IntegerWidthsConvert) {
  EXPECT_EQ(file_->GetUint("u8").value(), 200u);
  EXPECT_EQ(file_->GetUint("u16").value(), 60000u);
  EXPECT_EQ(file_->GetUint("u32").value(), 4000000000u);
  EXPECT_EQ(file_->GetUint("u64_big").value(), (1ull << 63) + 5);
  EXPECT_EQ(file_->GetUint("i16").value(), 1234u);
  EXPECT_EQ(file_->GetInt("u8").value(), 200);
  EXPECT_EQ(file_->GetInt("u32").value(), 4000000000);
  EXPECT_EQ(file_->GetInt("i8_neg").value(), -5);
  EXPECT_EQ(file_->GetInt("i64_neg").value(), -(1ll << 40));
  EXPECT_EQ(file_->GetFloat("f32").value(), 0.5);
  EXPECT_EQ(file_->GetFloat("f64").value(), 1e300);
  EXPECT_EQ(file_->GetFloat("i8_neg").value(), -5.0);
  EXPECT_EQ(file_->GetFloat("u32").value(), 4e9);
  EXPECT_EQ(file_->GetBool("bool").value(), true);
  EXPECT_EQ(file_->GetString("str").value(), "text");
  EXPECT_EQ(file_->GetIntArray("u16s").value(), (std::vector<int64_t>{7, 65535}));
  EXPECT_EQ(file_->GetIntArray("i8s").value(), (std::vector<int64_t>{-128}));
  EXPECT_EQ(file_->GetFloatArray("f64s").value(), (std::vector<float>{0.25f}));
  EXPECT_EQ(file_->GetStringArray("strs").value(), (std::vector<std::string>{"a"}));
}

TEST_F(GgufGettersTest, OutOfRangeIntegersAreInvalidArgument) {
  ExpectCode(file_->GetUint("i8_neg").status(), StatusCode::kInvalidArgument, "i8_neg");
  ExpectCode(file_->GetUint("i64_neg").status(), StatusCode::kInvalidArgument, "i64_neg");
  ExpectCode(file_->GetInt("u64_big").status(), StatusCode::kInvalidArgument, "u64_big");
  ExpectCode(file_->GetIntArray("u64s_big").status(), StatusCode::kInvalidArgument, "u64s_big");
}

TEST_F(GgufGettersTest, WrongTypesAreInvalidArgument) {
  ExpectCode(file_->GetString("u32").status(), StatusCode::kInvalidArgument, "u32");
  ExpectCode(file_->GetUint("str").status(), StatusCode::kInvalidArgument, "str");
  ExpectCode(file_->GetUint("f32").status(), StatusCode::kInvalidArgument, "f32");
  ExpectCode(file_->GetInt("bool").status(), StatusCode::kInvalidArgument, "bool");
  ExpectCode(file_->GetFloat("str").status(), StatusCode::kInvalidArgument, "str");
  ExpectCode(file_->GetFloat("strs").status(), StatusCode::kInvalidArgument, "strs");
  ExpectCode(file_->GetBool("u8").status(), StatusCode::kInvalidArgument, "u8");
  ExpectCode(file_->GetStringArray("str").status(), StatusCode::kInvalidArgument, "str");
  ExpectCode(file_->GetStringArray("u16s").status(), StatusCode::kInvalidArgument, "u16s");
  ExpectCode(file_->GetFloatArray("u16s").status(), StatusCode::kInvalidArgument, "u16s");
  ExpectCode(file_->GetIntArray("f64s").status(), StatusCode::kInvalidArgument, "f64s");
  ExpectCode(file_->GetIntArray("u8").status(), StatusCode::kInvalidArgument, "u8");
  ExpectCode(file_->GetIntArray("nested").status(), StatusCode::kInvalidArgument, "nested");
  const Status status = file_->GetStringArray("u16s").status();
  EXPECT_EQ(status.message(), "key 'u16s' is array of uint16, expected array of strings");
}

TEST_F(GgufGettersTest, MissingKeysAreNotFound) {
  ExpectCode(file_->GetString("nope").status(), StatusCode::kNotFound, "nope");
  ExpectCode(file_->GetUint("nope").status(), StatusCode::kNotFound, "nope");
  ExpectCode(file_->GetInt("nope").status(), StatusCode::kNotFound, "nope");
  ExpectCode(file_->GetFloat("nope").status(), StatusCode::kNotFound, "nope");
  ExpectCode(file_->GetBool("nope").status(), StatusCode::kNotFound, "nope");
  ExpectCode(file_->GetStringArray("nope").status(), StatusCode::kNotFound, "nope");
  ExpectCode(file_->GetFloatArray("nope").status(), StatusCode::kNotFound, "nope");
  ExpectCode(file_->GetIntArray("nope").status(), StatusCode::kNotFound, "nope");
  EXPECT_FALSE(file_->Has("nope"));
  EXPECT_EQ(file_->Find("nope"), nullptr);
}

// ---- Hostile files -------------------------------------------------------------------------

TEST(GgufHostileTest, BadMagic) {
  std::string bytes = SmallValidFile();
  bytes[3] = 'G';
  ExpectParseError(bytes, StatusCode::kInvalidArgument, "bad magic 0x47554747");
  ExpectParseError("", StatusCode::kDataLoss, "truncated while reading magic");
}

TEST(GgufHostileTest, UnsupportedVersions) {
  ExpectParseError(RawFile().Header(1, 0, 0).bytes(), StatusCode::kInvalidArgument,
                   "GGUF version 1 (32-bit counts) is not supported");
  ExpectParseError(RawFile().Header(4, 0, 0).bytes(), StatusCode::kInvalidArgument,
                   "unsupported GGUF version 4");
  ExpectParseError(RawFile().Header(0x03000000, 0, 0).bytes(), StatusCode::kInvalidArgument,
                   "big-endian GGUF file (version 3) is not supported");
}

TEST(GgufHostileTest, TruncatedAtEveryLength) {
  const std::string bytes = SmallValidFile();
  ASSERT_NE(ParseOk(bytes), nullptr);
  for (size_t len = 0; len < bytes.size(); ++len) {
    StatusOr<std::unique_ptr<GgufFile>> file = GgufFile::FromBytes(bytes.substr(0, len));
    ASSERT_FALSE(file.ok()) << "prefix of " << len << " bytes parsed";
    EXPECT_EQ(file.status().code(), StatusCode::kDataLoss) << len << ": " << file.status().ToString();
    const std::string& m = file.status().message();
    EXPECT_TRUE(m.find("truncated") != std::string::npos ||
                m.find("exceeds the file") != std::string::npos)
        << len << ": " << m;
  }
}

// Random bit flips either fail cleanly or yield a file whose tensors lie inside the buffer.
TEST(GgufHostileTest, RandomBitFlipsNeverReadOutOfBounds) {
  const std::string original = SmallValidFile();
  std::unique_ptr<GgufFile> clean = ParseOk(original);
  ASSERT_NE(clean, nullptr);
  const uint64_t header_end = clean->data_offset();
  std::mt19937 rng(20240531);
  int parsed = 0, failed = 0;
  for (int copy = 0; copy < 2000; ++copy) {
    std::string bytes = original;
    const int flips = 1 + static_cast<int>(rng() % 3);
    for (int f = 0; f < flips; ++f) {
      // Mostly in the header, where the structure is.
      const uint64_t range = rng() % 5 == 0 ? bytes.size() : header_end;
      const uint64_t pos = rng() % range;
      bytes[pos] = static_cast<char>(bytes[pos] ^ (1 << (rng() % 8)));
    }
    StatusOr<std::unique_ptr<GgufFile>> file = GgufFile::FromBytes(bytes);
    if (!file.ok()) {
      EXPECT_FALSE(file.status().message().empty());
      ++failed;
      continue;
    }
    ++parsed;
    const GgufFile& g = **file;
    const uint8_t* begin = g.file_data();
    const uint8_t* end = begin + g.file_size();
    uint64_t sum = 0;
    for (const auto& [key, value] : g.metadata()) sum += key.size() + Checksum(value);
    for (const GgufTensorInfo& t : g.tensors()) {
      ASSERT_GE(t.data, begin) << t.name;
      ASSERT_LE(t.nbytes, static_cast<uint64_t>(end - t.data)) << t.name;
      for (uint64_t i = 0; i < t.nbytes; ++i) sum += t.data[i];
    }
    EXPECT_GT(sum, 0u);
  }
  RecordProperty("parsed", parsed);
  RecordProperty("failed", failed);
  EXPECT_EQ(parsed + failed, 2000);
  EXPECT_GT(parsed, 0);
  EXPECT_GT(failed, 0);
}

TEST(GgufHostileTest, HugeStringLengths) {
  ExpectParseError(RawFile().Header(3, 0, 1).U64(1ull << 63).bytes() + std::string(20, 'k'),
                   StatusCode::kDataLoss, "string length 9223372036854775808 of metadata key #0");
  RawFile value;
  value.Str("name").U32(static_cast<uint32_t>(GgufType::kString)).U64(~0ull).Bytes("abc");
  ExpectParseError(OneTensorFileWithKv(1, value.bytes()), StatusCode::kDataLoss,
                   "string length 18446744073709551615 of name");
  RawFile tensor;
  tensor.Header(3, 1, 0).U64(1ull << 40).Zeros(40);
  ExpectParseError(tensor.bytes(), StatusCode::kDataLoss, "of tensor name #0");
}

TEST(GgufHostileTest, HugeArrayCounts) {
  RawFile kv;
  kv.Str("arr").U32(static_cast<uint32_t>(GgufType::kArray))
      .U32(static_cast<uint32_t>(GgufType::kUint32)).U64(1ull << 62).U32(1);
  ExpectParseError(OneTensorFileWithKv(1, kv.bytes()), StatusCode::kDataLoss,
                   "array count 4611686018427387904 of key 'arr' exceeds the file");
  RawFile nested;
  nested.Str("arr").U32(static_cast<uint32_t>(GgufType::kArray))
      .U32(static_cast<uint32_t>(GgufType::kArray)).U64(1)
      .U32(static_cast<uint32_t>(GgufType::kString)).U64(~0ull);
  ExpectParseError(OneTensorFileWithKv(1, nested.bytes()), StatusCode::kDataLoss,
                   "array count 18446744073709551615 of key 'arr' exceeds the file");
  ExpectParseError(RawFile().Header(3, 0, ~0ull).bytes(), StatusCode::kDataLoss,
                   "metadata count 18446744073709551615 exceeds the file");
  ExpectParseError(RawFile().Header(3, 1ull << 60, 0).Zeros(64).bytes(), StatusCode::kDataLoss,
                   "tensor count 1152921504606846976 exceeds the file");
}

TEST(GgufHostileTest, BadDimensionCounts) {
  RawFile zero;
  zero.Header(3, 1, 0).Str("t").U32(0).U32(kF32).U64(0).PadTo(32).Zeros(32);
  ExpectParseError(zero.bytes(), StatusCode::kDataLoss, "tensor 't' has 0 dimensions (1 to 4 allowed)");
  RawFile five;
  five.Header(3, 1, 0).Tensor("t", {1, 1, 1, 1, 1}, kF32, 0).PadTo(32).Zeros(32);
  ExpectParseError(five.bytes(), StatusCode::kDataLoss, "tensor 't' has 5 dimensions (1 to 4 allowed)");
}

TEST(GgufHostileTest, OverflowingDims) {
  RawFile product;
  product.Header(3, 1, 0).Tensor("t", {1ull << 32, 1ull << 32}, kF32, 0).PadTo(32).Zeros(32);
  ExpectParseError(product.bytes(), StatusCode::kDataLoss, "tensor 't' element count overflows");
  RawFile huge_dim;
  huge_dim.Header(3, 1, 0).Tensor("t", {0, ~0ull}, kF32, 0).PadTo(32).Zeros(32);
  ExpectParseError(huge_dim.bytes(), StatusCode::kDataLoss, "tensor 't' dimension 1 is 18446744073709551615");
  RawFile bytes;  // 2^62 f32 values fit int64 but their byte size does not fit uint64
  bytes.Header(3, 1, 0).Tensor("t", {1ull << 62}, kF32, 0).PadTo(32).Zeros(32);
  ExpectParseError(bytes.bytes(), StatusCode::kDataLoss, "tensor 't' byte size overflows");
}

TEST(GgufHostileTest, MisalignedOffset) {
  RawFile f;
  f.Header(3, 1, 0).Tensor("t", {1}, kF32, 4).PadTo(32).Zeros(64);
  ExpectParseError(f.bytes(), StatusCode::kDataLoss, "tensor 't' offset 0x4 is not aligned to 32");
}

TEST(GgufHostileTest, TensorDataPastTheEnd) {
  RawFile f;
  f.Header(3, 1, 0).Tensor("t", {16}, kF32, 32).PadTo(32).Zeros(64);
  ExpectParseError(f.bytes(), StatusCode::kDataLoss,
                   "tensor 't' data [0x20, +64) lies outside the file's data section (64 bytes)");
  RawFile wraps;  // offset + nbytes wraps around 2^64
  wraps.Header(3, 1, 0).Tensor("t", {16}, kF32, ~0ull - 31).PadTo(32).Zeros(64);
  ExpectParseError(wraps.bytes(), StatusCode::kDataLoss, "lies outside the file's data section");
  RawFile no_data;
  no_data.Header(3, 1, 0).Tensor("t", {16}, kF32, 0);
  ExpectParseError(no_data.bytes(), StatusCode::kDataLoss, "file truncated before the tensor data section");
}

TEST(GgufHostileTest, OverlappingTensors) {
  RawFile f;
  f.Header(3, 2, 0).Tensor("a", {16}, kF32, 0).Tensor("b", {8}, kF32, 32).PadTo(32).Zeros(64);
  ExpectParseError(f.bytes(), StatusCode::kDataLoss, "tensors 'a' and 'b' overlap in the data section");
}

TEST(GgufHostileTest, DuplicateKey) {
  RawFile kv;
  kv.KeyU32("general.x", 1).KeyU32("general.x", 2);
  ExpectParseError(OneTensorFileWithKv(2, kv.bytes()), StatusCode::kDataLoss,
                   "duplicate metadata key 'general.x'");
}

TEST(GgufHostileTest, DuplicateTensorName) {
  RawFile f;
  f.Header(3, 2, 0).Tensor("w", {8}, kF32, 0).Tensor("w", {8}, kF32, 32).PadTo(32).Zeros(64);
  ExpectParseError(f.bytes(), StatusCode::kDataLoss, "duplicate tensor name 'w'");
}

TEST(GgufHostileTest, UnknownTypes) {
  RawFile tensor;
  tensor.Header(3, 1, 0).Tensor("t", {8}, 99, 0).PadTo(32).Zeros(64);
  ExpectParseError(tensor.bytes(), StatusCode::kDataLoss, "tensor 't' has unknown type 99");
  RawFile value;
  value.Str("k").U32(13).U32(0);
  ExpectParseError(OneTensorFileWithKv(1, value.bytes()), StatusCode::kDataLoss,
                   "unknown value type 13 for key 'k'");
  RawFile element;
  element.Str("k").U32(static_cast<uint32_t>(GgufType::kArray)).U32(77).U64(0);
  ExpectParseError(OneTensorFileWithKv(1, element.bytes()), StatusCode::kDataLoss,
                   "unknown array element type 77 in key 'k'");
  RawFile boolean;
  boolean.Str("k").U32(static_cast<uint32_t>(GgufType::kBool)).U8(2);
  ExpectParseError(OneTensorFileWithKv(1, boolean.bytes()), StatusCode::kDataLoss,
                   "bool value 2 of key 'k'");
  RawFile row;  // Q8_0 rows must hold whole 32-value blocks
  row.Header(3, 1, 0).Tensor("q", {16}, static_cast<uint32_t>(GgmlType::kQ8_0), 0).PadTo(32).Zeros(64);
  ExpectParseError(row.bytes(), StatusCode::kDataLoss,
                   "tensor 'q': row length 16 is not a multiple of the q8_0 block size 32");
}

TEST(GgufHostileTest, BadAlignments) {
  for (uint32_t alignment : {0u, 48u, 3u, 1u << 21}) {
    RawFile kv;
    kv.KeyU32("general.alignment", alignment);
    ExpectParseError(OneTensorFileWithKv(1, kv.bytes()), StatusCode::kDataLoss,
                     "general.alignment must be a power of two integer <= 1048576, got " +
                         std::to_string(alignment));
  }
  RawFile text;
  text.Str("general.alignment").U32(static_cast<uint32_t>(GgufType::kString)).Str("32");
  ExpectParseError(OneTensorFileWithKv(1, text.bytes()), StatusCode::kDataLoss,
                   "general.alignment must be a power of two integer <= 1048576, got string");
  RawFile negative;
  negative.Str("general.alignment").U32(static_cast<uint32_t>(GgufType::kInt32)).U32(0xFFFFFFE0);
  ExpectParseError(OneTensorFileWithKv(1, negative.bytes()), StatusCode::kDataLoss, "got -32");
}

// `depth` arrays nested in one another, the innermost holding one u8.
std::string NestedArrays(int depth) {
  RawFile kv;
  kv.Str("deep").U32(static_cast<uint32_t>(GgufType::kArray));
  for (int d = 1; d < depth; ++d) kv.U32(static_cast<uint32_t>(GgufType::kArray)).U64(1);
  kv.U32(static_cast<uint32_t>(GgufType::kUint8)).U64(1).U8(9);
  return OneTensorFileWithKv(1, kv.bytes());
}

TEST(GgufHostileTest, ArraysNestedTooDeep) {
  std::unique_ptr<GgufFile> ok = ParseOk(NestedArrays(kGgufMaxArrayDepth));
  ASSERT_NE(ok, nullptr);
  const GgufValue* v = ok->Find("deep");
  for (int d = 1; d < kGgufMaxArrayDepth; ++d) v = &v->array.at(0);
  EXPECT_EQ(v->array.at(0).u64, 9u);
  ExpectParseError(NestedArrays(kGgufMaxArrayDepth + 1), StatusCode::kDataLoss,
                   "arrays nested deeper than 8 in key 'deep'");
}

TEST(GgufHostileTest, OpenReportsThePath) {
  const std::string missing = TempPath("missing.gguf");
  StatusOr<std::unique_ptr<GgufFile>> absent = GgufFile::Open(missing);
  EXPECT_EQ(absent.status().code(), StatusCode::kNotFound);
  EXPECT_NE(absent.status().message().find(missing), std::string::npos);
  EXPECT_EQ(GgufFile::Open(::testing::TempDir()).status().code(), StatusCode::kInvalidArgument);

  const std::string path = TempPath("corrupt.gguf");
  std::string bytes = SmallValidFile();
  bytes.resize(bytes.size() - 1);
  std::ofstream(path, std::ios::binary) << bytes;
  StatusOr<std::unique_ptr<GgufFile>> corrupt = GgufFile::Open(path);
  EXPECT_EQ(corrupt.status().code(), StatusCode::kDataLoss);
  EXPECT_EQ(corrupt.status().message().rfind(path + ": tensor 'b' data", 0), 0u)
      << corrupt.status().ToString();
  std::filesystem::remove(path);

  const std::string empty = TempPath("empty.gguf");
  std::ofstream(empty, std::ios::binary).flush();
  EXPECT_EQ(GgufFile::Open(empty).status().code(), StatusCode::kDataLoss);
  std::filesystem::remove(empty);
}

// ---- The real model ------------------------------------------------------------------------

TEST(GgufRealModelTest, Stories260KParses) {
  REQUIRE_SHARED_FILE("models/stories260K.gguf");
  StatusOr<std::unique_ptr<GgufFile>> opened =
      GgufFile::Open(::kvserve::testing::SharedPath("models/stories260K.gguf"));
  ASSERT_TRUE(opened.ok()) << opened.status().ToString();
  const GgufFile& file = **opened;
  EXPECT_EQ(file.version(), 3u);
  EXPECT_EQ(file.alignment(), 32u);
  EXPECT_EQ(file.file_size(), 1185376u);
  EXPECT_EQ(file.metadata().size(), 19u);
  EXPECT_EQ(file.GetString("general.architecture").value(), "llama");
  EXPECT_EQ(file.GetString("tokenizer.ggml.model").value(), "llama");
  EXPECT_EQ(file.GetUint("llama.block_count").value(), 5u);
  EXPECT_EQ(file.GetUint("llama.embedding_length").value(), 64u);
  EXPECT_EQ(file.GetUint("llama.feed_forward_length").value(), 172u);
  EXPECT_EQ(file.GetUint("llama.attention.head_count").value(), 8u);
  EXPECT_EQ(file.GetUint("llama.attention.head_count_kv").value(), 4u);
  EXPECT_EQ(file.GetUint("llama.context_length").value(), 2048u);
  EXPECT_EQ(file.GetUint("llama.rope.dimension_count").value(), 8u);
  EXPECT_EQ(file.GetFloat("llama.attention.layer_norm_rms_epsilon").value(),
            static_cast<double>(1e-5f));
  EXPECT_EQ(file.GetUint("tokenizer.ggml.bos_token_id").value(), 1u);
  EXPECT_EQ(file.GetUint("tokenizer.ggml.eos_token_id").value(), 2u);
  const std::vector<std::string> tokens = file.GetStringArray("tokenizer.ggml.tokens").value();
  ASSERT_EQ(tokens.size(), 512u);
  EXPECT_EQ(tokens[13], "<0x0A>");
  EXPECT_EQ(file.GetFloatArray("tokenizer.ggml.scores").value().size(), 512u);
  EXPECT_EQ(file.GetIntArray("tokenizer.ggml.token_type").value().size(), 512u);

  ASSERT_EQ(file.tensors().size(), 48u);
  const GgufTensorInfo* embd = file.FindTensor("token_embd.weight");
  ASSERT_NE(embd, nullptr);
  EXPECT_EQ(embd->dims, (std::vector<uint64_t>{64, 512}));
  EXPECT_EQ(embd->type, GgmlType::kF32);
  EXPECT_EQ(embd->offset, 0u);
  EXPECT_EQ(embd->nbytes, 64u * 512u * 4u);
  EXPECT_EQ(embd->rows(), 512u);
  const GgufTensorInfo* output = file.FindTensor("output.weight");
  ASSERT_NE(output, nullptr);
  EXPECT_EQ(output->dims, (std::vector<uint64_t>{64, 512}));
  const GgufTensorInfo* down = file.FindTensor("blk.4.ffn_down.weight");
  ASSERT_NE(down, nullptr);
  EXPECT_EQ(down->dims, (std::vector<uint64_t>{172, 64}));
  uint64_t bytes = 0;
  for (const GgufTensorInfo& t : file.tensors()) {
    EXPECT_EQ(t.type, GgmlType::kF32) << t.name;
    bytes += (t.nbytes + 31) / 32 * 32;
  }
  EXPECT_EQ(file.data_offset() + bytes, file.file_size());
}

}  // namespace
}  // namespace kvserve
