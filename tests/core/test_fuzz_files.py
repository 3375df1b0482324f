"""Fuzz: generated bad flags, config files, Hugging Face config.json files, census files and case files.

Each draw is run in-process (``hp_core.cli.main``) in an empty temporary folder and must end with
exit status 2, exactly one line on standard error that names a field or a file (a ``$`` path, a
``--flag``, or the file's name), nothing on standard output, no traceback and no file left behind
(no temporary beside an output). The draws start from valid inputs and break one thing: a number
past its bound, a float that is not finite, a zero where it divides, a wrong type, a missing or an
unknown key, deep nesting, an alias bomb. Bounded to about a minute on a 2-core machine
(``max_examples`` per test below). tests/core/test_bad_input.py fuzzes layouts and names.
"""

from __future__ import annotations

import contextlib
import copy
import io
import json
import os
import re
import tempfile
from pathlib import Path
from typing import Any

import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from hp_core.cli import main

DATA = Path(__file__).resolve().parents[1] / "plugins" / "data"
SETTINGS = settings(max_examples=40, deadline=None, database=None,
                    suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much])

# A case: argv (with "{dir}" for the folder) and the files to write there.
Case = tuple[list[str], dict[str, str]]
# What a line must name: a field path, a flag, or a file of the case.
_NAMES = re.compile(r"(\$|--[a-z]|config: |\.(ya?ml|json|toml)\b|plugin )")


def check(case: Case) -> None:
    argv, files = case
    with tempfile.TemporaryDirectory() as folder:
        for name, text in files.items():
            Path(folder, name).write_text(text, encoding="utf-8")
        args = [a.replace("{dir}", folder) for a in argv]
        out, err = io.StringIO(), io.StringIO()
        cwd = os.getcwd()
        os.chdir(folder)
        try:
            with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
                try:
                    status = main(args)
                except SystemExit as exc:
                    status = exc.code
        finally:
            os.chdir(cwd)
        left = sorted(set(os.listdir(folder)) - set(files))
    stderr = err.getvalue()
    assert status == 2, (args, files, status, stderr, out.getvalue()[:300])
    assert "Traceback" not in stderr, (args, stderr)
    assert stderr.endswith("\n") and stderr.count("\n") == 1, (args, stderr)
    assert _NAMES.search(stderr), ("names no field or file", args, stderr)
    assert out.getvalue() == "", (args, out.getvalue()[:300])
    assert left == [], ("files left behind", args, left)


# ----------------------------------------------------------------------------- values that break a field

HUGE_INTS = st.one_of(st.integers(2**53 + 1, 2**70), st.integers(10**20, 10**400), st.just(2**63))
NON_FINITE = st.sampled_from([float("inf"), float("-inf"), float("nan"), 1e308 * 10])
WRONG_TYPES = st.one_of(st.text(max_size=6), st.booleans(), st.lists(st.integers(0, 3), max_size=2),
                        st.dictionaries(st.text(max_size=3), st.integers(), max_size=2))
BAD_NUMBER = st.one_of(HUGE_INTS, NON_FINITE, st.integers(-10**6, 0), WRONG_TYPES)


def _deep(depth: int, leaf: Any = 1) -> Any:
    value = leaf
    for _ in range(depth):
        value = [value]
    return value


def _bomb(levels: int) -> str:
    """A YAML alias bomb of *levels* levels of nine aliases (9**levels values when expanded)."""
    lines = ["a0: &a0 [x, x, x, x, x, x, x, x, x]"]
    for i in range(1, levels + 1):
        lines.append(f"a{i}: &a{i} [" + ", ".join([f"*a{i - 1}"] * 9) + "]")
    return "\n".join(lines) + "\n"


def _dump(doc: Any, fmt: str) -> str:
    if fmt == "json":
        return json.dumps(doc)
    return yaml.safe_dump(doc)


# ----------------------------------------------------------------------------- flags

def _is_positive_int(text: str) -> bool:
    try:
        return int(text) > 0
    except ValueError:
        return False


_INT_FLAGS = ["--dp", "--tp", "--pp", "--vpp", "--cp", "--ep", "--etp", "--micro-batch-size", "--global-batch-size",
              "--seq-len", "--num-layers"]
_FLAG_TEXT = st.one_of(HUGE_INTS.map(str), st.integers(-10**9, 0).map(str), st.sampled_from(["1e9", "0x10", "", " ", "nan"]),
                       st.text(alphabet="0123456789.-+eE_", min_size=1, max_size=8).filter(lambda t: not _is_positive_int(t)))
