// Loader for the FlashMLA golden cases in tests/data/golden (see README.md and manifest.json
// there): raw little-endian tensors with their shapes and dtypes, the scalars of each case, and
// KvCacheView / TensorView wrappers so tests can feed them straight into the public API.
//   GoldenCase c = load_golden_case("decode_d512");
//   const GoldenTensor& q = c.tensor("q");      // q.shape {2, 2, 64, 512}, q.dtype bf16
//   KvCacheView cache = c.cache("kv_cache");    // format and block stride from the manifest
//   float scale = c.scalar("softmax_scale");
#pragma once

#include <cstdint>
#include <map>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "sparse_mla/sparse_mla.h"

namespace sparse_mla::test_support {

// The directory of the golden cases (SMLA_GOLDEN_DIR).
std::string golden_dir();

struct GoldenTensor {
  std::string name;  // manifest key: "q", "kv_cache", "lse_b_h_sq", ...
  std::string file;  // file name inside golden_dir()
  DType dtype = DType::kUInt8;
  std::vector<int64_t> shape;
  std::vector<int64_t> strides;    // elements; row-major unless the manifest gives strides
  int64_t block_stride_bytes = 0;  // caches only (0 otherwise)
  std::vector<uint8_t> bytes;      // the file's contents

  int64_t numel() const;
  // The raw contents as elements of T; throws std::runtime_error if sizeof(T) != dtype size.
  template <typename T>
  std::span<const T> as() const {
    check_element_size(sizeof(T));
    return {reinterpret_cast<const T*>(bytes.data()), bytes.size() / sizeof(T)};
  }
  // bf16 or fp32 contents widened to fp32 (row-major order of the file).
  std::vector<float> to_float() const;
  // A CPU view of the tensor (rank <= 4) with the manifest's shape and strides. The view points
  // into `bytes`; the library treats it as input, nothing may write through it.
  TensorView view() const;

 private:
  void check_element_size(size_t size) const;
};

class GoldenCase {
 public:
  const std::string& name() const { return name_; }
  bool has(std::string_view tensor_name) const;
  // Throws std::runtime_error naming the case and tensor when absent.
  const GoldenTensor& tensor(std::string_view tensor_name) const;
  std::vector<std::string> tensor_names() const;
  // Numeric scalars ("sm_scale", "softmax_scale"); throws when absent.
  double scalar(std::string_view scalar_name) const;
  bool has_scalar(std::string_view scalar_name) const;
  // The cache format of a decode case ("format": "v32_fp8" / "v4_fp8"); throws when absent.
  KvCacheFormat format() const;
  // A CPU KvCacheView over a cache tensor ("kv_cache" or "extra_kv_cache"): num_blocks and
  // page_block_size from its shape [num_blocks, page_block_size, 1, bytes_per_token],
  // block_stride_bytes from the manifest, d_qk and format from the case's format.
  KvCacheView cache(std::string_view tensor_name = "kv_cache") const;

 private:
  friend GoldenCase load_golden_case(std::string_view name);
  std::string name_;
  std::string format_name_;
  std::map<std::string, GoldenTensor, std::less<>> tensors_;
  std::map<std::string, double, std::less<>> scalars_;
};

// Names of the cases in the manifest ("decode_d512", "decode_d576", "prefill_d512", ...).
std::vector<std::string> golden_case_names();

// Loads one case; throws std::runtime_error (file missing, size not matching the shape, unknown
// dtype or format) with a message naming the case, tensor and file.
GoldenCase load_golden_case(std::string_view name);

}  // namespace sparse_mla::test_support
