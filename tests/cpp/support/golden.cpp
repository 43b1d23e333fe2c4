// Golden-case loader (golden.h): parses tests/data/golden/manifest.json with nlohmann_json and
// reads each listed tensor file whole, checking its size against shape x dtype (caches:
// num_blocks x block_stride_bytes).
#include "support/golden.h"

#include <fstream>
#include <iterator>
#include <nlohmann/json.hpp>
#include <stdexcept>

namespace sparse_mla::test_support {
namespace {

using nlohmann::json;

[[noreturn]] void fail(const std::string& message) {
  throw std::runtime_error("golden: " + message);
}

json read_manifest() {
  const std::string path = golden_dir() + "/manifest.json";
  std::ifstream in(path);
  if (!in) fail("cannot open " + path);
  try {
    return json::parse(in);
  } catch (const json::exception& e) {
    fail("cannot parse " + path + ": " + e.what());
  }
}

DType parse_dtype(const std::string& name, const std::string& where) {
  if (name == "bfloat16") return DType::kBFloat16;
  if (name == "float32") return DType::kFloat32;
  if (name == "int32") return DType::kInt32;
  if (name == "uint8") return DType::kUInt8;
  if (name == "float8_e4m3fn") return DType::kFloat8E4M3;
  fail(where + ": unknown dtype \"" + name + "\"");
}

std::vector<uint8_t> read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) fail("cannot open " + path);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

GoldenTensor parse_tensor(const std::string& case_name, const std::string& key, const json& entry) {
  const std::string where = case_name + "." + key;
  GoldenTensor t;
  t.name = key;
  try {
    t.file = entry.at("file").get<std::string>();
    t.dtype = parse_dtype(entry.at("dtype").get<std::string>(), where);
    t.shape = entry.at("shape").get<std::vector<int64_t>>();
    if (entry.contains("strides")) t.strides = entry.at("strides").get<std::vector<int64_t>>();
    if (entry.contains("block_stride_bytes")) {
      t.block_stride_bytes = entry.at("block_stride_bytes").get<int64_t>();
    }
  } catch (const json::exception& e) {
    fail(where + ": malformed manifest entry: " + e.what());
  }
  if (t.strides.empty()) {
    t.strides.assign(t.shape.size(), 1);
    for (int d = static_cast<int>(t.shape.size()) - 2; d >= 0; --d) {
      t.strides[d] = t.strides[d + 1] * t.shape[d + 1];
    }
  } else if (t.strides.size() != t.shape.size()) {
    fail(where + ": strides and shape differ in length");
  }
  t.bytes = read_file(golden_dir() + "/" + t.file);
  // A cache file holds whole blocks, block_stride_bytes each; any other file is dense.
  const int64_t expected = t.block_stride_bytes > 0
                               ? t.shape.at(0) * t.block_stride_bytes
                               : t.numel() * static_cast<int64_t>(dtype_size(t.dtype));
  if (static_cast<int64_t>(t.bytes.size()) != expected) {
    fail(where + ": " + t.file + " has " + std::to_string(t.bytes.size()) + " bytes, expected " +
         std::to_string(expected));
  }
  return t;
}

}  // namespace

std::string golden_dir() { return SMLA_GOLDEN_DIR; }

int64_t GoldenTensor::numel() const {
  int64_t n = 1;
  for (int64_t s : shape) n *= s;
  return n;
}

void GoldenTensor::check_element_size(size_t size) const {
  if (size != dtype_size(dtype)) {
    fail(name + " is " + dtype_name(dtype) + ", not an element of " + std::to_string(size) +
         " bytes");
  }
}

std::vector<float> GoldenTensor::to_float() const {
  std::vector<float> out;
  if (dtype == DType::kFloat32) {
    auto values = as<float>();
    out.assign(values.begin(), values.end());
  } else if (dtype == DType::kBFloat16) {
    auto values = as<uint16_t>();
    out.reserve(values.size());
    for (uint16_t v : values) out.push_back(bf16_to_float(v));
  } else {
    fail(name + " is " + dtype_name(dtype) + "; to_float() takes bf16 or fp32");
  }
  return out;
}

