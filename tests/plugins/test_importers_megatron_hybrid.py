"""The megatron importer's hybrid models (--hybrid-layer-pattern: Mamba 'M', attention '*', MLP '-', MoE 'E', MTP
after '/', pipeline segments at '|'), each count derived by hand from what Megatron-Core builds
(hp_plugins/importers/megatron_hybrid.py module docstring: megatron/core/ssm/mamba_mixer.py,
megatron/core/models/hybrid/hybrid_layer_specs.py and moe_layer.py at NVIDIA/Megatron-LM@d98e8a6)."""

from __future__ import annotations

import shlex

import attrs
import pytest

from hp_core.api import count_parameters, model_from_preset
from hp_core.cli import main
from hp_core.errors import ConfigError
from hp_core.io.convert import ConfigFile, structure
from hp_core.io.job import resolve_job
from hp_plugins.importers.megatron import import_megatron_args

# h 256; Mamba: H = 2h / 64 = 8 heads of 64 (no --mamba-num-heads: d_inner = 2h), G 2, N 16; attention 4 heads, 2
# groups of 64; MLP 512 (squared ReLU, ungated); 4 experts of 128, top-2, a shared expert of 256, latent 64.
SMALL = ("--hidden-size 256 --num-attention-heads 4 --group-query-attention --num-query-groups 2 --kv-channels 64 "
         "--ffn-hidden-size 512 --squared-relu --mamba-num-groups 2 --mamba-state-dim 16 --num-experts 4 "
         "--moe-router-topk 2 --moe-ffn-hidden-size 128 --moe-shared-expert-intermediate-size 256 --moe-latent-size 64 "
         "--moe-token-dispatcher-type alltoall --normalization RMSNorm --disable-bias-linear "
         "--position-embedding-type none --untie-embeddings-and-output-weights --vocab-size 1000 --seq-length 512 "
         "--micro-batch-size 1 --global-batch-size 8 --bf16 --hidden-dropout 0 --attention-dropout 0 "
         "--spec megatron.core.models.hybrid.hybrid_layer_specs hybrid_stack_spec")
H = 256
# MambaMixer: in_proj h (2 I + 2 G N + H) with I = 512, conv (I + 2 G N) x 4 + its bias, dt_bias, A_log, D per head,
# the gated norm I, out_proj I h, and the pre-norm fused into in_proj, h.
MAMBA = H * (2 * 512 + 2 * 2 * 16 + 8) + (512 + 64) * 4 + (512 + 64) + 3 * 8 + 512 + 512 * H + H
assert MAMBA == 415_320
ATTENTION = H * (4 + 2 * 2) * 64 + 4 * 64 * H + H  # linear_qkv, linear_proj, the fused pre-norm: 196,864
MLP = 2 * H * 512 + H  # linear_fc1 (ungated), linear_fc2, the fused pre-norm: 262,400
# The router E x h, 4 experts of fc1 L x 128 and fc2 128 x L over the latent L = 64, the shared expert's fc1 and fc2
# (h x 256 each), fc1_latent_proj and fc2_latent_proj (h x L each), pre_mlp_layernorm.
MOE = 4 * H + 4 * 2 * 64 * 128 + 2 * H * 256 + 2 * H * 64 + H
assert MOE == 230_656
EMBEDDING, OUTPUT = 1000 * H, 1000 * H + H  # untied; the final norm


# Nemotron 3 Super's model flags (MODEL_ARGS of Megatron-LM@d98e8a6 tests/functional_tests/test_cases/nemotron/
# nemotron3_super_release_gb200/model_config.yaml, typed 2026-12-03), with --vocab-size for its placeholder tokenizer.
SUPER = ("--tensor-model-parallel-size 2 --expert-model-parallel-size 64 --expert-tensor-parallel-size 1 "
         "--sequence-parallel --micro-batch-size 1 --global-batch-size 512 "
         "--spec megatron.core.models.hybrid.hybrid_layer_specs hybrid_stack_spec --is-hybrid-model "
         "--mamba-num-heads 128 --num-layers 88 --hidden-size 4096 --ffn-hidden-size 2688 --num-attention-heads 32 "
         "--group-query-attention --num-query-groups 2 --kv-channels 128 --hybrid-layer-pattern "
         "MEMEMEM*EMEMEMEM*EMEMEMEM*EMEMEMEMEM*EMEMEMEMEM*EMEMEMEMEM*EMEMEMEMEM*EMEMEMEM*EMEMEMEME/*E/*E "
         "--position-embedding-type none --normalization RMSNorm --untie-embeddings-and-output-weights "
         "--disable-bias-linear --squared-relu --seq-length 8192 --max-position-embeddings 8192 --num-experts 512 "
         "--moe-router-topk 22 --moe-router-dtype fp32 --moe-router-enable-expert-bias --moe-token-dispatcher-type "
         "alltoall --moe-grouped-gemm --moe-latent-size 1024 --moe-shared-expert-intermediate-size 5376 "
         "--mtp-num-layers 2 --bf16 --attention-dropout 0.0 --hidden-dropout 0.0 --vocab-size 131072")


