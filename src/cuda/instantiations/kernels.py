"""The CUDA back end's kernel table: every kernel configuration the library can build, once.

generate.py turns the rows that a build selects (CMake's SMLA_KERNELS) into one instantiation
unit (.cu) per row and into the registry entry arrays that src/cuda/kernel_tables.cpp dispatches
over (kernel_entries.inc), both under the build folder. A row is a kernel family (its launcher
template and its registry array, FAMILIES below) at one set of template arguments.

To add a family: write its launcher and its registry entry type in C++, add a Family here (what
an instantiation unit and an entry look like), then its rows to KERNELS. A row of arch "sm90a"
compiles for sm_90a only and is built only when SMLA_CUDA_ARCHS holds 90a; a row of arch "sm80"
is portable code, compiled for every architecture of the build.
"""
from __future__ import annotations

import dataclasses
from typing import Callable

# Architectures a row can ask for (Kernel.arch).
ARCHS = ("sm80", "sm90a")

# KvCacheFormat enumerator and kernel-name tag of each decode cache format (kv_cache_format.h).
FORMATS = {
    "v32_fp8": ("kV32Fp8", "v32fp8"),
    "v4_fp8": ("kV4Fp8", "v4fp8"),
    "bf16": ("kBf16", "bf16"),
    "v41_fp8": ("kV41Fp8", "v41fp8"),
}

# Decode formats whose rows run the V4.1 split kernels (v41_kernel.cuh; the warp-specialised tile
# v41_warp_specialized_kernel.cuh): a v41_fp8 main cache with a v41_fp8 or v41_fp4 extra cache,
# either page layout each (runtime arguments of one kernel).
V41_FORMATS = ("v41_fp8",)


@dataclasses.dataclass(frozen=True)
class Kernel:
    """One kernel configuration: a family at one set of template arguments."""

    family: str
    d_qk: int
    rows: int = 0  # head rows per CTA (0: the family's kernel has one tile)
    block_keys: int = 0  # KV slots per block (0: likewise)
    format: str = "bf16"  # KV-cache format (FORMATS); prefill reads a bf16 KV
    warp_specialized: bool = False  # producer warps gather and dequantise (decode)
    arch: str = "sm80"  # ARCHS

    @property
    def group(self) -> str:
        """Family, cache format (decode families) and d_qk: the part of the name tiles share."""
        tag = [FORMATS[self.format][1]] if FAMILIES[self.family].has_format else []
        return "_".join([self.family, *tag, f"d{self.d_qk}"])

    @property
    def name(self) -> str:
        """The group, then the tile: what SMLA_KERNELS globs match."""
        parts = [self.group]
        if self.rows:
            parts.append(f"h{self.rows}")
        if self.block_keys:
            parts.append(f"k{self.block_keys}")
        if self.warp_specialized:
            parts.append("warp_specialized")
        return "_".join(parts)

    @property
    def format_enum(self) -> str:
        return "KvCacheFormat::" + FORMATS[self.format][0]


@dataclasses.dataclass(frozen=True)
class Family:
    """How the rows of one kernel family become C++."""

    has_format: bool  # decode families name the cache format
    # The header an instantiation unit includes (the kernel's definition) and the namespace its
    # explicit instantiations live in.
    kernel_header: Callable[[Kernel], str]
    namespace: str
    # The explicit instantiations of one row, and a one-line description for the unit's comment.
    instantiations: Callable[[Kernel], list[str]]
    describe: Callable[[Kernel], str]
    # The registry: the header that declares the launcher (kernel_entries.inc includes it), the
    # C++ array the family's built rows go to, its element type (src/cuda/kernel_registry.h) and
    # the initializer of one row's element.
    launch_header: str
    registry: str
    entry_type: str
    entry: Callable[[Kernel], str]


def _prefill_args(k: Kernel) -> str:
    return f"{k.d_qk}, {k.rows}, {k.block_keys}"


