// Host-side launcher of the portable sparse prefill kernel, one explicit instantiation per
// (d_qk, head rows, keys per block): a row of the kernel table
// (src/cuda/instantiations/kernels.py), whose generated units alone include kernel.cuh.
#pragma once

#include <cuda_runtime.h>

#include "core/params.h"
#include "sparse_mla/status.h"

namespace sparse_mla::cuda::portable_prefill {

// Head rows per CTA for h_q heads: 16, 32 or 64 (h_q > 64 uses ceil(h_q / 64) CTAs per token).
inline int prefill_rows_for(int64_t h_q) { return h_q <= 16 ? 16 : (h_q <= 32 ? 32 : 64); }

// Dynamic shared memory the (d_qk, rows, keys) instantiation needs.
template <int kDqk, int kRows, int kBlockKeys>
int prefill_smem_bytes();

// Launches on `stream`; p is validated (core/validate). No host synchronisation.
template <int kDqk, int kRows, int kBlockKeys>
Status launch_portable_sparse_prefill(const detail::PrefillParams& p, cudaStream_t stream);

}  // namespace sparse_mla::cuda::portable_prefill
