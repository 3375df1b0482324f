"""Copy Megatron-LM's functional-test measurements into ``tests/plugins/data/megatron_ci_measured.json``.

Run against a clone of NVIDIA/Megatron-LM (any checkout holding commit d98e8a6):

    python benchmarks/megatron_ci_extract.py --repo PATH_TO_MEGATRON_LM_CLONE

Each row is one golden-values file (``golden_values_<env>_<platform>.json``) of a dense GPT test case, with the
case's ``model_config.yaml`` MODEL_ARGS as they stood at the commit that last wrote that golden file (the run that
produced the figures), its GPU count from the test recipe, and the three metrics this benchmark prices:
``mem-max-allocated-bytes`` (max over the logged steps, as ``compute_golden_statistics.py`` compares memory),
``mem-allocated-bytes`` (its steady value: the most frequent one) and ``iteration-time`` (median from the row's
``iteration_from_step``). The per-step values are copied too, so ``tests/plugins/test_megatron_ci.py`` re-derives
each figure. Nothing here is fitted: every row is held out (``benchmarks/megatron_ci.py`` prices them).
"""

from __future__ import annotations

import argparse
import collections
import json
import statistics
import subprocess
from pathlib import Path

import yaml

COMMIT = "d98e8a64ddf34856e74b24714e3bedb2f5a39553"
CASES = "tests/functional_tests/test_cases/gpt"
OUT = Path(__file__).resolve().parents[1] / "tests" / "plugins" / "data" / "megatron_ci_measured.json"
HARDWARE = {"dgx_h100": "h100-sxm", "dgx_gb200": "gb200", "dgx_a100": "a100-80gb"}
# GPU counts: the test recipes' ``spec`` (nodes x gpus; none of these cases' products overrides them).
RECIPES = {
    "dgx_h100": ("tests/test_utils/recipes/h100/gpt.yaml", COMMIT),
    "dgx_gb200": ("tests/test_utils/recipes/gb200/gpt.yaml", COMMIT),
    # No A100 product lists these cases at d98e8a6; the A100 golden files were written by adc69db (2025-10-21),
    # when tests/test_utils/recipes/gpt.yaml (spec: nodes 1, gpus 8, platforms dgx_a100) ran every GPT case.
    "dgx_a100": ("tests/test_utils/recipes/gpt.yaml", "adc69dba2dec6c9014d51b6cad3edf1020731786"),
}
PRICED = ("gpt3_7b_tp1_pp4_memory_speed", "gpt3_7b_tp4_pp1_memory_speed",
          "gpt3_weekly_mcore_tp2_pp2_current_scaling_native_fp8_tp_pp_sp_tp_overlap",
          "gpt3_weekly_mcore_tp4_cp2_current_scaling_native_fp8_tp_sp_cp_tp_overlap")
RELEASE = ("gpt3_15b_8t_release", "gpt3_15b_8t_release_sm", "gpt3_15b_8t_release_sm_gb200")
METRICS = ("mem-max-allocated-bytes", "mem-allocated-bytes", "iteration-time")
# The first logged steps hold the warm-up (step 2: 5-13 s on these runs; step 3 up to 8% slow): the median starts
# at step 4.
ITERATION_FROM_STEP = 4


