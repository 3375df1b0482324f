"""LoRA and QLoRA: frozen base weights (no gradient, master copy or optimizer state), adapters trained in full.

Memory derived by hand for a small model; hypothesis properties: adding adapters never lowers memory,
freezing never raises it.
"""

from __future__ import annotations

from fractions import Fraction

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from hp_core.api import build_registry, estimate, layer_context, model_from_preset
from hp_core.costs import ParamCount
from hp_core.engine.stage import static_bytes
from hp_core.errors import ConfigError
from hp_core.specs import LayerGroup, ModelSpec, ParallelSpec, PrecisionSpec
from hp_plugins.kinds.dense import DenseConfig
from hp_plugins.kinds.embedding import EmbeddingConfig
from hp_plugins.kinds.lora import MXFP4_BYTES, NF4_BYTES, LoRAConfig, with_lora
from hp_plugins.kinds.output import OutputConfig

_REGISTRY = build_registry(use_env=False)
V, H = 1000, 64


def _model(a=4, g=2, d=16, width=128, layers=1):
    dense = DenseConfig(hidden_size=H, num_attention_heads=a, num_key_value_heads=g, head_dim=d, intermediate_size=width)
    return ModelSpec(name="tiny", source="test", layers=(
        LayerGroup("embedding", EmbeddingConfig(vocab_size=V, hidden_size=H)), LayerGroup("dense", dense, layers),
        LayerGroup("output", OutputConfig(vocab_size=V, hidden_size=H))))


def _static(model, **parallel):
    result = estimate(model, ParallelSpec(seq_len=256, **parallel), registry=_REGISTRY)
    m = result.stages[0].memory
    return m.parameters_bytes, m.gradients_bytes, m.master_parameters_bytes, m.optimizer_states_bytes


def test_nf4_bytes_are_bitsandbytes_double_quantized_blocks():
    # 4 bits a weight, an 8-bit absmax per 64 weights, an fp32 absmax per 256 absmax values (QLoRA Section 3).
    assert NF4_BYTES == Fraction(1, 2) + Fraction(8, 8 * 64) + Fraction(32, 8 * 64 * 256)
    assert float((NF4_BYTES - Fraction(1, 2)) * 8) == pytest.approx(0.127, abs=5e-4)  # the paper's 0.127 bits