_MEMORY_TEXT = st.one_of(st.integers(51, 500).map(lambda n: "9" * n + "GiB"), st.sampled_from(["0", "0GiB", "-1GiB", "inf",
                         "nanGiB", "1e30", "80XB", "1.5.2GiB", "2000000TiB"]))

bad_flags = st.one_of(
    st.tuples(st.sampled_from(["estimate", "recompute", "potentials"]), st.sampled_from(_INT_FLAGS), _FLAG_TEXT).map(
        lambda c: ([c[0], f"{c[1]}={c[2]}"], {})),
    st.tuples(st.sampled_from(["estimate", "recompute"]), _MEMORY_TEXT).map(lambda c: ([c[0], f"--memory={c[1]}"], {})),
    st.tuples(st.sampled_from(["--devices", "--workers", "--global-batch-size", "--seq-len", "--top"]), _FLAG_TEXT).map(
        lambda c: (["search", "--model", "llama3-8b", "--hardware", "h100-sxm", "--devices", "8", f"{c[0]}={c[1]}"], {})),
    st.sampled_from(["--csv", "--plot"]).flatmap(lambda flag: st.sampled_from(["/dev/null", "{dir}", "{dir}/missing/\0x"]).map(
        lambda target: (["search", "--model", "llama3-8b", "--hardware", "h100-sxm", "--devices", "2", "--num-layers", "2",
                         "--global-batch-size", "8", "--seq-len", "512", flag, target], {}))),
    st.sampled_from(["2", "x.yaml", "--json"]).map(lambda word: (["estimate", "--sp", word] if word != "--json" else
                                                                  ["estimate", "nope.yaml", word], {})),
)


@SETTINGS
@given(case=bad_flags)
def test_bad_flags(case: Case):
    check(case)


# ----------------------------------------------------------------------------- config files

_PARALLEL_FIELDS = ["dp", "tp", "pp", "vpp", "cp", "ep", "etp", "micro_batch_size", "global_batch_size", "seq_len"]
_HARDWARE = {"name": "x", "memory_bytes": 80 * 2**30, "peak_flops": {"bf16": 9.89e14},
             "intra_node_bandwidth_bytes_per_second": 4.5e11}


@st.composite
def bad_configs(draw: st.DrawFn) -> Case:
    doc: dict[str, Any] = {"model": "llama3-8b", "parallel": {"seq_len": 1024}}
    where = draw(st.sampled_from(["parallel", "hardware", "num_layers", "attention", "layers", "deep", "bomb", "precision"]))
    fmt = draw(st.sampled_from(["yaml", "json"]))
    if where == "parallel":
        doc["parallel"][draw(st.sampled_from(_PARALLEL_FIELDS))] = draw(BAD_NUMBER)
    elif where == "hardware":
        hardware = copy.deepcopy(_HARDWARE)
        field = draw(st.sampled_from(["memory_bytes", "peak_flops", "intra_node_bandwidth_bytes_per_second"]))
        # A rate or a bandwidth is a float: a huge one is only absurd, a zero, a negative or a non-finite one is wrong.
        value = draw(st.one_of(BAD_NUMBER, st.just(0)) if field == "memory_bytes" else
                     st.one_of(NON_FINITE, st.floats(-1e6, 0), st.just(0), WRONG_TYPES))
        if field == "peak_flops":
            hardware["peak_flops"] = {"bf16": value}
        else:
            hardware[field] = value
        doc["hardware"] = hardware
    elif where == "num_layers":
        doc["num_layers"] = draw(BAD_NUMBER)
    elif where == "attention":
        doc["attention"] = draw(st.one_of(st.text(max_size=6).filter(lambda s: s not in ("flash", "eager")), WRONG_TYPES))
    elif where == "precision":
        doc["precision"] = {draw(st.sampled_from(["param_bytes", "grad_bytes", "activation_bytes"])): draw(BAD_NUMBER)}
    elif where == "layers":
        config = {"hidden_size": 64, "num_attention_heads": 4, "num_key_value_heads": 4, "intermediate_size": 128}
        group = {"kind": "dense", "count": 2, "config": config}
        field = draw(st.sampled_from(["count", "hidden_size", "intermediate_size", "num_attention_heads"]))
        if field == "count":
            group["count"] = draw(st.one_of(BAD_NUMBER, st.integers(10_001, 10**12)))
        else:
            config[field] = draw(BAD_NUMBER)
        doc["model"] = {"name": "tiny", "layers": [{"kind": "embedding", "config": {"vocab_size": 1000, "hidden_size": 64}},
                                                   group]}
    elif where == "deep":
        doc[draw(st.sampled_from(["model", "parallel", "precision"]))] = _deep(draw(st.integers(65, 400)))
    else:
        return ["estimate", "{dir}/run.yaml"], {"run.yaml": _bomb(draw(st.integers(6, 9)))}
    return ["estimate", "{dir}/run." + fmt], {"run." + fmt: _dump(doc, fmt)}


