"""The planner's and the search's output does not depend on ``PYTHONHASHSEED`` (docs/recompute.md, 'Ties').

Each case is run by the ``hp`` command line in two processes under different hash seeds, so a set of switch names,
settings or states iterated into an order that decides between plans of equal step time would show as a difference.
Both recompute cases hold exact ties (every float equal, not only up to summation order):

* the small MTP model of tests/plugins/test_mtp_full_recompute.py (4 ``moe_only`` layers, one stage) at its all-full
  peak, 240,784,640 bytes (173,675,776 before PyTorch's two cuBLAS workspaces were priced): ``ffAct+moeLayer+normOp`` on any one of layers 0-3 and full on the others gives the same
  step time, 0.052108333616682226 s, and the same peak (the four plans priced by ``step_time`` and ``estimate``, once);
  the planner gives it to layer 0, the lowest index, and goes through the MTP module's covering search;
* Llama 3 8B, pp 2, dp 4, 8,192 tokens, 40 GiB reserved: stage 0's plan, layer 0 ``ffAct+ffFc1`` and layers 1-14
  full, ties with ``ffAct+ffFc1`` swapped onto layer 1, 2, ... or 6 (the swaps checked: the same step time,
  9.149507833009705 s, and peak, 42,545,091,584 bytes, by ``step_time`` and ``estimate``, once).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

import hp_core

_ROOT = Path(hp_core.__file__).resolve().parents[1]
_SEEDS = ("0", "4242")

_SMALL = {"hidden_size": 64, "num_experts": 8, "num_experts_per_tok": 2, "moe_intermediate_size": 32,
          "shared_expert_intermediate_size": 48}
_MTP_JOB = {
    "model": {"name": "tiny-mtp", "layers": [
        {"kind": "embedding", "config": {"vocab_size": 1024, "hidden_size": 64}},
        {"kind": "moe_only", "count": 4, "config": _SMALL},
        {"kind": "output", "config": {"vocab_size": 1024, "hidden_size": 64}},
        {"kind": "mtp", "config": {"vocab_size": 1024, "hidden_size": 64, "layer": {"kind": "moe_only", "config": _SMALL}}},
    ]},
    "parallel": {"seq_len": 128, "ep": 2, "dp": 2, "global_batch_size": 2},
    "runtime": "megatron",
}
_ALL_FULL_PEAK = 240_784_640  # bytes: hp estimate of the job with --recompute full (test_mtp_full_recompute.py)
_H100_BYTES = 85_520_809_984  # the h100-sxm preset's memory


def _hp(argv: list[str], seed: str) -> str:
    env = dict(os.environ, PYTHONHASHSEED=seed)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(_ROOT), os.environ.get("PYTHONPATH")) if p)
    done = subprocess.run([sys.executable, "-m", "hp_core.cli", *argv], env=env, capture_output=True, text=True,
                          timeout=300)
    assert done.returncode == 0, done.stderr
    return done.stdout


def _same_under_both_seeds(argv: list[str]) -> str:
    first, second = (_hp(argv, seed) for seed in _SEEDS)
    assert first == second
    return first


def test_the_mtp_tie_goes_to_the_lowest_layer_under_any_hash_seed(tmp_path):
    job = tmp_path / "job.json"
    job.write_text(json.dumps(_MTP_JOB), encoding="utf-8")
    out = _same_under_both_seeds(["recompute", str(job), "--hardware", "h100-sxm",
                                  "--reserve", str(_H100_BYTES - _ALL_FULL_PEAK), "--json"])
    plan = json.loads(out)["plan"]
    # The tie's rule: of the four equal plans, the one giving the selective setting to the lowest layer.
    assert plan["recompute"] == {"default": "full", "layers": {"0": ["ffAct", "moeLayer", "normOp"]}}
    assert plan["peak_bytes"] == _ALL_FULL_PEAK and plan["unproven_states"] == []


def test_a_tied_llama_plan_is_the_same_under_any_hash_seed():
    out = _same_under_both_seeds(["recompute", "--model", "llama3-8b", "--tp", "1", "--pp", "2", "--dp", "4",
                                  "--seq-len", "8192", "--global-batch-size", "64", "--runtime", "megatron",
                                  "--hardware", "h100-sxm", "--reserve", "40GiB", "--json"])
    assert json.loads(out)["plan"]["fits"]


@pytest.mark.parametrize("model", ["llama3-8b", "nemotron-3-super-120b-a12b"])
def test_the_search_is_the_same_under_any_hash_seed(model):
    # Nemotron 3 Super's MTP depth puts the covering search and the module's states in every planned layout.
    out = _same_under_both_seeds(["search", "--model", model, "--num-layers", "8", "--devices", "16",
                                  "--hardware", "h100-sxm", "--global-batch-size", "64", "--seq-len", "4096",
                                  "--runtime", "megatron", "--reserve", "50GiB", "--workers", "1", "--top", "30",
                                  "--json"])
    assert json.loads(out)["top"]
