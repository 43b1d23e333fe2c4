// SMLA_HOST_DEVICE: marks small inline functions that both the host back ends and the CUDA
// kernels call (schedule arithmetic, list-length clamping), so each rule exists once.
#pragma once

#if defined(__CUDACC__)
#define SMLA_HOST_DEVICE __host__ __device__
#else
#define SMLA_HOST_DEVICE
#endif
