// The reference implementation: SPEC §2 (sparse prefill) and §3 (sparse decode, main and extra
// lists as one softmax) evaluated in double on one thread, written to be read. It is the
// definition of a correct result that every back end and the golden cases are checked against.
// Inputs have passed validation (core/validate.h); invalid index slots are never dereferenced.
#pragma once

#include "core/params.h"
#include "sparse_mla/status.h"

namespace sparse_mla::cpu {

Status reference_sparse_prefill(const detail::PrefillParams& params);
Status reference_sparse_decode(const detail::DecodeParams& params);

}  // namespace sparse_mla::cpu
