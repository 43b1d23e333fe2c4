// Argument validation (SPEC §6): every public entry point checks ranks, dtypes, shapes,
// devices, strides and alignment here, before any back end runs, and turns the arguments into
// the pointer-level params of params.h. Messages name the argument and the value, e.g.
//   "sparse_prefill: q.sizes[1] (h_q) = 129 is out of range [1, 128]".
#pragma once

#include "core/params.h"
#include "sparse_mla/kv_cache_format.h"
#include "sparse_mla/status.h"

namespace sparse_mla::detail {

inline constexpr int64_t kMaxHeads = 128;
inline constexpr int kValueDim = 512;  // d_v of every supported model

Status validate_prefill(const SparsePrefillArgs& args, PrefillParams* params);
Status validate_decode(const SparseDecodeArgs& args, DecodeParams* params);

// Checks a problem handed to plan_sparse_decode directly (it need not come from
// describe_sparse_decode): every size in range, a known format, consistent extra-cache fields.
Status validate_decode_problem(const SparseDecodeProblem& problem);

// True if every byte offset of `t` (element offsets sum(index * stride), times element_bytes)
// fits an int64, so that no back end's offset arithmetic overflows; false for negative sizes or
// strides or a rank outside [0, 4]. An empty view addresses nothing and fits.
bool offsets_fit_int64(const TensorView& t, size_t element_bytes);

// Checks one cache view on its own (used by decode validation and the codec).
// `what` names the argument in messages ("kv_cache", "extra_kv_cache", "cache").
Status validate_kv_cache_view(const char* op, const char* what, const KvCacheView& cache);

}  // namespace sparse_mla::detail
