"""Megatron-LM's CI measurements of its MoE cases (tests/plugins/data/megatron_ci_moe_measured.json): the figures as
the golden-value files state them, the Mixtral 8x7B rank as Megatron-Core builds it (counted by hand), the importer's
reading of the cases' arguments, the world-size inference, and docs/accuracy.md's table as
``benchmarks/megatron_ci_moe.py`` prints it today."""

from __future__ import annotations

import json
import shlex
from pathlib import Path

import pytest

from hp_core import api
from hp_core.errors import ConfigError
from hp_plugins.importers.megatron import import_megatron_args

from repo_script import load_script  # tests/repo_script.py

ROOT = Path(__file__).resolve().parents[2]
DATA = ROOT / "tests" / "plugins" / "data" / "megatron_ci_moe_measured.json"
GIB = 2**30


@pytest.fixture(scope="module")
def registry():
    return api.build_registry()


@pytest.fixture(scope="module")
def bench():
    return load_script("benchmarks/megatron_ci_moe.py")


@pytest.fixture(scope="module")
def found(bench, registry):
    return bench.results(registry)


def _rows() -> dict:
    return {r["id"]: r for r in json.loads(DATA.read_text(encoding="utf-8"))["rows"]}


def test_the_figures_are_the_golden_files_values():
    # Typed from NVIDIA/Megatron-LM@d98e8a6's golden_values files: the largest mem-max-allocated-bytes and its step,
    # the (constant) mem-allocated-bytes, the median iteration-time after warm-up.
    expected = {
        "mixtral-8x7b-tp2pp4vpp8ep8-h100": (35505844224, 30, 19743387648, 3.27259),
        "mixtral-8x7b-tp2pp4vpp8ep8-a100": (35900022784, 30, 19085930496, 3.74951),
        "mixtral-8x22b-tp2pp8ep8-h100": (28533706752, 60, 23002929152, 6.98051),
        "dsv3-proxy-tp2pp4vpp2ep16-h100": (46597890048, 345, 33395556352, 12.02946),
        "dsv3-proxy-tp2pp2ep8-gb200": (100882341888, 560, 58533744640, 7.66518),
        "moe-small-memory-speed-h100": (60111630336, 39, 6632031744, 1.02657),
        "moe-small-mtp-fp8-h100": (57578217472, 40, 7321333248, 1.14623),
    }
    rows = _rows()
    for key, (peak, step, steady, seconds) in expected.items():
        m = rows[key]["measured"]
        assert (m["peak_bytes"], m["peak_step"], m["steady_bytes"], m["iteration_seconds"]) == (peak, step, steady, seconds)
    # The 50-step H100 run logs every step: after step 5 its 45 iteration times have the median above.
    assert rows["moe-small-memory-speed-h100"]["measured"]["iteration_steps"].startswith("median of the 45 logged steps")


def test_every_row_states_its_provenance_and_assumptions():
    data = json.loads(DATA.read_text(encoding="utf-8"))
    assert "NVIDIA/Megatron-LM@d98e8a6" in data["source"]
    for row in data["rows"] + data["skipped"]:
        assert row["case"].startswith("tests/functional_tests/test_cases/"), row["id"]
        assert row["golden"] == f"{row['case']}/golden_values_{row['golden'].split('golden_values_')[1]}", row["id"]
        assert row["golden"].endswith(f"_{row['platform']}.json"), row["id"]
    for row in data["rows"]:
        assert row["hardware"] == {"dgx_h100": "h100-sxm", "dgxh100_dgxc": "h100-sxm", "dgx_a100": "a100-80gb",
                                   "dgx_gb200": "gb200"}[row["platform"]], row["id"]
        assert any("not forced balanced" in a for a in row["assumptions"]), row["id"]
        assert row["gpus_inferred"] == ("inferred" in row["gpus_source"]), row["id"]
    assert {s["id"] for s in data["skipped"]} == {"nemotron3-super-gb200", "nemotron3-super-sm-gb200"}


