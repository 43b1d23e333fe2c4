// The launch configuration of a paired decode launch (the two head groups of 65..128 heads as the
// two CTAs of a 2-CTA cluster that share each block's gather and dequantisation): grid
// (num_parts, 2), clusters of (1, 2, 1), so cluster rank = blockIdx.y = the head group. The
// portable split kernel and the Hopper decode launch through it.
#pragma once

#include <cuda_runtime.h>

namespace sparse_mla::cuda {

// `cluster` is the attribute storage the returned config points to.
inline cudaLaunchConfig_t pair_launch_config(int num_parts, int threads, int smem,
                                             cudaStream_t stream, cudaLaunchAttribute* cluster) {
  cluster->id = cudaLaunchAttributeClusterDimension;
  cluster->val.clusterDim.x = 1;
  cluster->val.clusterDim.y = 2;
  cluster->val.clusterDim.z = 1;
  cudaLaunchConfig_t config = {};
  config.gridDim = dim3(static_cast<unsigned>(num_parts), 2);
  config.blockDim = dim3(static_cast<unsigned>(threads));
  config.dynamicSmemBytes = static_cast<size_t>(smem);
  config.stream = stream;
  config.attrs = cluster;
  config.numAttrs = 1;
  return config;
}

}  // namespace sparse_mla::cuda
