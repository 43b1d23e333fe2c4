"""examples/tensor_parallel.py end to end: heads sharded over 2 torchrun processes (gloo on the
CPU back end; NCCL on GPUs), gathered and checked against one all-heads run; and its check
failing on a wrongly sharded attention sink."""

import json
import os
import pathlib
import socket
import subprocess
import sys

import pytest
import torch

REPO = pathlib.Path(__file__).resolve().parents[2]
EXAMPLE = REPO / "examples" / "tensor_parallel.py"
# Small shapes: a 2-core CI machine runs the whole example in a few seconds.
SMALL = ["--heads", "64", "--layers", "2", "--steps", "2", "--prefill-tokens", "16",
         "--prefill-context", "1024", "--batch", "3", "--extra-context", "512"]
TIMEOUT_S = 240


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def run_example(args, nproc=None):
    """Runs the example (under torch.distributed.run with nproc processes, or as one plain
    process) and returns the CompletedProcess."""
    env = dict(os.environ)
    if pathlib.Path("/sys/class/net/lo").exists():
        env.setdefault("GLOO_SOCKET_IFNAME", "lo")  # the loopback, whatever the host name says
    command = [sys.executable]
    if nproc is not None:
        command += ["-m", "torch.distributed.run", f"--nproc_per_node={nproc}", "--nnodes=1",
                    "--master_addr=127.0.0.1", f"--master_port={free_port()}"]
    command += [str(EXAMPLE)] + list(args)
    return subprocess.run(command, cwd=REPO, env=env, capture_output=True, text=True,
                          timeout=TIMEOUT_S)


def output(result) -> str:
    return (f"exit status {result.returncode}\n--- stdout\n{result.stdout}\n"
            f"--- stderr\n{result.stderr}")


def check_report(path, processes, shards, heads, backend, dist_backend):
    report = json.loads(path.read_text())
    assert report["check"]["passed"], report["check"]["failures"]
    assert report["check"]["failures"] == []
    assert (report["processes"], report["shards"], report["dist_backend"]) == (
        processes, shards, dist_backend)
    assert report["backend"] == backend and report["config"]["heads"] == heads
    per = heads // shards
    ranks = report["per_rank"]
    assert [e["heads"] for e in ranks] == [[s * per, (s + 1) * per] for s in range(shards)]
    assert [e["rank"] for e in ranks] == [s // (shards // processes) for s in range(shards)]
    assert report["all_heads"]["heads"] == [0, heads]
    for e in ranks + [report["all_heads"]]:
        assert e["prefill_ms_per_layer"] > 0 and e["decode_step_ms"] > 0
        assert len(e["decode_runs_ms"]) == report["config"]["steps"] * report["config"]["repeats"]
    for kind in ("prefill", "decode", "decode_with_gather"):
        assert report["speedup"][kind] > 0
    return report


def test_two_processes_gloo_cpu(tmp_path):
    path = tmp_path / "tp.json"
    result = run_example(["--device", "cpu", *SMALL, "--json", str(path)], nproc=2)
    assert result.returncode == 0, output(result)
    assert "check passed" in result.stdout, output(result)
    report = check_report(path, processes=2, shards=2, heads=64, backend="cpu",
                          dist_backend="gloo")
    assert all(e["gather_ms"] > 0 for e in report["per_rank"])
    assert report["config"]["prefill_topk"] == 512 and report["config"]["extra_topk"] == 512


def test_check_fails_on_a_wrong_sink_slice():
    """Every shard given its neighbour's sinks: the gathered outputs must fail the check (out
    differs; lse and max_logits, which the sink does not change, still match)."""
    result = run_example(["--device", "cpu", *SMALL, "--shards", "2", "--fault", "sink-slice"])
    assert result.returncode == 1, output(result)
    assert "check FAILED" in result.stdout, output(result)
    assert "prefill layer 0 out:" in result.stdout and "decode step 1 layer 1 out:" in result.stdout
    assert " lse:" not in result.stdout and "max_logits:" not in result.stdout


def test_bad_arguments_are_named():
    result = run_example(["--device", "cpu", *SMALL, "--shards", "3"])
    assert result.returncode != 0
    assert "--shards = 3" in result.stderr and "--heads = 64" in result.stderr, output(result)
    result = run_example(["--device", "cpu", "--extra-context", "100", "--extra-topk", "512"])
    assert result.returncode == 2
    assert "--extra-context = 100 must be >= --extra-topk = 512" in result.stderr, output(result)


@pytest.mark.gpu
def test_cuda_nccl(tmp_path):
    """Two processes over NCCL on two GPUs; with one GPU, two shards in one process."""
    path = tmp_path / "tp.json"
    nproc = 2 if torch.cuda.device_count() >= 2 else 1
    result = run_example(["--device", "cuda", *SMALL, "--shards", "2", "--json", str(path)],
                         nproc=nproc)
    assert result.returncode == 0, output(result)
    report = check_report(path, processes=nproc, shards=2, heads=64, backend="cuda",
                          dist_backend="nccl" if nproc == 2 else None)
    assert report["cuda_graph"]
    if nproc == 2:
        assert report["nccl_nvls_enable"] == os.environ.get("NCCL_NVLS_ENABLE", "0")