def _imported(registry, argv: str, devices: int = 8):
    return import_megatron_args(shlex.split(argv), registry, devices=devices)


def _model(registry, job):
    document = dict(job.document, parallel=dict(job.document["parallel"], dp=1))
    return resolve_job(structure(document, ConfigFile, registry), registry).model


def test_each_hybrid_layer_counts_as_megatron_core_builds_it(registry):
    job = _imported(registry, SMALL + " --hybrid-layer-pattern 'M*M-ME'")
    assert job.unmapped == ()
    layers = job.document["model"]["layers"]
    assert [(g["kind"], g["count"]) for g in layers] == [
        ("embedding", 1), ("mamba2", 1), ("attention", 1), ("mamba2", 1), ("mlp", 1), ("mamba2", 1), ("moe_only", 1),
        ("output", 1)]
    mamba = layers[1]["config"]
    assert {k: mamba[k] for k in ("mamba_num_heads", "mamba_head_dim", "n_groups", "ssm_state_size", "conv_kernel",
                                  "chunk_size", "use_bias", "use_conv_bias", "norm")} == {
        "mamba_num_heads": 8, "mamba_head_dim": 64, "n_groups": 2, "ssm_state_size": 16, "conv_kernel": 4,
        "chunk_size": 128, "use_bias": False, "use_conv_bias": True, "norm": "rmsnorm"}
    moe = layers[6]["config"]
    assert {k: moe[k] for k in ("expert_activation", "hidden_act", "moe_latent_size", "router_fp32",
                                "shared_expert_gate")} == {
        "expert_activation": "mlp", "hidden_act": "relu2", "moe_latent_size": 64, "router_fp32": False,
        "shared_expert_gate": False}
    summary = count_parameters(_model(registry, job), registry)
    assert summary.by_kind == {"embedding": EMBEDDING, "mamba2": 3 * MAMBA, "attention": ATTENTION, "mlp": MLP,
                               "moe_only": MOE, "output": OUTPUT}
    assert summary.total == 2_448_136
    # --mamba-num-heads sets the heads and d_inner = heads x head dim (mamba_mixer.py): 4 heads of 32, I = 128.
    job = _imported(registry, SMALL + " --hybrid-layer-pattern M --mamba-num-heads 4 --mamba-head-dim 32")
    small = H * (2 * 128 + 64 + 4) + (128 + 64) * 5 + 3 * 4 + 128 + 128 * H + H
    assert count_parameters(_model(registry, job), registry).by_kind["mamba2"] == small == 117_068
    # --qk-layernorm: a norm over one head's 64 channels for q and one for k (attention.py, the GPT path's rule).
    job = _imported(registry, SMALL + " --hybrid-layer-pattern '*' --qk-layernorm")
    assert count_parameters(_model(registry, job), registry).by_kind["attention"] == ATTENTION + 2 * 64
    # --moe-router-dtype fp32: the router runs in fp32 (router_gating_linear), its weight still the parameters' dtype.
    job = _imported(registry, SMALL + " --hybrid-layer-pattern E --moe-router-dtype fp32")
    assert job.document["model"]["layers"][1]["config"]["router_fp32"] is True