HEADER = {
    "what": ("Megatron-LM's own CI measurements of dense GPT functional tests (per-rank peak and steady allocated "
             "memory of the last global rank, seconds per iteration), each with the case's MODEL_ARGS, for checking "
             "hp's memory and step time through the megatron importer (benchmarks/megatron_ci.py, "
             "docs/megatron_ci.md). Every row is held out: nothing in hp is fitted to them."),
    "source": ("NVIDIA/Megatron-LM@d98e8a6 (d98e8a64ddf34856e74b24714e3bedb2f5a39553), read 2026-12-03: "
               "tests/functional_tests/test_cases/gpt/<case>/golden_values_<env>_<platform>.json (the measurements) "
               "and model_config.yaml (the run's arguments, read at the commit that last wrote the golden file: "
               "model_config_commit); GPU counts from tests/test_utils/recipes (gpus_source). Copied by "
               "benchmarks/megatron_ci_extract.py."),
    "units": {"peak_bytes": "bytes (torch.cuda.memory_stats()['allocated_bytes.all.peak'])",
              "steady_allocated_bytes": "bytes (torch.cuda.memory_stats()['allocated_bytes.all.current'])",
              "iteration_seconds": "seconds per iteration (the whole global batch)"},
    "conventions": {
        "metrics": ("megatron/training/training.py training_log with --log-memory-to-tensorboard writes "
                    "mem-allocated-bytes (allocated_bytes.all.current) and mem-max-allocated-bytes "
                    "(allocated_bytes.all.peak, since the process started, never reset) after each logged "
                    "iteration's optimizer step; the writer exists on the last global rank only "
                    "(megatron/training/global_vars.py: args.rank == args.world_size - 1): the last pipeline "
                    "stage, last TP/CP/DP rank. iteration-time is seconds per iteration."),
        "peak_bytes": "max over the logged steps' non-nan mem-max-allocated-bytes (compute_golden_statistics.py compares memory by max)",
        "steady_allocated_bytes": "the most frequent non-nan mem-allocated-bytes value over the logged steps",
        "iteration_seconds": ("median of the non-nan iteration-time values at steps >= iteration_from_step "
                              "(compute_golden_statistics.py compares iteration time by median); the first logged "
                              "steps hold the warm-up (5-13 s at step 2)"),
        "golden_values": "the golden file's three metrics as copied (non-nan steps only), so each figure is re-derived by tests",
        "model_args": "MODEL_ARGS of model_config.yaml as YAML reads it (true: a bare flag), at model_config_commit",
        "assumed_args": "arguments added for pricing where the run's files state them (a tokenizer model's size); each is in assumptions",
        "tp_comm_overlap_cfg_file": ("the file --tp-comm-overlap-cfg names (a path from the repository root, where "
                                     "the functional tests launch training), read at model_config_commit: its blob and "
                                     "its yaml.safe_load content; benchmarks/megatron_ci.py writes the content to a "
                                     "file the megatron importer reads as the run did"),
    },
}
# What each case's rows assume and leave unpriced beyond the importer's own warning lines (benchmarks/megatron_ci.py
# prints those).
CASE_NOTES = {
    "gpt3_7b_tp1_pp4_memory_speed": {
        "assumptions": ["GPU count from the recipe spec (8); dp = 8 / (tp 1 x pp 4) = 2",
                        "--num-layers-per-virtual-pipeline-stage 1: 8 chunks a rank, the last rank holding layers "
                        "3, 7, ..., 31 and the output layer"],
        "not_priced": ["--deterministic-mode (deterministic kernels) and NCCL_ALGO=Ring: step time priced with hp's "
                       "default kernels and collectives",
                       "CUBLAS_WORKSPACE_CONFIG=:4096:8 (cuBLAS workspaces of PyTorch's own GEMMs): only TE's cuBLAS "
                       "workspace is priced",
                       "NVTE_FWD/BWD_LAYERNORM_SM_MARGIN=16 (SMs kept from the LayerNorm kernels)"],
    },
    "gpt3_7b_tp4_pp1_memory_speed": {
        "assumptions": ["GPU count from the recipe spec (8); dp = 8 / (tp 4 x pp 1) = 2",
                        "no --sequence-parallel in MODEL_ARGS: TP without sequence parallelism"],
        "not_priced": ["--deterministic-mode (deterministic kernels) and NCCL_ALGO=Ring: step time priced with hp's "
                       "default kernels and collectives",
                       "CUBLAS_WORKSPACE_CONFIG=:4096:8 (cuBLAS workspaces of PyTorch's own GEMMs): only TE's cuBLAS "
                       "workspace is priced",
                       "NVTE_FWD/BWD_LAYERNORM_SM_MARGIN=16 (SMs kept from the LayerNorm kernels)"],
    },
    "gpt3_weekly_mcore_tp2_pp2_current_scaling_native_fp8_tp_pp_sp_tp_overlap": {
        "assumptions": ["GPU count from the recipe spec (8); dp = 8 / (tp 2 x pp 2) = 2",
                        "no --tokenizer-type: pretrain_gpt.py's default GPT2BPETokenizer, its vocab.json taken as "
                        "GPT-2's 50,257 tokens (the file is CI data, not in the repository)"],
        "not_priced": ["--tp-comm-overlap-cfg's per-GEMM methods and split counts: priced as every TP collective "
                       "overlapped; its SM margins are priced as the file states them (tp_comm_overlap_cfg_file, read "
                       "by the importer: only fc2_fprop, made a ring exchange over Transformer Engine's default "
                       "pipeline, keeps that default's 16-SM margin); the userbuffers' own memory is not priced",
                       "--deterministic-mode and NCCL_ALGO=Ring",
                       "CUBLAS_WORKSPACE_CONFIG=:4096:8: only TE's cuBLAS workspace is priced",
                       "no bf16 twin: the nearest bf16 case, gpt3_mcore_te_tp2_pp2, differs in micro batch (4), "
                       "global batch (32), norm (LayerNorm), attention (--attention-backend unfused), sequence "
                       "parallelism, TP overlap and optimizer (not distributed), so FP8's effect cannot be read as a "
                       "difference"],
    },
    "gpt3_weekly_mcore_tp4_cp2_current_scaling_native_fp8_tp_sp_cp_tp_overlap": {
        "assumptions": ["GPU count from the recipe spec (8); dp = 8 / (tp 4 x cp 2) = 1: 64 micro-batches a step",
                        "no --tokenizer-type: pretrain_gpt.py's default GPT2BPETokenizer, its vocab.json taken as "
                        "GPT-2's 50,257 tokens (the file is CI data, not in the repository)",
                        "the case's name says tp_overlap but MODEL_ARGS hold no --tp-comm-overlap: priced without it"],
        "not_priced": ["--deterministic-mode and NCCL_ALGO=Ring",
                       "CUBLAS_WORKSPACE_CONFIG=:4096:8: only TE's cuBLAS workspace is priced",
                       "no bf16 twin: no GPT case runs tp 4 with cp 2 without FP8"],
    },
}
SKIP_REASONS = {
    "gpt3_15b_8t_release": (
        "the GPU count is not in the public repository: release tests are launched from CI settings kept outside it "
        "(.gitlab-ci.yml at 3e0e261 reads them from the RELEASE_GPT variable) and no recipe under "
        "tests/test_utils/recipes lists the case; the data-parallel size sets the optimizer's share of memory and "
        "the micro-batches a step (global batch 384 at every logged step: --step-batch-size-schedule "
        "'0:384 200B:768 400B:1152' reaches 768 only after 200B tokens, 127,157 steps of 384 x 4096, beyond the "
        "runs' last logged step; the older --rampup-batch-size '384 384 97656250' likewise stays at 384), so "
        "neither figure can be priced without guessing it; the tokenizer (nemotron_2_256k.model) is CI data too"),
    "gpt3_15b_8t_release_sm": "as gpt3_15b_8t_release (the same model and layout, 13,000 steps)",
    "gpt3_15b_8t_release_sm_gb200": (
        "as gpt3_15b_8t_release (no public GPU count); besides, its dgx_h100 and lts dgx_a100 golden files are "
        "not runs of this case's tp 4 pp 2 layout: the lts_dgx_a100 file is byte-identical to "
        "gpt3_15b_8t_release_sm's (git blob 379036a), and the dgx_h100 file's median iteration, 3.40 s, is an A100 "
        "figure (the H100 runs of this model log 1.43-1.45 s)"),
}


