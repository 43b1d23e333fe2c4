#!/usr/bin/env python3
"""Tests of the kernel table and its generator (src/cuda/instantiations/kernels.py, generate.py).

What a build selects with SMLA_KERNELS (presets, globs, errors), which rows SMLA_CUDA_ARCHS can
build, and the files written: one unit per built row, registry arrays sized to match, and the
absent rows with a rebuild hint. Runs without CUDA (ctest label cpu: kernel_table).
"""
import pathlib
import re
import sys
import tempfile
import unittest

ROOT = pathlib.Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "src" / "cuda" / "instantiations"))

import generate  # noqa: E402
from kernels import FAMILIES, KERNELS, Kernel  # noqa: E402


def names(sel):
    return [k.name for k in sel.built]


class Table(unittest.TestCase):
    def test_names_are_unique_and_match_their_fields(self):
        seen = set()
        for k in KERNELS:
            self.assertNotIn(k.name, seen)
            seen.add(k.name)
            self.assertTrue(k.name.startswith(k.group))
            self.assertIn(f"_d{k.d_qk}", k.name)
            if k.rows:
                self.assertIn(f"_h{k.rows}_k{k.block_keys}", k.name)

    def test_every_configuration_of_the_cuda_back_end(self):
        self.assertEqual(len(KERNELS), 51)
        hopper = [k for k in KERNELS if k.arch == "sm90a"]
        self.assertEqual(sorted(k.name for k in hopper),
                         ["sm90a_sparse_decode_bf16_d512", "sm90a_sparse_decode_bf16_d576",
                          "sm90a_sparse_decode_v32fp8_d576", "sm90a_sparse_decode_v4fp8_d512",
                          "sm90a_sparse_prefill_d512", "sm90a_sparse_prefill_d576"])
        prefill = [k for k in KERNELS if k.family == "portable_sparse_prefill"]
        decode = [k for k in KERNELS if k.family == "portable_sparse_decode"]
        self.assertEqual(len(prefill), 12)  # d_qk 576 / 512 x rows 16 / 32 / 64 x keys 64 / 32
        self.assertEqual(len(decode), 33)  # 5 (format, d_qk) x 6 tiles + 3 warp-specialised
        self.assertEqual(
            sorted(k.name for k in decode if k.warp_specialized),
            [
                "portable_sparse_decode_v32fp8_d576_h16_k32_warp_specialized",
                "portable_sparse_decode_v41fp8_d512_h16_k32_warp_specialized",
                "portable_sparse_decode_v4fp8_d512_h16_k32_warp_specialized",
            ],
        )
        # The decode variants' names (src/cuda/kernel_tables.cpp) prefix their tiles' names.
        for variant in ("v32fp8", "v4fp8", "bf16", "v41fp8"):
            prefix = f"portable_sparse_decode_{variant}_"
            self.assertTrue(any(k.name.startswith(prefix) for k in decode))

    def test_every_row_names_a_family(self):
        for k in KERNELS:
            self.assertIn(k.family, FAMILIES)


