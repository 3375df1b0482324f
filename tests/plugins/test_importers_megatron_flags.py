"""The megatron importer's pipeline split, overlap options and precision recipe, each against what
Megatron-LM builds from the same arguments (hp_plugins/importers/megatron_options.py)."""

from __future__ import annotations

import json
import shlex
from pathlib import Path

import attrs
import pytest
from hypothesis import given, settings, strategies as st

from hp_core.cli import main
from hp_core.errors import ConfigError
from hp_plugins.importers.megatron import import_megatron_args
from hp_plugins.importers.megatron_options import parse_layout

from megatron_args import SMALL  # tests/plugins/megatron_args.py


# A DeepSeek-V2-shaped model (MLA, routed and shared experts, one leading dense layer) with one MTP layer:
# the measured deepseekv2 case's model arguments (tests/plugins/data/megatron_measured.json) at 8 layers.
_CASE = json.loads((Path(__file__).parent / "data" / "megatron_measured.json").read_text(encoding="utf-8"))["cases"][2]
MLA = [t.replace("<TRAIN_ITERS>", "10").replace("<WARMUP_ITERS>", "1").replace("<TB_PATH>", "tb")
       for t in _CASE["megatron_argv"]]
MLA[MLA.index("--num-layers") + 1] = "8"


def _imported(registry, argv: str | list[str], devices: int = 64):
    tokens = shlex.split(argv) if isinstance(argv, str) else argv
    return import_megatron_args(tokens, registry, devices=devices)


def _split(job) -> tuple[int, list[int] | None]:
    return job.document["parallel"]["vpp"], job.document["parallel"].get("layers_per_stage")


def test_layout_strings_unroll_as_megatron_parses_them():
    # pipeline_parallel_layer_layout.py parse_str_to_list's own example: "Ettt|(tt|)*29,m|L".
    assert parse_layout("Ettt|(tt|)*29,m|L") == ["Ettt"] + ["tt"] * 29 + ["m", "L"]
    # Megatron-Bridge's DeepSeek-V3 layout for 16 chunks (61 layers, one MTP layer).
    chunks = parse_layout("Et*4|(t*4|)*14tmL")
    assert chunks == ["Etttt"] + ["tttt"] * 14 + ["tmL"] and "".join(chunks).count("t") == 61
    with pytest.raises(ConfigError, match="unknown layer characters 'x'"):
        parse_layout("Etx|L")


def test_a_layout_places_the_layers_of_each_chunk(registry, capsys):
    # 8 layers over pp 4: chunk c on rank c % pp; the MTP layer with the loss on the last chunk, where hp places it.
    job = _imported(registry, MLA + ["--mtp-num-layers", "1", "--pipeline-model-parallel-size", "4",
                                     "--pipeline-model-parallel-layout", "Et|(tt|)*2,t*3mL"])
    assert _split(job) == (1, [1, 2, 2, 3]) and not job.unmapped
    # Interleaved: "E|tt|tt|tt|t|L" over pp 3 is two chunks a rank; rank 0 holds chunks 0 and 3.
    job = _imported(registry, SMALL.replace("--num-layers 8", "--num-layers 7")
                    + " --pipeline-model-parallel-size 3 --pipeline-model-parallel-layout 'E|tt|tt|tt|t|L'", devices=6)
    assert _split(job) == (2, [0, 2, 2, 2, 1, 0])
    status = main(["estimate", "--from", "megatron-args", SMALL.replace("--num-layers 8", "--num-layers 7")
                   + " --pipeline-model-parallel-size 3 --pipeline-model-parallel-layout 'E|tt|tt|tt|t|L'",
                   "--devices", "6", "--global-batch-size", "24", "--json"])
    out = json.loads(capsys.readouterr().out)
    assert status == 0 and [s["layers"] for s in out["stages"]] == [[4, 5], [0, 1, 6], [2, 3]]


def test_embedding_and_loss_counted_as_layers(registry):
    # transformer_block.py get_num_layers_to_build: (8 + 1 + 1) / pp 2 = 5 a rank, 1 a chunk over 5 virtual stages;
    # the first chunk builds one fewer for the embedding, the last one fewer for the loss.
    job = _imported(registry, SMALL + " --pipeline-model-parallel-size 2 --num-virtual-stages-per-pipeline-rank 5 "
                    "--account-for-embedding-in-pipeline-split --account-for-loss-in-pipeline-split")
    assert _split(job) == (5, [0] + [1] * 8 + [0])
    # Only the embedding: 9 does not divide over pp 2, as Megatron-LM asserts.
    with pytest.raises(ConfigError, match="9 layers .* do not split evenly over 2 ranks"):
        _imported(registry, SMALL + " --pipeline-model-parallel-size 2 --account-for-embedding-in-pipeline-split")
    # --num-layers-per-virtual-pipeline-stage counts the embedding and the loss too: 10 / 2 / 1 = 5 chunks a rank.
    job = _imported(registry, SMALL + " --pipeline-model-parallel-size 2 --num-layers-per-virtual-pipeline-stage 1 "
                    "--account-for-embedding-in-pipeline-split --account-for-loss-in-pipeline-split")
    assert _split(job) == (5, [0] + [1] * 8 + [0])


def test_uneven_first_and_last_ranks(registry):
    # 16 layers, pp 4: first 2, last 6, the 8 left over the 2 middle ranks; 2 virtual stages split each rank's count.
    job = _imported(registry, SMALL.replace("--num-layers 8", "--num-layers 16") + " --pipeline-model-parallel-size 4 "
                    "--decoder-first-pipeline-num-layers 2 --decoder-last-pipeline-num-layers 6 "
                    "--num-virtual-stages-per-pipeline-rank 2")
    assert _split(job) == (2, [1, 2, 2, 3, 1, 2, 2, 3])
    job = _imported(registry, SMALL + " --pipeline-model-parallel-size 2 --decoder-first-pipeline-num-layers 3")
    assert _split(job) == (1, [3, 5])