def git(repo: Path, *args: str) -> str:
    return subprocess.run(["git", "-C", str(repo), *args], check=True, capture_output=True, text=True).stdout


def spec_gpus(repo: Path, platform: str) -> tuple[int, str]:
    path, commit = RECIPES[platform]
    spec = yaml.safe_load(git(repo, "show", f"{commit}:{path}"))["spec"]
    return spec["nodes"] * spec["gpus"], (f"NVIDIA/Megatron-LM@{commit[:7]} {path} spec: nodes {spec['nodes']} x "
                                          f"gpus {spec['gpus']}")


def model_args(repo: Path, case: str, commit: str) -> dict:
    return yaml.safe_load(git(repo, "show", f"{commit}:{CASES}/{case}/model_config.yaml"))


def numeric(values: dict) -> dict[str, float]:
    return {step: value for step, value in values.items() if value != "nan"}


def figures(golden: dict) -> dict:
    peak = numeric(golden["mem-max-allocated-bytes"]["values"])
    steady = numeric(golden["mem-allocated-bytes"]["values"])
    times = numeric(golden["iteration-time"]["values"])
    late = [t for step, t in times.items() if int(step) >= ITERATION_FROM_STEP]
    return {"peak_bytes": int(max(peak.values())),
            "steady_allocated_bytes": int(collections.Counter(steady.values()).most_common(1)[0][0]),
            "iteration_seconds": statistics.median(late) if late else None}