def test_a_hybrid_model_s_experts_are_grouped_whatever_the_flag(registry):
    """hybrid_layer_specs.py builds the hybrid stack's MoE spec with moe_grouped_gemm=True (TEGroupedMLP), not from
    --moe-grouped-gemm (NVIDIA/Megatron-LM@d98e8a6): the import states moe_grouped_gemm true with or without the flag,
    where a GPT model's arguments without it state false (SequentialMLP; test_sequential_experts.py)."""
    for flag in ("", " --moe-grouped-gemm"):
        job = _imported(registry, SMALL + " --hybrid-layer-pattern 'M*M-ME'" + flag)
        assert job.document["runtime"]["options"]["moe_grouped_gemm"] is True, flag


def test_megatron_defaults_give_layernorm_biases_gelu_and_a_position_table(registry):
    # No --normalization, --disable-bias-linear, --squared-relu, --position-embedding-type or dropouts: Megatron-LM's
    # defaults (arguments.py): LayerNorm (weight and bias) before each block and at the end, biases on q/k/v, the
    # attention's output projection and both MLP projections (the Mamba mixer asserts none), a GeLU MLP, a learned
    # table of --max-position-embeddings rows, tied embeddings; dropout 0.1, priced after the * and - layers only.
    argv = ("--hidden-size 256 --num-attention-heads 4 --ffn-hidden-size 512 --vocab-size 1000 --seq-length 512 "
            "--max-position-embeddings 512 --micro-batch-size 1 --bf16 --hybrid-layer-pattern 'M*-' "
            "--spec megatron.core.models.hybrid.hybrid_layer_specs hybrid_stack_spec")
    job = _imported(registry, argv)
    assert job.unmapped == ("--hidden-dropout 0.1: the dropout after the Mamba and MoE layers' outputs is not priced "
                            "(hp's mamba2 and moe_only kinds state none); the attention and MLP layers' is",)
    layers = job.document["model"]["layers"]
    assert layers[3]["config"]["hidden_act"] == "gelu" and layers[2]["config"]["hidden_dropout"] == 0.1
    mamba = H * (2 * 512 + 2 * 8 * 128 + 8) + (512 + 2048) * 5 + 3 * 8 + 512 + 512 * H + 2 * H  # G 8, N 128
    attention = H * 3 * H + 3 * H + H * H + H + 2 * H  # MHA 4 x 64, q/k/v and output biases
    mlp = 2 * H * 512 + 512 + H + 2 * H
    summary = count_parameters(_model(registry, job), registry)
    assert summary.by_kind == {"embedding": 1000 * H + 512 * H, "mamba2": mamba, "attention": attention, "mlp": mlp,
                               "output": 2 * H}
    assert summary.total == 1_848_088


