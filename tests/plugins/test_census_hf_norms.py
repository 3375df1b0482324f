"""Every kind of the new architectures, configured for transformers' modules, within 2% of the torch census.

Skipped without the ``census`` extra. The formulas take the fsdp2 runtime's
``norm_implementation: transformers`` traits (each family's unfused RMSNorm
through :func:`hp_plugins.kit.fp32_norm_bytes`: ``rmsnorm`` or
``rmsnorm_fp32_weight``; Llama 4's weightless L2 QK-norm; a transformers router's
fp32 input copy) and eager attention as transformers runs it; Gated DeltaNet's
eager setting prices transformers' reference PyTorch path. The rows are
``benchmarks/census_hf_norms.py``'s, which writes docs/accuracy.md's table.
"""

from __future__ import annotations

from pathlib import Path

import pytest

pytest.importorskip("torch")
pytest.importorskip("transformers")

from hp_core.api import model_from_preset  # noqa: E402
from hp_core.costs import LayerContext  # noqa: E402
from hp_core.engine.census import formulas_precision  # noqa: E402
from hp_plugins.kit import fp32_norm_bytes  # noqa: E402
from repo_script import load_script  # tests/repo_script.py



def _page_module():
    return load_script("benchmarks/census_hf_norms.py")


PAGE = _page_module()
# The kinds each case must show (a kind the census or the model format dropped fails here, not silently).
KINDS = {
    "mistral-7b": {"dense"}, "phi-3-mini": {"dense"}, "phi-3-medium": {"dense"}, "gemma-2-9b": {"dense"},
    "gemma-2-27b": {"dense"}, "gemma-3-27b": {"dense"}, "gpt-oss-20b": {"moe"}, "gpt-oss-120b": {"moe"},
    "llama4-scout": {"moe (without routed experts)"}, "llama4-maverick": {"dense", "moe (without routed experts)"},
    "mamba-codestral-7b": {"mamba2"}, "nemotron-h-8b": {"mamba2", "attention", "mlp"},
    "nemotron-h-56b": {"mamba2", "attention", "mlp"}, "nemotron-3-nano-30b-a3b": {"mamba2", "attention", "moe_only"},
    "qwen3-next-80b-a3b": {"gdn_moe", "gated_attention_moe"},
    "qwen3-next-80b-a3b+mlp_only_layers": {"gdn", "gdn_moe", "gated_attention"},
}


@pytest.mark.parametrize("seq_len", PAGE.SEQ_LENS)
@pytest.mark.parametrize("case", PAGE.CASES)
def test_every_kind_within_two_percent_of_the_census(case, seq_len):
    found = PAGE.rows(case, seq_len)
    assert {kind for kind, _, _ in found} == KINDS[case] | {"embedding", "output"}
    for kind, census, priced in found:
        assert abs(priced - census) <= 0.02 * census, (case, seq_len, kind, priced, census)


def test_the_page_table_is_current():
    assert PAGE.section() in PAGE.PAGE.read_text(encoding="utf-8"), "regenerate with: python benchmarks/census_hf_norms.py"


def test_gdn_moe_was_the_fla_kernels_against_the_torch_path():
    """Before the eager setting priced transformers' reference path, gdn_moe's formulas (the flash-linear-attention
    terms, still the ``flash`` setting's) were 53% under the census: the torch path keeps q, k, v and the chunk tiles
    in fp32. At 1024 tokens, the mixer's eager terms beyond its flash terms (bytes per token, 32 value heads of 128,
    16 key heads of 128, chunk 64, conv 8,192 channels of width 4)."""
    reg = PAGE.registry()
    group = next(g for g in model_from_preset("qwen3-next-80b-a3b", reg).layers if g.kind == "gdn_moe")

    def kept(attention):
        x = LayerContext(tp=1, cp=1, sp=False, ep=1, etp=1, micro_batch_size=1, seq_len=1024,
                         precision=formulas_precision("eager"), attention=attention, traits=PAGE.HF_TRAITS)
        return {t.op: t.bytes / 1024 for t in reg.layer_kind("gdn_moe").evaluate(group.config, x).activations}

    eager, flash = kept("eager"), kept("flash")
    # The padded fp32 q, k and v; the five 64-wide fp32 chunk tiles; the fp32 chunk states (16 chunks of 128 x 128).
    assert eager["qkv_padded"] == 32 * (128 + 128 + 128) * 4
    assert eager["chunk_tiles"] == 5 * 32 * 64 * 4
    assert eager["chunk_states"] == 16 * 32 * 128 * 128 * 4 / 1024
    # The gated norm: fp32 input, gate, SiLU; bf16 normalised, product, out_proj input; the fp32 root per head.
    assert eager["gated_norm"] == 32 * (18 * 128 + 4)
    assert sum(eager.values()) - sum(flash.values()) == pytest.approx(534778 - 251592, abs=1)


def test_transformers_norms_keep_what_the_census_names():
    # Llama's RMSNorm 4w + 4 beyond a fused norm, Gemma's/GPT-OSS's/Nemotron-H's/Qwen3-Next's 6w + 4, a weightless
    # L2 norm 2w + 4 (its fp32 copy stands in for the input); nothing without the trait or for LayerNorm.
    traits = frozenset({"fp32_norm_copy"})
    assert fp32_norm_bytes(10, 4096, "rmsnorm", traits) == 10 * (4 * 4096 + 4)
    assert fp32_norm_bytes(10, 4096, "rmsnorm_fp32_weight", traits) == 10 * (6 * 4096 + 4)
    assert fp32_norm_bytes(10, 128, "rmsnorm", traits, weight=False) == 10 * (2 * 128 + 4)
    assert fp32_norm_bytes(10, 4096, "rmsnorm_fp32_weight", frozenset()) == 0
    assert fp32_norm_bytes(10, 4096, "layernorm", traits) == 0


def test_a_changed_config_s_folder_is_removed_after_its_census():
    """The +mlp_only_layers case writes its config.json to a temporary folder, gone once the rows are taken."""
    with PAGE._model_ref("qwen3-next-80b-a3b+mlp_only_layers") as (ref, model):
        config = Path(ref)
        assert config.name == "config.json" and config.is_file()
        assert model.name == "qwen3-next-80b-a3b+mlp_only_layers"
    assert not config.parent.exists()
    with PAGE._model_ref("mistral-7b") as (ref, _):
        assert ref == "mistral-7b"