def _decode_args(k: Kernel) -> str:
    if k.format in V41_FORMATS:
        return f"{k.rows}, {k.block_keys}"
    if k.warp_specialized:
        return f"{k.format_enum}, {k.d_qk}"
    return f"{k.format_enum}, {k.d_qk}, {k.rows}, {k.block_keys}"


def _decode_instantiations(k: Kernel) -> list[str]:
    a = _decode_args(k)
    if k.format in V41_FORMATS:
        v41 = "v41_warp_specialized" if k.warp_specialized else "v41"
        launch = "v41_warp_specialized_decode" if k.warp_specialized else "v41_sparse_decode"
        return [
            f"template int {v41}_decode_smem_bytes<{a}>();",
            f"template int {v41}_decode_ctas_per_sm<{a}>();",
            f"template Status launch_{launch}<{a}>(",
            "    const DecodeLaunch&, cudaStream_t);",
        ]
    if k.warp_specialized:
        return [
            f"template int warp_specialized_decode_smem_bytes<{a}>();",
            f"template int warp_specialized_decode_ctas_per_sm<{a}>();",
            f"template Status launch_warp_specialized_decode<{a}>(",
            "    const DecodeLaunch&, cudaStream_t);",
        ]
    return [
        f"template int decode_smem_bytes<{a}>();",
        f"template int decode_ctas_per_sm<{a}>();",
        f"template int decode_pair_clusters<{a}>();",
        f"template Status launch_portable_sparse_decode<{a}>(",
        "    const DecodeLaunch&, cudaStream_t);",
    ]


def _decode_entry(k: Kernel) -> str:
    a = _decode_args(k)
    tile = (
        f'{{"{k.name}", "{k.family}", {k.format_enum}, {k.d_qk}, {k.rows}, {k.block_keys}, '
        f"{'true' if k.warp_specialized else 'false'}}}"
    )
    pd = "portable_decode::"
    if k.format in V41_FORMATS:
        v41 = "v41_warp_specialized" if k.warp_specialized else "v41"
        launch = "v41_warp_specialized_decode" if k.warp_specialized else "v41_sparse_decode"
        fns = [
            f"{pd}launch_{launch}<{a}>",
            f"{pd}{v41}_decode_smem_bytes<{a}>",
            f"{pd}{v41}_decode_ctas_per_sm<{a}>",
            "no_pair_clusters",
        ]
    elif k.warp_specialized:
        fns = [
            f"{pd}launch_warp_specialized_decode<{a}>",
            f"{pd}warp_specialized_decode_smem_bytes<{a}>",
            f"{pd}warp_specialized_decode_ctas_per_sm<{a}>",
            "no_pair_clusters",
        ]
    else:
        fns = [
            f"{pd}launch_portable_sparse_decode<{a}>",
            f"{pd}decode_smem_bytes<{a}>",
            f"{pd}decode_ctas_per_sm<{a}>",
            f"{pd}decode_pair_clusters<{a}>",
        ]
    return f"{{{tile}, {', '.join(fns)}}}"


