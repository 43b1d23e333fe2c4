// The Hopper prefill's launcher (launch.h), one explicit instantiation per d_qk in
// src/cuda/instantiations/ (sm_90a only): the heads-in-N prefill (heads_in_n_kernel.cuh) at 1..16
// heads, or with SMLA_PREFILL_SM90A_HEADS_IN_N=1 at 1..32 (=0: never), else the seesaw prefill
// (kernel.cuh).
#pragma once

#include <cuda_runtime.h>

#include <cstdint>
#include <optional>

#include "cuda/knobs.h"
#include "cuda/sm90a/sparse_prefill/heads_in_n_kernel.cuh"
#include "cuda/sm90a/sparse_prefill/kernel.cuh"
#include "cuda/sm90a/sparse_prefill/launch.h"

namespace sparse_mla::cuda::sm90a_prefill {

// The seesaw's plan is the larger (sm90a/heads_in_n/config.cuh asserts it), so it sizes the
// instantiation's shared memory.
template <int kDqk>
int sm90a_prefill_smem_bytes() {
  return kSeesawPrefillSmemBytes<kDqk>;
}

// Heads the heads-in-N prefill takes by default: 16 (N 16). Measured on an H100
// (benchmarks/results/heads-in-n-h100-2026-12-07/, s_q 4096, s_kv 64K): 0.90-0.93x the seesaw's
// time at 8 and 16 heads (d512 topk 1024 906 / 927 us against 1005 / 1035, d576 topk 2048
// 2008 / 2039 against 2165 / 2196), 0.99-1.02x at 32 heads (N 32), so 17..32 heads keep the seesaw.
inline constexpr int64_t kHeadsInNPrefillDefaultMaxHeads = 16;

template <int kDqk>
Status launch_sm90a_sparse_prefill(const detail::PrefillParams& p, cudaStream_t stream) {
  const std::optional<int>& knob = cuda_knobs().prefill_sm90a_heads_in_n.value;
  const int64_t max_heads = knob ? (*knob == 1 ? 32 : 0) : kHeadsInNPrefillDefaultMaxHeads;
  if (p.problem.h_q <= max_heads) {
    return prefill_heads_in_n_for(p.problem.h_q) == 16
               ? launch_heads_in_n_prefill<kDqk, 16>(p, stream)
               : launch_heads_in_n_prefill<kDqk, 32>(p, stream);
  }
  return launch_seesaw_prefill<kDqk>(p, stream);
}

}  // namespace sparse_mla::cuda::sm90a_prefill
