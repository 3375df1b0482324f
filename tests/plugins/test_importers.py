"""Trainer-config importers: the Megatron-LM launch lines behind the measured cases import to the same
estimates as the hand-written reader; every plan the megatron exporter writes imports back as the same plan;
unmapped flags are named; bad sources are one-line errors."""

from __future__ import annotations

import json
import shlex
from pathlib import Path

import pytest

from hp_core.api import estimate, prepare, step_time
from hp_core.io.convert import ConfigFile, structure
from hp_core.io.job import resolve_job
from hp_plugins.cases.megatron_measured import read_megatron_case
from hp_plugins.exporters.megatron import export_megatron, megatron_candidates
from hp_plugins.importers.megatron import import_megatron_args, parse_megatron_args, read_megatron_script

from cli_run import run  # tests/cli_run.py


DATA = Path(__file__).parent / "data" / "megatron_measured.json"
CASES = json.loads(DATA.read_text(encoding="utf-8"))["cases"]

SMALL = ("--num-layers 4 --hidden-size 1024 --num-attention-heads 8 --group-query-attention --num-query-groups 4 "
         "--ffn-hidden-size 2048 --seq-length 512 --vocab-size 1000 --swiglu --normalization RMSNorm "
         "--disable-bias-linear --untie-embeddings-and-output-weights --tensor-model-parallel-size 2 "
         "--pipeline-model-parallel-size 2 --micro-batch-size 1 --global-batch-size 8 --bf16 --use-distributed-optimizer "
         "--attention-dropout 0.0 --hidden-dropout 0.0 --max-position-embeddings 512")


def _script(case) -> str:
    """The case's launch as a script: torchrun's arguments, the entry point, Megatron's arguments, one per line."""
    lines = ["#!/bin/bash", "# reconstructed from megatron_measured.json", f"GPUS={case['torchrun_args'][1]}",
             "MEGATRON_ARGS=("] + [f"    {shlex.quote(arg)}" for arg in case["megatron_argv"]] + [")"]
    launcher = " ".join(case["torchrun_args"]).replace(f"--nproc_per_node {case['torchrun_args'][1]}", "--nproc_per_node $GPUS")
    return "\n".join(lines + [f"torchrun {launcher} \\", f"    {case['megatron_entry']} \"${{MEGATRON_ARGS[@]}}\"", ""])


@pytest.mark.parametrize("index", range(len(CASES)), ids=[c["case_id"] for c in CASES])
def test_measured_launch_lines_import_to_the_hand_written_estimates(capsys, tmp_path, registry, index):
    case = CASES[index]
    script = tmp_path / "train.sh"
    script.write_text(_script(case))
    status, out, err = run(capsys, "estimate", "--from", "megatron", script, "--hardware", "b200", "--json")
    assert status == 0, err
    imported = json.loads(out)
    hand = read_megatron_case(case, index)
    reference = estimate(hand.model, hand.parallel, registry=registry, runtime="megatron")
    assert [s["memory"]["peak_bytes"] for s in imported["stages"]] == [s.peak_bytes for s in reference.stages]
    assert imported["world_size"] == 8 and imported["layout"]["dp"] == hand.parallel.dp
    timed = step_time(hand.model, hand.parallel, registry=registry, runtime="megatron",
                      hardware=registry.hardware_preset("b200").spec)
    assert imported["time"]["step_seconds"] == pytest.approx(timed.step_seconds, rel=1e-12)
    # Every flag is mapped or has no effect on what hp prices, so no warning is printed.
    assert err == ""


def test_the_script_reader_expands_variables_and_reads_the_device_count():
    text = ("NODES=2\nexport TP=4\nARGS=(\n  --tensor-model-parallel-size $TP   # a comment\n  --seq-length ${SEQ:-2048}\n)\n"
            "torchrun --nproc-per-node 8 --nnodes ${NODES} \\\n  pretrain_gpt.py ${ARGS[@]} --micro-batch-size=2\n")
    tokens, devices = read_megatron_script(text)
    assert devices == 16
    assert parse_megatron_args(tokens) == {"tensor-model-parallel-size": ["4"], "seq-length": ["2048"],
                                           "micro-batch-size": ["2"]}


def _job(registry, imported, devices=8):
    """The imported document as a resolved job, dp derived from the device count as the command line does."""
    document = dict(imported.document)
    parallel = dict(document["parallel"])
    parallel["dp"] = devices // (parallel["tp"] * parallel["pp"] * parallel["cp"])
    document["parallel"] = parallel
    return resolve_job(structure(document, ConfigFile, registry), registry)


def _resolved(registry, job, plan):
    run_ = prepare(job.model, job.parallel, registry=registry, runtime=job.runtime)
    return [run_.resolve(group, setting) for group, setting in zip(run_.body_group, run_.settings(plan))]


@pytest.mark.parametrize("base", ["small", "deepseek"])
def test_every_plan_the_exporter_writes_imports_back_as_the_same_plan(registry, base):
    tokens = shlex.split(SMALL) if base == "small" else list(CASES[2]["megatron_argv"])
    # without the case's own recompute flags (values included)
    tokens = [t for flag, values in parse_megatron_args(tokens).items() if not flag.startswith("recompute")
              for t in (f"--{flag}", *values)]
    plain = import_megatron_args(tokens, registry, devices=8)
    job = _job(registry, plain)
    candidates = megatron_candidates(job.model, job.parallel, registry=registry)
    assert len(candidates) > 3
    for plan in candidates:
        flags = export_megatron(plan, job.model, job.parallel, registry=registry)
        back = import_megatron_args(tokens + shlex.split(flags), registry, devices=8)
        assert back.unmapped == plain.unmapped, flags
        again = _job(registry, back)
        assert _resolved(registry, again, again.recompute) == _resolved(registry, job, plan), flags