@SETTINGS
@given(case=bad_configs())
def test_bad_config_files(case: Case):
    check(case)


# ----------------------------------------------------------------------------- Hugging Face config.json

_LLAMA = {"model_type": "llama", "hidden_size": 256, "intermediate_size": 512, "num_attention_heads": 4,
          "num_key_value_heads": 2, "num_hidden_layers": 4, "vocab_size": 1000, "tie_word_embeddings": False}
_DEEPSEEK = {"model_type": "deepseek_v3", "hidden_size": 256, "intermediate_size": 512, "moe_intermediate_size": 64,
             "num_attention_heads": 4, "num_hidden_layers": 4, "vocab_size": 1000, "n_routed_experts": 8,
             "num_experts_per_tok": 2, "n_shared_experts": 1, "first_k_dense_replace": 1, "kv_lora_rank": 32,
             "q_lora_rank": 64, "qk_nope_head_dim": 16, "qk_rope_head_dim": 8, "v_head_dim": 16,
             "num_nextn_predict_layers": 1}


# Fields where 0 is a valid count (no shared experts, no dense layers first, no MTP module).
_ZERO_MEANS_NONE = {"n_shared_experts", "first_k_dense_replace", "num_nextn_predict_layers"}


@st.composite
def bad_hf_configs(draw: st.DrawFn) -> Case:
    config = copy.deepcopy(draw(st.sampled_from([_LLAMA, _DEEPSEEK])))
    field = draw(st.sampled_from(sorted(k for k in config if k != "model_type")))
    how = draw(st.sampled_from(["value", "layers", "missing", "deep"]))
    if how == "value":
        value = draw(BAD_NUMBER)
        if field in _ZERO_MEANS_NONE and value == 0:
            value = -1
        if isinstance(config[field], bool):
            value = draw(st.one_of(st.integers(), st.text(max_size=3)))
        config[field] = value
    elif how == "layers":
        config["num_hidden_layers"] = draw(st.one_of(st.just(0), st.integers(10_001, 10**9), st.just(2**63)))
    elif how == "missing" and field not in ("num_key_value_heads", "tie_word_embeddings", "n_shared_experts",
                                            "first_k_dense_replace", "q_lora_rank", "num_nextn_predict_layers"):
        del config[field]
    else:
        config[field] = _deep(draw(st.integers(65, 400)))
    return ["estimate", "--model", "{dir}"], {"config.json": json.dumps(config)}


@SETTINGS
@given(case=bad_hf_configs())
def test_bad_hf_config_files(case: Case):
    check(case)


# ----------------------------------------------------------------------------- census files

_RECORD = {"saved": 1000.0, "saved_tp": 2000.0, "working": 10.0, "working_tp": 20.0, "provenance": {"source": "a test"}}


@st.composite
def bad_census_files(draw: st.DrawFn) -> Case:
    record = copy.deepcopy(_RECORD)
    how = draw(st.sampled_from(["value", "missing", "unknown", "deep", "bomb", "per_op"]))
    fmt = draw(st.sampled_from(["yaml", "json"]))
    if how == "value":
        record[draw(st.sampled_from(["saved", "saved_tp", "working", "working_tp"]))] = draw(
            st.one_of(NON_FINITE, st.floats(-1e6, -1e-3), st.floats(2.0**51, 1e308), WRONG_TYPES, st.just(1e308)))
    elif how == "missing":
        del record[draw(st.sampled_from(sorted(record)))]
    elif how == "unknown":
        record[draw(st.from_regex(r"[a-z]{1,8}", fullmatch=True).filter(lambda k: k not in _RECORD and k not in (
            "per_op", "policies")))] = 1.0
    elif how == "per_op":
        record["per_op"] = {draw(st.sampled_from(["softmax", "9bad", ""])): {"saved": draw(BAD_NUMBER), "saved_tp": 0.0}}
    elif how == "deep":
        record["provenance"] = _deep(draw(st.integers(65, 400)))
    else:
        return ["estimate", "--census", "{dir}/census.yaml"], {"census.yaml": _bomb(draw(st.integers(6, 9)))}
    doc = {"kinds": {"dense": record}}
    return ["estimate", "--census", "{dir}/census." + fmt], {"census." + fmt: _dump(doc, fmt)}