def test_mtp_depths_are_the_mtp_kind(registry):
    # "/E/E": two depths, each enorm, hnorm, eh_proj (2h x h), one MoE layer as the main pattern's E and the final
    # norm (multi_token_prediction.py MultiTokenPredictionLayer); the shared embedding and head counted once.
    job = _imported(registry, SMALL + " --hybrid-layer-pattern 'M*M-ME/E/E' --mtp-num-layers 2")
    assert job.unmapped == ()
    model = _model(registry, job)
    (mtp,) = [g for g in model.layers if g.kind == "mtp"]
    assert mtp.count == 2 and mtp.config.layer.kind == "moe_only"
    assert mtp.config.layer.config == next(g.config for g in model.layers if g.kind == "moe_only")
    assert count_parameters(model, registry).total == 2_448_136 + 2 * (3 * H + 2 * H * H + MOE)
    with pytest.raises(ConfigError, match="rope or none positions, not learned_absolute"):  # arguments.py asserts it
        _imported(registry, SMALL.replace("--position-embedding-type none", "--max-position-embeddings 512")
                  + " --hybrid-layer-pattern 'M*M-ME/E/E'")
    # A depth of two layers ("*E", Nemotron 3 Super's): each depth enorm, hnorm, eh_proj, a HybridStack of an attention
    # and an MoE layer as the main pattern's, and the final norm (MultiTokenPredictionLayer's hybrid path).
    job = _imported(registry, SMALL + " --hybrid-layer-pattern 'M*M-ME/*E/*E'")
    assert job.unmapped == ()
    model = _model(registry, job)
    (mtp,) = [g for g in model.layers if g.kind == "mtp"]
    assert mtp.count == 2 and mtp.config.layer is None
    assert [(g.kind, g.count) for g in mtp.config.layers] == [("attention", 1), ("moe_only", 1)]
    assert [g.config for g in mtp.config.layers] == [next(g.config for g in model.layers if g.kind == kind)
                                                    for kind in ("attention", "moe_only")]
    depth = 3 * H + 2 * H * H + ATTENTION + MOE
    assert depth == 768 + 131_072 + 196_864 + 230_656 == 559_360
    assert count_parameters(model, registry).total == 2_448_136 + 2 * depth == 3_566_856
    assert main(["estimate", "--from", "megatron-args", SMALL + " --hybrid-layer-pattern 'M*M-ME/*E/*E'",
                 "--devices", "8", "--hardware", "h100-sxm"]) == 0
    # Nemotron 3 Super as Megatron-LM's CI runs it (the model flags of tests/functional_tests/test_cases/nemotron/
    # nemotron3_super_release_gb200/model_config.yaml MODEL_ARGS at NVIDIA/Megatron-LM@d98e8a6, its placeholder
    # tokenizer replaced by --vocab-size 131072): the main model 120,668,687,360 (tests/plugins/test_ssm.py) and two
    # '*E' depths of 2,942,324,736 each (tests/plugins/test_mtp_depths.py).
    job = _imported(registry, SUPER, devices=128)
    assert job.unmapped == ()
    summary = count_parameters(_model(registry, job), registry)
    assert summary.by_kind["mtp"] == 2 * 2_942_324_736 == 5_884_649_472
    assert summary.total == 120_668_687_360 + 5_884_649_472 == 126_553_336_832
    # The legacy spelling (--hybrid-override-pattern, --mtp-hybrid-override-pattern with --mtp-num-layers) is the same
    # model (arguments.py joins them into one pattern).
    legacy = _imported(registry, SMALL + " --hybrid-override-pattern 'M*M-ME' --mtp-hybrid-override-pattern E "
                                         "--mtp-num-layers 2")
    assert legacy.document["model"] == _imported(registry, SMALL + " --hybrid-layer-pattern 'M*M-ME/E/E'").document["model"]


def _split(job):
    return job.document["parallel"]["vpp"], job.document["parallel"].get("layers_per_stage")


def test_pipeline_segments_are_the_chunks(registry):
    # '|' segments: segment v * pp + r on rank r (select_pipeline_segment), hp's chunk order; more segments than
    # ranks are virtual stages.
    assert _split(_imported(registry, SMALL + " --hybrid-layer-pattern 'M*M|-E' --pipeline-model-parallel-size 2",
                            devices=2)) == (1, [3, 2])
    assert _split(_imported(registry, SMALL + " --hybrid-layer-pattern 'M*|M|-E|M' --pipeline-model-parallel-size 2",
                            devices=2)) == (2, [2, 1, 2, 1])
    # Without '|': an even split, or the first and last stages' counts.
    assert _split(_imported(registry, SMALL + " --hybrid-layer-pattern 'M*M-' --pipeline-model-parallel-size 2",
                            devices=2)) == (1, None)
    assert _split(_imported(registry, SMALL + " --hybrid-layer-pattern 'M*M-ME-M' --pipeline-model-parallel-size 3 "
                                              "--decoder-first-pipeline-num-layers 2", devices=3)) == (1, [2, 3, 3])
    assert _split(_imported(registry, SMALL + " --hybrid-layer-pattern 'M*M-ME-M' --pipeline-model-parallel-size 3 "
                                              "--decoder-last-pipeline-num-layers 4", devices=3)) == (1, [2, 2, 4])
    # MTP sits with the head on the last chunk (HybridModel's mtp_on_this_rank), beside the segments' layers.
    argv = SMALL + " --hybrid-layer-pattern 'M*M|-ME/E' --pipeline-model-parallel-size 2"
    job = _imported(registry, argv, devices=2)
    assert _split(job) == (1, None) and job.document["model"]["layers"][-1]["kind"] == "mtp"
    assert main(["estimate", "--from", "megatron-args", argv, "--devices", "2", "--hardware", "h100-sxm"]) == 0
    for extra, flag in (("--hybrid-layer-pattern 'M*|M-ME' --pipeline-model-parallel-size 2 "
                         "--decoder-first-pipeline-num-layers 2", "--decoder-first-pipeline-num-layers"),
                        ("--hybrid-layer-pattern 'M*|M-|ME' --pipeline-model-parallel-size 2", "--hybrid-layer-pattern"),
                        ("--hybrid-layer-pattern 'M*M-M' --pipeline-model-parallel-size 2", "--pipeline-model-parallel-size"),
                        ("--hybrid-layer-pattern 'M*M-' --pipeline-model-parallel-size 2 "
                         "--num-virtual-stages-per-pipeline-rank 2", "--num-virtual-stages-per-pipeline-rank"),
                        ("--hybrid-layer-pattern 'M*M-' --pipeline-model-parallel-size 2 "
                         "--pipeline-model-parallel-layout 'Ett|ttL'", "--pipeline-model-parallel-layout"),
                        ("--hybrid-layer-pattern 'M*M-' --pipeline-model-parallel-size 2 "
                         "--account-for-loss-in-pipeline-split", "--account-for-loss-in-pipeline-split")):
        with pytest.raises(ConfigError) as error:
            _imported(registry, SMALL + " " + extra, devices=2)
        assert error.value.path == flag