def test_mixtral_8x7b_last_rank_counted_by_hand(bench, registry):
    """TP 2, PP 4 with 8 virtual stages, EP 8, expert TP 1: the last rank holds 8 of the 32 layers and the output head.
    Per layer (h 4096, 32 heads of 128, 8 query groups, FFN 14336, 8 experts): QKV (4096 + 2 * 1024) * 4096 / 2 =
    12,582,912, the projection 4096 * 4096 / 2 = 8,388,608, the fused input norm 4096, the pre-MLP norm 4096, the
    router 8 * 4096 = 32,768 (not split), one local expert 3 * 14336 * 4096 = 176,160,768: 197,173,248; the head:
    the final norm 4096 and 32,000 (Llama 2's vocabulary, already a multiple of 128 * tp) * 4096 / 2 = 65,536,000."""
    row = _rows()["mixtral-8x7b-tp2pp4vpp8ep8-h100"]
    j = bench.job(row, registry)
    stage = api.estimate(j.model, j.parallel, registry=registry, runtime=j.runtime, precision=j.precision).stages[-1]
    per_layer = 12_582_912 + 8_388_608 + 4096 + 4096 + 32_768 + 176_160_768
    assert per_layer == 197_173_248
    assert len(stage.layers) == 8
    assert stage.parameters_by_kind == {"moe": 8 * per_layer, "output": 4096 + 65_536_000}
    # Megatron's accounting at 64 GPUs: bf16 weights, the fp32 gradient buffer, and the distributed optimizer's 12
    # bytes (fp32 master, two fp32 moments) per element over the data-parallel group: dp 64 / (tp 2 * pp 4) = 8 for
    # the dense part, the expert data-parallel 64 / (pp 4 * ep 8) = 2 for the experts.
    total, experts = 8 * per_layer + 4096 + 65_536_000, 8 * 176_160_768
    model_states = 2 * total + 4 * total + 12 * (total - experts) // 8 + 12 * experts // 2
    assert model_states == 18_663_733_248
    m = stage.memory
    assert m.parameters_bytes + m.gradients_bytes + m.master_parameters_bytes + m.optimizer_states_bytes == model_states
    assert bench.static_bytes(m) == model_states + m.runtime_overhead_bytes


def test_the_importer_reads_the_cases(bench, registry):
    rows = _rows()
    mixtral = bench.imported(rows["mixtral-8x7b-tp2pp4vpp8ep8-h100"], registry)
    parallel = mixtral.document["parallel"]
    # The case's name says tp1; its arguments state tp 2 (and --num-layers-per-virtual-pipeline-stage 1: 8 chunks).
    assert {k: parallel[k] for k in ("tp", "pp", "vpp", "ep", "etp", "sp", "zero", "global_batch_size")} == {
        "tp": 2, "pp": 4, "vpp": 8, "ep": 8, "etp": 1, "sp": True, "zero": 1, "global_batch_size": 256}
    # Checkpoint, logging and loss-weight flags are quiet; what is left is named.
    assert mixtral.unmapped == ("--tokenizer-type Llama2Tokenizer: read as Llama 2's 32,000-token vocabulary; a "
                                "different tokenizer file is not priced",)
    assert mixtral.document["runtime"]["options"]["rope_kernels"] == "eager"  # --no-rope-fusion
    proxy = bench.imported(rows["dsv3-proxy-tp2pp4vpp2ep16-h100"], registry).document
    assert (proxy["parallel"]["vpp"], proxy["parallel"]["layers_per_stage"]) == (2, [2, 2, 2, 2, 2, 2, 1, 1])
    assert proxy["runtime"]["options"]["ep_all_to_all"] == "hybridep"
    small = bench.imported(rows["moe-small-mtp-fp8-h100"], registry)
    assert small.document["precision"] == {"recipe": "fp8-current"}
    assert small.unmapped[0] == ("--tokenizer-type not given: read as pretrain_gpt.py's default GPT2BPETokenizer "
                                 "(--vocab-file and --merge-file given)")


def test_an_unstated_tokenizer_with_bpe_files_is_pretrain_gpts_gpt2_bpe(registry):
    base = ("--num-layers 2 --hidden-size 256 --num-attention-heads 4 --seq-length 128 --max-position-embeddings 128 "
            "--micro-batch-size 1 --global-batch-size 8 --bf16 --tensor-model-parallel-size 2")

    def vocab(extra):
        job = import_megatron_args(shlex.split(base + extra), registry, devices=8)
        (embedding,) = [g for g in job.document["model"]["layers"] if g["kind"] == "embedding"]
        return embedding["config"]["vocab_size"], job.unmapped

    # 50,257 padded to a multiple of 128 * tp 2 = 256: 50,432 rows in Megatron, hp's embedding states the 50,257.
    size, unmapped = vocab(" --vocab-file vocab.json --merge-file merges.txt")
    assert size == 50257
    assert any("pretrain_gpt.py's default GPT2BPETokenizer" in line for line in unmapped)
    assert vocab(" --vocab-file vocab.json --vocab-size 1000")[0] == 1000  # no merge file: no BPE pair, the size is kept
    with pytest.raises(Exception, match="--vocab-size"):
        vocab("")  # neither a size nor a file: still refused
    with pytest.raises(ConfigError, match="state --vocab-size"):  # a vocab file alone names no tokenizer
        vocab(" --vocab-file vocab.json")


