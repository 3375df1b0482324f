"""torchtitan's MoE token routing counted op by op (the ``fsdp2`` option ``moe_permutation``), by hand.

Bytes per element of the width h (bf16 2, fp32 4), per routed row and per token (docs/time.md, "torchtitan's MoE
token routing"; hp_plugins/runtimes/torchtitan_moe.py says which op each comes from).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import attrs
import pytest

from hp_core.api import build_registry, step_time
from hp_core.errors import ConfigError
from hp_core.runtime_options import apply_options
from hp_plugins.runtimes.timing_profiles import FSDP2
from hp_plugins.runtimes.torchtitan_moe import (MOE_PERMUTATIONS, TORCHTITAN_ALL_TO_ALL, TORCHTITAN_EXPERT_PARALLEL,
                                                TORCHTITAN_MINIMAL_ASYNC_EP)

sys.path.insert(0, str(Path(__file__).resolve().parent))
import scale_cases as sc  # noqa: E402

SCORE_MULTIPLY = (2 + 4) + (4 + 4) + (4 + 2)  # .to(float32), * scores, .to(bfloat16)
SCORE_MULTIPLY_BACKWARD = (2 + 4) + (4 + 4) + (4 + 4 + 4) + 4 + (4 + 2)  # cast, grad * s, grad * x, its sum, cast
GATHER = 2 + 2  # read the gathered rows, write them (gather, index, a non-accumulating index put)


def _bytes(permutation) -> tuple[float, float, float, float]:
    """The statement in bytes per element (bf16 accesses x 2)."""
    return tuple(2 * v for v in (permutation.forward_accesses_per_row_element,
                                 permutation.forward_accesses_per_token_element,
                                 permutation.backward_accesses_per_row_element,
                                 permutation.backward_accesses_per_token_element))


def test_the_statements_are_the_ops_summed():
    assert SCORE_MULTIPLY == 20 and SCORE_MULTIPLY_BACKWARD == 36
    # 82a9530f6: gather, vstack (a copy), x[permuted_indices], out_unpermuted[permuted_indices] = out, the multiply,
    # and scatter_add's atomics (read the source, read and write the destination element of each: 2 + 2 + 2); per
    # token scatter_add's copy of the shared output. Backward: scatter_add's gather, the multiply's, slice_backward (a
    # fill and a copy), the index put's gather, x[permuted_indices]'s (a fill and a sorted accumulation) and the
    # gather's (atomic scatter_add_), per token the gather's zero fill.
    assert _bytes(TORCHTITAN_EXPERT_PARALLEL) == (
        GATHER * 4 + SCORE_MULTIPLY + 6, 4,
        GATHER + SCORE_MULTIPLY_BACKWARD + 6 + GATHER + (2 + 6) + 6, 2) == (42, 4, 64, 2)
    # 6b9602339: x_TD[idx], _permute, _unpermute, the multiply, the deterministic scatter's source; per token the zero
    # fill, scatter_add's copy, the sorted accumulation's read and write, the shared output's add. Backward: the
    # gather, the multiply's, the index put's gather, _permute's (a fill and a sorted accumulation), x_TD[idx]'s
    # source rows; per token its zero fill and each row read and written once.
    assert _bytes(TORCHTITAN_ALL_TO_ALL) == (
        GATHER * 3 + SCORE_MULTIPLY + 2, 2 + 4 + 4 + 6,
        GATHER + SCORE_MULTIPLY_BACKWARD + GATHER + (2 + 6) + 2, 2 + 4) == (34, 16, 54, 6)
    # MinimalAsyncEP's Triton kernels: the reduction reads each row and writes each token, plus the shared add;
    # backward the expansion (read, write), the score gradient (two reads), the dispatch backward's reduction.
    assert _bytes(TORCHTITAN_MINIMAL_ASYNC_EP) == (2, 2 + 6, 4 + 4 + 2, 2) == (2, 8, 10, 2)
    # Against the profile's two passes (a gather and a scatter): 4 bytes a row and 4 a token each way.
    assert FSDP2.moe_permute_passes.value == 2 and FSDP2.moe_permutation is None
    assert all(p.eager for p in MOE_PERMUTATIONS.values())


def test_the_operators_move_what_the_statements_say():
    """ATen's operators, run on the CPU as the two dispatchers call them (census extra)."""
    pytest.importorskip("torch")
    from repo_script import load_script

    script = load_script("benchmarks/count_torchtitan_moe_bytes.py")
    for form, statement in (("2510", TORCHTITAN_EXPERT_PARALLEL), ("2606", TORCHTITAN_ALL_TO_ALL)):
        found = script.count(form)
        forward_row, forward_token, backward_row, backward_token = _bytes(statement)
        assert found["forward"][:2] == pytest.approx((forward_row, forward_token), abs=1e-9)
        assert found["backward"][:2] == pytest.approx((backward_row, backward_token), abs=1e-9)
        # The indices and scores: a few hundred bytes a routed row, under 0.5% of its bytes at h = 2,048.
        for key, row in (("forward", forward_row), ("backward", backward_row)):
            assert 0 < found[f"{key}_narrow"][0] < 0.005 * row * 2048
    # 2510's padding: 8 rows per local expert a layer (4 local experts here), moved by the permute and its gradients.
    assert script.count("2510")["forward"][2] > 0 and script.count("2606")["forward"][2] == pytest.approx(0, abs=1e-9)