class Select(unittest.TestCase):
    def test_all(self):
        sel = generate.select("all", "80;90a")
        self.assertEqual(names(sel), [k.name for k in KERNELS])
        self.assertEqual(sel.absent, [])

    def test_deepseek_v4_is_d_qk_512_only(self):
        sel = generate.select("deepseek-v4", "90a")
        # prefill 6 + sm90a 1, v4_fp8 6 + 1 + sm90a 1, bf16 d512 6 + sm90a 1, v41_fp8 6 + 1
        self.assertEqual(len(sel.built), 29)
        self.assertTrue(all(k.d_qk == 512 for k in sel.built))
        self.assertEqual({k.format for k in sel.built}, {"v4_fp8", "bf16", "v41_fp8"})
        self.assertIn("portable_sparse_decode_v4fp8_d512_h16_k32_warp_specialized", names(sel))
        self.assertEqual(len(sel.absent), 22)
        for k, why in sel.absent:
            self.assertNotEqual(k.d_qk, 512)
            self.assertIn("SMLA_KERNELS=deepseek-v4 does not select", why)
            self.assertIn(f"-DSMLA_KERNELS='deepseek-v4,{generate.group_glob(k)}'", why)

    def test_deepseek_v41_is_its_decode_and_the_d512_prefill(self):
        sel = generate.select("deepseek-v4.1", "90a")
        self.assertEqual(len(sel.built), 14)  # prefill 6 + sm90a 1, v41_fp8 6 + 1
        self.assertEqual({k.format for k in sel.built if k.family == "portable_sparse_decode"},
                         {"v41_fp8"})
        self.assertIn("portable_sparse_decode_v41fp8_d512_h16_k32_warp_specialized", names(sel))

    def test_globs_presets_and_spaces(self):
        sel = generate.select(
            "portable_sparse_prefill_d512_h64_*, portable_sparse_decode_bf16_*", "80"
        )
        self.assertEqual(
            names(sel)[:2],
            ["portable_sparse_prefill_d512_h64_k64", "portable_sparse_prefill_d512_h64_k32"],
        )
        self.assertEqual(len(sel.built), 2 + 12)
        sel = generate.select("deepseek-v4,portable_sparse_prefill_d576_h16_k64", "80")
        self.assertEqual(len(sel.built), 27)
        compact16 = [
            k.name
            for k in KERNELS
            if k.rows == 16 and k.block_keys == 32 and not k.warp_specialized
        ]
        self.assertEqual(names(generate.select("*_h16_k32", "80")), compact16)

    def test_warp_specialized_brings_its_twin(self):
        sel = generate.select("portable_sparse_decode_v4fp8_d512_h16_k32_warp_specialized", "80")
        self.assertEqual(
            names(sel),
            [
                "portable_sparse_decode_v4fp8_d512_h16_k32",
                "portable_sparse_decode_v4fp8_d512_h16_k32_warp_specialized",
            ],
        )

    def test_errors_name_the_item(self):
        with self.assertRaisesRegex(
            generate.SelectionError, "'portable_sparse_decode_v5\\*' matches no kernel"
        ):
            generate.select("deepseek-v4,portable_sparse_decode_v5*", "80")
        with self.assertRaisesRegex(generate.SelectionError, "empty item"):
            generate.select("all,", "80")
        with self.assertRaisesRegex(generate.SelectionError, "empty item"):
            generate.select("", "80")
        with self.assertRaisesRegex(generate.SelectionError, "matches no kernel"):
            generate.select("ALL", "80")  # names and presets are case-sensitive


# A Hopper family as the table will hold it: rows of arch sm90a.
HOPPER = [Kernel("portable_sparse_prefill", d_qk=640, rows=64, block_keys=64, arch="sm90a")]


class Archs(unittest.TestCase):
    def test_buildable(self):
        self.assertEqual(generate.buildable_archs("80;90a"), {"sm80", "sm90a"})
        self.assertEqual(generate.buildable_archs("90a-real"), {"sm80", "sm90a"})
        self.assertEqual(generate.buildable_archs("80"), {"sm80"})
        self.assertEqual(generate.buildable_archs("OFF"), {"sm80"})
        self.assertEqual(generate.buildable_archs("90"), {"sm80"})  # sm_90 lacks the a features

    def test_sm90a_rows_need_90a(self):
        table = KERNELS + HOPPER
        sel = generate.select("all", "80;90a", table)
        self.assertIn(HOPPER[0], sel.built)
        sel = generate.select("all", "80", table)
        self.assertNotIn(HOPPER[0], sel.built)
        (why,) = [w for k, w in sel.absent if k == HOPPER[0]]
        self.assertIn("sm90a code and SMLA_CUDA_ARCHS=80 does not build it", why)
        with self.assertRaisesRegex(generate.SelectionError, "selects only sm90a kernels"):
            generate.select("*_d640_*", "80", table)


