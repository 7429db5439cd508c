#include "engine/model/gguf.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <limits>

namespace kvserve {
namespace {

constexpr uint32_t kMagic = 0x46554747;  // "GGUF" little-endian
constexpr int kMaxArrayDepth = 8;
constexpr uint64_t kMaxDims = 4;

std::string Hex(uint64_t v) {
  char buf[32];
  std::snprintf(buf, sizeof(buf), "0x%llx", static_cast<unsigned long long>(v));
  return buf;
}

// Bounds-checked little-endian reader over [data, data + size).
class Reader {
 public:
  Reader(const uint8_t* data, uint64_t size) : data_(data), size_(size) {}

  uint64_t pos() const { return pos_; }
  uint64_t remaining() const { return size_ - pos_; }

  template <typename T>
  Status Read(T* out, std::string_view what) {
    if (remaining() < sizeof(T)) {
      return DataLossError("file truncated while reading " + std::string(what) + " at offset " +
                           Hex(pos_));
    }
    std::memcpy(out, data_ + pos_, sizeof(T));
    pos_ += sizeof(T);
    return OkStatus();
  }

  Status ReadString(std::string* out, std::string_view what) {
    uint64_t len = 0;
    RETURN_IF_ERROR(Read(&len, what));
    if (len > remaining()) {
      return DataLossError("string length " + std::to_string(len) + " of " + std::string(what) +
                           " at offset " + Hex(pos_ - 8) + " exceeds the file");
    }
    out->assign(reinterpret_cast<const char*>(data_ + pos_), len);
    pos_ += len;
    return OkStatus();
  }