TensorView GoldenTensor::view() const {
  if (shape.size() > static_cast<size_t>(kMaxRank)) {
    fail(name + " has rank " + std::to_string(shape.size()) + " > " + std::to_string(kMaxRank));
  }
  TensorView v;
  v.data = const_cast<uint8_t*>(bytes.data());  // input only (see golden.h)
  v.dtype = dtype;
  v.rank = static_cast<int>(shape.size());
  for (int d = 0; d < v.rank; ++d) {
    v.sizes[d] = shape[d];
    v.strides[d] = strides[d];
  }
  v.device = Device::cpu();
  return v;
}

bool GoldenCase::has(std::string_view tensor_name) const {
  return tensors_.find(tensor_name) != tensors_.end();
}

const GoldenTensor& GoldenCase::tensor(std::string_view tensor_name) const {
  auto it = tensors_.find(tensor_name);
  if (it == tensors_.end()) fail(name_ + " has no tensor \"" + std::string(tensor_name) + "\"");
  return it->second;
}

std::vector<std::string> GoldenCase::tensor_names() const {
  std::vector<std::string> names;
  for (const auto& [key, value] : tensors_) names.push_back(key);
  return names;
}

bool GoldenCase::has_scalar(std::string_view scalar_name) const {
  return scalars_.find(scalar_name) != scalars_.end();
}

double GoldenCase::scalar(std::string_view scalar_name) const {
  auto it = scalars_.find(scalar_name);
  if (it == scalars_.end()) fail(name_ + " has no scalar \"" + std::string(scalar_name) + "\"");
  return it->second;
}

KvCacheFormat GoldenCase::format() const {
  if (format_name_.empty()) fail(name_ + " has no \"format\"");
  auto format = parse_kv_cache_format(format_name_);
  if (!format) fail(name_ + ": unknown format \"" + format_name_ + "\"");
  return *format;
}

KvCacheView GoldenCase::cache(std::string_view tensor_name) const {
  const GoldenTensor& t = tensor(tensor_name);
  if (t.shape.size() != 4 || t.block_stride_bytes <= 0) {
    fail(name_ + "." + t.name + " is not a paged cache (needs a 4-d shape and block_stride_bytes)");
  }
  const KvCacheFormat fmt = format();
  const KvCacheFormatInfo& info = kv_cache_format_info(fmt);
  KvCacheView view;
  view.data = t.bytes.data();
  view.format = fmt;
  view.num_blocks = t.shape[0];
  view.page_block_size = t.shape[1];
  view.block_stride_bytes = t.block_stride_bytes;
  view.d_qk = info.d_qk != 0 ? info.d_qk : static_cast<int>(t.shape[3] / 2);
  view.device = Device::cpu();
  if (t.shape[3] != kv_cache_bytes_per_token(fmt, view.d_qk)) {
    fail(name_ + "." + t.name + ": bytes_per_token " + std::to_string(t.shape[3]) +
         " does not match format " + format_name_);
  }
  return view;
}

std::vector<std::string> golden_case_names() {
  const json manifest = read_manifest();
  std::vector<std::string> names;
  for (const auto& [key, value] : manifest.at("cases").items()) names.push_back(key);
  return names;
}

GoldenCase load_golden_case(std::string_view name) {
  const json manifest = read_manifest();
  const json& cases = manifest.at("cases");
  auto it = cases.find(std::string(name));
  if (it == cases.end()) fail("no case \"" + std::string(name) + "\" in manifest.json");
  GoldenCase c;
  c.name_ = std::string(name);
  for (const auto& [key, value] : it->items()) {
    if (value.is_object()) {
      c.tensors_.emplace(key, parse_tensor(c.name_, key, value));
    } else if (value.is_number()) {
      c.scalars_.emplace(key, value.get<double>());
    } else if (key == "format" && value.is_string()) {
      c.format_name_ = value.get<std::string>();
    }
  }
  return c;
}

}  // namespace sparse_mla::test_support
