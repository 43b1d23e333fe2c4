// GPU tests of the device KV-cache codec (src/cuda/codec/kv_cache_codec.cu) against the host codec,
// for every format and page layout (test_support::kAllCacheFormats):
//   quantize_kv_cache    the whole cache's bytes (padding and block tails included) equal the host
//                        codec's, from rows with NaN, +-inf, huge, tiny, subnormal, -0 and random
//                        values, padded row strides, odd page sizes and odd block strides;
//   dequantize_kv_cache  bf16 and fp32 outputs equal the host's bit for bit (NaN where it is NaN);
//   write_kv_cache       rows at their slots equal the host writer's bytes, skipped slots (< 0,
//                        >= num_slots, INT_MAX) and every other token untouched; captured in a
//                        CUDA graph and replayed, the same bytes.
// A failure names the format, layout and the first differing byte: which block, and whether it is
// a data row, a scale row or block padding.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "gpu/gpu_test_support.h"
#include "sparse_mla/sparse_mla.h"
#include "support/cache_formats.h"

#if defined(SMLA_WITH_CUDA)
#include <cuda_runtime.h>
#endif

namespace sparse_mla {
namespace {

using test_support::CacheFormatCase;
using test_support::kGpu;

uint16_t bf16(float x) { return float_to_bf16(x); }

// Rows of d_qk bf16 values: randn / 10 plus an offset, and in some rows the values the quantizer
// treats specially. Row r of kind r % 8: 0-2 plain; 3 one NaN; 4 +-inf and huge; 5 tiny and
// subnormal (the 1e-4 / 2^-9 scale floors); 6 all zero and -0; 7 wide exponents (ties and
// saturation of e2m1 / e4m3 land somewhere in it).
std::vector<uint16_t> make_rows(int64_t n, int64_t stride, int d_qk, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> normal(0.0f, 0.1f);
  std::uniform_real_distribution<float> unit(-1.0f, 1.0f);
  std::vector<uint16_t> rows(static_cast<size_t>(n * stride), bf16(12345.0f));  // padding
  for (int64_t r = 0; r < n; ++r) {
    const float offset = unit(rng) * 0.05f;
    uint16_t* row = rows.data() + r * stride;
    for (int i = 0; i < d_qk; ++i) {
      float x = normal(rng) + offset;
      switch (r % 8) {
        case 3:
          if (i == (r * 7) % d_qk) x = std::numeric_limits<float>::quiet_NaN();
          break;
        case 4:
          if (i % 37 == 0) x = (i % 2 ? -1.0f : 1.0f) * std::numeric_limits<float>::infinity();
          if (i % 41 == 1) x = 3e38f * unit(rng);
          if (i % 43 == 2) x = 1e30f;
          break;
        case 5:
          x *= 1e-36f;
          if (i % 5 == 0) x = 1e-40f;  // a bf16 subnormal
          break;
        case 6:
          x = i % 2 ? -0.0f : 0.0f;
          break;
        case 7:
          x = std::ldexp(unit(rng), static_cast<int>(rng() % 40) - 20);
          if (i % 16 == 3) x = 6.0f * std::ldexp(1.0f, static_cast<int>(rng() % 10));
          break;
        default:
          break;
      }
      row[i] = bf16(x);
    }
  }
  return rows;
}

KvCacheView cache_view(const CacheFormatCase& fc, void* data, Device device, int64_t num_blocks,
                       int64_t pbs, int64_t stride) {
  KvCacheView v;
  v.data = data;
  v.format = fc.format;
  v.layout = fc.layout;
  v.num_blocks = num_blocks;
  v.page_block_size = pbs;
  v.block_stride_bytes = stride;
  v.d_qk = fc.d_qk;
  v.device = device;
  return v;
}

// A block stride past the minimum: one alignment unit more, and for formats that allow any
// stride (v32_fp8, bf16) an odd one, so rows are unaligned.
int64_t padded_stride(const CacheFormatCase& fc, int64_t pbs) {
  const int64_t min = kv_cache_min_block_stride(fc.format, pbs, fc.d_qk, fc.layout);
  const int align = kv_cache_format_info(fc.format, fc.layout).block_alignment;
  return align == 1 ? min + 7 : min + align;
}

// "block 2, byte 1040 of 16912 (scale rows): device 0x3a, host 0x3b" for the first difference.
std::string first_difference(const CacheFormatCase& fc, const std::vector<uint8_t>& got,
                             const std::vector<uint8_t>& want, int64_t pbs, int64_t stride) {
  for (size_t i = 0; i < want.size(); ++i) {
    if (got[i] == want[i]) continue;
    const KvCacheFormatInfo& info = kv_cache_format_info(fc.format, fc.layout);
    const int64_t block = static_cast<int64_t>(i) / stride, at = static_cast<int64_t>(i) % stride;
    const int64_t row_bytes = info.data_row_bytes != 0 ? info.data_row_bytes : 2 * fc.d_qk;
    std::string where;
    if (at < pbs * row_bytes) {
      where = "data row of token " + std::to_string(at / row_bytes) + ", byte " +
              std::to_string(at % row_bytes);
    } else if (info.layout == KvLayout::kPageSplit &&
               at < pbs * row_bytes + pbs * info.scale_row_bytes) {
      const int64_t s = at - pbs * row_bytes;
      where = "scale row of token " + std::to_string(s / info.scale_row_bytes) + ", byte " +
              std::to_string(s % info.scale_row_bytes);
    } else {
      where = "block padding";
    }
    char buf[64];
    std::snprintf(buf, sizeof buf, ": device 0x%02x, host 0x%02x", got[i], want[i]);
    return fc.name() + ": first difference at block " + std::to_string(block) + ", offset " +
           std::to_string(at) + " (" + where + ")" + buf;
  }
  return "";
}

bool same_bits_or_both_nan(float a, float b) {
  uint32_t x, y;
  std::memcpy(&x, &a, 4);
  std::memcpy(&y, &b, 4);
  return x == y || (std::isnan(a) && std::isnan(b));
}

class CodecGpu : public ::testing::TestWithParam<CacheFormatCase> {};

// quantize_kv_cache on the device = the host codec's bytes, then dequantize_kv_cache = the host's.
TEST_P(CodecGpu, QuantizeAndDequantizeMatchTheHostCodec) {
  SMLA_SKIP_WITHOUT_GPU();
  const CacheFormatCase fc = GetParam();
  for (int64_t pbs : {1, 53, 64}) {
    SCOPED_TRACE(fc.name() + " page_block_size " + std::to_string(pbs));
    const int64_t num_blocks = 5;
    const int64_t stride = padded_stride(fc, pbs);
    const int64_t row_stride = fc.d_qk + 8;  // padded rows
    const std::vector<uint16_t> rows = make_rows(num_blocks * pbs, row_stride, fc.d_qk, pbs);
    const size_t cache_bytes = static_cast<size_t>(num_blocks * stride);
    // Both caches start as garbage: every byte must be written (padding as 0).
    std::vector<uint8_t> host_cache(cache_bytes, 0xa5), got(cache_bytes);
    const TensorView host_rows = TensorView::strided(
        const_cast<uint16_t*>(rows.data()), DType::kBFloat16, {num_blocks, pbs, 1, fc.d_qk},
        {pbs * row_stride, row_stride, fc.d_qk, 1});
    SMLA_ASSERT_OK(quantize_kv_cache(
        host_rows, cache_view(fc, host_cache.data(), Device::cpu(), num_blocks, pbs, stride)));

    Buffer d_rows, d_cache;
    SMLA_ASSERT_OK(test_support::to_device(rows, &d_rows));
    SMLA_ASSERT_OK(test_support::to_device(std::vector<uint8_t>(cache_bytes, 0x5a), &d_cache));
    TensorView dev_rows = host_rows;
    dev_rows.data = d_rows.data();
    dev_rows.device = kGpu;
    const KvCacheView dev_cache = cache_view(fc, d_cache.data(), kGpu, num_blocks, pbs, stride);
    SMLA_ASSERT_OK(quantize_kv_cache(dev_rows, dev_cache));
    SMLA_ASSERT_OK(synchronize(kGpu));
    SMLA_ASSERT_OK(test_support::to_host(d_cache.data(), cache_bytes, &got));
    ASSERT_TRUE(got == host_cache) << first_difference(fc, got, host_cache, pbs, stride);

    // Dequantize both ways, bf16 and fp32, into padded outputs.
    const KvCacheView host_view =
        cache_view(fc, host_cache.data(), Device::cpu(), num_blocks, pbs, stride);
    for (DType dtype : {DType::kBFloat16, DType::kFloat32}) {
      const size_t element = dtype == DType::kFloat32 ? 4 : 2;
      const int64_t out_stride = fc.d_qk + 16;
      const size_t out_bytes = static_cast<size_t>(num_blocks * pbs * out_stride) * element;
      std::vector<uint8_t> want(out_bytes, 0), dev_out(out_bytes, 0);
      const TensorView want_view =
          TensorView::strided(want.data(), dtype, {num_blocks, pbs, 1, fc.d_qk},
                              {pbs * out_stride, out_stride, fc.d_qk, 1});
      SMLA_ASSERT_OK(dequantize_kv_cache(host_view, want_view));
      Buffer d_out;
      SMLA_ASSERT_OK(test_support::to_device(std::vector<uint8_t>(out_bytes, 0), &d_out));
      TensorView dev_view = want_view;
      dev_view.data = d_out.data();
      dev_view.device = kGpu;
      SMLA_ASSERT_OK(dequantize_kv_cache(dev_cache, dev_view));
      SMLA_ASSERT_OK(synchronize(kGpu));
      SMLA_ASSERT_OK(test_support::to_host(d_out.data(), out_bytes, &dev_out));
      for (size_t i = 0; i < out_bytes / element; ++i) {
        float a, b;
        if (dtype == DType::kFloat32) {
          std::memcpy(&a, dev_out.data() + 4 * i, 4);
          std::memcpy(&b, want.data() + 4 * i, 4);
        } else {
          uint16_t x, y;
          std::memcpy(&x, dev_out.data() + 2 * i, 2);
          std::memcpy(&y, want.data() + 2 * i, 2);
          a = bf16_to_float(x);
          b = bf16_to_float(y);  // exact: different bits give different floats (NaN aside)
        }
        ASSERT_TRUE(same_bits_or_both_nan(a, b))
            << fc.name() << (dtype == DType::kFloat32 ? " fp32" : " bf16") << " element " << i
            << " (token " << i / out_stride << ", dim " << i % out_stride << "): device " << a
            << ", host " << b;
      }
    }
  }
}

// write_kv_cache: the rows land at their slots as the host writer stores them; skipped slots
// (negative, >= num_slots) and every other token, block padding included, keep their bytes.
TEST_P(CodecGpu, WriterStoresRowsAtTheirSlotsAndSkipsTheRest) {
  SMLA_SKIP_WITHOUT_GPU();
  const CacheFormatCase fc = GetParam();
  for (int64_t pbs : {2, 61, 64}) {
    SCOPED_TRACE(fc.name() + " page_block_size " + std::to_string(pbs));
    const int64_t num_blocks = 4;
    const int64_t num_slots = num_blocks * pbs;
    const int64_t stride = padded_stride(fc, pbs);
    const size_t cache_bytes = static_cast<size_t>(num_blocks * stride);
    std::vector<uint8_t> before(cache_bytes);
    std::mt19937_64 rng(static_cast<uint64_t>(pbs));
    for (uint8_t& b : before) b = static_cast<uint8_t>(rng());
    // Slots: distinct valid ones (every third slot, reversed), then skipped ones.
    std::vector<int32_t> slots;
    for (int64_t s = num_slots - 1; s >= 0; s -= 3) slots.push_back(static_cast<int32_t>(s));
    const size_t n_valid = slots.size();
    for (int32_t bad : {-1, -123456, static_cast<int32_t>(num_slots), 114514,
                        std::numeric_limits<int32_t>::max(), std::numeric_limits<int32_t>::min()}) {
      slots.insert(slots.begin() + static_cast<int64_t>(slots.size() / 2), bad);
    }
    const int64_t n = static_cast<int64_t>(slots.size());
    const int64_t row_stride = fc.d_qk + 24;
    const std::vector<uint16_t> rows = make_rows(n, row_stride, fc.d_qk, 100 + pbs);

    // Host reference: the same rows minus those the host would reject (>= num_slots).
    std::vector<uint8_t> want = before;
    {
      std::vector<int32_t> host_slots;
      std::vector<uint16_t> host_rows;
      for (int64_t i = 0; i < n; ++i) {
        if (slots[i] >= num_slots) continue;
        host_slots.push_back(slots[i]);
        host_rows.insert(host_rows.end(), rows.begin() + i * row_stride,
                         rows.begin() + (i + 1) * row_stride);
      }
      const auto m = static_cast<int64_t>(host_slots.size());
      SMLA_ASSERT_OK(write_kv_cache(
          TensorView::strided(host_rows.data(), DType::kBFloat16, {m, fc.d_qk}, {row_stride, 1}),
          TensorView::contiguous(host_slots.data(), DType::kInt32, {m}),
          cache_view(fc, want.data(), Device::cpu(), num_blocks, pbs, stride)));
    }
    ASSERT_GE(n_valid, 1u);

    Buffer d_rows, d_slots, d_cache;
    SMLA_ASSERT_OK(test_support::to_device(rows, &d_rows));
    SMLA_ASSERT_OK(test_support::to_device(slots, &d_slots));
    SMLA_ASSERT_OK(test_support::to_device(before, &d_cache));
    const TensorView dev_rows =
        TensorView::strided(d_rows.data(), DType::kBFloat16, {n, fc.d_qk}, {row_stride, 1}, kGpu);
    const TensorView dev_slots = TensorView::contiguous(d_slots.data(), DType::kInt32, {n}, kGpu);
    const KvCacheView dev_cache = cache_view(fc, d_cache.data(), kGpu, num_blocks, pbs, stride);
    SMLA_ASSERT_OK(write_kv_cache(dev_rows, dev_slots, dev_cache));
    SMLA_ASSERT_OK(synchronize(kGpu));
    std::vector<uint8_t> got;
    SMLA_ASSERT_OK(test_support::to_host(d_cache.data(), cache_bytes, &got));
    ASSERT_TRUE(got == want) << first_difference(fc, got, want, pbs, stride);

#if defined(SMLA_WITH_CUDA)
    // The same call captured in a CUDA graph, replayed twice onto the original bytes.
    cudaStream_t stream;
    ASSERT_EQ(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking), cudaSuccess);
    RunOptions options;
    options.stream = stream;
    cudaGraph_t graph;
    ASSERT_EQ(cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal), cudaSuccess);
    const Status captured = write_kv_cache(dev_rows, dev_slots, dev_cache, options);
    ASSERT_EQ(cudaStreamEndCapture(stream, &graph), cudaSuccess);
    SMLA_ASSERT_OK(captured);
    cudaGraphExec_t exec;
    ASSERT_EQ(cudaGraphInstantiate(&exec, graph, 0), cudaSuccess);
    for (int replay = 0; replay < 2; ++replay) {
      SMLA_ASSERT_OK(copy_bytes(d_cache.data(), kGpu, before.data(), Device::cpu(), cache_bytes));
      ASSERT_EQ(cudaGraphLaunch(exec, stream), cudaSuccess);
      ASSERT_EQ(cudaStreamSynchronize(stream), cudaSuccess);
      SMLA_ASSERT_OK(test_support::to_host(d_cache.data(), cache_bytes, &got));
      ASSERT_TRUE(got == want) << "graph replay " << replay << ": "
                               << first_difference(fc, got, want, pbs, stride);
    }
    cudaGraphExecDestroy(exec);
    cudaGraphDestroy(graph);
    cudaStreamDestroy(stream);
#endif
  }
}

INSTANTIATE_TEST_SUITE_P(Formats, CodecGpu, ::testing::ValuesIn(test_support::kAllCacheFormats),
                         [](const ::testing::TestParamInfo<CacheFormatCase>& info) {
                           return info.param.name();
                         });

}  // namespace
}  // namespace sparse_mla
