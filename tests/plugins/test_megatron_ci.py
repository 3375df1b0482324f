"""Megatron-LM's CI measurements (tests/plugins/data/megatron_ci_measured.json): the data as copied, the models as
Megatron-LM builds them, the importer flags these cases need, and docs/megatron_ci.md's table as
``benchmarks/megatron_ci.py`` prints it today."""

from __future__ import annotations

import collections
import json
import shlex
import statistics
from pathlib import Path

import pytest

from hp_core.errors import ConfigError
from hp_plugins.importers.megatron import import_megatron_args
from hp_plugins.runtimes.userbuffers import custom_margins
from repo_script import load_script  # tests/repo_script.py

ROOT = Path(__file__).resolve().parents[2]
DATA = ROOT / "tests" / "plugins" / "data" / "megatron_ci_measured.json"


@pytest.fixture(scope="module")
def ci():
    return load_script("benchmarks/megatron_ci.py")


@pytest.fixture(scope="module")
def data() -> dict:
    return json.loads(DATA.read_text(encoding="utf-8"))


@pytest.fixture(scope="module")
def found(ci):
    return ci.results()


def _row(data: dict, row_id: str, key: str = "rows") -> dict:
    return next(r for r in data[key] if r["id"] == row_id)


def test_every_row_is_held_out_with_its_provenance(data):
    assert "NVIDIA/Megatron-LM@d98e8a6" in data["source"]
    hardware = {"dgx_h100": "h100-sxm", "dgx_gb200": "gb200", "dgx_a100": "a100-80gb"}
    dense = [r for r in data["rows"] if r["case"].startswith("tests/functional_tests/test_cases/gpt/")]
    assert len(dense) == 10 and sum(r["case"].startswith("tests/functional_tests/test_cases/gpt/")
                                    for r in data["skipped"]) == 9
    for row in dense:
        args = row["model_args"]
        ranks = (args.get("--tensor-model-parallel-size", 1) * args.get("--pipeline-model-parallel-size", 1)
                 * args.get("--context-parallel-size", 1))
        assert row["split"] == "held_out" and row["gpus"] == 8 and row["gpus"] % ranks == 0, row["id"]
        assert row["golden_file"] == f"{row['case']}/golden_values_{row['environment']}_{row['platform']}.json"
        assert row["hardware"] == hardware[row["platform"]] and "recipes" in row["gpus_source"]
        assert args["--log-memory-to-tensorboard"] is True  # the run logged the memory it is compared on
        assert row["assumptions"] and row["not_priced"] and "golden_values" in row, row["id"]
    for row in data["skipped"]:
        assert row["reason"], row["id"]
    # The A100 rows ran before NVIDIA/Megatron-LM c9dfe34 moved the NullTokenizer's EOD into --vocab-size: their
    # MODEL_ARGS (read at the commit that wrote their golden file) state 131072, the later ones 131073.
    assert _row(data, "gpt3_7b_tp1_pp4_memory_speed-dev-dgx_a100")["model_args"]["--vocab-size"] == 131072
    assert _row(data, "gpt3_7b_tp1_pp4_memory_speed-dev-dgx_h100")["model_args"]["--vocab-size"] == 131073


def test_measured_figures_are_the_golden_values_as_copied(data):
    for row in data["rows"]:
        if "golden_values" not in row:
            continue
        golden, measured = row["golden_values"], row["measured"]
        assert measured["peak_bytes"] == max(golden["mem-max-allocated-bytes"]["values"].values()), row["id"]
        steady = collections.Counter(golden["mem-allocated-bytes"]["values"].values()).most_common(1)[0][0]
        assert measured["steady_allocated_bytes"] == steady, row["id"]
        late = [t for step, t in golden["iteration-time"]["values"].items() if int(step) >= row["iteration_from_step"]]
        assert measured["iteration_seconds"] == pytest.approx(statistics.median(late), abs=1e-12), row["id"]
    # By hand from golden_values_dev_dgx_h100.json of gpt3_7b_tp1_pp4_memory_speed: the peak from step 2 on, the
    # one steady value, and the 6th of the 11 even steps 4-24 sorted (1.14861 ... 1.16377).
    h100 = _row(data, "gpt3_7b_tp1_pp4_memory_speed-dev-dgx_h100")["measured"]
    assert h100 == {"peak_bytes": 60720852992, "steady_allocated_bytes": 24808996864, "iteration_seconds": 1.15017}
    fp8 = _row(data, "gpt3_weekly_mcore_tp4_cp2_current_scaling_native_fp8_tp_sp_cp_tp_overlap-dev-dgx_h100")
    assert fp8["measured"]["peak_bytes"] == 425122816 and fp8["measured"]["steady_allocated_bytes"] == 300733952


