// Host-side launcher of the Hopper (sm_90a) FP8 sparse decode kernel, one explicit instantiation
// per cache format in src/cuda/instantiations/ (compiled for sm_90a only). Only those units
// include kernel.cuh. Same launch inputs (DecodeLaunch: schedule, workspace) as the portable
// split kernels; never paired; grid (num_parts, ceil(h_q / 64)).
#pragma once

#include <cuda_runtime.h>

#include "cuda/decode/launch.h"
#include "sparse_mla/kv_cache_format.h"
#include "sparse_mla/status.h"

namespace sparse_mla::cuda::sm90a_decode {

// Dynamic shared memory of the instantiation (the seesaw's plan plus 1 KiB of alignment slack).
template <KvCacheFormat kFormat, int kDqk>
int sm90a_decode_smem_bytes();

// Launches on `stream`; launch.p is validated (core/validate) and the caller has checked that the
// device is sm_90 and runs this library's sm_90a code.
template <KvCacheFormat kFormat, int kDqk>
Status launch_sm90a_sparse_decode(const decode::DecodeLaunch& launch, cudaStream_t stream);

}  // namespace sparse_mla::cuda::sm90a_decode