 private:
  const uint8_t* data_;
  uint64_t size_;
  uint64_t pos_ = 0;
};

// Smallest encoded size of one element of `type` (to bound array counts by file size).
uint64_t MinEncodedSize(GgufType type) {
  switch (type) {
    case GgufType::kUint8:
    case GgufType::kInt8:
    case GgufType::kBool: return 1;
    case GgufType::kUint16:
    case GgufType::kInt16: return 2;
    case GgufType::kUint32:
    case GgufType::kInt32:
    case GgufType::kFloat32: return 4;
    case GgufType::kUint64:
    case GgufType::kInt64:
    case GgufType::kFloat64:
    case GgufType::kString: return 8;
    case GgufType::kArray: return 12;
  }
  return 1;
}

bool ValidType(uint32_t t) { return t <= 12; }

template <typename T>
Status ReadInteger(Reader& r, GgufValue* v, std::string_view what) {
  T x;
  RETURN_IF_ERROR(r.Read(&x, what));
  if constexpr (std::is_signed_v<T>) {
    v->i64 = x;
    v->u64 = x >= 0 ? static_cast<uint64_t>(x) : 0;
  } else {
    v->u64 = x;
    v->i64 = x <= static_cast<uint64_t>(std::numeric_limits<int64_t>::max())
                 ? static_cast<int64_t>(x)
                 : 0;
  }
  v->f64 = static_cast<double>(x);
  return OkStatus();
}

Status ReadValue(Reader& r, GgufType type, GgufValue* v, const std::string& key, int depth) {
  v->type = type;
  switch (type) {
    case GgufType::kUint8: return ReadInteger<uint8_t>(r, v, key);
    case GgufType::kInt8: return ReadInteger<int8_t>(r, v, key);
    case GgufType::kUint16: return ReadInteger<uint16_t>(r, v, key);
    case GgufType::kInt16: return ReadInteger<int16_t>(r, v, key);
    case GgufType::kUint32: return ReadInteger<uint32_t>(r, v, key);
    case GgufType::kInt32: return ReadInteger<int32_t>(r, v, key);
    case GgufType::kUint64: return ReadInteger<uint64_t>(r, v, key);
    case GgufType::kInt64: return ReadInteger<int64_t>(r, v, key);
    case GgufType::kFloat32: {
      float f;
      RETURN_IF_ERROR(r.Read(&f, key));
      v->f64 = f;
      return OkStatus();
    }
    case GgufType::kFloat64: return r.Read(&v->f64, key);
    case GgufType::kBool: {
      uint8_t b;
      RETURN_IF_ERROR(r.Read(&b, key));
      if (b > 1) return DataLossError("bool value " + std::to_string(b) + " of key '" + key + "'");
      v->b = b != 0;
      return OkStatus();
    }
    case GgufType::kString: return r.ReadString(&v->str, key);
    case GgufType::kArray: {
      if (depth >= kMaxArrayDepth) {
        return DataLossError("arrays nested deeper than " + std::to_string(kMaxArrayDepth) +
                             " in key '" + key + "'");
      }
      uint32_t elem;
      uint64_t count;
      RETURN_IF_ERROR(r.Read(&elem, key));
      RETURN_IF_ERROR(r.Read(&count, key));
      if (!ValidType(elem)) {
        return DataLossError("unknown array element type " + std::to_string(elem) +
                             " in key '" + key + "'");
      }
      v->elem_type = static_cast<GgufType>(elem);
      if (count > r.remaining() / MinEncodedSize(v->elem_type)) {
        return DataLossError("array count " + std::to_string(count) + " of key '" + key +
                             "' exceeds the file");
      }
      v->array.resize(count);
      for (uint64_t i = 0; i < count; ++i) {
        RETURN_IF_ERROR(ReadValue(r, v->elem_type, &v->array[i], key, depth + 1));
      }
      return OkStatus();
    }
  }
  return DataLossError("unknown value type for key '" + key + "'");
}

}  // namespace

std::string_view GgufTypeName(GgufType type) {
  switch (type) {
    case GgufType::kUint8: return "uint8";
    case GgufType::kInt8: return "int8";
    case GgufType::kUint16: return "uint16";
    case GgufType::kInt16: return "int16";
    case GgufType::kUint32: return "uint32";
    case GgufType::kInt32: return "int32";
    case GgufType::kFloat32: return "float32";
    case GgufType::kBool: return "bool";
    case GgufType::kString: return "string";
    case GgufType::kArray: return "array";
    case GgufType::kUint64: return "uint64";
    case GgufType::kInt64: return "int64";
    case GgufType::kFloat64: return "float64";
  }
  return "unknown";
}

bool GgufValue::is_integer() const {
  switch (type) {
    case GgufType::kUint8:
    case GgufType::kInt8:
    case GgufType::kUint16:
    case GgufType::kInt16:
    case GgufType::kUint32:
    case GgufType::kInt32:
    case GgufType::kUint64:
    case GgufType::kInt64: return true;
    default: return false;
  }
}

StatusOr<std::unique_ptr<GgufFile>> GgufFile::Open(const std::string& path) {
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return NotFoundError("cannot open '" + path + "': " + std::strerror(errno));
  struct stat st;
  if (::fstat(fd, &st) != 0) {
    int err = errno;
    ::close(fd);
    return InvalidArgumentError("cannot stat '" + path + "': " + std::strerror(err));
  }
  if (!S_ISREG(st.st_mode)) {
    ::close(fd);
    return InvalidArgumentError("'" + path + "' is not a regular file");
  }
  std::unique_ptr<GgufFile> file(new GgufFile());
  file->size_ = static_cast<uint64_t>(st.st_size);
  if (file->size_ > 0) {
    void* p = ::mmap(nullptr, file->size_, PROT_READ, MAP_PRIVATE, fd, 0);
    if (p == MAP_FAILED) {
      int err = errno;
      ::close(fd);
      return InvalidArgumentError("cannot mmap '" + path + "': " + std::strerror(err));
    }
    file->mapping_ = p;
    file->data_ = static_cast<const uint8_t*>(p);
  }
  ::close(fd);
  Status status = file->Parse();
  if (!status.ok()) return status.WithContext(path);
  return file;
}

StatusOr<std::unique_ptr<GgufFile>> GgufFile::FromBytes(std::string bytes) {
  std::unique_ptr<GgufFile> file(new GgufFile());
  file->owned_ = std::move(bytes);
  file->data_ = reinterpret_cast<const uint8_t*>(file->owned_.data());
  file->size_ = file->owned_.size();
  RETURN_IF_ERROR(file->Parse());
  return file;
}

GgufFile::~GgufFile() {
  if (mapping_ != nullptr) ::munmap(mapping_, size_);
}

Status GgufFile::Parse() {
  Reader r(data_, size_);
  uint32_t magic = 0;
  RETURN_IF_ERROR(r.Read(&magic, "magic"));
  if (magic != kMagic) return InvalidArgumentError("not a GGUF file (bad magic " + Hex(magic) + ")");
  RETURN_IF_ERROR(r.Read(&version_, "version"));
  if (version_ == 1) {
    return InvalidArgumentError("GGUF version 1 (32-bit counts) is not supported; convert the "
                                "file to version 3");
  }
  if (version_ != 2 && version_ != 3) {
    return InvalidArgumentError("unsupported GGUF version " + std::to_string(version_));
  }
  uint64_t tensor_count = 0, kv_count = 0;
  RETURN_IF_ERROR(r.Read(&tensor_count, "tensor count"));
  RETURN_IF_ERROR(r.Read(&kv_count, "metadata count"));
  // Each key/value takes at least 8 (key length) + 4 (type) + 1 bytes; each tensor info at
  // least 8 + 4 + 8 + 4 + 8.
  if (kv_count > r.remaining() / 13) {
    return DataLossError("metadata count " + std::to_string(kv_count) + " exceeds the file");
  }
  for (uint64_t i = 0; i < kv_count; ++i) {
    std::string key;
    RETURN_IF_ERROR(r.ReadString(&key, "metadata key #" + std::to_string(i)));
    uint32_t type = 0;
    RETURN_IF_ERROR(r.Read(&type, key));
    if (!ValidType(type)) {
      return DataLossError("unknown value type " + std::to_string(type) + " for key '" + key + "'");
    }
    GgufValue value;
    RETURN_IF_ERROR(ReadValue(r, static_cast<GgufType>(type), &value, key, 0));
    if (metadata_.count(key) != 0) return DataLossError("duplicate metadata key '" + key + "'");
    metadata_.emplace(std::move(key), std::move(value));
  }

  if (const GgufValue* a = Find("general.alignment")) {
    if (!a->is_integer() || a->u64 == 0 || a->u64 > (1u << 20) || (a->u64 & (a->u64 - 1)) != 0) {
      return DataLossError("general.alignment must be a power of two integer, got " +
                           (a->is_integer() ? std::to_string(a->u64) : std::string(GgufTypeName(a->type))));
    }
    alignment_ = a->u64;
  }

  if (tensor_count > r.remaining() / 32) {
    return DataLossError("tensor count " + std::to_string(tensor_count) + " exceeds the file");
  }
  tensors_.resize(tensor_count);
  for (uint64_t i = 0; i < tensor_count; ++i) {
    GgufTensorInfo& t = tensors_[i];
    RETURN_IF_ERROR(r.ReadString(&t.name, "tensor name #" + std::to_string(i)));
    uint32_t n_dims = 0;
    RETURN_IF_ERROR(r.Read(&n_dims, t.name));
    if (n_dims == 0 || n_dims > kMaxDims) {
      return DataLossError("tensor '" + t.name + "' has " + std::to_string(n_dims) +
                           " dimensions (1 to 4 allowed)");
    }
    t.dims.resize(n_dims);
    t.num_elements = 1;
    for (uint32_t d = 0; d < n_dims; ++d) {
      RETURN_IF_ERROR(r.Read(&t.dims[d], t.name));
      if (t.dims[d] != 0 &&
          t.num_elements > static_cast<uint64_t>(std::numeric_limits<int64_t>::max()) / t.dims[d]) {
        return DataLossError("tensor '" + t.name + "' element count overflows");
      }
      t.num_elements *= t.dims[d];
    }
    uint32_t type = 0;
    RETURN_IF_ERROR(r.Read(&type, t.name));
    std::optional<GgmlTypeInfo> info = GetGgmlTypeInfo(type);
    if (!info) {
      return DataLossError("tensor '" + t.name + "' has unknown type " + std::to_string(type));
    }
    t.type = static_cast<GgmlType>(type);
    RETURN_IF_ERROR(r.Read(&t.offset, t.name));
    if (t.dims[0] % info->block_values != 0) {
      return DataLossError("tensor '" + t.name + "': row length " + std::to_string(t.dims[0]) +
                           " is not a multiple of the " + std::string(info->name) +
                           " block size " + std::to_string(info->block_values));
    }
    const uint64_t blocks = t.num_elements / info->block_values;
    if (blocks > std::numeric_limits<uint64_t>::max() / info->block_bytes) {
      return DataLossError("tensor '" + t.name + "' byte size overflows");
    }
    t.nbytes = blocks * info->block_bytes;
    if (t.offset % alignment_ != 0) {
      return DataLossError("tensor '" + t.name + "' offset " + Hex(t.offset) +
                           " is not aligned to " + std::to_string(alignment_));
    }
    if (!tensor_index_.emplace(t.name, i).second) {
      return DataLossError("duplicate tensor name '" + t.name + "'");
    }
  }

  uint64_t data_start = (r.pos() + alignment_ - 1) / alignment_ * alignment_;
  if (tensor_count > 0 && data_start > size_) {
    return DataLossError("file truncated before the tensor data section");
  }
  const uint64_t data_size = data_start <= size_ ? size_ - data_start : 0;
  for (GgufTensorInfo& t : tensors_) {
    if (t.offset > data_size || t.nbytes > data_size - t.offset) {
      return DataLossError("tensor '" + t.name + "' data [" + Hex(t.offset) + ", +" +
                           std::to_string(t.nbytes) + ") lies outside the file's data section (" +
                           std::to_string(data_size) + " bytes): file truncated or corrupt");
    }
    t.data = data_ + data_start + t.offset;
  }
  return OkStatus();
}

const GgufValue* GgufFile::Find(std::string_view key) const {
  auto it = metadata_.find(std::string(key));
  return it == metadata_.end() ? nullptr : &it->second;
}

namespace {
Status Missing(std::string_view key) { return NotFoundError("missing key '" + std::string(key) + "'"); }
Status WrongType(std::string_view key, const GgufValue& v, std::string_view want) {
  return InvalidArgumentError("key '" + std::string(key) + "' is " +
                              std::string(GgufTypeName(v.type)) + ", expected " +
                              std::string(want));
}
}  // namespace

StatusOr<std::string> GgufFile::GetString(std::string_view key) const {
  const GgufValue* v = Find(key);
  if (!v) return Missing(key);
  if (v->type != GgufType::kString) return WrongType(key, *v, "string");
  return v->str;
}

StatusOr<uint64_t> GgufFile::GetUint(std::string_view key) const {
  const GgufValue* v = Find(key);
  if (!v) return Missing(key);
  if (!v->is_integer()) return WrongType(key, *v, "an unsigned integer");
  bool is_signed = v->type == GgufType::kInt8 || v->type == GgufType::kInt16 ||
                   v->type == GgufType::kInt32 || v->type == GgufType::kInt64;
  if (is_signed && v->i64 < 0) {
    return InvalidArgumentError("key '" + std::string(key) + "' is negative");
  }
  return v->u64;
}

StatusOr<int64_t> GgufFile::GetInt(std::string_view key) const {
  const GgufValue* v = Find(key);
  if (!v) return Missing(key);
  if (!v->is_integer()) return WrongType(key, *v, "an integer");
  if (v->type == GgufType::kUint64 &&
      v->u64 > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) {
    return InvalidArgumentError("key '" + std::string(key) + "' is out of range");
  }
  return v->i64;
}

StatusOr<double> GgufFile::GetFloat(std::string_view key) const {
  const GgufValue* v = Find(key);
  if (!v) return Missing(key);
  if (!v->is_float() && !v->is_integer()) return WrongType(key, *v, "a number");
  return v->f64;
}

StatusOr<bool> GgufFile::GetBool(std::string_view key) const {
  const GgufValue* v = Find(key);
  if (!v) return Missing(key);
  if (v->type != GgufType::kBool) return WrongType(key, *v, "bool");
  return v->b;
}

StatusOr<std::vector<std::string>> GgufFile::GetStringArray(std::string_view key) const {
  const GgufValue* v = Find(key);
  if (!v) return Missing(key);
  if (v->type != GgufType::kArray || v->elem_type != GgufType::kString) {
    return WrongType(key, *v, "array of strings");
  }
  std::vector<std::string> out;
  out.reserve(v->array.size());
  for (const GgufValue& e : v->array) out.push_back(e.str);
  return out;
}

StatusOr<std::vector<float>> GgufFile::GetFloatArray(std::string_view key) const {
  const GgufValue* v = Find(key);
  if (!v) return Missing(key);
  if (v->type != GgufType::kArray ||
      (v->elem_type != GgufType::kFloat32 && v->elem_type != GgufType::kFloat64)) {
    return WrongType(key, *v, "array of floats");
  }
  std::vector<float> out;
  out.reserve(v->array.size());
  for (const GgufValue& e : v->array) out.push_back(static_cast<float>(e.f64));
  return out;
}

StatusOr<std::vector<int64_t>> GgufFile::GetIntArray(std::string_view key) const {
  const GgufValue* v = Find(key);
  if (!v) return Missing(key);
  GgufValue probe;
  probe.type = v->elem_type;
  if (v->type != GgufType::kArray || !probe.is_integer()) {
    return WrongType(key, *v, "array of integers");
  }
  std::vector<int64_t> out;
  out.reserve(v->array.size());
  for (const GgufValue& e : v->array) out.push_back(e.i64);
  return out;
}

const GgufTensorInfo* GgufFile::FindTensor(std::string_view name) const {
  auto it = tensor_index_.find(name);
  return it == tensor_index_.end() ? nullptr : &tensors_[it->second];
}

}  // namespace kvserve
