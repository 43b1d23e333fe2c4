// sparse-mla: sparse MLA prefill and paged-FP8 sparse MLA decode for DeepSeek V3.2 / V4.
// The one header to include. See README.md and docs/design.md.
#pragma once

#include "sparse_mla/backend.h"
#include "sparse_mla/dtype.h"
#include "sparse_mla/kernel_registry.h"
#include "sparse_mla/kv_cache_codec.h"
#include "sparse_mla/kv_cache_format.h"
#include "sparse_mla/runtime.h"
#include "sparse_mla/sparse_decode.h"
#include "sparse_mla/sparse_prefill.h"
#include "sparse_mla/status.h"
#include "sparse_mla/tensor_view.h"
#include "sparse_mla/version.h"
