"""``hp recompute``: the plan per stage, its JSON document, and one-line errors with status 2."""

from __future__ import annotations

import json

import pytest

from cli_run import run

LAYOUT = ("--model", "llama3-70b", "--num-layers", "16", "--tp", "8", "--sp", "--pp", "2", "--seq-len", "8192",
          "--global-batch-size", "16", "--hardware", "h100-sxm", "--runtime", "megatron")


def test_json_states_each_stage_with_bytes_and_seconds(capsys):
    status, out, err = run(capsys, "recompute", *LAYOUT, "--memory", "20GiB", "--reserve", "1GiB", "--unrestricted", "--json")
    assert status == 0, err
    doc = json.loads(out)
    assert doc["memory_bytes"] == 20 * 2**30 and doc["reserve_bytes"] == 2**30 and doc["limit_bytes"] == 19 * 2**30
    assert doc["fits"] and doc["unrestricted"] is not None
    stage = doc["plan"]["stages"][0]
    for key in ("index", "layers", "ranges", "peak_bytes", "limit_bytes", "shortfall_bytes", "binding_point", "reason",
                "micro_batches_in_flight", "micro_batch_seconds"):
        assert key in stage
    assert all(s["peak_bytes"] <= doc["limit_bytes"] for s in doc["plan"]["stages"])
    assert doc["plan"]["step_seconds"] > 0
    assert set(doc["plan"]["recompute"]) == {"default", "layers"}


def test_the_table_shows_ranges_peaks_and_the_step(capsys):
    status, out, err = run(capsys, "recompute", *LAYOUT, "--memory", "20GiB")
    assert status == 0, err
    assert "Recompute plan (the runtime runs)" in out and "Step time" in out and "every stage fits" in out
    assert "Plan: default" in out


@pytest.mark.parametrize("argv, message", [
    (("--memory", "lots"), "expected a size"),
    (("--reserve", "80GiB"), "reserve"),
    (("--offload", "2"), "offload shares"),
    (("--hardware", "no-such-device"), "no-such-device"),
])
def test_bad_input_is_one_line_and_status_2(capsys, argv, message):
    status, out, err = run(capsys, "recompute", *LAYOUT, *argv)
    assert status == 2
    assert len(err.strip().splitlines()) == 1 and message in err


def test_no_hardware_is_refused(capsys, tmp_path):
    config = tmp_path / "job.json"
    config.write_text(json.dumps({"model": "llama3-8b", "parallel": {"seq_len": 4096}}))
    status, _, err = run(capsys, "recompute", config)
    assert status == 2
    assert len(err.strip().splitlines()) == 1 and "--hardware" in err


def test_offload_without_a_host_link_is_refused(capsys, tmp_path):
    config = tmp_path / "job.json"
    device = {"name": "bare", "memory_bytes": 20 * 2**30, "peak_flops": {"bf16": 989e12}, "devices_per_node": 8,
              "intra_node_bandwidth_bytes_per_second": 450e9, "inter_node_bandwidth_bytes_per_second": 50e9,
              "memory_bandwidth_bytes_per_second": 3.35e12, "architecture": "hopper",
              "intra_node_latency_seconds": 1e-5, "inter_node_latency_seconds": 2e-5}
    config.write_text(json.dumps({"model": "llama3-8b", "parallel": {"seq_len": 4096}, "hardware": device}))
    status, _, err = run(capsys, "recompute", config, "--offload", "0.5")
    assert status == 2
    assert len(err.strip().splitlines()) == 1 and "host_link_bandwidth" in err