FAMILIES: dict[str, Family] = {
    "portable_sparse_prefill": Family(
        has_format=False,
        kernel_header=lambda k: "cuda/portable/sparse_prefill/kernel.cuh",
        namespace="sparse_mla::cuda::portable_prefill",
        instantiations=lambda k: [
            f"template int prefill_smem_bytes<{_prefill_args(k)}>();",
            f"template Status launch_portable_sparse_prefill<{_prefill_args(k)}>(",
            "    const detail::PrefillParams&, cudaStream_t);",
        ],
        describe=lambda k: (
            f"Portable sparse prefill, d_qk {k.d_qk}, {k.rows} head rows per CTA, "
            f"{k.block_keys} keys per block."
        ),
        launch_header="cuda/portable/sparse_prefill/launch.h",
        registry="kPortablePrefillEntries",
        entry_type="PrefillEntry",
        entry=lambda k: (
            f'{{"{k.name}", {k.d_qk}, {k.rows}, {k.block_keys}, '
            f"portable_prefill::launch_portable_sparse_prefill<{_prefill_args(k)}>, "
            f"portable_prefill::prefill_smem_bytes<{_prefill_args(k)}>}}"
        ),
    ),
    "portable_sparse_decode": Family(
        has_format=True,
        kernel_header=lambda k: (
            "cuda/portable/sparse_decode/v41_warp_specialized_kernel.cuh"
            if k.format in V41_FORMATS and k.warp_specialized
            else "cuda/portable/sparse_decode/v41_kernel.cuh"
            if k.format in V41_FORMATS
            else "cuda/portable/sparse_decode/warp_specialized_kernel.cuh"
            if k.warp_specialized
            else "cuda/portable/sparse_decode/kernel.cuh"
        ),
        namespace="sparse_mla::cuda::portable_decode",
        instantiations=_decode_instantiations,
        describe=lambda k: (
            f"{'Warp-specialised' if k.warp_specialized else 'Portable'} sparse decode split "
            f"kernel, {k.format} cache"
            f"{' (extra cache v41_fp8 or v41_fp4, either layout)' if k.format in V41_FORMATS else ''}"
            f", d_qk {k.d_qk}, {k.rows} head rows per CTA, {k.block_keys} keys per block."
        ),
        launch_header="cuda/portable/sparse_decode/launch.h",
        registry="kPortableDecodeEntries",
        entry_type="DecodeEntry",
        entry=_decode_entry,
    ),
    "sm90a_sparse_prefill": Family(
        has_format=False,
        kernel_header=lambda k: "cuda/sm90a/sparse_prefill/launch.cuh",
        namespace="sparse_mla::cuda::sm90a_prefill",
        instantiations=lambda k: [
            f"template int sm90a_prefill_smem_bytes<{k.d_qk}>();",
            f"template Status launch_sm90a_sparse_prefill<{k.d_qk}>(",
            "    const detail::PrefillParams&, cudaStream_t);",
        ],
        describe=lambda k: (
            f"Hopper (sm_90a) sparse prefill, d_qk {k.d_qk}: 64 head rows per CTA, 64-key blocks, "
            "wgmma consumers and a cp.async producer warpgroup."
        ),
        launch_header="cuda/sm90a/sparse_prefill/launch.h",
        registry="kSm90aPrefillEntries",
        entry_type="Sm90aPrefillEntry",
        entry=lambda k: (
            f'{{"{k.name}", {k.d_qk}, sm90a_prefill::launch_sm90a_sparse_prefill<{k.d_qk}>, '
            f"sm90a_prefill::sm90a_prefill_smem_bytes<{k.d_qk}>}}"
        ),
    ),
    "sm90a_sparse_decode": Family(
        has_format=True,
        kernel_header=lambda k: "cuda/sm90a/sparse_decode/kernel.cuh",
        namespace="sparse_mla::cuda::sm90a_decode",
        instantiations=lambda k: [
            f"template int sm90a_decode_smem_bytes<{k.format_enum}, {k.d_qk}>();",
            f"template Status launch_sm90a_sparse_decode<{k.format_enum}, {k.d_qk}>(",
            "    const decode::DecodeLaunch&, cudaStream_t);",
        ],
        describe=lambda k: (
            f"Hopper (sm_90a) sparse decode, {k.format} cache, d_qk {k.d_qk}: 64 head rows per "
            "CTA, 64-key blocks, a producer warpgroup that copies the cache's rows and wgmma "
            "consumers"
            + (" that dequantise them in place." if k.format != "bf16" else ".")
        ),
        launch_header="cuda/sm90a/sparse_decode/launch.h",
        registry="kSm90aDecodeEntries",
        entry_type="Sm90aDecodeEntry",
        entry=lambda k: (
            f'{{"{k.name}", {k.format_enum}, {k.d_qk}, '
            f"sm90a_decode::launch_sm90a_sparse_decode<{k.format_enum}, {k.d_qk}>, "
            f"sm90a_decode::sm90a_decode_smem_bytes<{k.format_enum}, {k.d_qk}>}}"
        ),
    ),
}

