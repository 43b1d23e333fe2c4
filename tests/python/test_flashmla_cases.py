"""benchmarks/python/flashmla_cases.py: the inputs shaped as FlashMLA's benchmarks make them
(prefill: distinct slots per token; decode: per-request lengths and pages, distinct positions per
token) are what that module says, and the library's CPU kernels take them and match the
reference."""

import pathlib
import sys

import torch

import sparse_mla
from sparse_mla.reference import sparse_decode_reference, sparse_prefill_reference
from support import DECODE_LSE, DECODE_OUT, PREFILL_OUT, PREFILL_STATS, assert_close

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[2] / "benchmarks" / "python"))
import flashmla_cases  # noqa: E402


def test_request_pages_are_a_share_of_one_pool():
    gen = torch.Generator().manual_seed(3)
    lengths, table, max_len = flashmla_cases.request_pages(b=40, s_q=3, s_k=300, page=7, gen=gen)
    assert lengths.shape == (40,) and int(lengths.min()) >= 3
    assert max_len % 28 == 0 and max_len >= int(lengths.max())
    assert table.shape == (40, max_len // 7)
    assert torch.equal(table.flatten().sort().values, torch.arange(table.numel()))
    # N(300, 150) over 40 requests: lengths spread on both sides of s_k, some clamped to s_q.
    assert int(lengths.max()) > 300 > int(lengths.min())


def test_token_lists_are_distinct_positions_of_the_own_request():
    gen = torch.Generator().manual_seed(4)
    b, s_q, topk, page = 30, 2, 50, 8
    lengths, table, max_len = flashmla_cases.request_pages(b, s_q, 60, page, gen)
    lists = flashmla_cases.token_lists(lengths, table, max_len, s_q, topk, page, gen)
    assert lists.shape == (b, s_q, topk) and lists.dtype == torch.int32
    owner = torch.empty(table.numel(), dtype=torch.int64)
    owner[table.flatten()] = torch.arange(b).repeat_interleave(table.shape[1])
    position_of_page = torch.empty(table.numel(), dtype=torch.int64)
    position_of_page[table.flatten()] = torch.arange(table.shape[1]).repeat(b) * page
    short = 0
    for r in range(b):
        n = min(topk, int(lengths[r]))
        short += n < topk
        for s in range(s_q):
            row = lists[r, s]
            valid = row[row >= 0].to(torch.int64)
            assert valid.numel() == n, (r, s)
            assert valid.unique().numel() == n, (r, s)
            pages = valid // page
            assert bool((owner[pages] == r).all()), (r, s)
            positions = position_of_page[pages] + valid % page
            assert int(positions.max()) < int(lengths[r]), (r, s)
    assert short > 0  # N(60, 30) leaves some requests below topk 50: their -1 entries are tested


def test_decode_inputs_run_and_match_the_reference():
    case = dict(fmt="v4_fp8", b=3, s_q=2, h_q=8, topk=24, page=16, extra=(40, 8), s_k=64)
    a = flashmla_cases.decode_inputs(case, "cpu", seed=5)
    again = flashmla_cases.decode_inputs(case, "cpu", seed=6)
    for name in ("kv_cache", "extra_kv_cache", "indices", "extra_indices"):
        assert a[name].shape == again[name].shape, name  # same lengths seed: same shapes
    assert not torch.equal(a["indices"], again["indices"])
    kw = dict(attn_sink=a["attn_sink"], extra_kv_cache=a["extra_kv_cache"],
              extra_indices=a["extra_indices"])
    out, lse = sparse_mla.sparse_decode(a["q"], a["kv_cache"], a["indices"], **kw)
    ref_out, ref_lse = sparse_decode_reference(a["q"], a["kv_cache"], a["indices"], **kw)
    assert bool(torch.isfinite(out.float()).all())
    assert_close("out", out, ref_out, DECODE_OUT)
    assert_close("lse", lse, ref_lse, DECODE_LSE)


def test_prefill_lists_are_distinct_slots():
    for s_kv, topk in ((500, 64), (100, 90), (30, 40)):
        a = flashmla_cases.prefill_inputs(dict(s_q=7, s_kv=s_kv, h_q=4, d_qk=512, topk=topk),
                                          "cpu", seed=2)
        assert a["indices"].shape == (7, 1, topk) and a["indices"].dtype == torch.int32
        valid = min(topk, s_kv)
        for row in a["indices"][:, 0]:
            assert row[:valid].unique().numel() == valid
            assert int(row[:valid].min()) >= 0 and int(row[:valid].max()) < s_kv
            assert bool((row[valid:] == -1).all())
    out, max_logits, lse = sparse_mla.sparse_prefill(a["q"], a["kv"], a["indices"],
                                                     sm_scale=a["sm_scale"])
    ref = sparse_prefill_reference(a["q"], a["kv"], a["indices"], sm_scale=a["sm_scale"])
    assert_close("out", out, ref[0], PREFILL_OUT)
    assert_close("max_logits", max_logits, ref[1], PREFILL_STATS)
    assert_close("lse", lse, ref[2], PREFILL_STATS)