@pytest.mark.parametrize("extra, flag, message", [
    ("--hybrid-layer-pattern 'MG*'", "--hybrid-layer-pattern", r"'G' \(gated delta net\) layers are not mapped"),
    ("--hybrid-layer-pattern 'MX'", "--hybrid-layer-pattern", "'X' is not a layer symbol"),
    ("--hybrid-layer-pattern 'M*/E/M'", "--hybrid-layer-pattern", "every MTP depth must have the same pattern"),
    ("--hybrid-layer-pattern M --hybrid-override-pattern M", "--hybrid-override-pattern", "not both"),
    ("--is-hybrid-model", "--is-hybrid-model", "which is missing; state it"),
    ("--hybrid-layer-pattern 'ME' --mamba-num-groups 3", "--mamba-num-groups", "do not divide 8 Mamba heads"),
])
def test_what_hp_cannot_state_is_refused(registry, extra, flag, message):
    with pytest.raises(ConfigError, match=message) as error:
        _imported(registry, SMALL + " " + extra)
    assert error.value.path == flag


def test_moe_layers_need_experts_and_no_biases_and_the_mamba_spec(registry):
    with pytest.raises(ConfigError, match="'E' need it") as error:
        _imported(registry, SMALL.replace("--num-experts 4 ", "") + " --hybrid-layer-pattern ME")
    assert error.value.path == "--num-experts"
    with pytest.raises(ConfigError, match="biases of a hybrid MoE layer") as error:
        _imported(registry, SMALL.replace("--disable-bias-linear ", "") + " --hybrid-layer-pattern ME")
    assert error.value.path == "--disable-bias-linear"
    with pytest.raises(ConfigError, match="hybrid_stack_spec") as error:
        _imported(registry, SMALL.replace("hybrid_stack_spec", "gated_delta_product_stack_spec")
                  + " --hybrid-layer-pattern ME")
    assert error.value.path == "--spec"
    job = _imported(registry, SMALL.replace("--spec megatron.core.models.hybrid.hybrid_layer_specs hybrid_stack_spec", "")
                    + " --hybrid-layer-pattern ME --num-layers 3")
    assert job.unmapped == (
        "--spec not given (Megatron-LM's hybrid builder requires it): priced as "
        "megatron.core.models.hybrid.hybrid_layer_specs hybrid_stack_spec",
        "--num-layers 3: --hybrid-layer-pattern states 2 layers, which Megatron-LM builds; priced so")


