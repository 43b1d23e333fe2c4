// Device side of the transposed wgmma checks (wgmma_kernels.h): one CTA of one warpgroup places
// K, Q and P^T in shared memory as the heads-in-N prefill does and runs its two MMA helpers.
// Compiled for every SMLA_CUDA_ARCHS entry; without sm_90a code the kernel only reports so.
#include <cuda_runtime.h>

#include <cstdint>
#include <memory>

#include "cuda/device/ptx/warpgroup.cuh"
#include "cuda/device/ptx/wgmma.cuh"
#include "cuda/device/smem_tile.cuh"
#include "cuda/sm90a/heads_in_n/consumers.cuh"
#include "gpu/wgmma_kernels.h"

namespace sparse_mla::test_support {
namespace {

using cuda::sm90a::kValuePanels;

constexpr uint32_t kRan = 1;
constexpr uint32_t kNoSm90aCode = 2;
constexpr int kKeys = 64;

// Row `row` of a [rows][dims] bf16 tile into its swizzled panels (panel stride rows x 128 B).
template <int kRows>
__device__ void place_rows(uint8_t* tile, const uint16_t* src, int dims) {
  for (int e = static_cast<int>(threadIdx.x); e < kRows * dims; e += blockDim.x) {
    const int row = e / dims, col = e % dims;
    *reinterpret_cast<uint16_t*>(tile + cuda::tile_chunk_offset<kRows>(row, col / 8) +
                                 (col % 8) * 2) = src[e];
  }
}

template <int kN, int kDqk>
__global__ void transposed_wgmma_kernel(const uint16_t* k, const uint16_t* q, const uint16_t* pt,
                                        float* scores, float* products, uint32_t* status) {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
  extern __shared__ uint8_t smem_raw[];
  uint8_t* base = smem_raw + ((1024 - (cuda::smem_u32(smem_raw) & 1023)) & 1023);
  uint8_t* kv = base;                   // [64][kDqk], panels of 8 KiB
  uint8_t* qs = kv + kKeys * kDqk * 2;  // [kN][kDqk], panels of kN x 128 B
  uint8_t* pts = qs + kN * kDqk * 2;    // [kN][64]
  place_rows<kKeys>(kv, k, kDqk);
  place_rows<kN>(qs, q, kDqk);
  place_rows<kN>(pts, pt, kKeys);
  cuda::ptx::fence_proxy_async_shared();
  __syncthreads();

  float s[kN / 2];
  cuda::ptx::wgmma_fence_operands(s);
  cuda::ptx::wgmma_fence();
  cuda::sm90a::issue_transposed_scores<kN, 0, kDqk / 64, true>(cuda::smem_u32(qs),
                                                               cuda::smem_u32(kv), s);
  cuda::ptx::wgmma_commit_group();
  cuda::ptx::wgmma_wait_group<0>();
  cuda::ptx::wgmma_fence_operands(s);

  float o[kValuePanels][kN / 2];
#pragma unroll
  for (int panel = 0; panel < kValuePanels; ++panel) {
#pragma unroll
    for (int i = 0; i < kN / 2; ++i) o[panel][i] = 0.0f;
  }
  cuda::sm90a::fence_outputs<kN>(o);
  cuda::ptx::wgmma_fence();
  cuda::sm90a::issue_transposed_products<kN, 0, kValuePanels>(cuda::smem_u32(kv),
                                                              cuda::smem_u32(pts), o);
  cuda::ptx::wgmma_commit_group();
  cuda::ptx::wgmma_wait_group<0>();
  cuda::sm90a::fence_outputs<kN>(o);

  // The accumulator layout (wgmma.cuh): d[i] at row 16 w + l / 4 + 8 ((i >> 1) & 1), column
  // 8 (i >> 2) + 2 (l % 4) + (i & 1).
  const int t = static_cast<int>(threadIdx.x), warp = t / 32, lane = t % 32;
#pragma unroll
  for (int i = 0; i < kN / 2; ++i) {
    const int row = 16 * warp + lane / 4 + 8 * ((i >> 1) & 1);
    const int col = 8 * (i >> 2) + 2 * (lane % 4) + (i & 1);
    scores[row * kN + col] = s[i];
#pragma unroll
    for (int panel = 0; panel < kValuePanels; ++panel) {
      products[(64 * panel + row) * kN + col] = o[panel][i];
    }
  }
  if (t == 0) *status = kRan;
#else
  if (threadIdx.x == 0) *status = kNoSm90aCode;
#endif
}

struct CudaFree {
  void operator()(void* p) const { cudaFree(p); }
};

template <class T>
cudaError_t device_copy(const std::vector<T>& host, std::unique_ptr<void, CudaFree>* owner,
                        T** device) {
  void* raw = nullptr;
  cudaError_t err = cudaMalloc(&raw, host.size() * sizeof(T) + 4);
  owner->reset(raw);
  if (err != cudaSuccess) return err;
  *device = static_cast<T*>(raw);
  return cudaMemcpy(raw, host.data(), host.size() * sizeof(T), cudaMemcpyHostToDevice);
}

template <int kN, int kDqk>
cudaError_t run(const std::vector<uint16_t>& k, const std::vector<uint16_t>& q,
                const std::vector<uint16_t>& pt, TransposedWgmmaResult* out) {
  std::unique_ptr<void, CudaFree> k_owner, q_owner, pt_owner, out_owner;
  uint16_t *dk = nullptr, *dq = nullptr, *dpt = nullptr;
  cudaError_t err;
  if ((err = device_copy(k, &k_owner, &dk)) != cudaSuccess) return err;
  if ((err = device_copy(q, &q_owner, &dq)) != cudaSuccess) return err;
  if ((err = device_copy(pt, &pt_owner, &dpt)) != cudaSuccess) return err;
  const size_t n_scores = static_cast<size_t>(kKeys) * kN, n_products = 512u * kN;
  void* raw = nullptr;
  err = cudaMalloc(&raw, (n_scores + n_products) * sizeof(float) + sizeof(uint32_t));
  out_owner.reset(raw);
  if (err != cudaSuccess) return err;
  auto* scores = static_cast<float*>(raw);
  float* products = scores + n_scores;
  auto* status = reinterpret_cast<uint32_t*>(products + n_products);
  if ((err = cudaMemset(raw, 0, (n_scores + n_products) * sizeof(float) + 4)) != cudaSuccess) {
    return err;
  }
  const int smem = (kKeys * kDqk + kN * kDqk + kN * kKeys) * 2 + 1024;
  const auto kernel = transposed_wgmma_kernel<kN, kDqk>;
  if ((err = cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, smem)) !=
      cudaSuccess) {
    return err;
  }
  kernel<<<1, 128, smem>>>(dk, dq, dpt, scores, products, status);
  if ((err = cudaGetLastError()) != cudaSuccess) return err;
  uint32_t host_status = 0;
  if ((err = cudaMemcpy(&host_status, status, 4, cudaMemcpyDeviceToHost)) != cudaSuccess) {
    return err;
  }
  if (host_status != kRan && host_status != kNoSm90aCode) return cudaErrorLaunchFailure;
  out->ran = host_status == kRan;
  out->scores.resize(n_scores);
  out->products.resize(n_products);
  if ((err = cudaMemcpy(out->scores.data(), scores, n_scores * sizeof(float),
                        cudaMemcpyDeviceToHost)) != cudaSuccess) {
    return err;
  }
  return cudaMemcpy(out->products.data(), products, n_products * sizeof(float),
                    cudaMemcpyDeviceToHost);
}

}  // namespace

cudaError_t run_transposed_wgmma(int heads, int d_qk, const std::vector<uint16_t>& k,
                                 const std::vector<uint16_t>& q, const std::vector<uint16_t>& pt,
                                 TransposedWgmmaResult* out) {
  *out = {};
  if (heads == 16 && d_qk == 576) return run<16, 576>(k, q, pt, out);
  if (heads == 16 && d_qk == 512) return run<16, 512>(k, q, pt, out);
  if (heads == 32 && d_qk == 576) return run<32, 576>(k, q, pt, out);
  if (heads == 32 && d_qk == 512) return run<32, 512>(k, q, pt, out);
  return cudaErrorInvalidValue;
}

}  // namespace sparse_mla::test_support