class Files(unittest.TestCase):
    def write(self, spec, archs="90a"):
        out = pathlib.Path(self.tmp.name)
        generate.write(generate.select(spec, archs), out)
        return out

    def setUp(self):
        self.tmp = tempfile.TemporaryDirectory()

    def tearDown(self):
        self.tmp.cleanup()

    def test_units_and_registry_agree(self):
        for spec, prefill, decode, hopper, hopper_decode in (("all", 12, 33, 2, 4),
                                                             ("deepseek-v4", 6, 20, 1, 2)):
            out = self.write(spec)
            units = sorted(p.stem for p in (out / "instantiations").glob("*.cu"))
            self.assertEqual(len(units), prefill + decode + hopper + hopper_decode)
            inc = (out / "kernel_entries.inc").read_text()
            self.assertIn(f"std::array<PrefillEntry, {prefill}> kPortablePrefillEntries", inc)
            self.assertIn(f"std::array<DecodeEntry, {decode}> kPortableDecodeEntries", inc)
            self.assertIn(f"std::array<Sm90aPrefillEntry, {hopper}> kSm90aPrefillEntries", inc)
            self.assertIn(f"std::array<Sm90aDecodeEntry, {hopper_decode}> kSm90aDecodeEntries",
                          inc)
            built = prefill + decode + hopper + hopper_decode
            self.assertIn(f"std::array<AbsentKernel, {51 - built}> kAbsentKernels", inc)
            entries, absent = inc.split("kAbsentKernels")
            self.assertEqual(sorted(re.findall(r'^    \{\{?"([a-z0-9_]+)"', entries, re.M)), units)
            absent_rows = re.findall(r'^    \{"([a-z0-9_]+)"', absent, re.M)
            self.assertEqual(len(absent_rows), 51 - len(units))
            cmake = (out / "kernels.cmake").read_text()
            self.assertIn(f"set(SMLA_KERNELS_BUILT {built})", cmake)
            self.assertIn("sm90a_sparse_prefill_d512.cu", cmake)

    def test_a_unit_instantiates_its_row(self):
        out = self.write("all")
        units = out / "instantiations"
        unit = (units / "portable_sparse_decode_v4fp8_d512_h64_k32.cu").read_text()
        self.assertIn('#include "cuda/portable/sparse_decode/kernel.cuh"', unit)
        self.assertIn(
            "template Status launch_portable_sparse_decode<KvCacheFormat::kV4Fp8, 512, 64, 32>(",
            unit,
        )
        unit = (units / "portable_sparse_decode_v41fp8_d512_h16_k32.cu").read_text()
        self.assertIn('#include "cuda/portable/sparse_decode/v41_kernel.cuh"', unit)
        self.assertIn("template Status launch_v41_sparse_decode<16, 32>(", unit)
        unit = (units / "portable_sparse_decode_v41fp8_d512_h16_k32_warp_specialized.cu").read_text()
        self.assertIn('#include "cuda/portable/sparse_decode/v41_warp_specialized_kernel.cuh"', unit)
        self.assertIn("template Status launch_v41_warp_specialized_decode<16, 32>(", unit)
        unit = (units / "portable_sparse_prefill_d576_h16_k32.cu").read_text()
        self.assertIn("template int prefill_smem_bytes<576, 16, 32>();", unit)

    def test_a_narrower_selection_removes_units_and_keeps_unchanged_files(self):
        out = self.write("all")
        kept = out / "instantiations" / "portable_sparse_prefill_d512_h16_k64.cu"
        before = kept.stat().st_mtime_ns
        self.write("deepseek-v4")
        gone = out / "instantiations" / "portable_sparse_prefill_d576_h16_k64.cu"
        self.assertFalse(gone.exists())
        self.assertEqual(kept.stat().st_mtime_ns, before)
        self.assertEqual(len(list((out / "instantiations").glob("*.cu"))), 29)

    def test_command_line(self):
        self.assertEqual(generate.main(["--list", "--kernels", "portable_sparse_prefill_d5*"]), 0)
        self.assertEqual(generate.main(["--list", "--kernels", "nothing*"]), 1)


if __name__ == "__main__":
    unittest.main()