@SETTINGS
@given(case=bad_census_files())
def test_bad_census_files(case: Case):
    check(case)


# ----------------------------------------------------------------------------- case files

_MEGATRON = json.loads((DATA / "megatron_measured.json").read_text(encoding="utf-8"))
_MEGATRON_PATHS = [
    ("training_config", "batch", "seq_length"), ("training_config", "batch", "micro_batch_size"),
    ("training_config", "batch", "memory_measured_at_global_batch"), ("training_config", "parallelism", "data_parallel_size"),
    ("training_config", "parallelism", "tensor_model_parallel_size"),
    ("training_config", "parallelism", "pipeline_model_parallel_size"), ("training_config", "optimizer"),
    ("training_config", "model_hf", "hidden_size"), ("training_config", "model_hf", "num_hidden_layers"),
    ("training_config", "model_hf", "vocab_size"), ("measured", "per_stage_peak_derived"), ("measured", "timing_by_mbc"),
    ("case_id",), ("training_config",), ("measured",), ("training_config", "parallelism"),
]


@st.composite
def bad_case_files(draw: st.DrawFn) -> Case:
    if draw(st.booleans()):
        case = copy.deepcopy(_MEGATRON["cases"][0])
        path = draw(st.sampled_from(_MEGATRON_PATHS))
        parent = case
        for key in path[:-1]:
            parent = parent[key]
        how = draw(st.sampled_from(["delete", "value"]))
        if how == "delete" and path[-1] not in ("optimizer", "timing_by_mbc"):  # a case without timings is valid
            del parent[path[-1]]
        else:
            if path[-1] in ("optimizer", "timing_by_mbc"):
                bad = st.one_of(st.text(max_size=3), st.integers(), st.lists(st.text(max_size=2), min_size=1))
            elif path[-1] == "case_id":  # any string is a name
                bad = st.one_of(st.integers(), st.none(), st.lists(st.integers(), max_size=2))
            else:
                bad = st.one_of(BAD_NUMBER, st.none())
            parent[path[-1]] = draw(bad)
        doc = {**_MEGATRON, "cases": [case]}
        return ["validate", "{dir}/megatron_measured.json"], {"megatron_measured.json": json.dumps(doc)}
    measured: dict[str, Any] = {"source": "x", "stage_peak_gib": [10.0, 12.5]}
    case = {"name": "tiny", "config": {"model": "llama3-8b", "num_layers": 4, "runtime": "megatron",
                                       "parallel": {"dp": 2, "tp": 2, "pp": 2, "sp": True, "seq_len": 2048}},
            "measured": measured}
    doc: dict[str, Any] = {"format": "hp-cases/1", "cases": [case]}
    how = draw(st.sampled_from(["peak", "steps", "cases", "missing", "deep", "bomb"]))
    if how == "peak":
        measured["stage_peak_gib"] = [draw(st.one_of(NON_FINITE, st.floats(-100, 0), st.floats(2.0**21, 1e300), WRONG_TYPES)),
                                      12.5]
    elif how == "steps":
        measured["steps"] = draw(st.one_of(st.text(max_size=3), st.dictionaries(st.text(max_size=2), st.integers(), max_size=2),
                                           st.just([{"micro_batches": 4, "seconds": float("nan")}]),
                                           st.just([{"micro_batches": 10**30, "seconds": 1.0}])))
    elif how == "cases":
        doc["cases"] = draw(st.one_of(st.just({}), st.just([]), st.just(""), st.integers()))
    elif how == "missing":
        del case[draw(st.sampled_from(["name", "config", "measured"]))]
    elif how == "deep":
        case["config"] = _deep(draw(st.integers(65, 400)))
    else:
        return ["validate", "{dir}/cases.yaml"], {"cases.yaml": _bomb(draw(st.integers(6, 9)))}
    return ["validate", "{dir}/cases.yaml"], {"cases.yaml": yaml.safe_dump(doc)}


@SETTINGS
@given(case=bad_case_files())
def test_bad_case_files(case: Case):
    check(case)


def test_the_checker_fails_on_valid_input():
    """The properties can fail: a valid run does not pass the checker."""
    import pytest

    with pytest.raises(AssertionError):
        check((["estimate", "--tp=2"], {}))
    with pytest.raises(AssertionError):
        check((["estimate", "--model", "{dir}"], {"config.json": json.dumps(_LLAMA)}))