# Head rows per CTA: 16 (h_q <= 16), 32 (h_q <= 32), 64 (everything above, in groups of 64).
ROWS = (16, 32, 64)

# Keys per KV block: 64 (standard) and 32 (compact). Prefill runs the compact tiles only where the
# standard ones do not fit the device's shared memory (sm_80 / sm_86 / sm_89); decode runs them at
# 16 head rows (more CTAs per SM) and where the standard ones do not fit (cuda/tile_choice.h).
BLOCK_KEYS = (64, 32)

KERNELS: list[Kernel] = (
    [
        Kernel("portable_sparse_prefill", d_qk=dqk, rows=rows, block_keys=keys)
        for dqk in (576, 512)
        for rows in ROWS
        for keys in BLOCK_KEYS
    ]
    + [
        Kernel("portable_sparse_decode", format=fmt, d_qk=dqk, rows=rows, block_keys=keys)
        for fmt, dqk in (("v32_fp8", 576), ("v4_fp8", 512), ("bf16", 576), ("bf16", 512))
        for rows in ROWS
        for keys in BLOCK_KEYS
    ]
    # The V4.1 split kernel: every tile of the split kernel (its warp-specialised 16 x 32 tile is
    # with the other formats' below).
    + [
        Kernel("portable_sparse_decode", format="v41_fp8", d_qk=512, rows=rows, block_keys=keys)
        for rows in ROWS
        for keys in BLOCK_KEYS
    ]
    # The warp-specialised 16-row x 32-key decode tile, quantized caches only (a bf16 cache has no
    # conversion to move into producer warps). Chosen through, and falling back to, the split
    # kernel's 16 x 32 tile of the same format (its twin), so selecting it selects the twin too.
    + [
        Kernel(
            "portable_sparse_decode",
            format=fmt,
            d_qk=dqk,
            rows=16,
            block_keys=32,
            warp_specialized=True,
        )
        for fmt, dqk in (("v32_fp8", 576), ("v4_fp8", 512), ("v41_fp8", 512))
    ]
    # The Hopper prefill: one tile (64 head rows, 64-key blocks) per d_qk, sm_90a code only.
    + [Kernel("sm90a_sparse_prefill", d_qk=dqk, arch="sm90a") for dqk in (576, 512)]
    # The Hopper decode: one kernel per cache format and d_qk (V4.1's records run the portable
    # kernels), sm_90a code only.
    + [
        Kernel("sm90a_sparse_decode", format=fmt, d_qk=dqk, arch="sm90a")
        for fmt, dqk in (("v32_fp8", 576), ("v4_fp8", 512), ("bf16", 576), ("bf16", 512))
    ]
)

# SMLA_KERNELS presets: a name that stands for the rows its predicate accepts.
PRESETS: dict[str, tuple[str, Callable[[Kernel], bool]]] = {
    "all": ("every kernel configuration", lambda k: True),
    # DeepSeek V4 attends with d_qk 512: the v4_fp8, V4.1 and bf16 caches in decode, prefill at
    # 512.
    "deepseek-v4": ("d_qk 512 only (DeepSeek V4 and V4.1)", lambda k: k.d_qk == 512),
    # DeepSeek V4.1 only: its decode caches and the d_qk 512 prefill.
    "deepseek-v4.1": (
        "DeepSeek V4.1: the V4.1 decode kernels and the d_qk 512 prefill",
        lambda k: k.d_qk == 512 and (k.format in V41_FORMATS or not FAMILIES[k.family].has_format),
    ),
}
