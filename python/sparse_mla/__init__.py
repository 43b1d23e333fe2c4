"""sparse-mla: sparse MLA prefill and paged sparse MLA decode for DeepSeek V3.2 / V4 / V4.1.

The operations run on the device of their tensors: CPU tensors on the library's CPU back end,
CUDA tensors on its CUDA back end, on torch's current CUDA stream. They are torch operators
(``torch.ops.sparse_mla.*``) with fake implementations, so they work under ``torch.compile`` and
inside CUDA graphs.

- :func:`sparse_prefill` — SPEC §2: bf16 KV, one top-k index list per query token.
- :func:`plan_decode`, :func:`sparse_decode` — SPEC §3: paged KV cache (``v32_fp8``, ``v4_fp8``,
  ``v41_fp8``, ``v41_fp4`` or ``bf16``; V4.1 records in either page layout, ``kv_layout``),
  optionally a second ("extra") cache in the same softmax.
- :func:`quantize_kv_cache`, :func:`dequantize_kv_cache`, :func:`empty_kv_cache` — SPEC §4 byte
  layouts; :func:`write_kv_cache` — an engine's per-step cache writer (CUDA-graph safe).
- :mod:`sparse_mla.reference` — the definitions in plain torch (float64), for tests.
- :mod:`sparse_mla.flash_mla` — FlashMLA's Python API on top of this library.
"""

from __future__ import annotations

import os

import torch

__version__ = "0.1.0"


def _load_extension() -> None:
    """Loads the compiled operators (``_sparse_mla_ops.so`` next to this file) into torch."""
    path = os.path.join(os.path.dirname(os.path.abspath(__file__)), "_sparse_mla_ops.so")
    if not os.path.exists(path):
        raise ImportError(
            f"sparse_mla: the compiled extension {path} is missing; install the package with "
            "`pip install --no-build-isolation .` from the repository root"
        )
    torch.ops.load_library(path)


_load_extension()

from sparse_mla.kv_cache import (  # noqa: E402  (needs the extension loaded)
    KV_CACHE_FORMATS,
    KV_LAYOUTS,
    KvCacheFormat,
    dequantize_kv_cache,
    empty_kv_cache,
    infer_kv_cache_format,
    kv_cache_block_stride,
    kv_cache_format,
    quantize_kv_cache,
    write_kv_cache,
)
from sparse_mla.ops import DecodePlan, plan_decode, sparse_decode, sparse_prefill  # noqa: E402

__all__ = [
    "KV_CACHE_FORMATS",
    "KV_LAYOUTS",
    "DecodePlan",
    "KvCacheFormat",
    "dequantize_kv_cache",
    "empty_kv_cache",
    "infer_kv_cache_format",
    "kv_cache_block_stride",
    "kv_cache_format",
    "plan_decode",
    "quantize_kv_cache",
    "sparse_decode",
    "sparse_prefill",
    "write_kv_cache",
]