def test_lora_memory_by_hand():
    embedding, output = V * H, H + V * H
    dense = H + H * (4 + 2 * 2) * 16 + 4 * 16 * H + H + H * 2 * 128 + 128 * H
    assert dense == 36992
    adapters = 8 * (H + 4 * 16) + 8 * (H + 2 * 16)  # q_proj and v_proj, r = 8
    lora = with_lora(_model(), _REGISTRY, rank=8, target_modules=("q_proj", "v_proj"))
    # bf16 parameters; fp32 gradients, master copy and two AdamW moments of the adapters alone.
    assert _static(lora) == (2 * (embedding + dense + output + adapters), 4 * adapters, 4 * adapters, 8 * adapters)
    qlora = with_lora(_model(), _REGISTRY, rank=8, target_modules=("q_proj", "v_proj"), base="nf4")
    linears = H * 8 * 16 + 4 * 16 * H + H * 256 + 128 * H  # the dense layer's weight matrices, in NF4
    nf4 = -(-linears * NF4_BYTES.numerator // NF4_BYTES.denominator)
    assert _static(qlora)[0] == nf4 + 2 * (embedding + output + (dense - linears) + adapters) == 278985
    # Full training of the same model keeps everything for every parameter.
    total = embedding + dense + output
    assert _static(_model()) == (2 * total, 4 * total, 4 * total, 8 * total)


def test_trainable_parameters_of_llama3_8b_lora():
    """PEFT's count for Llama-3-8B with r = 16 on q, k, v, o: 13,631,488 trainable parameters."""
    model = with_lora(model_from_preset("llama3-8b", _REGISTRY), _REGISTRY, rank=16)
    from hp_core.api import count_parameters

    assert count_parameters(model, _REGISTRY).total - 8_030_261_248 == 32 * 16 * (2 * 8192 + 2 * 5120) == 13_631_488


def test_frozen_parameters_in_the_static_memory():
    # ZeRO-3 shards frozen parameters as it shards the group's others; nothing else is held for them.
    frozen = {"dense": Fraction(1000, 3)}
    assert static_bytes({"dense": 10}, {"dense": 80}, PrecisionSpec(), 4, 0, 4, 4, frozen_bytes=frozen) == (
        20 + 334, 40, 40, 80)
    assert static_bytes({"dense": 10}, {"dense": 80}, PrecisionSpec(), 4, 3, 4, 4, frozen_bytes=frozen) == (
        5 + 84, 10, 10, 20)
    with pytest.raises(ValueError, match="element_bytes must be a positive number"):
        ParamCount("x", "dense", 4, False, element_bytes=0)


def test_the_adapters_and_the_frozen_base_in_the_layer_cost():
    layer = LayerGroup("dense", _model().layers[1].config, 1)
    kind = _REGISTRY.layer_kind("lora")
    context = layer_context(ParallelSpec(seq_len=256), PrecisionSpec(), "flash")
    from hp_core.engine.prepare import with_sublayers

    context = with_sublayers(context, _REGISTRY)
    cost = kind.evaluate(LoRAConfig(layer=layer, rank=8, dropout=0.1, target_modules=("q_proj",)), context)
    assert {p.name for p in cost.params if p.trainable} == {"lora_A_q_proj", "lora_B_q_proj"}
    kept = {t.op: t.bytes for t in cost.activations}
    assert (kept["lora_q_proj_a_out"], kept["lora_q_proj_dropout_mask"], kept["lora_q_proj_dropout_out"]) == (
        2 * 256 * 8, 256 * H, 2 * 256 * H)
    plain = _REGISTRY.layer_kind("dense").evaluate(layer.config, context)
    assert cost.forward.matmul_flops == plain.forward.matmul_flops + 2 * 256 * 8 * (H + 64)
    assert cost.work.frozen_matmul_flops == plain.forward.matmul_flops
    # Its frozen GEMMs are the base's, whose weight-gradient GEMMs the step time drops; the adapters' are trained.
    assert cost.work.frozen_gemms == plain.work.gemms and cost.work.gemms == (*plain.work.gemms, (256, 8, H), (256, 64, 8))
    with pytest.raises(ConfigError, match=r"\$\.parallel\.tp: tp=2: LoRA adapters under tensor parallelism"):
        kind.validate(LoRAConfig(layer=layer), layer_context(ParallelSpec(tp=2, seq_len=256), PrecisionSpec(), "flash"))


@settings(max_examples=25, deadline=None)
@given(heads=st.sampled_from([(4, 2), (4, 4), (8, 2)]), width=st.sampled_from([64, 128, 256]),
       rank=st.integers(1, 32), targets=st.sets(st.sampled_from(["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj",
                                                                  "up_proj", "down_proj"]), min_size=1),
       dropout=st.sampled_from([0.0, 0.1]), base=st.sampled_from(["bf16", "nf4"]), zero=st.sampled_from([0, 1, 3]),
       dp=st.sampled_from([1, 2]))
def test_adapters_never_lower_memory_and_freezing_never_raises_it(heads, width, rank, targets, dropout, base, zero, dp):
    model = _model(*heads, width=width, layers=2)
    frozen = with_lora(model, _REGISTRY, rank=rank, target_modules=(), base=base)
    adapted = with_lora(model, _REGISTRY, rank=rank, target_modules=tuple(sorted(targets)), dropout=dropout, base=base)
    peaks = [estimate(m, ParallelSpec(dp=dp, zero=zero, seq_len=256), registry=_REGISTRY).peak_bytes
             for m in (frozen, adapted, model)]
    # Adding adapters never lowers the frozen model's peak; freezing never raises the full model's. (An adapted
    # model may exceed full training: on a tiny model the adapters' kept activations, dropout's above all,
    # outweigh the gradients and optimizer states freezing saves, e.g. width 128, rank 31, every target.)
    assert peaks[0] <= peaks[1] and peaks[0] <= peaks[2]


def test_mxfp4_experts_of_gpt_oss_20b_by_hand():
    """base: mxfp4 holds GPT-OSS's routed expert weights as its checkpoint does (17 bytes per 32 weights: 16 of
    packed E2M1 pairs and one E8M0 scale) and their biases in fp32, the rest in bf16: 13.78 GB of parameters for
    GPT-OSS-20B, the size of its published checkpoint (about 13.8 GB), against 41.8 GB in bf16."""
    assert MXFP4_BYTES == Fraction(17, 32)
    model = model_from_preset("gpt-oss-20b", _REGISTRY)
    held = {base: estimate(with_lora(model, _REGISTRY, base=base, rank=8), ParallelSpec(seq_len=256),
                           registry=_REGISTRY).stages[0].memory.parameters_bytes for base in ("bf16", "mxfp4")}
    layers, experts, h, width = 24, 32, 2880, 2880
    weights, biases = layers * experts * 3 * h * width, layers * experts * (2 * width + h)
    assert weights == 19_110_297_600
    assert held["bf16"] - held["mxfp4"] == 2 * weights - weights * 17 // 32 + 2 * biases - 4 * biases
    assert held["mxfp4"] == 13_782_498_432
    # Expert parallelism splits the packed experts as it splits bf16 ones: per rank, half of them over ep = 2.
    ep2 = estimate(with_lora(model, _REGISTRY, base="mxfp4", rank=8), ParallelSpec(dp=2, ep=2, seq_len=256),
                   registry=_REGISTRY).stages[0].memory.parameters_bytes
    assert held["mxfp4"] - ep2 == (weights * 17 // 32 + 4 * biases) // 2


def test_mxfp4_base_without_routed_experts_is_refused():
    """base: mxfp4 packs routed experts only: on a dense model it would silently price the bf16 figure."""
    llama = model_from_preset("llama3-8b", _REGISTRY)
    with pytest.raises(ConfigError, match=r"^base: base: mxfp4 holds routed experts only and 'llama3-8b'"):
        with_lora(llama, _REGISTRY, base="mxfp4")
    dense = LoRAConfig(layer=LayerGroup("dense", llama.layers[1].config, 1), base="mxfp4")
    with pytest.raises(ConfigError, match=r"config\.base: base: mxfp4 holds routed experts only and this 'dense'"):
        _REGISTRY.layer_kind("lora").validate(dense, layer_context(ParallelSpec(seq_len=256), PrecisionSpec(), "flash"))


def test_the_config_page_example_estimates(tmp_path):
    from pathlib import Path

    from hp_core.cli import main

    page = (Path(__file__).resolve().parents[2] / "docs" / "config.md").read_text(encoding="utf-8")
    section = page[page.index("## LoRA and QLoRA fine-tuning"):]
    block = section[section.index("```yaml") + len("```yaml"):]
    (tmp_path / "lora.yaml").write_text(block[:block.index("```")], encoding="utf-8")
    assert main(["estimate", str(tmp_path / "lora.yaml"), "--json"]) == 0
