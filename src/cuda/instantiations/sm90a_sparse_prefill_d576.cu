// Hopper sparse prefill, d_qk 576 (compiled for sm_90a only: cmake/cuda.cmake).
#include "cuda/sm90a/sparse_prefill/kernel.cuh"

namespace sparse_mla::cuda::sm90a_prefill {
template int sm90a_prefill_smem_bytes<576>();
template Status launch_sm90a_sparse_prefill<576>(const detail::PrefillParams&, cudaStream_t);
}  // namespace sparse_mla::cuda::sm90a_prefill