def _row(name: str) -> dict:
    return next(r for r in sc.ROWS if r["id"] == name)


def _priced(row: dict, registry, permutation: str):
    runtime = apply_options(sc.runtime(row, registry), {"moe_permutation": permutation})
    return step_time(sc.model(row, registry), sc.layout(row), registry=registry, hardware=sc.hardware(row, registry),
                     runtime=runtime, recompute=sc.recompute(row, registry))


def test_the_ep8_row_prices_the_routing_of_its_26_moe_layers_by_hand():
    # tt-dsv3-16b-ep8-b4: 4 x 4,096 = 16,384 tokens a rank, top-6: 98,304 routed rows of h = 2,048 (the rank's experts
    # receive as many, balanced); 26 MoE layers (27, the first dense), one micro-batch, H100 SXM 3.35 TB/s x 0.85.
    registry = build_registry(use_env=False)
    row = _row("tt-dsv3-16b-ep8-b4")
    assert row["options"]["moe_permutation"] == "torchtitan_expert_parallel"
    tokens, rows, h = 16384, 98304, 2048
    memory = 3.35e12 * 0.85
    assert sc.hardware(row, registry).memory_bandwidth_bytes_per_second == 3.35e12
    forward = (42 * rows + 4 * tokens) * h
    backward = (64 * rows + 2 * tokens) * h
    assert forward == 2**33 and backward == 12_952_010_752  # 256 and 386 bytes a token per element
    two_passes = (4 * rows + 4 * tokens) * h  # the profile's gather and scatter, each way
    assert two_passes == 939_524_096
    counted, passes = (_priced(row, registry, p) for p in ("torchtitan_expert_parallel", "gather_scatter"))
    (a,), (b,) = counted.stages, passes.stages
    assert a.forward_seconds - b.forward_seconds == pytest.approx(26 * (forward - two_passes) / memory, rel=1e-9)
    assert a.backward_seconds - b.backward_seconds == pytest.approx(26 * (backward - two_passes) / memory, rel=1e-9)
    # The per-op policy re-runs the forward's ops, whichever prices them (op_sac: no op of the routing is saved).
    assert a.recompute_seconds - b.recompute_seconds == pytest.approx(26 * (forward - two_passes) / memory, rel=1e-9)
    # Nothing else moves: the collectives, the step-end reduction and the optimizer.
    assert a.communication_seconds == b.communication_seconds
    assert (a.data_parallel_seconds, a.optimizer_seconds) == (b.data_parallel_seconds, b.optimizer_seconds)
    assert counted.step_seconds - passes.step_seconds == pytest.approx(
        26 * (2 * forward + backward - 3 * two_passes) / memory, rel=1e-9)
    # measured 1.423 s (-29.2% before the routing was counted, -11.1% after; -12.0% since Hopper's grouped-GEMM pair was
    # measured on an H200, 2026-12-04)
    assert counted.step_seconds == pytest.approx(1.252, abs=5e-4)


def test_the_ep4_rows_price_their_dispatchers_by_hand():
    # 16 x 4,096 = 65,536 tokens a rank, 393,216 routed rows; full AC re-runs the forward; the Grand Teton H100's
    # 2.4 TB/s x 0.85. The standard dispatcher against MinimalAsyncEP: the same layout, the same all-to-alls.
    registry = build_registry(use_env=False)
    full, minimal = _row("tt-dsv3-16b-ep4-b16-full"), _row("tt-dsv3-16b-ep4-b16-full-minimalep")
    assert full["options"]["moe_permutation"] == "torchtitan_all_to_all"
    assert minimal["options"]["moe_permutation"] == "torchtitan_minimal_async_ep"
    tokens, rows, h, memory = 65536, 393216, 2048, 2.4e12 * 0.85
    standard = _priced(full, registry, "torchtitan_all_to_all")
    fused = _priced(full, registry, "torchtitan_minimal_async_ep")
    (a,), (b,) = standard.stages, fused.stages
    assert a.forward_seconds - b.forward_seconds == pytest.approx(26 * ((34 - 2) * rows + (16 - 8) * tokens) * h / memory,
                                                                  rel=1e-9)
    assert a.backward_seconds - b.backward_seconds == pytest.approx(26 * ((54 - 10) * rows + (6 - 2) * tokens) * h / memory,
                                                                    rel=1e-9)
    assert a.recompute_seconds - b.recompute_seconds == pytest.approx(a.forward_seconds - b.forward_seconds, rel=1e-9)
    assert a.communication_seconds == b.communication_seconds
    # The two rows: measured 6.450 and 5.226 s (1.22 s apart); priced 6.468 and 5.325 s (1.14 s apart), each with its
    # chunked loss's copies, 18.4 GB at 2.04 TB/s: 9 ms (6.535 and 5.393 s before; tests/plugins/test_chunked_loss.py;
    # 6.544 and 5.402 s before Hopper's grouped-GEMM pair was measured on an H200, 2026-12-04).
    assert standard.step_seconds == pytest.approx(6.468, abs=5e-4)
    assert _priced(minimal, registry, "torchtitan_minimal_async_ep").step_seconds == pytest.approx(5.325, abs=5e-4)