# Nemotron 3 Nano 30B-A3B as Megatron-LM arguments: the model fields of Megatron-Bridge's pre-training recipe
# (NVIDIA-NeMo/Megatron-Bridge@067f987, src/megatron/bridge/recipes/nemotronh/h100/nemotron_3_nano.py
# nemotron_3_nano_pretrain_8gpu_h100_bf16_config, read 2026-12-03) with the defaults of its HybridModelProvider
# (src/megatron/bridge/models/hybrid/hybrid_provider.py: RMSNorm, no linear biases, no position embedding, untied
# embeddings, dropouts 0) written as the flags Megatron-LM reads; --squared-relu for its activation_func=squared_relu;
# --vocab-size the Hugging Face config.json's 131,072 (the recipe reads the tokenizer of the same checkpoint).
NANO = ("--hybrid-layer-pattern MEMEM*EMEMEM*EMEMEM*EMEMEM*EMEMEM*EMEMEMEM*EMEMEMEME --num-layers 52 "
        "--hidden-size 2688 --mamba-num-heads 64 --kv-channels 128 --mamba-state-dim 128 --ffn-hidden-size 1856 "
        "--num-attention-heads 32 --mamba-head-dim 64 --seq-length 8192 --group-query-attention --num-query-groups 2 "
        "--num-experts 128 --moe-ffn-hidden-size 1856 --moe-shared-expert-intermediate-size 3712 --moe-router-topk 6 "
        "--moe-router-topk-scaling-factor 2.5 --moe-router-num-groups 1 --moe-router-group-topk 1 "
        "--mamba-num-groups 8 --make-vocab-size-divisible-by 128 --squared-relu --first-last-layers-bf16 "
        "--is-hybrid-model --moe-router-score-function sigmoid --moe-router-enable-expert-bias "
        "--moe-router-load-balancing-type seq_aux_loss --moe-router-dtype fp32 --moe-grouped-gemm "
        "--moe-token-dispatcher-type flex --moe-flex-dispatcher-backend hybridep --moe-hybridep-num-sms 16 "
        "--moe-permute-fusion --expert-model-parallel-size 8 --micro-batch-size 1 --global-batch-size 1024 --bf16 "
        "--normalization RMSNorm --disable-bias-linear --position-embedding-type none "
        "--untie-embeddings-and-output-weights --hidden-dropout 0.0 --attention-dropout 0.0 --vocab-size 131072 "
        "--spec megatron.core.models.hybrid.hybrid_layer_specs hybrid_stack_spec --use-distributed-optimizer")


def _fields(config) -> dict:
    """A layer config's fields, the norm type read as one: Transformer Engine's RMSNorm ("rmsnorm") where transformers'
    NemotronHRMSNorm scales in fp32 ("rmsnorm_fp32_weight"; the same parameters and, fused, the same kept tensors:
    hp_plugins/kit/norms.py)."""
    found = attrs.asdict(config)
    if "norm" in found:
        assert found["norm"] in ("rmsnorm", "rmsnorm_fp32_weight")
        found["norm"] = "rmsnorm"
    return found


def _as_preset(registry, job, preset_name: str) -> int:
    """Assert every layer group of *job* equals the preset's field for field (but the norm type); its total."""
    preset = model_from_preset(preset_name, registry=registry)
    layers = job.document["model"]["layers"]
    assert len(layers) == len(preset.layers)
    imported = [(g["kind"], g["count"], _fields(type(p.config)(**g["config"]))) for g, p in zip(layers, preset.layers)]
    assert imported == [(g.kind, g.count, _fields(g.config)) for g in preset.layers]
    total = count_parameters(preset, registry).total
    assert count_parameters(_model(registry, job), registry).total == total
    return total


def test_nemotron_3_nano_arguments_import_as_its_preset(registry):
    # Every layer group equals the nemotron-3-nano-30b-a3b preset's (the nemotron_h format of its Hugging Face
    # config.json), field by field but the norm type (_fields).
    job = _imported(registry, NANO)
    assert job.unmapped == ("--first-last-layers-bf16: no --fp8-format or --fp4-format, so no layer is quantized; "
                            "ignored",)
    assert _as_preset(registry, job, "nemotron-3-nano-30b-a3b") == 31_577_937_344
    assert main(["estimate", "--from", "megatron-args", NANO, "--devices", "8", "--hardware", "h100-sxm"]) == 0


