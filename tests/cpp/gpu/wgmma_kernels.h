// Host side of the transposed wgmma checks (wgmma_kernels.cu): the heads-in-N kernels' two MMA
// steps (sm90a/heads_in_n/consumers.cuh), run by one warpgroup on tiles laid out as
// the kernel lays them out, against the same products on the host. Compiled only into CUDA builds
// of sparse_mla_gpu_tests.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>
#include <vector>

namespace sparse_mla::test_support {

struct TransposedWgmmaResult {
  // False when the kernel ran code built without sm_90a (the wgmma helpers trap there); then
  // nothing was computed.
  bool ran = false;
  std::vector<float> scores;    // [64 keys][heads]: S^T = K Q^T over d_qk
  std::vector<float> products;  // [512 dims][heads]: O^T = V^T P^T over the 64 keys
};

// heads: 16 or 32 (the N of the wgmma); d_qk: 576 or 512. k: [64 keys][d_qk] bf16 bits (its
// first 512 dims are V), q: [heads][d_qk], pt: [heads][64 keys]. Each tile goes into shared memory
// as 128-B swizzled panels of 64 elements (the kernel's layout: the K tile's panels 8 KiB apart,
// Q's heads x 128 B apart, P^T one panel), then issue_transposed_scores and
// issue_transposed_products run and every thread writes its accumulators at the (row, column)
// the accumulator layout gives them.
cudaError_t run_transposed_wgmma(int heads, int d_qk, const std::vector<uint16_t>& k,
                                 const std::vector<uint16_t>& q, const std::vector<uint16_t>& pt,
                                 TransposedWgmmaResult* out);

}  // namespace sparse_mla::test_support
