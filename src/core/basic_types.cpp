// Names and small helpers of the public value types: Status codes, dtypes, devices, tensor
// views, back ends, version.
#include <cstdio>
#include <limits>

#include "sparse_mla/sparse_mla.h"

namespace sparse_mla {

const char* status_code_name(StatusCode code) {
  switch (code) {
    case StatusCode::kOk:
      return "ok";
    case StatusCode::kInvalidArgument:
      return "invalid argument";
    case StatusCode::kUnsupported:
      return "unsupported";
    case StatusCode::kDeviceError:
      return "device error";
    case StatusCode::kInternal:
      return "internal error";
  }
  return "?";
}

const char* dtype_name(DType t) {
  switch (t) {
    case DType::kBFloat16:
      return "bf16";
    case DType::kFloat32:
      return "fp32";
    case DType::kInt32:
      return "int32";
    case DType::kUInt8:
      return "uint8";
    case DType::kFloat8E4M3:
      return "float8_e4m3fn";
  }
  return "?";
}

std::string to_string(const Device& device) {
  return device.is_cuda() ? "cuda:" + std::to_string(device.index) : "cpu";
}

namespace {
TensorView make_view(void* data, DType dtype, std::initializer_list<int64_t> sizes, Device device) {
  TensorView t;
  t.data = data;
  t.dtype = dtype;
  t.device = device;
  t.rank = static_cast<int>(sizes.size() > kMaxRank ? kMaxRank : sizes.size());
  int d = 0;
  for (int64_t s : sizes) {
    if (d == t.rank) break;
    t.sizes[d++] = s;
  }
  return t;
}

// a * b, or INT64_MAX / INT64_MIN where the product does not fit: sizes come from callers, and
// validation reports a view too large to address; the arithmetic before it must not overflow.
int64_t saturating_mul(int64_t a, int64_t b) {
  int64_t product = 0;
  if (!__builtin_mul_overflow(a, b, &product)) return product;
  return (a < 0) != (b < 0) ? std::numeric_limits<int64_t>::min()
                            : std::numeric_limits<int64_t>::max();
}
}  // namespace

TensorView TensorView::contiguous(void* data, DType dtype, std::initializer_list<int64_t> sizes,
                                  Device device) {
  TensorView t = make_view(data, dtype, sizes, device);
  int64_t stride = 1;
  for (int d = t.rank - 1; d >= 0; --d) {
    t.strides[d] = stride;
    stride = saturating_mul(stride, t.sizes[d]);
  }
  return t;
}

TensorView TensorView::strided(void* data, DType dtype, std::initializer_list<int64_t> sizes,
                               std::initializer_list<int64_t> strides, Device device) {
  TensorView t = make_view(data, dtype, sizes, device);
  int d = 0;
  for (int64_t s : strides) {
    if (d == t.rank) break;
    t.strides[d++] = s;
  }
  return t;
}

namespace {
// A rank outside [0, kMaxRank] is reported by validation; never index past the arrays.
int clamped_rank(int rank) { return rank < 0 ? 0 : (rank > kMaxRank ? kMaxRank : rank); }
}  // namespace

int64_t TensorView::numel() const {
  int64_t n = 1;
  for (int d = 0; d < clamped_rank(rank); ++d) {
    if (sizes[d] == 0) return 0;
    n = saturating_mul(n, sizes[d]);
  }
  return n;
}

bool TensorView::is_contiguous() const {
  int64_t stride = 1;
  for (int d = clamped_rank(rank) - 1; d >= 0; --d) {
    if (sizes[d] != 1 && strides[d] != stride) return false;
    stride = saturating_mul(stride, sizes[d]);
  }
  return true;
}

// Built with std::to_string, not a stream: error text must not depend on the host's iostream
// locale machinery. Linked into the torch extension, the library's copy of libstdc++'s
// num_put<char> facet id (a template static) is not the one the process's locale was built with,
// and streaming an integer crashed in every error message that described a tensor (torch 2.11 on
// the H200 machine, both CPU and CUDA tensors).
std::string describe(const TensorView& t) {
  const int rank = clamped_rank(t.rank);
  std::string s = "[";
  for (int d = 0; d < rank; ++d) s += (d ? ", " : "") + std::to_string(t.sizes[d]);
  s += std::string("] ") + dtype_name(t.dtype) + " strides [";
  for (int d = 0; d < rank; ++d) s += (d ? ", " : "") + std::to_string(t.strides[d]);
  return s + "] " + to_string(t.device);
}

const char* backend_name(Backend backend) {
  switch (backend) {
    case Backend::kAuto:
      return "auto";
    case Backend::kCpu:
      return "cpu";
    case Backend::kCuda:
      return "cuda";
    case Backend::kReference:
      return "reference";
  }
  return "?";
}

std::optional<Backend> parse_backend(std::string_view name) {
  for (Backend b : {Backend::kAuto, Backend::kCpu, Backend::kCuda, Backend::kReference}) {
    if (name == backend_name(b)) return b;
  }
  return std::nullopt;
}

const char* version_string() { return "0.1.0"; }

}  // namespace sparse_mla