def test_the_option_sets_the_statement_and_refuses_fused_kernels():
    registry = build_registry(use_env=False)
    fsdp2 = registry.runtime("fsdp2")
    assert fsdp2.timing.moe_permutation is None
    for name, statement in MOE_PERMUTATIONS.items():
        runtime = apply_options(fsdp2, {"moe_permutation": name})
        assert runtime.timing.moe_permutation is statement
        assert apply_options(runtime, {"moe_permutation": "gather_scatter"}).timing.moe_permutation is None
    row = _row("tt-dsv3-16b-ep8-b4")
    runtime = apply_options(sc.runtime(row, registry), {"elementwise_kernels": "fused"})
    with pytest.raises(ConfigError, match=r"moe_permutation=torchtitan_expert_parallel: counted for the kernels torchtitan's eager model runs"):
        step_time(sc.model(row, registry), sc.layout(row), registry=registry, hardware=sc.hardware(row, registry),
                  runtime=runtime, recompute=sc.recompute(row, registry))
    # The default leaves every other fsdp2 row as it was: the AutoModel MoE rows state no choice.
    for r in sc.ROWS:
        if r["runtime"] == "fsdp2" and not r["id"].startswith("tt-dsv3-16b"):
            assert "moe_permutation" not in r.get("options", {}), r["id"]


def test_a_dense_model_is_not_priced_differently():
    registry = build_registry(use_env=False)
    row = _row("tt-8b-fsdp8")
    runtime = sc.runtime(row, registry)
    args = dict(registry=registry, hardware=sc.hardware(row, registry), recompute=sc.recompute(row, registry))
    plain = step_time(sc.model(row, registry), sc.layout(row), runtime=runtime, **args)
    counted = step_time(sc.model(row, registry), sc.layout(row),
                        runtime=apply_options(runtime, {"moe_permutation": "torchtitan_all_to_all"}), **args)
    assert counted.step_seconds == plain.step_seconds
    assert attrs.asdict(counted.stages[0]) == attrs.asdict(plain.stages[0])


def test_docs_state_every_statement_with_its_source():
    text = (Path(__file__).resolve().parents[2] / "docs" / "time.md").read_text(encoding="utf-8")
    for name, m in MOE_PERMUTATIONS.items():
        forward = (m.forward_accesses_per_row_element, m.forward_accesses_per_token_element)
        backward = (m.backward_accesses_per_row_element, m.backward_accesses_per_token_element)
        line = (f"- `moe_permutation` = `{name}` (option `moe_permutation`): {forward[0]:g} and "
                f"{forward[1]:g} bf16 accesses per element per routed row and per token forward, "
                f"{backward[0]:g} and {backward[1]:g} backward: {m.source}")
        assert line in text, name
    assert "### torchtitan's MoE token routing" in text


_FUSED_REFUSAL = ("$.runtime.options.moe_permutation: moe_permutation=torchtitan_all_to_all: counted for the kernels "
                  "torchtitan's eager model runs, and timing profile fsdp2 fuses its elementwise ops "
                  "(elementwise_kernels=fused: torch.compile would fuse some of them); what they move then is not "
                  "stated, so the step time is not priced")


def _estimate(capsys, model: str, *options: str) -> dict:
    from cli_run import run

    argv = ["estimate", "--model", model, "--num-layers", 2, "--dp", 8, "--ep", 8, "--seq-len", 2048,
            "--runtime", "fsdp2", "--hardware", "h100-sxm", "--json"]
    for option in options:
        argv += ["--runtime-option", option]
    status, out, err = run(capsys, *argv)
    assert (status, err) == (0, ""), err
    return json.loads(out)


def test_fused_kernels_refuse_the_counted_permutation_of_an_moe_model_only(capsys):
    counted = ("moe_permutation=torchtitan_all_to_all", "elementwise_kernels=fused")
    # An MoE model (Mixtral's layers route tokens): its step time is refused, the memory estimate stands.
    moe = _estimate(capsys, "mixtral-8x7b", *counted)
    assert moe["time"] is None and moe["time_unavailable"] == _FUSED_REFUSAL
    assert moe["stages"]
    # A dense model has no token permutation: the option is inert, its step time priced as without it, to the byte.
    dense = _estimate(capsys, "llama3-8b", *counted)
    plain = _estimate(capsys, "llama3-8b", "elementwise_kernels=fused")
    assert "time_unavailable" not in dense and dense["time"] is not None
    assert dense["time"]["step_seconds"] == plain["time"]["step_seconds"]
    assert dense["time"]["stages"] == plain["time"]["stages"]
    # And with eager kernels the MoE model's permutation is priced.
    assert _estimate(capsys, "mixtral-8x7b", "moe_permutation=torchtitan_all_to_all",
                     "elementwise_kernels=eager")["time"]["step_seconds"] > 0