def _layer_7b(tp: int) -> int:
    """One decoder layer of the 7B cases (h 4096, 32 heads, 8 query groups of 128 channels, GeLU MLP 4h, biases,
    LayerNorm with bias) on one TP rank, as Megatron-Core builds it: column-parallel QKV and FC1 split with their
    biases, row-parallel proj and FC2 split but their biases whole, the two LayerNorms (weight and bias) whole."""
    h, qkv, ffn = 4096, 4096 + 2 * 8 * 128, 16384
    norms = 2 * 2 * h
    column = (h * qkv + qkv + h * ffn + ffn) // tp
    row = (h * h + ffn * h) // tp + h + h
    return norms + column + row


def test_parameters_per_rank_as_megatron_builds_them(ci, data):
    assert _layer_7b(1) == 176_207_872
    # The vocabulary padded to a multiple of 128 * tp (arguments.py --make-vocab-size-divisible-by 128):
    # 131,073 (+ the importer's EOD) -> 131,200 at tp 1, 131,584 at tp 4.
    pp4 = ci.price_row(_row(data, "gpt3_7b_tp1_pp4_memory_speed-dev-dgx_h100"))
    # The last rank of pp 4 with one layer a virtual stage: layers 3, 7, ..., 31, the final LayerNorm, the untied
    # output layer; the first: eight layers, the word table and the learned position table (8192 rows).
    assert pp4["stages"][-1]["parameters_bytes"] == 2 * (8 * _layer_7b(1) + 2 * 4096 + 131_200 * 4096) == 2 * 1_947_066_368
    assert pp4["stages"][0]["parameters_bytes"] == 2 * (8 * _layer_7b(1) + 131_200 * 4096 + 8192 * 4096)
    tp4 = ci.price_row(_row(data, "gpt3_7b_tp4_pp1_memory_speed-dev-dgx_h100"))
    assert tp4["stages"][-1]["parameters_bytes"] == 2 * (32 * _layer_7b(4) + 2 * 131_584 * 4096 // 4 + 8192 * 4096
                                                         + 2 * 4096) == 2 * 1_713_299_456
    # The 15B (h 6144, 48 heads, 8 groups, squared-ReLU MLP 4h, no linear biases, rope, untied, 256,000 tokens): the
    # per-rank count does not depend on the GPU count, which the skipped rows lack; 8 GPUs make dp 1 or 2 here.
    h = 6144
    weights = h * (h + 2 * 8 * 128) + h * h + 2 * h * 4 * h
    # tp 8 pp 1: every layer, the word table and the output layer (untied); tp 4 pp 2 with 8 layers a virtual stage:
    # the last rank holds chunks 1 and 3 (16 layers) and the output layer. 256,000 is a multiple of 128 * 8.
    for row_id, tp, layers, tables in (("gpt3_15b_8t_release-dev-dgx_h100", 8, 32, 2),
                                       ("gpt3_15b_8t_release_sm_gb200-dev-dgx_gb200", 4, 16, 1)):
        row = _row(data, row_id, "skipped")
        priced = ci.price_args(row["model_args"], 8, "h100-sxm", extra_args={"--vocab-size": 256000})
        hand = layers * (weights // tp + 4 * h) + tables * 256_000 * h // tp + 2 * h
        assert priced["stages"][-1]["parameters_bytes"] == 2 * hand, row_id
    assert 32 * (weights // 8 + 4 * h) + 2 * 256_000 * h // 8 + 2 * h == 1_954_295_808


def _imported(registry, argv: str, devices: int = 8):
    return import_megatron_args(shlex.split(argv), registry, devices=devices)


SMALL = ("--num-layers 2 --hidden-size 512 --num-attention-heads 8 --seq-length 1024 --max-position-embeddings 1024 "
         "--micro-batch-size 2 --bf16")


def test_importer_reads_a_step_batch_size_schedule(registry):
    job = _imported(registry, SMALL + " --vocab-size 1000 --step-batch-size-schedule '0:384 200B:768 400B:1152'")
    assert job.document["parallel"]["global_batch_size"] == 384
    assert any("first global batch 384" in line and "768 from 200,000,000,000" in line for line in job.unmapped)
    assert _imported(registry, SMALL + " --vocab-size 1000 --step-batch-size-schedule 0:64").document[
        "parallel"]["global_batch_size"] == 64
    assert _imported(registry, SMALL + " --vocab-size 1000 --step-batch-size-schedule '0:8 1.5K:16'").unmapped[0].endswith(
        "(16 from 1,500 tokens or samples) are not priced")
    with pytest.raises(ConfigError, match="refuses it with --global-batch-size"):
        _imported(registry, SMALL + " --vocab-size 1000 --global-batch-size 8 --step-batch-size-schedule 0:8")
    with pytest.raises(ConfigError, match="the first threshold must be 0"):
        _imported(registry, SMALL + " --vocab-size 1000 --step-batch-size-schedule 10:8")
    with pytest.raises(ConfigError, match="strictly increasing"):
        _imported(registry, SMALL + " --vocab-size 1000 --step-batch-size-schedule '0:8 2M:16 1M:32'")


def test_importer_builds_the_gpt_cases_as_megatron_does(registry, data, ci, tmp_path):
    """The 7B cases state none of --swiglu, --normalization, --position-embedding-type, --disable-bias-linear:
    Megatron's defaults (arguments.py --position-embedding-type learned_absolute; TransformerConfig normalization
    LayerNorm, add_bias_linear True, activation_func gelu, gated_linear_unit False at NVIDIA/Megatron-LM@d98e8a6)."""
    ci_argv = ci.argv

    def configs(row_id: str, key: str = "rows", extra: dict | None = None) -> dict:
        row = _row(data, row_id, key)
        job = import_megatron_args(ci_argv({**row["model_args"], **(extra or {})}), registry, devices=8)
        return {g["kind"]: g["config"] for g in job.document["model"]["layers"]}

    gpt = configs("gpt3_7b_tp1_pp4_memory_speed-dev-dgx_h100")
    assert (gpt["dense"]["norm"], gpt["dense"]["hidden_act"], gpt["dense"]["gated_mlp"]) == ("layernorm", "gelu", False)
    assert gpt["dense"]["attention_bias"] and gpt["dense"]["mlp_bias"] and gpt["dense"]["partial_rotary_factor"] == 0.0
    assert gpt["dense"]["intermediate_size"] == 4 * 4096 and gpt["dense"]["num_key_value_heads"] == 8
    assert gpt["embedding"]["position_embeddings"] == 8192 and not gpt["output"]["tie_word_embeddings"]
    # The FP8 cases: RMSNorm, tied embeddings, GPT-2's vocabulary, and the recipe stating tensorwise current scaling
    # with FP8 parameter gathers; sequence parallelism and TP overlap as the layout and runtime options.
    fp8 = _row(data, "gpt3_weekly_mcore_tp2_pp2_current_scaling_native_fp8_tp_pp_sp_tp_overlap-dev-dgx_h100")
    # Its --tp-comm-overlap-cfg file, as the run read it from Megatron-LM's root, copied into the row; the importer
    # reads the copy (benchmarks/megatron_ci.py price_row writes it so).
    copied = fp8["tp_comm_overlap_cfg_file"]
    assert copied["path"] == fp8["model_args"]["--tp-comm-overlap-cfg"] and copied["commit"] == fp8["model_config_commit"]
    cfg = tmp_path / "tp_comm_overlap_cfg.yaml"
    cfg.write_text(json.dumps(copied["content"]), encoding="utf-8")
    job = import_megatron_args(ci_argv({**fp8["model_args"], "--tp-comm-overlap-cfg": str(cfg)}), registry, devices=8)
    assert job.document["precision"]["recipe"] == "fp8-megatron-param-gather"
    assert job.document["parallel"]["sp"] and job.document["runtime"]["options"]["tp_comm_overlap"]
    # Laid over TE's defaults only fc2_fprop keeps a margin: the file makes it a ring exchange and states neither
    # num_sm nor set_sm_margin, so it keeps its default pipeline's 16 SMs with a margin (base.py get_default_config at
    # NVIDIA/TransformerEngine@d0067d0); every other pipeline or bulk GEMM states set_sm_margin 0.
    stated = job.document["runtime"]["options"]["tp_comm_overlap_cfg"]
    assert custom_margins(stated) == (("fc2_fprop", 16),) and stated["fc2_fprop"] == {"method": "ring_exchange",
                                                                                          "aggregate": False}
    # Its path as the run gave it names a file relative to Megatron-LM's root, which hp's directory does not hold.
    with pytest.raises(ConfigError, match="--tp-comm-overlap-cfg: tests/functional_tests/.*cannot be read"):
        import_megatron_args(ci_argv(fp8["model_args"]), registry, devices=8)
    layers = {g["kind"]: g["config"] for g in job.document["model"]["layers"]}
    assert layers["dense"]["norm"] == "rmsnorm" and layers["output"]["tie_word_embeddings"]
    assert layers["embedding"]["vocab_size"] == 50257
    cp = _row(data, "gpt3_weekly_mcore_tp4_cp2_current_scaling_native_fp8_tp_sp_cp_tp_overlap-dev-dgx_h100")
    job = import_megatron_args(ci_argv(cp["model_args"]), registry, devices=8)
    assert (job.document["parallel"]["tp"], job.document["parallel"]["cp"], job.document["parallel"]["sp"]) == (4, 2, True)
    assert "tp_comm_overlap" not in job.document["runtime"]["options"]  # the case's MODEL_ARGS do not ask for it
    # The 15B release model: squared ReLU, rope on half of each head, no linear biases, the schedule's first batch.
    big = configs("gpt3_15b_8t_release_sm_gb200-dev-dgx_gb200", "skipped", {"--vocab-size": 256000})
    assert (big["dense"]["hidden_act"], big["dense"]["partial_rotary_factor"]) == ("relu2", 0.5)
    assert not big["dense"]["mlp_bias"] and not big["dense"]["attention_bias"] and big["embedding"]["position_embeddings"] == 0


def test_the_docs_table_is_current(ci, found):
    page = (ROOT / "docs" / "megatron_ci.md").read_text(encoding="utf-8")
    assert ci.section(found) in page, "regenerate with: python benchmarks/megatron_ci.py --write"
    assert "(megatron_ci.md)" in (ROOT / "docs" / "accuracy.md").read_text(encoding="utf-8")
    assert "(docs/megatron_ci.md)" in (ROOT / "README.md").read_text(encoding="utf-8")


def test_the_docs_prose_states_the_table_s_figures(found):
    """Pins of docs/megatron_ci.md's prose to today's figures (the table is checked exactly above): a change that
    moves them fails here until the prose is rewritten."""
    page = " ".join((ROOT / "docs" / "megatron_ci.md").read_text(encoding="utf-8").split())
    mib = 2**20
    seven = [r for r in found if "_7b_" in r["row"]["case"]]
    fp8 = [r for r in found if "fp8" in r["row"]["case"]]
    assert f"within {max(abs(r['peak_error']) for r in seven):.1%} on all six" in page

    def gap(r):  # measured steady - hp static, MiB
        return round((r["row"]["measured"]["steady_allocated_bytes"] - r["priced"]["static_bytes"]) / mib)

    pp4 = [gap(r) for r in seven if "pp4" in r["row"]["case"]]
    assert f"holds {min(pp4):,}-{max(pp4):,} MiB more than hp's static" in page
    tp2 = [gap(r) for r in fp8 if "tp2_pp2" in r["row"]["case"]]
    cp2 = {gap(r) for r in fp8 if "cp2" in r["row"]["case"]}
    assert f"by {min(tp2)}-{max(tp2)} MiB at tp 2 pp 2" in page and cp2 == {2} and "by 2 MiB at tp 4 cp 2" in page

    def dynamic(r):
        measured = r["row"]["measured"]
        return (round((measured["peak_bytes"] - measured["steady_allocated_bytes"]) / mib),
                round((r["priced"]["peak_bytes"] - r["priced"]["static_bytes"]) / mib))

    tp2 = [dynamic(r) for r in fp8 if "tp2_pp2" in r["row"]["case"]]
    assert {hp for _, hp in tp2} == {387} and f"{min(m for m, _ in tp2)}-{max(m for m, _ in tp2)} MiB against hp's 387" in page
    by_platform = {}
    for r in seven:
        by_platform.setdefault(r["row"]["platform"], []).append(-r["time_error"])
    for platform, name in (("dgx_h100", "H100"), ("dgx_a100", "A100"), ("dgx_gb200", "GB200")):
        low, high = min(by_platform[platform]), max(by_platform[platform])
        assert f"{low:.1%}-{high:.1%} on {name}".replace("%-", "-") in page, platform
    shortest = [-r["time_error"] for r in fp8]
    assert f"{min(shortest):.0%}-{max(shortest):.0%} shorter than measured".replace("%-", "-") in page


def test_each_row_states_the_recipe_its_launch_imports_as(found):
    """The FP8 rows (``--fp8-format hybrid --fp8-recipe tensorwise --fp8-param-gather``) import as
    fp8-megatron-param-gather, the others (``--bf16`` alone) as bf16: what benchmarks/fp8_scoreboard.py counts them by."""
    for r in found:
        fp8 = "--fp8-format" in r["row"]["model_args"]
        assert r["recipe"] == ("fp8-megatron-param-gather" if fp8 else "bf16"), r["row"]["id"]
    assert sum(r["recipe"] != "bf16" for r in found) == 4