def overlap_cfg(repo: Path, args: dict, commit: str) -> dict:
    """The userbuffers config file a row's ``--tp-comm-overlap-cfg`` names, as the run read it: the path (relative to
    the repository root, where the functional tests launch training) at the row's model_config_commit, its blob and
    ``yaml.safe_load`` of it (Megatron-LM's ``_initialize_tp_communicators``); ``{}`` without the flag."""
    path = args.get("--tp-comm-overlap-cfg")
    if path is None:
        return {}
    return {"tp_comm_overlap_cfg_file": {
        "path": path, "commit": commit, "blob": git(repo, "rev-parse", f"{commit}:{path}").strip(),
        "source": f"NVIDIA/Megatron-LM@{commit[:7]} {path}, read 2026-12-03 by benchmarks/megatron_ci_extract.py",
        "content": yaml.safe_load(git(repo, "show", f"{commit}:{path}"))}}


def row(repo: Path, case: str, name: str) -> dict:
    path = f"{CASES}/{case}/{name}"
    env, platform = name.removeprefix("golden_values_").removesuffix(".json").split("_", 1)
    written, date = git(repo, "log", "-1", "--format=%H %cI", COMMIT, "--", path).split()
    golden = json.loads(git(repo, "show", f"{COMMIT}:{path}"))
    if not all(metric in golden for metric in METRICS):
        return {"id": f"{case}-{env}-{platform}", "case": f"{CASES}/{case}", "platform": platform, "environment": env,
                "golden_file": path, "golden_written_at": date, "metrics_in_file": sorted(golden)}
    config = model_args(repo, case, written)
    head = model_args(repo, case, COMMIT)
    gpus, gpus_source = spec_gpus(repo, platform)
    series = {metric: {"start_step": golden[metric]["start_step"], "end_step": golden[metric]["end_step"],
                       "step_interval": golden[metric]["step_interval"], "values": numeric(golden[metric]["values"])}
              for metric in METRICS}
    return {
        "id": f"{case}-{env}-{platform}", "case": f"{CASES}/{case}", "platform": platform, "environment": env,
        "hardware": HARDWARE[platform], "golden_file": path, "golden_blob": git(repo, "rev-parse", f"{COMMIT}:{path}").strip(),
        "golden_written_by": written, "golden_written_at": date,
        "model_config": f"{CASES}/{case}/model_config.yaml", "model_config_commit": written,
        "model_args_as_at_head": config["MODEL_ARGS"] == head["MODEL_ARGS"],
        "gpus": gpus, "gpus_source": gpus_source, "env_vars": config.get("ENV_VARS", {}),
        "model_args": config["MODEL_ARGS"], "measured": figures(golden), "iteration_from_step": ITERATION_FROM_STEP,
        "golden_values": series, "split": "held_out",
        **overlap_cfg(repo, config["MODEL_ARGS"], written),
        **CASE_NOTES.get(case, {}),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repo", type=Path, required=True, help="a clone of NVIDIA/Megatron-LM holding d98e8a6")
    args = parser.parse_args()
    rows, skipped = [], []
    for case in PRICED + RELEASE:
        names = sorted(n.rsplit("/", 1)[1] for n in git(args.repo, "ls-tree", "--name-only", COMMIT, f"{CASES}/{case}/").split()
                       if n.rsplit("/", 1)[1].startswith("golden_values_"))
        for name in names:
            found = row(args.repo, case, name)
            if case in PRICED and "measured" in found:
                rows.append(found)
            else:
                found.pop("golden_values", None)
                skipped.append(found)
    for r in skipped:
        case = r["case"].rsplit("/", 1)[1]
        if case in RELEASE:
            r["gpus"], r["gpus_source"] = None, "not public (see reason)"
            r["reason"] = SKIP_REASONS[case]
        else:
            r["reason"] = (f"the golden file holds no {', '.join(METRICS)} (metrics in it: "
                           f"{', '.join(r['metrics_in_file']) or 'none'}); the recipe lists the lts A100 product "
                           "commented out ('OOM: #434')")
    # Rows of other cases (another extractor's) are kept as they are; this script's own are replaced.
    ours = {f"{CASES}/{case}" for case in PRICED + RELEASE}
    before = json.loads(OUT.read_text(encoding="utf-8")) if OUT.exists() else {}
    document = {**before, **HEADER,
                "rows": [r for r in before.get("rows", []) if r["case"] not in ours] + rows,
                "skipped": [r for r in before.get("skipped", []) if r["case"] not in ours] + skipped}
    OUT.write_text(json.dumps(document, indent=1) + "\n", encoding="utf-8")


if __name__ == "__main__":
    main()
