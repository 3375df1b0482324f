"""The search through a Dask cluster ranks exactly as the serial search (the ``dask`` extra)."""

from __future__ import annotations

import pytest

distributed = pytest.importorskip("distributed")

from hp_core.api import build_registry, model_from_preset, search  # noqa: E402

REGISTRY = build_registry(use_env=False)
MODEL = model_from_preset("llama3-8b", REGISTRY).with_body_layers(4, REGISTRY.kinds_placed("body"))
HARDWARE = REGISTRY.hardware_preset("h100-sxm").spec
ARGS = dict(registry=REGISTRY, devices=8, hardware=HARDWARE, global_batch_size=16, seq_len=2048, runtime="megatron", top=8)


@pytest.fixture(scope="module")
def client():
    with distributed.LocalCluster(n_workers=2, threads_per_worker=1, processes=True, dashboard_address=None) as cluster:
        with distributed.Client(cluster) as client:
            yield client


def test_a_local_cluster_gives_the_serial_ranking(client):
    serial = search(MODEL, **ARGS)
    clustered = search(MODEL, executor=client.get_executor(), **ARGS)
    assert clustered == serial
    assert [c.layout.key for c in clustered.top] == [c.layout.key for c in serial.top]
    assert len(serial.top) == 8


def test_hp_search_on_a_local_dask_cluster_prints_the_serial_ranking(capsys):
    import json

    from cli_run import run

    argv = ("search", "--model", "llama3-8b", "--num-layers", "4", "--devices", "8", "--hardware", "h100-sxm",
            "--global-batch-size", "16", "--seq-len", "2048", "--runtime", "megatron", "--top", "5", "--json")
    status, serial, _ = run(capsys, *argv)
    assert status == 0
    status, clustered, _ = run(capsys, *argv, "--executor", "dask", "--workers", "2")
    assert status == 0
    assert json.loads(clustered) == json.loads(serial)


def test_an_unreachable_scheduler_is_one_line_and_exit_2(capsys, monkeypatch):
    from cli_run import run

    # A scheduler that refuses at once: the client's connection error, named with the flag.
    def refuse(address, timeout):
        raise OSError(f"Timed out trying to connect to {address}")

    monkeypatch.setattr(distributed, "Client", refuse)
    status, out, err = run(capsys, "search", "--model", "llama3-8b", "--devices", "8", "--hardware", "h100-sxm",
                           "--executor", "dask=tcp://10.0.0.1:8786")
    assert (status, out) == (2, "")
    assert err.strip() == ("hp search: error: --executor: cannot reach the Dask scheduler at tcp://10.0.0.1:8786: "
                           "OSError: Timed out trying to connect to tcp://10.0.0.1:8786")
    # An endpoint that is no Dask scheduler answers what distributed cannot read (a MemoryError was seen): one line too.
    def garbled(address, timeout):
        raise MemoryError("unpacking the reply")

    monkeypatch.setattr(distributed, "Client", garbled)
    status, out, err = run(capsys, "search", "--model", "llama3-8b", "--devices", "8", "--hardware", "h100-sxm",
                           "--executor", "dask=tcp://10.0.0.1:8786")
    assert (status, out) == (2, "") and err.strip().endswith("MemoryError: unpacking the reply")
