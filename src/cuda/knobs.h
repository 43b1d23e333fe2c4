// The CUDA back end's tuning and testing knobs, read from the environment once per process
// (core/env_knob.h parses them). tests/cpp/CMakeLists.txt runs the GPU tests with each setting;
// the A/B scripts use them to compare launches with one binary.
//   SMLA_PREFILL_BLOCK_KEYS      32 | 64  keys per KV block of the prefill tile (tile_choice.h)
//   SMLA_DECODE_BLOCK_KEYS       32 | 64  the same for the decode tile
//   SMLA_PREFILL_SM90A           0 | 1    the Hopper prefill kernel on sm_90 devices (default 1;
//                                         0 runs the portable one there; kernel_tables.cpp)
//   SMLA_PREFILL_SM90A_CTAS      1..2^20  caps the Hopper prefill's persistent grid (one CTA per
//                                         SM by default), so that small tests walk several work
//                                         items per CTA (sm90a/sparse_prefill/kernel.cuh)
//   SMLA_PREFILL_SM90A_HEADS_IN_N 0 | 1   the Hopper prefill with the heads in the wgmma N
//                                         dimension: 1 at 1..32 heads, 0 never (the seesaw, its
//                                         64-row tile padded); unset, at 1..16 heads
//                                         (sm90a/sparse_prefill/launch.cuh)
//   SMLA_DECODE_SM90A            0 | 1    the Hopper decode kernel on sm_90 devices: 1 runs it
//                                         wherever it can, 0 never; unset, where its launch has
//                                         enough work (sm90a_decode_by_default,
//                                         decode_launch_policy.h; kernel_tables.cpp)
//   SMLA_DECODE_INDEX_UNION      0 | 1    1: the Hopper decode over the union of each request's
//                                         draft tokens' lists wherever it fits; 0 or unset never
//                                         (index_union_chosen, decode_launch_policy.h). A token
//                                         multiplies the V rows of the others' keys by 0: a row
//                                         holding Inf or NaN makes every token of the request NaN
//                                         (docs/kernels/index_union.md)
//   SMLA_DECODE_PAIR_HEAD_GROUPS 0 | 1    2-CTA clusters for 65..128 heads
//                                         (decode_launch_policy.cpp)
//   SMLA_DECODE_WARP_SPECIALIZED 0 | 1    producer warps in the 16-row FP8 decode tile
//                                         (decode_launch_policy.cpp; default 1)
//   SMLA_COMBINE_COLUMN_SLICES   1 | 4    warps per head in the split combine (split_combine.cu)
//   SMLA_COMBINE_PIECE_GROUPS    1 | 8    warps that share a query's pieces per column slice of
//                                         the split combine (8 implies 4 slices; split_combine.cu)
//   SMLA_DECODE_NUM_PARTS        1..2^20  parts of an unpaired decode launch, the Hopper
//                                         decode's too, on the plain cost line
//                                         (decode_launch_policy.cpp, kernel_tables.cpp)
//   SMLA_DEVICE_SMEM_OPTIN       1..2^30  caps the shared memory per block that the tile choice
//                                         sees (kernel_tables.cpp): a larger GPU then runs the
//                                         tiles of a smaller one, e.g. 166912 (A100) or 101376
//                                         (sm_86 / sm_89: L40, RTX) on an H200
// A bad setting fails every CUDA call with a message naming the variable, its value and the
// choices (kernel_tables.cpp checks `error` before choosing a kernel), so no launch runs with a
// knob the user mistyped.
#pragma once

#include <string>

#include "core/env_knob.h"

namespace sparse_mla::cuda {

struct CudaKnobs {
  detail::EnvKnob prefill_block_keys;
  detail::EnvKnob prefill_sm90a;
  detail::EnvKnob prefill_sm90a_ctas;
  detail::EnvKnob prefill_sm90a_heads_in_n;
  detail::EnvKnob decode_block_keys;
  detail::EnvKnob decode_sm90a;
  detail::EnvKnob decode_index_union;
  detail::EnvKnob decode_pair_head_groups;
  detail::EnvKnob decode_warp_specialized;
  detail::EnvKnob combine_column_slices;
  detail::EnvKnob combine_piece_groups;
  detail::EnvKnob decode_num_parts;
  detail::EnvKnob device_smem_optin;
  std::string error;  // the first bad setting's message, or "" when every knob is valid
};

const CudaKnobs& cuda_knobs();

}  // namespace sparse_mla::cuda