def test_no_rope_fusion_runs_the_rotation_as_megatrons_eager_kernels(bench, registry):
    """--no-rope-fusion (arguments.py, dest apply_rope_fusion) maps to the megatron runtime's rope_kernels eager, whose
    form is the runtime's rope_rotate_half trait (rope_utils.py _rotate_half): 20 bytes per rotated q/k element
    forward and 30 backward in place of the fused kernel's read and write. Only with rope positions."""
    base = ("--num-layers 2 --hidden-size 256 --num-attention-heads 4 --seq-length 128 --max-position-embeddings 128 "
            "--micro-batch-size 1 --global-batch-size 8 --bf16 --vocab-size 1000 --no-rope-fusion")
    options = lambda extra: import_megatron_args(shlex.split(base + extra), registry, devices=8).document["runtime"]["options"]
    assert options(" --position-embedding-type rope")["rope_kernels"] == "eager"
    assert "rope_kernels" not in options("")  # learned positions: validate_args turns the fusion off, no rotation
    assert "rope_rotate_half" in registry.runtime("megatron").traits
    row = _rows()["mixtral-8x7b-tp2pp4vpp8ep8-h100"]
    j = bench.job(row, registry)
    eager = api.step_time(j.model, j.parallel, registry=registry, runtime=j.runtime, hardware=j.hardware).step_seconds
    fused = api.step_time(j.model, j.parallel, registry=registry, hardware=j.hardware,
                          runtime=api.apply_options(j.runtime, {"rope_kernels": "as_elementwise"})).step_seconds
    assert eager > fused


def test_the_native_fused_loss_keeps_the_fp32_softmax(bench, registry):
    """--cross-entropy-loss-fusion with Megatron-Core's default --cross-entropy-fusion-impl native
    (megatron/core/fusions/fused_cross_entropy.py: logits.float(), the fp32 softmax saved for backward) is the runtime's
    unfused loss in memory; only te is cross_entropy_fusion. On the GB200 proxy's last stage (micro-batch 4, 4,096
    tokens, 256,000 tokens padded to a multiple of 3232 * tp 2 = 6,464: 258,560, 129,280 a rank) the model's loss and
    the MTP module's each keep 4 * 4,096 * 129,280 * 4 bytes, 2 bytes an element more than TE's bf16 logits."""
    row = _rows()["dsv3-proxy-tp2pp2ep8-gb200"]
    imported = bench.imported(row, registry)
    assert imported.document["runtime"]["options"]["cross_entropy_fusion"] is False
    assert not any("cross-entropy" in line for line in imported.unmapped)
    j = bench.job(row, registry)

    def stage(runtime):
        return api.estimate(j.model, j.parallel, registry=registry, runtime=runtime, precision=j.precision).stages[-1]

    native, te = stage(j.runtime), stage(api.apply_options(j.runtime, {"cross_entropy_fusion": True}))
    in_flight = native.chunks[-1].micro_batches_in_flight
    extra = 4 * 4096 * 129_280 * (4 - 2)
    assert native.activations_by_kind["output"] - te.activations_by_kind["output"] == extra * in_flight
    assert native.activations_by_kind["mtp"] - te.activations_by_kind["mtp"] == extra * in_flight
    te_job = import_megatron_args(bench.argv(row) + ["--cross-entropy-fusion-impl", "te"], registry, devices=32)
    assert te_job.document["runtime"]["options"]["cross_entropy_fusion"] is True


def test_the_world_size_inference_is_the_fewest_gpus_whose_model_states_fit(bench, registry):
    inferred = 0
    for row in _rows().values():
        if not row["gpus_inferred"]:
            continue
        candidates = bench.world_candidates(row, registry)
        assert candidates[0][0] == bench.least_world(row, registry)
        assert bench.inferred_world(row, registry) == row["gpus"], row["id"]
        fewer = [states for gpus, states in candidates if gpus < row["gpus"]]
        assert all(states > row["measured"]["steady_bytes"] for states in fewer), row["id"]
        inferred += 1
    assert inferred == 11


def test_the_suspect_a100_timings_exceed_what_an_a100_reaches(found):
    by_id = {r["row"]["id"]: r for r in found}
    assert by_id["mixtral-8x7b-tp2pp4vpp8ep8-a100"]["measured_mfu"] > 1.0
    assert by_id["mixtral-8x22b-tp2pp8ep8-a100"]["measured_mfu"] > 0.9
    assert by_id["mixtral-8x7b-a2a-tp2pp4ep4-a100"]["measured_mfu"] < 0.5  # the plausible A100 file of the three
    suspect = {r["row"]["id"] for r in found if r["row"]["time_suspect"]}
    assert suspect == {"mixtral-8x7b-tp2pp4vpp8ep8-a100", "mixtral-8x22b-tp2pp8ep8-a100", "moe-small-memory-speed-h100-dgxc"}


def test_docs_table_is_current(bench, found):
    page = (ROOT / "docs" / "accuracy.md").read_text(encoding="utf-8")
    assert bench.section(found) in page, "regenerate with: python benchmarks/megatron_ci_moe.py"


def test_each_row_states_the_recipe_its_launch_imports_as(found):
    """The one FP8 row (``--fp8-format hybrid --fp8-recipe tensorwise``, no FP8 parameters) imports as fp8-current,
    the others (``--bf16`` alone) as bf16: what benchmarks/fp8_scoreboard.py counts them by."""
    assert {r["row"]["id"]: r["recipe"] for r in found if r["recipe"] != "bf16"} == {"moe-small-mtp-fp8-h100": "fp8-current"}
    assert all("--fp8-format" not in r["row"]["model_args"] for r in found if r["recipe"] == "bf16")
