// Tests of the GGUF reader and writer: writer->reader round trips of every metadata type and
// tensor type, v2/v3, alignments and typed getters (hostile files: gguf_hostile_test.cpp).
#include "engine/model/gguf.h"

#include <gtest/gtest.h>

#include <cstring>
#include <string>
#include <vector>

#include "tests/unit/model/gguf_test_util.h"

namespace kvserve {
namespace gguf_test {

using namespace gguf_test;  // NOLINT(build/namespaces)

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

}  // namespace gguf_test
}  // namespace kvserve
