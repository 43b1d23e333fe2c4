#include "cuda/knobs.h"

namespace sparse_mla::cuda {

const CudaKnobs& cuda_knobs() {
  static const CudaKnobs knobs = [] {
    using detail::read_env_knob;
    CudaKnobs k;
    k.prefill_block_keys = read_env_knob("SMLA_PREFILL_BLOCK_KEYS", {32, 64});
    k.prefill_sm90a = read_env_knob("SMLA_PREFILL_SM90A", {0, 1});
    k.prefill_sm90a_ctas = detail::read_env_knob_in_range("SMLA_PREFILL_SM90A_CTAS", 1, 1 << 20);
    k.prefill_sm90a_heads_in_n = read_env_knob("SMLA_PREFILL_SM90A_HEADS_IN_N", {0, 1});
    k.decode_block_keys = read_env_knob("SMLA_DECODE_BLOCK_KEYS", {32, 64});
    k.decode_sm90a = read_env_knob("SMLA_DECODE_SM90A", {0, 1});
    k.decode_index_union = read_env_knob("SMLA_DECODE_INDEX_UNION", {0, 1});
    k.decode_pair_head_groups = read_env_knob("SMLA_DECODE_PAIR_HEAD_GROUPS", {0, 1});
    k.decode_warp_specialized = read_env_knob("SMLA_DECODE_WARP_SPECIALIZED", {0, 1});
    k.combine_column_slices = read_env_knob("SMLA_COMBINE_COLUMN_SLICES", {1, 4});
    k.combine_piece_groups = read_env_knob("SMLA_COMBINE_PIECE_GROUPS", {1, 8});
    k.decode_num_parts = detail::read_env_knob_in_range("SMLA_DECODE_NUM_PARTS", 1, 1 << 20);
    k.device_smem_optin = detail::read_env_knob_in_range("SMLA_DEVICE_SMEM_OPTIN", 1, 1 << 30);
    for (const detail::EnvKnob* knob :
         {&k.prefill_block_keys, &k.prefill_sm90a, &k.prefill_sm90a_ctas,
          &k.prefill_sm90a_heads_in_n, &k.decode_block_keys, &k.decode_sm90a, &k.decode_index_union,
          &k.decode_pair_head_groups, &k.decode_warp_specialized, &k.combine_column_slices,
          &k.combine_piece_groups, &k.decode_num_parts, &k.device_smem_optin}) {
      if (k.error.empty()) k.error = knob->error;
    }
    return k;
  }();
  return knobs;
}

}  // namespace sparse_mla::cuda