def test_uneven_stages_the_exporter_writes_import_back(registry):
    from hp_core.io.convert import ConfigFile, structure
    from hp_core.io.job import resolve_job
    from hp_plugins.exporters.megatron import export_megatron
    from hp_core.specs import RecomputeSpec

    base = SMALL.replace("--num-layers 8", "--num-layers 16") + " --pipeline-model-parallel-size 4"
    for split in ([3, 4, 4, 5], [1, 2, 2, 3, 1, 2, 2, 3], [2, 5, 5, 4]):
        document = json.loads(json.dumps(_imported(registry, base).document))
        document["parallel"].update(dp=2, vpp=len(split) // 4, layers_per_stage=split)
        job = resolve_job(structure(document, ConfigFile, registry), registry)
        flags = export_megatron(RecomputeSpec.uniform("none"), job.model, job.parallel, registry=registry)
        assert _split(_imported(registry, base + " " + flags)) == (len(split) // 4, split), flags


@pytest.mark.parametrize(("extra", "message"), [
    ("--pipeline-model-parallel-size 2 --pipeline-model-parallel-layout 'Etttt|tttt'", "the loss 'L' must come last"),
    ("--pipeline-model-parallel-size 2 --pipeline-model-parallel-layout 'tE|tttt|ttt|L'", "the embedding 'E' must come first"),
    ("--pipeline-model-parallel-size 2 --pipeline-model-parallel-layout 'E|tttt|tttL'", "3 chunks do not divide"),
    ("--pipeline-model-parallel-size 2 --pipeline-model-parallel-layout 'Etttt|tttL'", "places 7 decoder layers"),
    ("--pipeline-model-parallel-size 2 --pipeline-model-parallel-layout 'Etttt|ttttmL'", "places 1 MTP layers"),
    ("--pipeline-model-parallel-size 2 --num-layers-per-virtual-pipeline-stage 2 "
     "--num-virtual-stages-per-pipeline-rank 2", "at most one of"),
    ("--pipeline-model-parallel-size 3 --decoder-first-pipeline-num-layers 1", "do not split evenly over the 2 middle"),
    ("--pipeline-model-parallel-size 2 --decoder-first-pipeline-num-layers 3 --account-for-loss-in-pipeline-split",
     "does not take it with"),
])
def test_pipeline_splits_megatron_refuses_are_one_line_errors(registry, extra, message):
    with pytest.raises(ConfigError, match=message):
        _imported(registry, SMALL + " " + extra)


def _options(job) -> dict:
    return job.document["runtime"]["options"]


def test_overlap_flags_and_the_dispatcher_are_the_runtime_options(registry):
    job = _imported(registry, SMALL + " --tensor-model-parallel-size 2 --sequence-parallel --overlap-grad-reduce "
                    "--overlap-param-gather --tp-comm-overlap --pipeline-model-parallel-size 2 "
                    "--num-virtual-stages-per-pipeline-rank 2")
    assert {k: _options(job)[k] for k in ("overlap_grad_reduce", "overlap_param_gather", "tp_comm_overlap",
                                          "overlap_p2p_communication")} == dict.fromkeys(
        ("overlap_grad_reduce", "overlap_param_gather", "tp_comm_overlap", "overlap_p2p_communication"), True)
    # arguments.py: pipeline sends overlap by default (dest overlap_p2p_comm) and only under the interleaved schedule.
    off = _imported(registry, SMALL + " --pipeline-model-parallel-size 2 --num-virtual-stages-per-pipeline-rank 2 "
                    "--no-overlap-p2p-communication")
    assert "overlap_p2p_communication" not in _options(off) and not off.unmapped
    assert "overlap_p2p_communication" not in _options(_imported(registry, SMALL + " --pipeline-model-parallel-size 2"))
    moe = MLA + ["--moe-token-dispatcher-type", "flex", "--moe-enable-deepep", "--overlap-moe-expert-parallel-comm"]
    job = _imported(registry, moe)
    assert _options(job)["ep_all_to_all"] == "deepep" and _options(job)["overlap_moe_expert_parallel_comm"] is True
    hybrid = _imported(registry, MLA + ["--moe-token-dispatcher-type", "flex", "--moe-flex-dispatcher-backend", "hybridep"])
    # Without --moe-hybridep-num-sms Megatron-Core's default differs by release (16 at core_v0.16.0 and v0.17.0,
    # DeepEP's own from v0.17.1): the runtime's 32 (Megatron-Bridge's) is priced and that is named.
    assert _options(hybrid)["ep_all_to_all"] == "hybridep" and "hybridep_num_sms" not in _options(hybrid)
    assert len(hybrid.unmapped) == 1 and hybrid.unmapped[0].startswith("--moe-hybridep-num-sms (--moe-flex-dispatcher-num-sms) not given")
    # A stated SM count becomes the option hybridep_num_sms, quietly.
    for sms in (32, 16, 24):
        job = _imported(registry, MLA + ["--moe-token-dispatcher-type", "flex", "--moe-flex-dispatcher-backend", "hybridep",
                                         "--moe-hybridep-num-sms", str(sms)])
        assert _options(job)["hybridep_num_sms"] == sms and not job.unmapped
    # Megatron-LM d98e8a6's unified --moe-flex-dispatcher-num-sms is read too, before the deprecated per-backend flag
    # (TransformerConfig.__post_init__ keeps an explicit moe_flex_dispatcher_num_sms).
    flex = ["--moe-token-dispatcher-type", "flex", "--moe-flex-dispatcher-backend", "hybridep"]
    assert _options(_imported(registry, MLA + flex + ["--moe-flex-dispatcher-num-sms", "16"]))["hybridep_num_sms"] == 16
    both = _imported(registry, MLA + flex + ["--moe-flex-dispatcher-num-sms", "24", "--moe-hybridep-num-sms", "32"])
    assert _options(both)["hybridep_num_sms"] == 24 and not both.unmapped
    # HybridEP's permute fused into its dispatch kernel is not priced (the flex dispatcher's separate pass is): named.
    fused = _imported(registry, MLA + ["--moe-token-dispatcher-type", "flex", "--moe-flex-dispatcher-backend", "hybridep",
                                       "--moe-hybridep-num-sms", "32", "--moe-permute-fusion-into-hybridep"])
    assert fused.unmapped == ("--moe-permute-fusion-into-hybridep: priced with HybridEP's permute as its own pass each "
                              "way (the flex dispatcher's unfused default)",)
    # Megatron-Core 0.18's flex dispatcher defaults to the DeepEP backend; --moe-enable-deepep needs flex.
    assert _options(_imported(registry, MLA + ["--moe-token-dispatcher-type", "flex"]))["ep_all_to_all"] == "deepep"
    with pytest.raises(ConfigError, match="--moe-enable-deepep: Megatron-LM takes it only with --moe-token-dispatcher"):
        _imported(registry, MLA + ["--moe-enable-deepep"])
    # TE userbuffers' per-collective switches are named when they turn an overlap off.
    tp = _imported(registry, SMALL + " --tensor-model-parallel-size 2 --sequence-parallel --tp-comm-overlap "
                   "--disable-tp-comm-overlap-rs", devices=8)
    assert tp.unmapped == ("--disable-tp-comm-overlap-rs: priced with every TP collective overlapped (--tp-comm-overlap)",)
    assert not _imported(registry, SMALL + " --disable-tp-comm-overlap-rs").unmapped  # no overlap: nothing to turn off
    gathered = _imported(registry, [t for t in MLA if t != "alltoall" and t != "--moe-token-dispatcher-type"])
    assert gathered.unmapped[0].startswith("--moe-token-dispatcher-type allgather (Megatron's default)")


@pytest.mark.parametrize("flags, expected", [
    ("", None),
    ("--enable-cuda-graph", "layers"),  # arguments.py at 2edffadb: the deprecated --cuda-graph-impl local
    ("--external-cuda-graph", "layers"),  # ... and transformer_engine, the whole layer by default
    ("--cuda-graph-impl local", "layers"),
    ("--cuda-graph-impl transformer_engine --cuda-graph-scope full", "layers"),  # "full": the old name of the whole layer
    ("--cuda-graph-impl local --cuda-graph-scope full_iteration", "full_iteration"),
    ("--cuda-graph-scope attn", None),  # a scope without an implementation builds no graph
])
def test_cuda_graph_flags_are_the_runtime_option(registry, flags, expected):
    job = _imported(registry, f"{SMALL} {flags}", devices=8)
    assert _options(job).get("cuda_graphs") == expected and not job.unmapped


def test_partial_cuda_graph_scopes_are_priced_eager_and_named(registry, capsys):
    job = _imported(registry, MLA + ["--cuda-graph-impl", "transformer_engine", "--cuda-graph-scope", "attn",
                                     "moe_router", "moe_preprocess"])
    assert "cuda_graphs" not in _options(job)
    assert job.unmapped == ("--cuda-graph-impl transformer_engine --cuda-graph-scope attn moe_router moe_preprocess: part "
                            "of each layer captured; priced with every kernel launched eagerly (the host floor of "
                            "docs/time.md)",)
    with pytest.raises(ConfigError, match="--cuda-graph-impl: expected none, local, transformer_engine or full_iteration, got 'cudnn'"):
        _imported(registry, SMALL + " --cuda-graph-impl cudnn")
    with pytest.raises(ConfigError, match="--cuda-graph-scope: unknown scope 'layer'"):
        _imported(registry, SMALL + " --cuda-graph-impl local --cuda-graph-scope layer")
    with pytest.raises(ConfigError, match="--cuda-graph-scope: full_iteration needs --cuda-graph-impl local"):
        _imported(registry, SMALL + " --cuda-graph-impl transformer_engine --cuda-graph-scope full_iteration")
    inference = _imported(registry, SMALL + " --cuda-graph-impl local --cuda-graph-scope full_iteration_inference")
    assert "cuda_graphs" not in _options(inference)
    assert inference.unmapped == ("--cuda-graph-impl local --cuda-graph-scope full_iteration_inference: an inference "
                                  "scope, no training graph; priced with every kernel launched eagerly",)
    # The option reaches the step time: this small job's layers are host-bound eager (512 tokens a micro-batch),
    # and graphed they are priced at their kernels' time; memory does not move.
    def priced(extra: str) -> dict:
        assert main(["estimate", "--from", "megatron-args", SMALL + extra, "--devices", "8", "--hardware", "h100-sxm",
                     "--json"]) == 0
        return json.loads(capsys.readouterr().out)

    eager, graphed = priced(""), priced(" --enable-cuda-graph")
    assert graphed["time"]["step_seconds"] < eager["time"]["step_seconds"]
    assert eager["peak_bytes"] == graphed["peak_bytes"]


def _recipe(job) -> str | None:
    return job.document.get("precision", {}).get("recipe")


def test_every_recipe_stating_megatron_flags_imports_from_them(registry):
    stated = [r for r in registry.precision_recipes if "megatron" in r.flags]
    assert {r.name for r in stated} >= {"fp8-delayed", "fp8-current", "fp8-blockwise", "mxfp8", "nvfp4",
                                        "fp8-megatron-param-gather", "fp8-delayed-param-gather", "mxfp8-param-gather"}
    for recipe in stated:
        job = _imported(registry, shlex.split(SMALL) + list(recipe.flags["megatron"]))
        assert _recipe(job) == recipe.name and not job.unmapped, recipe.name
    assert _recipe(_imported(registry, SMALL)) is None


def test_recipe_flags_megatron_defaults_and_near_matches(registry):
    # --fp8-recipe defaults to delayed, with a history of 1 and the most recent amax (arguments.py).
    job = _imported(registry, SMALL + " --fp8-format hybrid")
    assert _recipe(job) == "fp8-delayed"
    assert job.unmapped == ("--fp8-amax-history-len 1: priced as fp8-delayed's 1024",)
    job = _imported(registry, SMALL + " --fp8-format e4m3 --fp8-recipe tensorwise")
    assert _recipe(job) == "fp8-current" and job.unmapped[0].startswith("--fp8-format e4m3: priced as fp8-current")
    # MXFP8 parameters gathered through the gradient buffer (Megatron-Bridge's bf16_with_mxfp8_mixed) are
    # mxfp8-param-gather; without --reuse-grad-buf-for-mxfp8-param-ag Megatron-Core keeps a parameter buffer beside
    # them, which no recipe prices: mxfp8 with bf16 parameters, said in one line.
    mx = SMALL + " --fp8-format e4m3 --fp8-recipe mxfp8 --fp8-param-gather"
    job = _imported(registry, mx + " --reuse-grad-buf-for-mxfp8-param-ag")
    assert _recipe(job) == "mxfp8-param-gather" and job.unmapped == ()
    job = _imported(registry, mx)
    assert _recipe(job) == "mxfp8" and job.unmapped == (
        "--fp8-param-gather under --fp8-recipe mxfp8 without --reuse-grad-buf-for-mxfp8-param-ag: Megatron-Core then "
        "keeps a parameter buffer beside the MXFP8 weights (optimizer_config.py warns of the memory), which hp does not "
        "price; priced as mxfp8, with bf16 parameters and gathers",)
    # The flag alone, or beside a per-tensor recipe, changes nothing in Megatron-Core.
    for argv in (mx.replace(" --fp8-param-gather", ""), SMALL + " --fp8-format hybrid --fp8-recipe tensorwise"):
        job = _imported(registry, argv + " --reuse-grad-buf-for-mxfp8-param-ag")
        assert _recipe(job) in ("mxfp8", "fp8-current") and job.unmapped == (
            "--reuse-grad-buf-for-mxfp8-param-ag: changes nothing without --fp8-recipe mxfp8 and --fp8-param-gather "
            "(Megatron-Core reads it with MXFP8 parameters alone)",), argv
    with pytest.raises(ConfigError, match="--fp8-recipe: no registered precision recipe states --fp8-format hybrid "
                                          "--fp8-recipe custom"):
        _imported(registry, SMALL + " --fp8-format hybrid --fp8-recipe custom")
    with pytest.raises(ConfigError, match="--fp4-format: Megatron-LM takes --fp4-format or --fp8-format, not both"):
        _imported(registry, SMALL + " --fp8-format hybrid --fp4-format e2m1")


@pytest.mark.parametrize(("extra", "message"), [
    # A precision flag with nothing after it (argparse: "expected one argument"), not read as its default.
    ("--fp8-format", "--fp8-format: takes a value and none follows it"),
    ("--fp8-format --fp8-recipe tensorwise", "--fp8-format: takes a value and none follows it"),
    ("--fp8-format hybrid --fp8-recipe", "--fp8-recipe: takes a value and none follows it"),
    ("--fp4-format", "--fp4-format: takes a value and none follows it"),
    ("--fp8-format hybrid --fp8-amax-history-len abc", "--fp8-amax-history-len: expected int, got 'abc'"),
    # Low-precision parameters without their format (transformer_config.py, arguments.py).
    ("--fp8-param-gather", "--fp8-param-gather: Megatron-LM refuses it without --fp8-format"),
    ("--fp4-param-gather", "--fp4-param-gather: Megatron-LM refuses it without --fp4-format"),
    ("--fp4-format e2m1 --fp8-param-gather", "--fp8-param-gather: Megatron-LM refuses it without --fp8-format"),
])
def test_precision_flags_megatron_refuses_are_refused(registry, extra, message):
    with pytest.raises(ConfigError, match=message):
        _imported(registry, SMALL + " " + extra)


def test_an_fp8_parameter_gather_needs_the_distributed_optimizer_for_every_recipe(registry):
    # arguments.py asserts --fp8-param-gather only with the distributed optimizer or FSDP, whatever the recipe: the
    # MXFP8 and blockwise ones are refused as the per-tensor one is, not relaxed to a recipe gathering in bf16.
    plain = SMALL.replace(" --use-distributed-optimizer", "")
    for recipe in ("tensorwise", "mxfp8", "blockwise"):
        with pytest.raises(ConfigError, match="--fp8-param-gather: Megatron-LM asserts it only with the distributed "
                                              "optimizer or FSDP"):
            _imported(registry, plain + f" --fp8-format e4m3 --fp8-recipe {recipe} --fp8-param-gather")
    # arguments.py asserts the FP8 gather alone: the FP4 one imports (as nvfp4, no recipe gathering FP4 parameters).
    assert _recipe(_imported(registry, plain + " --fp4-format e2m1 --fp4-param-gather")) == "nvfp4"


def test_precision_flags_megatron_ignores_are_said(registry):
    # Without --fp8-format / --fp4-format Megatron-LM quantizes nothing: priced bf16, each ignored flag one line.
    job = _imported(registry, SMALL + " --fp8-recipe mxfp8 --fp8-amax-history-len 16")
    assert _recipe(job) is None and job.unmapped == (
        "--fp8-recipe mxfp8 without --fp8-format: Megatron-LM quantizes nothing then; priced in bf16",
        "--fp8-amax-history-len 16 without --fp8-format: Megatron-LM quantizes nothing then; priced in bf16")
    job = _imported(registry, SMALL + " --fp4-recipe nvfp4")
    assert _recipe(job) is None and job.unmapped == (
        "--fp4-recipe nvfp4 without --fp4-format: Megatron-LM quantizes nothing then; priced in bf16",)
    # Megatron-LM turns the gradient-buffer gather off under Megatron-FSDP whatever its strategy (arguments.py): the
    # MXFP8 parameters then keep a parameter buffer, priced as mxfp8 with bf16 parameters, at ZeRO 3 as at ZeRO 1.
    mx = " --fp8-format e4m3 --fp8-recipe mxfp8 --fp8-param-gather --reuse-grad-buf-for-mxfp8-param-ag"
    for strategy in ("optim", "optim_grads_params"):
        job = _imported(registry, SMALL.replace(" --use-distributed-optimizer", "") + " --use-megatron-fsdp "
                        f"--data-parallel-sharding-strategy {strategy}" + mx)
        assert _recipe(job) == "mxfp8"
        assert ("--reuse-grad-buf-for-mxfp8-param-ag: Megatron-LM turns it off under --use-megatron-fsdp; priced "
                "without it") in job.unmapped


def test_an_imported_recipe_prices_as_the_named_one(registry, capsys):
    argv = SMALL + " --fp8-format hybrid --fp8-recipe tensorwise --fp8-param-gather"
    assert main(["estimate", "--from", "megatron-args", argv, "--devices", "8", "--hardware", "h100-sxm", "--json"]) == 0
    imported = json.loads(capsys.readouterr().out)
    assert main(["estimate", "--from", "megatron-args", SMALL, "--devices", "8", "--hardware", "h100-sxm",
                 "--precision", "fp8-megatron-param-gather", "--json"]) == 0
    named = json.loads(capsys.readouterr().out)
    assert imported["time"]["step_seconds"] == named["time"]["step_seconds"]
    assert [s["memory"]["peak_bytes"] for s in imported["stages"]] == [s["memory"]["peak_bytes"] for s in named["stages"]]
    assert main(["estimate", "--from", "megatron-args", SMALL, "--devices", "8", "--hardware", "h100-sxm", "--json"]) == 0
    bf16 = json.loads(capsys.readouterr().out)
    assert bf16["time"]["step_seconds"] > imported["time"]["step_seconds"]


def test_megatron_gpt_defaults_build_the_gpt_megatron_runs(registry):
    # No --swiglu, --normalization or --position-embedding-type: Megatron-LM's GPT (arguments.py defaults): LayerNorm,
    # a GeLU MLP of 4h, biases, tied embeddings, a learned position table; GPT2BPETokenizer's 50,257 tokens.
    import scale_cases
    from hp_core.api import count_parameters

    argv = ("--num-layers 96 --hidden-size 12288 --num-attention-heads 96 --seq-length 2048 "
            "--max-position-embeddings 2048 --micro-batch-size 1 --tensor-model-parallel-size 8 "
            "--pipeline-model-parallel-size 16 --tokenizer-type GPT2BPETokenizer --vocab-file gpt2-vocab.json "
            "--attention-dropout 0.0 --hidden-dropout 0.0 --fp16")
    job = _imported(registry, argv, devices=128)
    assert job.unmapped[0].startswith("--tokenizer-type GPT2BPETokenizer: read as GPT-2's 50,257-token vocabulary")
    from hp_core.io.convert import ConfigFile, structure
    from hp_core.io.job import resolve_job
    document = dict(job.document, parallel=dict(job.document["parallel"], dp=1))
    imported = resolve_job(structure(document, ConfigFile, registry), registry).model
    reference = scale_cases._gpt({"hidden_size": 12288, "num_layers": 96, "num_attention_heads": 96, "vocab_size": 50257,
                                  "position_embeddings": 2048})
    # The same layers (the imported one states Megatron's kv-channels, h / heads = 128; the reference derives it).
    plain = [(g.kind, g.count, attrs.evolve(g.config, head_dim=None) if g.kind == "dense" else g.config) for g in imported.layers]
    assert imported.layers[1].config.head_dim == 128
    assert plain == [(g.kind, g.count, g.config) for g in reference.layers]
    # GPT-3 175B (Brown et al. 2020): 96 x (12 h^2 + 13 h) + (50,257 + 2,048) h + 2 h = 174,604,259,328.
    h = 12288
    assert count_parameters(imported, registry).total == 96 * (12 * h * h + 13 * h) + (50257 + 2048) * h + 2 * h
    # --swiglu's unstated width is int(8h / 3 / 64) * 64 (arguments.py), --squared-relu an ungated squared ReLU.
    swiglu = _imported(registry, SMALL.replace("--ffn-hidden-size 2048 ", ""))
    assert swiglu.document["model"]["layers"][1]["config"]["intermediate_size"] == 2688
    relu2 = _imported(registry, SMALL.replace("--swiglu", "--squared-relu"))
    assert {k: relu2.document["model"]["layers"][1]["config"][k] for k in ("gated_mlp", "hidden_act")} == {
        "gated_mlp": False, "hidden_act": "relu2"}


def test_a_launch_script_as_megatron_lm_examples_write_them():
    # The shapes of Megatron-LM's own example launchers (examples/llama/train_llama3_8b_h100_fp8.sh): a test of the
    # entry point's path before the launch, arithmetic, arrays appended to, multi-word elements split by ${A[@]}.
    from hp_plugins.importers.megatron import read_megatron_script

    text = "\n".join([
        "GPUS_PER_NODE=8", "NUM_NODES=2", "WORLD_SIZE=$(($GPUS_PER_NODE*$NUM_NODES))", "PP=$(( (WORLD_SIZE / 8) ))",
        'PRETRAIN_SCRIPT_PATH="pretrain_gpt.py"',
        "DISTRIBUTED_ARGS=(", "    --nproc_per_node $GPUS_PER_NODE", "    --nnodes $NUM_NODES", ")",
        "TRAINING_ARGS=(", "    --micro-batch-size 1  # a comment", ")",
        "DDP_ARGS=(", "    --overlap-grad-reduce", ")",
        'TRAINING_ARGS+=("${DDP_ARGS[@]}")',
        'DTYPE_ARGS=("--fp8-format hybrid" "--fp8-amax-history-len 1024")',
        'if [ ! -f "$PRETRAIN_SCRIPT_PATH" ]; then', '    echo "not found: $PRETRAIN_SCRIPT_PATH"', "fi",
        'torchrun ${DISTRIBUTED_ARGS[@]} "$PRETRAIN_SCRIPT_PATH" ${TRAINING_ARGS[@]} ${DTYPE_ARGS[@]} '
        "--pipeline-model-parallel-size $PP --world $WORLD_SIZE",
    ])
    tokens, devices = read_megatron_script(text)
    assert devices == 16
    assert tokens == ["--micro-batch-size", "1", "--overlap-grad-reduce", "--fp8-format", "hybrid",
                      "--fp8-amax-history-len", "1024", "--pipeline-model-parallel-size", "2", "--world", "16"]


def test_megatron_fsdp_and_named_tokenizers(registry):
    job = _imported(registry, SMALL.replace("--use-distributed-optimizer", "--use-megatron-fsdp "
                                            "--data-parallel-sharding-strategy optim_grads_params --use-distributed-optimizer"))
    assert job.document["parallel"]["zero"] == 3 and job.unmapped[0].startswith(
        "--use-megatron-fsdp --data-parallel-sharding-strategy optim_grads_params: priced as ZeRO-3")
    # The default strategy changed between releases (no_shard to core_v0.17, optim_grads_params from core_v0.18).
    with pytest.raises(ConfigError, match="--data-parallel-sharding-strategy: its default changed"):
        _imported(registry, SMALL + " --use-megatron-fsdp")
    # Under Megatron-FSDP the overlap flags prefetch its gathers and overlap its reduce-scatters.
    runtime = registry.runtime("megatron")
    for option, fields in (("overlap_param_gather", ("overlap_param_gather", "fsdp_prefetch")),
                           ("overlap_grad_reduce", ("overlap_grad_reduce", "fsdp_reduce_scatter_overlap"))):
        applied = next(o for o in runtime.options if o.name == option).apply(runtime, True)
        assert all(getattr(applied.timing.schedule, f) for f in fields), option
    llama2 = _imported(registry, SMALL.replace("--vocab-size 1000", "--tokenizer-type Llama2Tokenizer"))
    assert llama2.document["model"]["layers"][0]["config"]["vocab_size"] == 32000
    # tokenizer.py sizes these from their files: a stated --vocab-size is not read, and the line says so.
    stated = _imported(registry, SMALL + " --tokenizer-type GPT2BPETokenizer")
    assert stated.document["model"]["layers"][0]["config"]["vocab_size"] == 50257
    assert "not --vocab-size 1,000, which it does not read" in stated.unmapped[0]


@pytest.mark.parametrize(("extra", "message"), [
    ("--position-embedding-type alibi", "--position-embedding-type: expected one of learned_absolute, rope"),
    ("--no-position-embedding", "--no-position-embedding: Megatron-LM takes it only with rope positions"),
    ("--fp8-format e5m2", "--fp8-format: expected e4m3 or hybrid, got 'e5m2'"),
    ("--pipeline-model-parallel-size 2 --pipeline-model-parallel-layout 'Etttt|ttttL' --account-for-loss-in-pipeline-split",
     "--account-for-loss-in-pipeline-split: Megatron-LM does not take it with --pipeline-model-parallel-layout"),
    ("--pipeline-model-parallel-size 2 --decoder-first-pipeline-num-layers 0", "must be larger than 0, got 0"),
    ("--decoder-first-pipeline-num-layers 2 --decoder-last-pipeline-num-layers 6", "has no rank for both"),
])
def test_arguments_megatron_refuses_are_refused(registry, extra, message):
    with pytest.raises(ConfigError, match=message):
        _imported(registry, SMALL + " " + extra)
    # The legacy RoPE flag is rope positions: no learned table.
    rope = _imported(registry, SMALL + " --use-rotary-position-embeddings")
    assert rope.document["model"]["layers"][0]["config"]["position_embeddings"] == 0


@pytest.mark.parametrize(("text", "tokens", "devices"), [
    # $(( )) inside an array, with spaces, with **; a string appended to; declare/local arrays.
    ("NNODES=2\ndeclare -a ARGS=(\n  --global-batch-size $((NNODES*64))\n)\nlocal B=(--seq-length $(( 2**12 )))\n"
     'A="--micro-batch-size 1"\nA+=" --fp8-format hybrid"\n'
     "torchrun --nproc_per_node 8 --nnodes $NNODES pretrain_gpt.py ${ARGS[@]} ${B[@]} $A --num-layers $(( NNODES * 8 ))",
     ["--global-batch-size", "128", "--seq-length", "4096", "--micro-batch-size", "1", "--fp8-format", "hybrid",
      "--num-layers", "16"], 16),
    # A double-quoted assignment over several lines (the older Megatron-LM examples' GPT_ARGS="...").
    ('GPT_ARGS="\n    --num-layers 24\n    --hidden-size 1024\n"\npython pretrain_gpt.py $GPT_ARGS',
     ["--num-layers", "24", "--hidden-size", "1024"], None),
    # No launcher word: the entry point run directly, or through a variable the environment sets.
    ("./pretrain_gpt.py --num-layers 2", ["--num-layers", "2"], None),
    ("$PYTHON pretrain_gpt.py --num-layers 2", ["--num-layers", "2"], None),
    # A line copying a *.py file before it launches one: the launched entry point, not the first *.py word.
    ("cp ./configs/hooks.py /tmp && torchrun --nproc_per_node 2 pretrain_gpt.py --num-layers 2", ["--num-layers", "2"], 2),
    # A preprocessing step launched first: the training entry point is preferred.
    ("python tools/preprocess_data.py --input x.json\npython pretrain_gpt.py --num-layers 2", ["--num-layers", "2"], None),
])
def test_shell_forms_launch_scripts_use(text, tokens, devices):
    from hp_plugins.importers.megatron import read_megatron_script

    assert read_megatron_script(text) == (tokens, devices)


def test_the_precision_aware_optimizer_states_the_optimizers_widths(registry):
    # DeepSeek-V3's recipe (NVIDIA/Megatron-LM docs/discussions/deepseek-v3-gb200-optimization): bf16 moments.
    bf16 = "--use-precision-aware-optimizer --main-grads-dtype fp32 --main-params-dtype fp32 --exp-avg-dtype bf16 " \
           "--exp-avg-sq-dtype bf16"
    job = _imported(registry, SMALL + " " + bf16)
    assert job.document["precision"] == {"moment_bytes": 2} and not job.unmapped
    mixed = _imported(registry, SMALL + " --use-precision-aware-optimizer --main-params-dtype fp16 --exp-avg-dtype fp8")
    assert mixed.document["precision"] == {"master_param_bytes": 2, "moment_bytes": 3}  # 1 + 4 bytes: 2.5, priced 3
    assert mixed.unmapped == ("--exp-avg-dtype fp8 --exp-avg-sq-dtype fp32: 5 bytes for the two moments, priced as 3 each",)
    # Without the flag Megatron-LM reads none of them.
    assert "precision" not in _imported(registry, SMALL + " --exp-avg-dtype bf16").document
    with pytest.raises(ConfigError, match="--exp-avg-dtype: expected one of fp32, fp16, bf16, fp8, got 'int4'"):
        _imported(registry, SMALL + " --use-precision-aware-optimizer --exp-avg-dtype int4")


@settings(max_examples=200, deadline=None)
@given(layers=st.integers(1, 96), pp=st.integers(1, 8), vpp=st.integers(1, 4), first=st.one_of(st.none(), st.integers(1, 12)),
       last=st.one_of(st.none(), st.integers(1, 12)), embedding=st.booleans(), loss=st.booleans())
def test_every_split_megatron_accepts_places_every_layer_once(layers, pp, vpp, first, last, embedding, loss):
    from hp_plugins.importers.megatron import _Args
    from hp_plugins.importers.megatron_options import pipeline_split
    from hp_plugins.importers.shell import parse_megatron_args

    values = {"num-virtual-stages-per-pipeline-rank": vpp if vpp > 1 else None, "decoder-first-pipeline-num-layers": first,
              "decoder-last-pipeline-num-layers": last, "account-for-embedding-in-pipeline-split": embedding,
              "account-for-loss-in-pipeline-split": loss}
    try:
        tokens = [t for name, value in values.items() if value not in (None, False)
                  for t in ([f"--{name}"] if value is True else [f"--{name}", str(value)])]
        got_vpp, counts = pipeline_split(_Args(parse_megatron_args(tokens)), layers, 0, pp, [])
    except ConfigError:
        return  # a split Megatron-LM refuses is refused
    assert got_vpp == vpp and len(counts) == pp * vpp and sum(counts) == layers and min(counts) >= 0
    if first is not None:  # the first rank holds exactly its stated layers, split over its virtual stages
        assert sum(counts[0::pp]) == first
    if last is not None and pp > 1:
        assert sum(counts[pp - 1::pp]) == last


def test_first_last_layers_bf16_imports_as_the_high_precision_layer_counts(registry):
    # Megatron-Core's defaults: one layer at each end (TransformerConfig at NVIDIA/Megatron-LM@d98e8a6).
    job = _imported(registry, SMALL + " --fp8-format hybrid --fp8-recipe tensorwise --first-last-layers-bf16")
    precision = job.document["precision"]
    assert (precision["high_precision_layers_at_start"], precision["high_precision_layers_at_end"]) == (1, 1)
    job = _imported(registry, SMALL + " --fp8-format e4m3 --fp8-recipe mxfp8 --first-last-layers-bf16 "
                                      "--num-layers-at-start-in-bf16 0 --num-layers-at-end-in-bf16 2")
    precision = job.document["precision"]
    assert (precision["high_precision_layers_at_start"], precision["high_precision_layers_at_end"]) == (0, 2)
    # The counts alone are not read by Megatron-Core; the flag without a recipe keeps nothing, said in a line.
    job = _imported(registry, SMALL + " --fp8-format hybrid --fp8-recipe tensorwise --num-layers-at-end-in-bf16 2")
    assert "high_precision_layers_at_end" not in job.document["precision"] and not job.unmapped
    job = _imported(registry, SMALL + " --first-last-layers-bf16")
    assert "high_precision_layers_at_start" not in job.document.get("precision", {})
    assert job.unmapped == ("--first-last-layers-bf16: no --fp8-format or --fp4-format, so no layer is quantized; ignored",)


def test_the_megatron_export_states_the_bf16_layers(registry, capsys):
    argv = SMALL + " --fp8-format e4m3 --fp8-recipe mxfp8 --first-last-layers-bf16 --num-layers-at-end-in-bf16 2"
    assert main(["estimate", "--from", "megatron-args", argv, "--devices", "8", "--hardware", "b200", "--export", "megatron"]) == 0
    out = " ".join(capsys.readouterr().out.split())
    assert ("--fp8-format e4m3 --fp8-recipe mxfp8 --first-last-layers-bf16 --num-layers-at-start-in-bf16 1 "
            "--num-layers-at-end-in-bf16 2") in out


def test_an_export_says_what_its_flags_leave_unset(registry, capsys, tmp_path):
    def exported(*argv: str) -> dict:
        assert main(["estimate", "--model", "llama3-8b", "--seq-len", "4096", "--json", *argv]) == 0
        return json.loads(capsys.readouterr().out)["export"]

    mega = ("--runtime", "megatron", "--dp", "4", "--tp", "2", "--sp", "--hardware", "b200", "--export", "megatron")
    # FP8 attention has no Megatron-LM flag: the linears' recipe's flags, said so.
    doc = exported(*mega, "--precision", "mxfp8-fp8-attention")
    assert doc["precision_flags"] == "--fp8-format e4m3 --fp8-recipe mxfp8"
    assert doc["precision_note"].startswith("megatron has no command-line flag for mxfp8-fp8-attention's FP8 attention")
    # A module's own format is no flag either (Megatron-Core reads it from a per-module recipe file).
    config = tmp_path / "job.yaml"
    config.write_text("model: llama3-8b\nparallel: {dp: 4, tp: 2, sp: true, seq_len: 4096}\n"
                      "runtime: {name: megatron}\nhardware: b200\nprecision: {recipe: nvfp4, module_formats: {attention_qkv: bf16}}\n",
                      encoding="utf-8")
    assert main(["estimate", str(config), "--export", "megatron", "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)["export"]
    assert doc["precision_flags"] == "--fp4-format e2m1 --fp4-recipe nvfp4"
    assert "modules formats of their own (attention_qkv: bf16)" in doc["precision_note"]
    # torchtitan's float8 converter leaves only filter_fqns in bf16 (none by default): the export keeps the head there,
    # as hp prices it, so its flags import back with nothing to say.
    from hp_plugins.importers.torchtitan import import_torchtitan

    for recipe in ("torchao-float8-tensorwise", "torchao-float8-rowwise", "torchao-float8-rowwise-gw-hp"):
        doc = exported("--runtime", "fsdp2", "--zero", "3", "--dp", "8", "--hardware", "h100-sxm", "--precision", recipe,
                       "--export", "torchtitan")
        assert doc["precision_flags"].endswith("--quantize.linear.float8.filter_fqns output"), recipe
        assert "precision_note" not in doc
        data = {"model": {"name": "llama3", "flavor": "8B"}, "training": {"local_batch_size": 1, "seq_len": 4096}}
        words = doc["precision_flags"].split()
        for at, word in enumerate(words):  # --a.b.c value, or a bare --a.b.c (true)
            if word.startswith("--"):
                *tables, key = word[2:].split(".")
                value = words[at + 1] if at + 1 < len(words) and not words[at + 1].startswith("--") else True
                table = data
                for name in tables:
                    table = table.setdefault(name, {})
                table[key] = value.split(",") if key in ("converters", "filter_fqns") else value
        job = import_torchtitan(data, registry, devices=8)
        assert job.document["precision"]["recipe"] == recipe and job.unmapped == (), recipe


def test_recompute_and_potentials_exports_carry_the_recipe_flags(registry, capsys):
    job = ["--model", "llama3-8b", "--num-layers", "4", "--hardware", "h100-sxm", "--dp", "4", "--tp", "2", "--sp",
           "--seq-len", "4096", "--runtime", "megatron", "--precision", "fp8-current", "--export", "megatron"]
    flags = "--fp8-format hybrid --fp8-recipe tensorwise"
    assert main(["recompute", *job, "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["trainer_plan"]["precision_flags"] == flags
    assert main(["potentials", *job, "--steps", "1", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["precision_flags"] == flags
    for command in (["recompute"], ["potentials", "--steps", "1"]):
        assert main([*command, *job]) == 0
        assert f"Precision recipe flags:\n{flags}" in capsys.readouterr().out


# Qwen3-30B-A3B as Megatron-LM arguments (its Hugging Face config.json's sizes; dropouts 0 as the preset states them).
QWEN3_MOE = ("--num-layers 48 --hidden-size 2048 --ffn-hidden-size 6144 --num-attention-heads 32 "
             "--group-query-attention --num-query-groups 4 --kv-channels 128 --seq-length 4096 "
             "--max-position-embeddings 40960 --micro-batch-size 1 --num-experts 128 --moe-ffn-hidden-size 768 "
             "--moe-router-topk 8 --moe-token-dispatcher-type alltoall --bf16 --normalization RMSNorm "
             "--norm-epsilon 1e-6 --swiglu --untie-embeddings-and-output-weights --position-embedding-type rope "
             "--qk-layernorm --disable-bias-linear --vocab-size 151936 --hidden-dropout 0 --attention-dropout 0")


def _same_as_preset(registry, argv: str, preset_name: str) -> int:
    """Assert *argv* imports with nothing unmapped as the preset, every layer group field for field; its total."""
    from hp_core.api import count_parameters, model_from_preset

    job = _imported(registry, argv, devices=8)
    assert job.unmapped == ()
    preset = model_from_preset(preset_name, registry=registry)
    imported = [(g["kind"], g["count"], g["config"]) for g in job.document["model"]["layers"]]
    assert imported == [(g.kind, g.count, attrs.asdict(g.config)) for g in preset.layers]
    return count_parameters(preset, registry).total


def test_qk_layernorm_moe_imports_as_the_qwen3_preset(registry):
    # --qk-layernorm on a GQA model: per-head norms of q and k (megatron/core/transformer/attention.py); routed experts
    # without MLA through the qwen2_moe layout: every layer field the qwen3-30b-a3b preset states, and its count.
    assert _same_as_preset(registry, QWEN3_MOE, "qwen3-30b-a3b") == 30_532_122_624
    # The dense Qwen3 32B likewise (llama layout, q/k norms from --qk-layernorm).
    dense = ("--num-layers 64 --hidden-size 5120 --ffn-hidden-size 25600 --num-attention-heads 64 "
             "--group-query-attention --num-query-groups 8 --kv-channels 128 --seq-length 4096 "
             "--max-position-embeddings 40960 --micro-batch-size 1 --bf16 --normalization RMSNorm --norm-epsilon 1e-6 "
             "--swiglu --untie-embeddings-and-output-weights --position-embedding-type rope --qk-layernorm "
             "--disable-bias-linear --vocab-size 151936 --hidden-dropout 0 --attention-dropout 0")
    assert _same_as_preset(registry, dense, "qwen3-32b") == 32_762_123_264


def test_shared_gated_expert_leading_dense_layer_and_qkv_bias_without_mla(registry, capsys):
    # One dense layer then MoE (--moe-layer-freq), a gated shared expert, q/k/v biases without a projection bias.
    # Counted by hand, h = 64, 4 heads and 2 groups of d = 16, ffn 128, 8 experts of 32, shared 64, vocabulary 1,000:
    # attention h (a + 2 g) d + (a + 2 g) d (q/k/v biases) + a d h + 2 d (q/k norms) + h (input norm) = 12,512;
    # dense layer + 3 h ffn + h = 37,152; MoE layer + h + 8 h (router) + 8 x 3 h 32 + 3 h 64 (shared) + h (its gate)
    # = 74,592; embedding 64,000; head 64,000 + h (final norm).
    argv = ("--num-layers 4 --hidden-size 64 --num-attention-heads 4 --group-query-attention --num-query-groups 2 "
            "--kv-channels 16 --ffn-hidden-size 128 --num-experts 8 --moe-ffn-hidden-size 32 --moe-router-topk 2 "
            "--moe-shared-expert-intermediate-size 64 --moe-shared-expert-gate --moe-layer-freq ([0]*1+[1]*3) "
            "--moe-token-dispatcher-type alltoall --add-qkv-bias --disable-bias-linear --swiglu --normalization RMSNorm "
            "--position-embedding-type rope --untie-embeddings-and-output-weights --vocab-size 1000 "
            "--make-vocab-size-divisible-by 8 --seq-length 128 --micro-batch-size 1 --qk-layernorm")
    job = _imported(registry, argv, devices=1)
    assert job.unmapped == ()
    layers = job.document["model"]["layers"]
    assert [(g["kind"], g["count"]) for g in layers] == [("embedding", 1), ("dense", 1), ("moe", 3), ("output", 1)]
    for g in layers[1:3]:
        assert {k: g["config"][k] for k in ("attention_bias", "attention_out_bias", "qk_norm", "qk_norm_weight")} == {
            "attention_bias": True, "attention_out_bias": False, "qk_norm": True, "qk_norm_weight": True}
    assert layers[1]["config"]["intermediate_size"] == 128 and layers[1]["config"]["mlp_bias"] is False
    assert {k: layers[2]["config"][k] for k in ("shared_expert_intermediate_size", "shared_expert_gate")} == {
        "shared_expert_intermediate_size": 64, "shared_expert_gate": True}
    assert main(["estimate", "--from", "megatron-args", argv, "--devices", "1"]) == 0
    out = capsys.readouterr().out
    assert "Parameters: 388,992 in all (embedding 64,000, dense 37,152, moe 223,776, output 64,064)" in out
    # Without --moe-shared-expert-gate the shared expert has no gate (h fewer parameters a MoE layer).
    ungated = _imported(registry, argv.replace(" --moe-shared-expert-gate", ""), devices=1)
    assert ungated.document["model"]["layers"][2]["config"]["shared_expert_gate"] is False


def test_qk_norm_forms_and_linear_biases(registry):
    # --qk-l2-norm: Llama 4's weightless L2 norm, which Megatron-Core takes over --qk-layernorm; biases: q/k/v with
    # either flag, the output projection and the MLP only with add_bias_linear (Megatron's default).
    l2 = _imported(registry, SMALL + " --qk-l2-norm --qk-layernorm").document["model"]["layers"][1]["config"]
    assert (l2["qk_norm"], l2["qk_norm_weight"]) == (True, False)
    plain = _imported(registry, SMALL).document["model"]["layers"][1]["config"]
    assert (plain["qk_norm"], plain["attention_bias"], plain["attention_out_bias"], plain["mlp_bias"]) == (
        False, False, False, False)
    biased = _imported(registry, SMALL.replace(" --disable-bias-linear", "")).document["model"]["layers"][1]["config"]
    assert (biased["attention_bias"], biased["attention_out_bias"], biased["mlp_bias"]) == (True, True, True)
    qkv = _imported(registry, SMALL + " --add-qkv-bias").document["model"]["layers"][1]["config"]
    assert (qkv["attention_bias"], qkv["attention_out_bias"], qkv["mlp_bias"]) == (True, False, False)
    # What is priced otherwise is named: LayerNorm-type q/k norms as RMSNorms, the experts' biases.
    layernorm = _imported(registry, SMALL.replace("--normalization RMSNorm", "--normalization LayerNorm") + " --qk-layernorm")
    assert layernorm.unmapped == ("--qk-layernorm with --normalization LayerNorm: the per-head LayerNorms priced as "
                                  "RMSNorms (their biases, 2 x kv-channels parameters a layer, left out)",)
    moe = _imported(registry, QWEN3_MOE.replace(" --disable-bias-linear", ""), devices=8)
    assert moe.unmapped == ("--num-experts without --disable-bias-linear: the experts' own linear biases are not "
                            "priced (the attention's and dense layers' are)",)


@pytest.mark.parametrize("freq, dense", [
    ("2", [1, 3, 5, 7]),  # an int N: layer i MoE where i % N == 0 (gpt_layer_specs.py)
    ("([0]*1+[1]*1)*4", [0, 2, 4, 6]),
    ("[1,1,0,1,1,1,1,0]", [2, 7]),
    ("1", []),
])
def test_any_moe_layer_pattern_without_mla_places_its_dense_layers(registry, freq, dense):
    argv = QWEN3_MOE.replace("--num-layers 48", "--num-layers 8") + f" --moe-layer-freq {freq}"
    kinds = []
    for g in _imported(registry, argv, devices=8).document["model"]["layers"][1:-1]:
        kinds += [g["kind"]] * g["count"]
    assert [i for i, kind in enumerate(kinds) if kind == "dense"] == dense and len(kinds) == 8


def test_a_moe_layer_pattern_megatron_refuses_is_refused(registry):
    argv = QWEN3_MOE.replace("--num-layers 48", "--num-layers 8")
    with pytest.raises(ConfigError, match="--moe-layer-freq: 4 entries for --num-layers 8; Megatron-Core requires one per layer"):
        _imported(registry, argv + " --moe-layer-freq ([0]*1+[1]*3)", devices=8)
    with pytest.raises(ConfigError, match="--moe-layer-freq: expected a positive integer"):
        _imported(registry, argv + " --moe-layer-freq 0", devices=8)


def test_the_fp8_activation_input_store_flag_is_the_runtime_option(registry):
    # arguments.py --activation-func-fp8-input-store (store_true): off unless passed, quietly mapped either way.
    stored = _imported(registry, SMALL + " --activation-func-fp8-input-store")
    plain = _imported(registry, SMALL)
    assert _options(stored)["activation_func_fp8_input_store"] is True and not stored.unmapped
    assert _options(plain)["activation_func_fp8_input_store"] is False


def test_the_ddp_bucket_size_flag_is_the_runtime_option(registry):
    # arguments.py --ddp-bucket-size (type int, default None): stated, the option; unstated, Megatron's own size.
    job = _imported(registry, SMALL + " --overlap-grad-reduce --ddp-bucket-size 768000000")
    assert _options(job)["ddp_bucket_size"] == 768_000_000 and not job.unmapped
    assert "ddp_bucket_size" not in _options(_imported(registry, SMALL))
