// Argument validation (SPEC §6): every public entry point checks ranks, dtypes, shapes,
// devices, strides and alignment here, before any back end runs, and turns the arguments into
// the pointer-level params of params.h. Messages name the argument and the value, e.g.
//   "sparse_prefill: q.sizes[1] (h_q) = 129 is out of range [1, 128]".
#pragma once

#include <cstdint>

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
// The problem with its layouts resolved (never kDefault) and extra_format set iff has_extra:
// the form plans hold and validate_decode produces.
SparseDecodeProblem normalized_decode_problem(const SparseDecodeProblem& problem);
// Which extra-cache formats go with a main cache format (SPEC §3), and the rule in words.
bool extra_format_allowed(KvCacheFormat main, KvCacheFormat extra);
const char* extra_format_rule(KvCacheFormat main);
// The same for a prefill problem (what validate_prefill checks on shapes): `op` names the caller.
Status validate_prefill_problem(const char* op, const SparsePrefillProblem& problem);

// True if every byte offset of `t` (element offsets sum(index * stride), times element_bytes)
// fits an int64, so that no back end's offset arithmetic overflows; false for negative sizes or
// strides or a rank outside [0, 4]. An empty view addresses nothing and fits.
bool offsets_fit_int64(const TensorView& t, size_t element_bytes);

// True if no two index tuples of `t` address the same element, judged the way every strided
// layout torch makes passes: with the dimensions of size > 1 ordered by stride, each stride is at
// least the span (largest offset + 1) of the dimensions before it. Interleavings that pass no
// such ordering (sizes [3, 2], strides [2, 3]) are refused although their elements are distinct.
bool views_distinct_elements(const TensorView& t);

// The bytes a validated view or cache can touch: [begin, end), empty (begin == end) for an empty
// view. A cache spans its blocks' first bytes to the last block's minimal length.
struct ByteRange {
  uintptr_t begin = 0, end = 0;
  bool empty() const { return begin == end; }
  bool overlaps(const ByteRange& o) const {
    return !empty() && !o.empty() && begin < o.end && o.begin < end;
  }
};
ByteRange byte_range(const TensorView& t);
ByteRange byte_range(const KvCacheView& cache);

// Refuses outputs whose bytes overlap an input's or another output's (an `out` aliasing `q`
// would be read after the kernel wrote it). Judged on address ranges: outputs interleaved with
// other tensors inside one range are refused although their elements may be distinct. Checked by
// the calls that write (sparse_prefill, sparse_decode), after validate_prefill / validate_decode.
Status validate_no_aliasing(const SparsePrefillArgs& args);
Status validate_no_aliasing(const SparseDecodeArgs& args);

// Checks RunOptions: a back end this build knows, num_threads >= 0.
Status validate_run_options(const char* op, const RunOptions& options);

// Checks one cache view on its own (used by decode validation and the codec).
// `what` names the argument in messages ("kv_cache", "extra_kv_cache", "cache").
Status validate_kv_cache_view(const char* op, const char* what, const KvCacheView& cache);

}  // namespace sparse_mla::detail
