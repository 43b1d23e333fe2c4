// The KV slots a prefill CTA walks for its query token, shared by every prefill kernel (portable
// and Hopper): the valid prefix of the token's index list (detail::effective_topk, the host back
// ends' rule), none at all when the KV tensor has no rows (then `kv` may be null and no copy, not
// even a zero-filling one, may name it), and the blocks of kBlockKeys slots covering it.
#pragma once

#include <cstdint>

#include "core/params.h"

namespace sparse_mla::cuda::prefill {

struct TokenSlots {
  const int32_t* indices;  // [topk] the token's index list
  int64_t n_valid;         // slots [0, n_valid) are read; the rest are never touched
  int num_blocks;          // ceil(n_valid / kBlockKeys)
};

template <int kBlockKeys>
__device__ __forceinline__ TokenSlots token_slots(const detail::PrefillParams& p, int64_t token) {
  const int64_t n_valid = p.problem.s_kv > 0 ? detail::effective_topk(p, token) : 0;
  return {p.indices + token * p.indices_stride_s, n_valid,
          static_cast<int>((n_valid + kBlockKeys - 1) / kBlockKeys)};
}

}  // namespace sparse_mla::cuda::prefill