# Nemotron-H 8B as Megatron-LM arguments: Megatron-Bridge's pre-training recipe (NVIDIA-NeMo/Megatron-Bridge@067f987,
# src/megatron/bridge/recipes/nemotronh/h100/nemotronh.py nemotronh_8b_pretrain_2gpu_h100_bf16_config, read
# 2026-12-03; TP 2 with sequence parallelism, global batch 768) and its HybridModelProvider's defaults, as for NANO; no
# --kv-channels (Megatron's h / heads, 128); d_inner = 128 heads x 64 = 2h; --vocab-size the Hugging Face config.json's
# 131,072 (the recipe trains mock data through a NullTokenizer, not the model's tokenizer).
NEMOTRON_H_8B = ("--hybrid-layer-pattern M-M-M-M*-M-M-M-M-M*-M-M-M-M-M*-M-M-M-M-M*-M-M-M-M-M- --num-layers 52 "
                 "--hidden-size 4096 --mamba-state-dim 128 --mamba-num-heads 128 --ffn-hidden-size 21504 "
                 "--num-attention-heads 32 --seq-length 8192 --mamba-num-groups 8 --mamba-head-dim 64 "
                 "--group-query-attention --num-query-groups 8 --make-vocab-size-divisible-by 128 --squared-relu "
                 "--tensor-model-parallel-size 2 --sequence-parallel --micro-batch-size 1 --global-batch-size 768 "
                 "--bf16 --normalization RMSNorm --disable-bias-linear --position-embedding-type none "
                 "--untie-embeddings-and-output-weights --hidden-dropout 0.0 --attention-dropout 0.0 "
                 "--vocab-size 131072 --spec megatron.core.models.hybrid.hybrid_layer_specs hybrid_stack_spec "
                 "--use-distributed-optimizer")


def test_nemotron_h_8b_arguments_import_as_its_preset(registry):
    job = _imported(registry, NEMOTRON_H_8B, devices=2)
    assert job.unmapped == ()
    assert _as_preset(registry, job, "nemotron-h-8b") == 8_100_852_736
    assert main(["estimate", "--from", "megatron-args", NEMOTRON_H_8B, "--devices", "2", "--hardware", "h100-sxm"]) == 0


def test_cuda_graph_modules_are_read_as_megatron_d98e8a6_names_them(registry):
    # NVIDIA/Megatron-LM@d98e8a6 arguments.py: --cuda-graph-modules (the recipe's set_cuda_graph_modules attn, mamba)
    # captures part of each layer: priced eager, said; --cuda-graph-impl full_iteration the whole iteration, its modules
    # empty; the CI files' bracketed list is read as its words.
    job = _imported(registry, NANO + " --cuda-graph-impl transformer_engine --cuda-graph-modules attn mamba")
    assert "cuda_graphs" not in job.document["runtime"]["options"]
    assert ("--cuda-graph-impl transformer_engine --cuda-graph-modules attn mamba: part of each layer captured; priced "
            "with every kernel launched eagerly (the host floor of docs/time.md)") in job.unmapped
    job = _imported(registry, NANO + " --cuda-graph-impl local --cuda-graph-modules '[attn mamba moe_router]'")
    assert "--cuda-graph-modules attn mamba moe_router: part of each layer" in " ".join(job.unmapped)
    for flags, expected in (("--cuda-graph-impl full_iteration", "full_iteration"),
                            ("--cuda-graph-impl transformer_engine", "layers")):
        job = _imported(registry, NANO + " " + flags)
        assert job.document["runtime"]["options"]["cuda_graphs"] == expected
    with pytest.raises(ConfigError, match="must be empty with --cuda-graph-impl full_iteration") as error:
        _imported(registry, NANO + " --cuda-graph-impl full_iteration --cuda-graph-modules attn")
    assert error.value.path == "--cuda-graph-modules"


def test_a_repeated_mtp_layer_is_one_module_applied_at_every_depth(registry):
    # --mtp-use-repeated-layer: one MTP layer built and applied at both depths (multi_token_prediction.py
    # MultiTokenPredictionBlock at NVIDIA/Megatron-LM@d98e8a6): the mtp kind once, applied twice, its parameters once.
    job = _imported(registry, SMALL + " --hybrid-layer-pattern 'M*M-ME/*E/*E' --mtp-use-repeated-layer")
    assert job.unmapped == ()
    model = _model(registry, job)
    (mtp,) = [g for g in model.layers if g.kind == "mtp"]
    assert (mtp.count, mtp.config.applications) == (1, 2)
    assert count_parameters(model, registry).total == 2_448_136 + 559_360
    # Without a pattern's MTP depths the flag builds nothing (no MTP block), as in Megatron-LM.
    plain = _imported(registry, SMALL + " --hybrid-layer-pattern 'M*M-ME' --mtp-use-repeated-layer")
    assert not [g for g in _model(registry, plain).layers if g.kind == "mtp"]
