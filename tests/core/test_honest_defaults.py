"""Honest defaults: flags alone describe a job as a config file does, --devices gives dp, the reserve is
its own column and counts in ``fits``, and a schedule that cannot run is refused."""

from __future__ import annotations

import json

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from cli_run import run

RESERVE_BYTES = 300 * 2**20  # the built-in runtimes' CUDA context (hp_plugins/runtimes/reserve.py)


def _json(capsys, *argv):
    status, out, err = run(capsys, "estimate", *argv, "--json")
    assert status == 0, err
    return json.loads(out)


def test_flags_alone_do_not_inherit_the_demo_layout(capsys):
    doc = _json(capsys, "--model", "llama3-70b", "--tp", "8", "--pp", "4")
    assert doc["world_size"] == 32  # dp 1, not the demo's 4
    assert doc["layout"]["dp"] == 1 and doc["layout"]["sp"] is False
    assert doc["layout"]["global_batch_size"] == 4 and doc["micro_batches"] == 4  # micro-batch size * dp * pp
    assert doc["layout"]["seq_len"] == 8192
    assert doc["device_memory_bytes"] is None and doc["fits"] is None  # no hardware unless stated
    status, out, _ = run(capsys, "estimate", "--model", "llama3-70b", "--tp", "8", "--pp", "4")
    assert "global batch 4, 4 micro-batches/step" in " ".join(out.split())


def test_devices_give_dp(capsys):
    doc = _json(capsys, "--model", "llama3-70b", "--tp", "8", "--pp", "4", "--devices", "128")
    assert (doc["layout"]["dp"], doc["world_size"]) == (4, 128)
    status, _, err = run(capsys, "estimate", "--tp", "8", "--pp", "4", "--devices", "100")
    assert status == 2 and "--devices: devices=100 is not a multiple of cp*tp*pp=32" in err
    status, _, err = run(capsys, "estimate", "--tp", "8", "--dp", "2", "--devices", "64")
    assert status == 2 and "dp*cp*tp*pp=16 differs from devices=64" in err


def test_a_file_without_parallel_takes_the_layout_from_the_flags(capsys, tmp_path):
    config = tmp_path / "job.yaml"
    config.write_text("model: llama3-8b\nruntime: megatron\n")
    doc = _json(capsys, config, "--seq-len", "4096", "--tp", "2")
    assert (doc["layout"]["seq_len"], doc["layout"]["tp"], doc["provenance"]["runtime"]) == (4096, 2, "megatron")
    status, _, err = run(capsys, "estimate", config)
    assert status == 2 and "$.parallel.seq_len: required field missing" in err


def test_interleaved_1f1b_needs_two_chunks_per_stage(capsys):
    status, out, err = run(capsys, "estimate", "--pp", "2", "--schedule", "interleaved_1f1b")
    assert status == 2 and out == ""
    assert err.startswith("hp estimate: error: $.parallel.vpp: the interleaved_1f1b schedule needs vpp >= 2") and \
        err.count("\n") == 1


def test_the_reserve_is_the_runtimes_and_counts_in_fits(capsys):
    base = ["--model", "llama3-8b", "--num-layers", "2", "--seq-len", "1024"]
    doc = _json(capsys, *base, "--hardware", "h100-sxm")
    peak = doc["peak_bytes"]
    assert doc["reserve_bytes"] == RESERVE_BYTES
    exact = _json(capsys, *base, "--memory", str(peak + RESERVE_BYTES))
    short = _json(capsys, *base, "--memory", str(peak + RESERVE_BYTES - 1))
    assert (exact["fits"], short["fits"]) == (True, False)
    opted_out = _json(capsys, *base, "--memory", str(peak), "--reserve", "0")
    assert (opted_out["reserve_bytes"], opted_out["fits"]) == (0, True)
    assert _json(capsys, *base, "--reserve", "2GiB")["reserve_bytes"] == 2 * 2**30
    status, out, _ = run(capsys, "estimate", *base, "--hardware", "h100-sxm")
    assert "+ reserve 0.29 GiB; device 79.65 GiB: fits" in out


def test_recompute_keeps_the_runtimes_reserve_free(capsys):
    argv = ["recompute", "--model", "llama3-8b", "--num-layers", "2", "--seq-len", "1024", "--hardware", "h100-sxm",
            "--runtime", "megatron", "--json"]
    status, out, _ = run(capsys, *argv)
    doc = json.loads(out)
    assert doc["reserve_bytes"] == RESERVE_BYTES and doc["limit_bytes"] == doc["memory_bytes"] - RESERVE_BYTES
    status, out, _ = run(capsys, *argv, "--reserve", "0")
    assert json.loads(out)["reserve_bytes"] == 0


@st.composite
def layouts(draw):
    """A layout of Llama-3-8B cut to 4 layers, as flags and as the same config file."""
    tp = draw(st.sampled_from((1, 2, 4, 8)))
    pp = draw(st.sampled_from((1, 2, 4)))
    vpp = draw(st.sampled_from((1, 2))) if pp > 1 and 4 % (pp * 2) == 0 else 1
    dp = draw(st.integers(1, 3))
    mbs = draw(st.integers(1, 2))
    parallel = {"tp": tp, "pp": pp, "vpp": vpp, "dp": dp, "micro_batch_size": mbs,
                "seq_len": draw(st.sampled_from((256, 512)))}
    if tp > 1 and draw(st.booleans()):
        parallel["sp"] = True
    if draw(st.booleans()):
        parallel["global_batch_size"] = mbs * dp * pp * draw(st.integers(1, 3)) * (2 if vpp > 1 else 1)
    if draw(st.booleans()):
        parallel["zero"] = draw(st.sampled_from((0, 1, 2, 3)))
    return parallel, draw(st.sampled_from((None, "megatron"))), draw(st.sampled_from((None, "h100-sxm")))


@settings(max_examples=25, deadline=None, database=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(case=layouts())
def test_flag_only_and_file_jobs_agree(capsys, tmp_path_factory, case):
    parallel, runtime, hardware = case
    flags = ["--model", "llama3-8b", "--num-layers", "4"]
    for name, value in parallel.items():
        flags += ["--sp"] if value is True else [f"--{name.replace('_', '-')}", str(value)]
    document = {"model": "llama3-8b", "num_layers": 4, "parallel": parallel}
    if runtime:
        flags += ["--runtime", runtime]
        document["runtime"] = runtime
    if hardware:
        flags += ["--hardware", hardware]
        document["hardware"] = hardware
    config = tmp_path_factory.mktemp("job") / "job.json"
    config.write_text(json.dumps(document))
    from_flags = run(capsys, "estimate", *flags, "--json")
    from_file = run(capsys, "estimate", config, "--json")
    assert from_flags == from_file
    if from_file[0] == 0:
        doc = json.loads(from_file[1])
        assert doc["layout"]["dp"] == parallel["dp"] and doc["fits"] is (None if hardware is None else doc["fits"])
