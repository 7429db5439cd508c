// GgufWriter: serializes metadata and tensors into a GGUF v3 file.
//
// Layout (little-endian, as the reader in gguf.cpp expects): magic, version 3, tensor count,
// metadata count; each key/value in insertion order; each tensor info (name, n_dims, dims,
// type, offset); zero padding to the alignment; then each tensor's bytes followed by zero
// padding to the alignment. Offsets are relative to the data section. The builder is
// thread-compatible; Serialize/WriteFile do not modify it.
#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <algorithm>
#include <cstring>
#include <limits>

#include "engine/model/gguf.h"

namespace kvserve {
namespace {

constexpr uint32_t kWriterVersion = 3;

// Appends little-endian encodings to a string (the host is little-endian: x86-64, aarch64).
class ByteAppender {
 public:
  explicit ByteAppender(std::string* out) : out_(out) {}

  template <typename T>
  void Put(T value) {
    char bytes[sizeof(T)];
    std::memcpy(bytes, &value, sizeof(T));
    out_->append(bytes, sizeof(T));
  }
  void PutString(std::string_view s) {
    Put<uint64_t>(s.size());
    out_->append(s.data(), s.size());
  }
  void PutZeros(uint64_t n) { out_->append(n, '\0'); }

 private:
  std::string* out_;
};

// Checks that `value`'s fields are consistent with its type; `depth` counts enclosing arrays.
void CheckValueShape(const GgufValue& value, std::string_view key, int depth) {
  switch (value.type) {
    case GgufType::kUint8:
      CHECK(value.u64 <= std::numeric_limits<uint8_t>::max()) << "key " << key;
      return;
    case GgufType::kUint16:
      CHECK(value.u64 <= std::numeric_limits<uint16_t>::max()) << "key " << key;
      return;
    case GgufType::kUint32:
      CHECK(value.u64 <= std::numeric_limits<uint32_t>::max()) << "key " << key;
      return;
    case GgufType::kInt8:
      CHECK(value.i64 >= std::numeric_limits<int8_t>::min() &&
            value.i64 <= std::numeric_limits<int8_t>::max()) << "key " << key;
      return;
    case GgufType::kInt16:
      CHECK(value.i64 >= std::numeric_limits<int16_t>::min() &&
            value.i64 <= std::numeric_limits<int16_t>::max()) << "key " << key;
      return;
    case GgufType::kInt32:
      CHECK(value.i64 >= std::numeric_limits<int32_t>::min() &&
            value.i64 <= std::numeric_limits<int32_t>::max()) << "key " << key;
      return;
    case GgufType::kArray:
      CHECK(depth < kGgufMaxArrayDepth) << "key " << key << ": arrays nested too deep";
      for (const GgufValue& element : value.array) {
        CHECK(element.type == value.elem_type)
            << "key " << key << ": element of type " << GgufTypeName(element.type)
            << " in an array of " << GgufTypeName(value.elem_type);
        CheckValueShape(element, key, depth + 1);
      }
      return;
    default: return;  // 64-bit integers, floats, bool, string: any field value fits
  }
}

void EncodeValue(const GgufValue& value, ByteAppender& out) {
  switch (value.type) {
    case GgufType::kUint8: out.Put(static_cast<uint8_t>(value.u64)); return;
    case GgufType::kInt8: out.Put(static_cast<int8_t>(value.i64)); return;
    case GgufType::kUint16: out.Put(static_cast<uint16_t>(value.u64)); return;
    case GgufType::kInt16: out.Put(static_cast<int16_t>(value.i64)); return;
    case GgufType::kUint32: out.Put(static_cast<uint32_t>(value.u64)); return;
    case GgufType::kInt32: out.Put(static_cast<int32_t>(value.i64)); return;
    case GgufType::kUint64: out.Put(value.u64); return;
    case GgufType::kInt64: out.Put(value.i64); return;
    case GgufType::kFloat32: out.Put(static_cast<float>(value.f64)); return;
    case GgufType::kFloat64: out.Put(value.f64); return;
    case GgufType::kBool: out.Put(static_cast<uint8_t>(value.b ? 1 : 0)); return;
    case GgufType::kString: out.PutString(value.str); return;
    case GgufType::kArray:
      out.Put(static_cast<uint32_t>(value.elem_type));
      out.Put(static_cast<uint64_t>(value.array.size()));
      for (const GgufValue& element : value.array) EncodeValue(element, out);
      return;
  }
  CHECK(false) << "unknown GGUF value type " << static_cast<uint32_t>(value.type);
}

GgufValue ScalarValue(GgufType type) {
  GgufValue v;
  v.type = type;
  return v;
}

GgufValue ArrayValue(GgufType elem_type, size_t count) {
  GgufValue v;
  v.type = GgufType::kArray;
  v.elem_type = elem_type;
  v.array.reserve(count);
  return v;
}

// A status for a failed system call: the code says what the caller can do about it.
Status ErrnoError(int err, const std::string& what) {
  std::string message = what + ": " + std::strerror(err);
  switch (err) {
    case ENOENT:
    case ENOTDIR: return NotFoundError(std::move(message));
    case ENOSPC:
    case EDQUOT:
    case EFBIG: return ResourceExhaustedError(std::move(message));
    default: return InternalError(std::move(message));
  }
}

// Writes all of [data, data + size) to fd, retrying short writes and EINTR.
Status WriteAll(int fd, const char* data, uint64_t size, const std::string& path) {
  while (size > 0) {
    const size_t chunk = static_cast<size_t>(std::min<uint64_t>(size, uint64_t{1} << 30));
    const ssize_t written = ::write(fd, data, chunk);
    if (written < 0) {
      if (errno == EINTR) continue;
      return ErrnoError(errno, "cannot write '" + path + "'");
    }
    data += written;
    size -= static_cast<uint64_t>(written);
  }
  return OkStatus();
}

Status WriteZeros(int fd, uint64_t count, const std::string& path) {
  static const char kZeros[4096] = {};
  while (count > 0) {
    const uint64_t chunk = std::min<uint64_t>(count, sizeof(kZeros));
    RETURN_IF_ERROR(WriteAll(fd, kZeros, chunk, path));
    count -= chunk;
  }
  return OkStatus();
}

}  // namespace

GgufWriter::GgufWriter(uint64_t alignment) : alignment_(alignment) {
  CHECK(alignment != 0 && (alignment & (alignment - 1)) == 0 && alignment <= kGgufMaxAlignment)
      << "GGUF alignment must be a power of two <= " << kGgufMaxAlignment << ", got "
      << alignment;
  if (alignment_ != kGgufDefaultAlignment) {
    AddUint32("general.alignment", static_cast<uint32_t>(alignment_));
  }
}

void GgufWriter::AddValue(std::string key, GgufValue value) {
  for (const auto& [existing, unused] : values_) {
    CHECK(existing != key) << "duplicate GGUF key '" << key << "'";
  }
  CheckValueShape(value, key, 0);
  if (key == "general.alignment") {
    CHECK(value.is_integer() && value.u64 == alignment_)
        << "general.alignment must equal the writer's alignment " << alignment_;
  }
  values_.emplace_back(std::move(key), std::move(value));
}

void GgufWriter::AddString(std::string key, std::string value) {
  GgufValue v = ScalarValue(GgufType::kString);
  v.str = std::move(value);
  AddValue(std::move(key), std::move(v));
}

void GgufWriter::AddUint32(std::string key, uint32_t value) {
  GgufValue v = ScalarValue(GgufType::kUint32);
  v.u64 = value;
  v.i64 = value;
  v.f64 = value;
  AddValue(std::move(key), std::move(v));
}

void GgufWriter::AddInt32(std::string key, int32_t value) {
  GgufValue v = ScalarValue(GgufType::kInt32);
  v.i64 = value;
  v.u64 = value >= 0 ? static_cast<uint64_t>(value) : 0;
  v.f64 = value;
  AddValue(std::move(key), std::move(v));
}

void GgufWriter::AddFloat32(std::string key, float value) {
  GgufValue v = ScalarValue(GgufType::kFloat32);
  v.f64 = value;
  AddValue(std::move(key), std::move(v));
}

void GgufWriter::AddBool(std::string key, bool value) {
  GgufValue v = ScalarValue(GgufType::kBool);
  v.b = value;
  AddValue(std::move(key), std::move(v));
}

void GgufWriter::AddStringArray(std::string key, const std::vector<std::string>& values) {
  GgufValue array = ArrayValue(GgufType::kString, values.size());
  for (const std::string& s : values) {
    GgufValue e = ScalarValue(GgufType::kString);
    e.str = s;
    array.array.push_back(std::move(e));
  }
  AddValue(std::move(key), std::move(array));
}

void GgufWriter::AddFloat32Array(std::string key, const std::vector<float>& values) {
  GgufValue array = ArrayValue(GgufType::kFloat32, values.size());
  for (float f : values) {
    GgufValue e = ScalarValue(GgufType::kFloat32);
    e.f64 = f;
    array.array.push_back(std::move(e));
  }
  AddValue(std::move(key), std::move(array));
}

void GgufWriter::AddInt32Array(std::string key, const std::vector<int32_t>& values) {
  GgufValue array = ArrayValue(GgufType::kInt32, values.size());
  for (int32_t i : values) {
    GgufValue e = ScalarValue(GgufType::kInt32);
    e.i64 = i;
    e.u64 = i >= 0 ? static_cast<uint64_t>(i) : 0;
    e.f64 = i;
    array.array.push_back(std::move(e));
  }
  AddValue(std::move(key), std::move(array));
}

void GgufWriter::AddTensor(std::string name, GgmlType type, std::vector<uint64_t> dims,
                           std::string bytes) {
  CHECK(!dims.empty() && dims.size() <= kGgufMaxDims)
      << "tensor '" << name << "' has " << dims.size() << " dimensions";
  for (const Tensor& t : tensors_) CHECK(t.name != name) << "duplicate tensor '" << name << "'";
  StatusOr<uint64_t> row_bytes = GgmlRowBytes(type, dims[0]);
  CHECK(row_bytes.ok()) << "tensor '" << name << "': " << row_bytes.status().ToString();
  uint64_t rows = 1;
  for (size_t d = 1; d < dims.size(); ++d) rows *= dims[d];
  CHECK_EQ(bytes.size(), *row_bytes * rows) << "tensor '" << name << "' byte size";
  tensors_.push_back(Tensor{std::move(name), type, std::move(dims), std::move(bytes)});
}

std::string GgufWriter::EncodeHeader() const {
  std::string header;
  ByteAppender out(&header);
  out.Put(kGgufMagic);
  out.Put(kWriterVersion);
  out.Put(static_cast<uint64_t>(tensors_.size()));
  out.Put(static_cast<uint64_t>(values_.size()));
  for (const auto& [key, value] : values_) {
    out.PutString(key);
    out.Put(static_cast<uint32_t>(value.type));
    EncodeValue(value, out);
  }
  uint64_t offset = 0;
  for (const Tensor& t : tensors_) {
    out.PutString(t.name);
    out.Put(static_cast<uint32_t>(t.dims.size()));
    for (uint64_t d : t.dims) out.Put(d);
    out.Put(static_cast<uint32_t>(t.type));
    out.Put(offset);
    offset += PaddedSize(t.bytes.size());
  }
  out.PutZeros(PaddedSize(header.size()) - header.size());
  return header;
}

std::string GgufWriter::Serialize() const {
  std::string file = EncodeHeader();
  ByteAppender out(&file);
  for (const Tensor& t : tensors_) {
    file += t.bytes;
    out.PutZeros(PaddedSize(t.bytes.size()) - t.bytes.size());
  }
  return file;
}

Status GgufWriter::WriteFile(const std::string& path) const {
  const std::string partial = path + ".partial";
  const int fd = ::open(partial.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) {
    return ErrnoError(errno, "cannot create '" + partial + "'");
  }
  Status status = [&]() -> Status {
    const std::string header = EncodeHeader();
    RETURN_IF_ERROR(WriteAll(fd, header.data(), header.size(), partial));
    for (const Tensor& t : tensors_) {
      RETURN_IF_ERROR(WriteAll(fd, t.bytes.data(), t.bytes.size(), partial));
      RETURN_IF_ERROR(WriteZeros(fd, PaddedSize(t.bytes.size()) - t.bytes.size(), partial));
    }
    return OkStatus();
  }();
  if (::close(fd) != 0 && status.ok()) {
    status = ErrnoError(errno, "cannot close '" + partial + "'");
  }
  if (status.ok() && std::rename(partial.c_str(), path.c_str()) != 0) {
    status = ErrnoError(errno, "cannot rename '" + partial + "' to '" + path + "'");
  }
  if (!status.ok()) ::unlink(partial.c_str());
  return status;
}

}  // namespace kvserve