def test_megatron_args_text_with_devices_and_unmapped_flags(capsys):
    status, out, err = run(capsys, "estimate", "--from", "megatron-args", SMALL + " --fp8-wgrad --lr 1e-4",
                           "--devices", "16", "--json")
    assert status == 0
    doc = json.loads(out)
    assert (doc["layout"]["dp"], doc["layout"]["tp"], doc["layout"]["pp"]) == (4, 2, 2)
    assert doc["provenance"]["runtime_options"]["cross_entropy_fusion"] is False  # Megatron's default: unfused
    assert err == "hp estimate: warning: --fp8-wgrad: not mapped\n"  # --lr changes nothing priced: quiet


def test_grad_reduce_in_bf16_imports_as_the_runtime_option(registry):
    # arguments.py: under --bf16, --grad-reduce-in-bf16 turns --accumulate-allreduce-grads-in-fp32 off.
    job = import_megatron_args(shlex.split(SMALL + " --grad-reduce-in-bf16"), registry, devices=16)
    assert job.document["runtime"]["options"]["grad_reduce_in_fp32"] is False and not job.unmapped
    assert "grad_reduce_in_fp32" not in import_megatron_args(shlex.split(SMALL), registry, devices=16).document["runtime"]["options"]


def test_flags_override_the_imported_job(capsys):
    status, out, _ = run(capsys, "estimate", "--from", "megatron-args", SMALL, "--dp", "1", "--tp", "1",
                         "--runtime-option", "cross_entropy_fusion=true", "--json")
    doc = json.loads(out)
    assert status == 0 and (doc["layout"]["tp"], doc["layout"]["dp"]) == (1, 1)
    assert doc["provenance"]["runtime_options"]["cross_entropy_fusion"] is True


@pytest.mark.parametrize(("argv", "message"), [
    (SMALL.replace("--vocab-size 1000", ""), "--vocab-size: the tokenizer's vocabulary is not in the arguments"),
    (SMALL.replace("RMSNorm", "ScaleNorm"), "--normalization: expected LayerNorm or RMSNorm, got 'ScaleNorm'"),
    (SMALL.replace("--max-position-embeddings 512", ""), "--max-position-embeddings: Megatron-LM requires it"),
    (SMALL.replace("--num-layers 4", "--num-layers four"), "--num-layers: expected int, got 'four'"),
    ("--num-layers 4 'unclosed", "--from megatron-args: the arguments do not parse"),
    (SMALL + " --recompute-granularity full --recompute-method block",
     "--recompute-num-layers: --recompute-method block needs it"),
])
def test_bad_arguments_are_one_line_errors(capsys, argv, message):
    status, out, err = run(capsys, "estimate", "--from", "megatron-args", argv, "--dp", "1")
    assert status == 2 and out == "" and err.count("\n") == 1 and message in err


def test_a_script_without_an_entry_point_or_an_unknown_importer(capsys, tmp_path):
    script = tmp_path / "x.sh"
    script.write_text("echo hello\n")
    status, _, err = run(capsys, "estimate", "--from", "megatron", script)
    assert status == 2 and "found no line running a *.py entry point" in err
    status, _, err = run(capsys, "estimate", "--from", "nemo-9000", script)
    assert status == 2 and "--from" in err and "megatron" in err


def test_a_script_s_cublas_workspace_config_sizes_pytorch_s_workspaces(capsys, tmp_path, registry):
    """``export CUBLAS_WORKSPACE_CONFIG=:4096:8`` (Megatron-LM's CI) is the runtime option cublas_workspace_kib,
    4,096 KiB x 8 = 32,768; the last stage, which runs the output layer through torch, holds two such workspaces."""
    launch = ("torchrun --nproc-per-node 8 pretrain_gpt.py --num-layers 2 --hidden-size 1024 --num-attention-heads 8 "
              "--seq-length 1024 --max-position-embeddings 1024 --micro-batch-size 1 --vocab-size 32000 "
              "--tokenizer-type NullTokenizer --bf16\n")
    environment: dict[str, str] = {}
    tokens, _ = read_megatron_script("export CUBLAS_WORKSPACE_CONFIG=:4096:8\nLIST=(a b)\n" + launch, environment)
    assert environment == {"CUBLAS_WORKSPACE_CONFIG": ":4096:8"}
    imported = import_megatron_args(tokens, registry, env=environment)
    assert imported.document["runtime"]["options"]["cublas_workspace_kib"] == 32_768
    plain = import_megatron_args(tokens, registry)
    assert "cublas_workspace_kib" not in plain.document["runtime"]["options"]
    (stated,), (default,) = (estimate(job.model, job.parallel, registry=registry, runtime=job.runtime,
                                      hardware="a100-80gb").stages
                             for job in (_job(registry, imported), _job(registry, plain)))
    # On the A100 PyTorch's default is :4096:2:16:8, 8,519,680 B a workspace.
    assert stated.memory.runtime_overhead_bytes - default.memory.runtime_overhead_bytes == 2 * (32 * 2**20 - 8_519_680)
    script = tmp_path / "bad.sh"
    script.write_text("export CUBLAS_WORKSPACE_CONFIG=4096\n" + launch)
    status, _, err = run(capsys, "estimate", "--from", "megatron", script)
    assert status == 2 and "CUBLAS_WORKSPACE_CONFIG" in err and "Traceback" not in err
