"""The ``fsdp2`` option ``attention_kernel=flex``: FlexAttention's published rates, its 128 x 128 blocks, its refusal
where no rate is published, and the block counts of a causal mask (hp_core.score_masks).

Hand-derived values: FlashAttention-2 on H100 333 TFLOP/s forward and 318 backward (Shah et al. 2024, Figures 5-6,
the sdpa rates), FlexAttention 1.25 and 1.03 times that on H100 (PyTorch, GTC 2025 abstract), 0.90 and 0.85 on A100
(PyTorch blog, 2024-08-07), on 0.73 and 0.63 of the A100's 312 TFLOP/s (Dao 2023); block counts by hand and by
brute force over the mask.
"""

from __future__ import annotations

import attrs
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from hp_core.api import build_registry, step_time
from hp_core.errors import ConfigError
from hp_core.runtime_options import apply_options
from hp_core.score_masks import LocalMask, block_factor, causal_block_pairs, causal_score_pairs, local_mask
from hp_core.specs import LayerGroup, ModelSpec, ParallelSpec
from hp_plugins.kinds.dense import DenseConfig
from hp_plugins.kinds.embedding import EmbeddingConfig
from hp_plugins.kinds.output import OutputConfig
from hp_plugins.runtimes.flex_attention import FLEX, FLEX_BLOCK_TOKENS, FLEX_THROUGHPUT_RATIOS

SEQ, H = 4096, 1024  # 16 heads of 64


@pytest.fixture(scope="module")
def registry():
    return build_registry(use_env=False)


def _one_layer(window: int | None = None) -> ModelSpec:
    """One GPT layer (hidden 1024, 16 heads, GeLU MLP of 4h) between an embedding and a tied head."""
    layer = DenseConfig(hidden_size=H, num_attention_heads=16, num_key_value_heads=16, intermediate_size=4 * H,
                        gated_mlp=False, hidden_act="gelu", norm="layernorm", sliding_window=window)
    return ModelSpec(name="one-layer", layers=(
        LayerGroup(kind="embedding", config=EmbeddingConfig(vocab_size=32000, hidden_size=H)),
        LayerGroup(kind="dense", config=layer),
        LayerGroup(kind="output", config=OutputConfig(vocab_size=32000, hidden_size=H, tie_word_embeddings=True,
                                                      norm="layernorm"))), source="test")


def _stage(registry, model, kernel: str, hardware: str = "h100-sxm"):
    layout = ParallelSpec(dp=1, seq_len=SEQ, micro_batch_size=1, global_batch_size=1)
    runtime = apply_options(registry.runtime("fsdp2"), {"attention_kernel": kernel})
    return step_time(model, layout, registry=registry, hardware=registry.hardware_preset(hardware).spec,
                     runtime=runtime).stages[0]


# ----------------------------------------------------------------------------- the published figures


def test_flex_rates_are_flash_attention_2_s_times_pytorch_s_ratios():
    # H100: 333 and 318 TFLOP/s of 989.4 (FlashAttention-2, the sdpa rates) x 1.25 and x 1.03: 416.25 and 327.54.
    forward, backward = FLEX["hopper"]
    assert forward.value * 989.4 == pytest.approx(416.25) and backward.value * 989.4 == pytest.approx(327.54)
    # A100: 0.73 and 0.63 of peak (Dao 2023) x 0.90 and x 0.85.
    assert [f.value for f in FLEX["ampere"]] == pytest.approx([0.657, 0.5355])
    assert set(FLEX) == set(FLEX_THROUGHPUT_RATIOS) == {"hopper", "ampere"}
    assert "pytorch-at-gtc" in forward.source and "25% faster than FlashAttention-2" in forward.source
    assert "flexattention" in FLEX["ampere"][0].source and "A100" in FLEX["ampere"][1].source
    assert FLEX_BLOCK_TOKENS.value == 128 and "_DEFAULT_SPARSE_BLOCK_SIZE" in FLEX_BLOCK_TOKENS.source


def test_flex_prices_one_layer_at_the_published_ratio(registry):
    # One causal layer at 4,096 tokens, hidden 1,024: 4 s^2 h = 68.72 GFLOP of scores and weighted sums, half of it
    # executed under the causal mask, 34.36 GFLOP forward, 2.5 times that backward.
    executed = 4 * SEQ * SEQ * H * 0.5
    assert executed == pytest.approx(34.36e9, rel=1e-3)
    sdpa_fwd, sdpa_bwd = executed / 333e12, 2.5 * executed / 318e12  # 103.2 us, 270.1 us
    flex_fwd, flex_bwd = executed / 416.25e12, 2.5 * executed / 327.54e12  # 82.5 us, 262.3 us
    assert (flex_fwd, flex_bwd) == pytest.approx((82.55e-6, 262.26e-6), rel=1e-3)
    sdpa, flex = _stage(registry, _one_layer(), "sdpa"), _stage(registry, _one_layer(), "flex")
    # Everything but the attention kernel is priced alike (one rank: no communication).
    assert flex.forward_seconds - sdpa.forward_seconds == pytest.approx(flex_fwd - sdpa_fwd, rel=1e-9)
    assert flex.backward_seconds - sdpa.backward_seconds == pytest.approx(flex_bwd - sdpa_bwd, rel=1e-9)
    # On A100 80GB (312 TFLOP/s): FlashAttention-2 at 0.73 / 0.63 of peak, FlexAttention 0.90 / 0.85 of that.
    sdpa, flex = (_stage(registry, _one_layer(), k, "a100-80gb") for k in ("sdpa", "flex"))
    assert flex.forward_seconds - sdpa.forward_seconds == pytest.approx(
        executed / 312e12 * (1 / 0.657 - 1 / 0.73), rel=1e-9)
    assert flex.backward_seconds - sdpa.backward_seconds == pytest.approx(
        2.5 * executed / 312e12 * (1 / 0.5355 - 1 / 0.63), rel=1e-9)


def test_a_128_token_window_runs_its_blocks_under_flex_and_its_pairs_under_sdpa(registry):
    # A 128-token window at 4,096 tokens keeps 128 * 129 / 2 + 3,968 * 128 = 516,160 of the 8,390,656 causal pairs;
    # FlexAttention's 128 x 128 blocks: query block 0 runs 1 block, each of the other 31 its own and the one before
    # it, 63 of the full causal mask's 32 * 33 / 2 = 528.
    assert causal_score_pairs(SEQ, window=128) == 516_160 and causal_score_pairs(SEQ) == 8_390_656
    assert causal_block_pairs(SEQ, 128, window=128) == 63 and causal_block_pairs(SEQ, 128) == 528
    full_fwd = 4 * SEQ * SEQ * H * 0.5
    sdpa_fwd = full_fwd * 516_160 / 8_390_656 / 333e12  # the exact pairs: 6.35 us
    flex_fwd = full_fwd * 63 / 528 / 416.25e12  # the blocks: 9.85 us, 1.94 times the pairs' at the same rate
    assert (sdpa_fwd, flex_fwd) == pytest.approx((6.348e-6, 9.850e-6), rel=1e-3)
    sdpa, flex = (_stage(registry, _one_layer(window=128), k) for k in ("sdpa", "flex"))
    assert flex.forward_seconds - sdpa.forward_seconds == pytest.approx(flex_fwd - sdpa_fwd, rel=1e-9)
    assert flex.backward_seconds - sdpa.backward_seconds == pytest.approx(
        2.5 * full_fwd * (63 / 528 / 327.54e12 - 516_160 / 8_390_656 / 318e12), rel=1e-9)
    assert LocalMask(SEQ, 128).executed_over_exact(128) == pytest.approx((63 / 528) / (516_160 / 8_390_656))
    assert block_factor(LocalMask(SEQ, 128), None) == block_factor(None, 128) == 1.0


def test_block_counts_by_hand():
    # Chunks of 256 over 1,024 tokens at blocks of 128: each chunk's two query blocks run 1 and 2 blocks.
    assert causal_block_pairs(1024, 128, chunk=256) == 4 * (1 + 2)
    # A window of 129 reaches back exactly to the start of the block before (row 128 i keeps keys 128 i - 128 ..):
    # still two blocks; a window of 130 reaches one key into the block two before: 1, 2, then 3 blocks each.
    assert causal_block_pairs(1024, 128, window=129) == 1 + 7 * 2
    assert causal_block_pairs(1024, 128, window=130) == 1 + 2 + 6 * 3
    # A last partial block counts whole: 300 tokens at 128 are 3 query blocks, 6 causal block pairs.
    assert causal_block_pairs(300, 128) == 6
    # A mask keeping every causal pair is none; a window wider than the sequence too.
    assert local_mask(4096, window=4096) is None and local_mask(4096, chunk=8192) is None
    assert local_mask(4096, window=128) == LocalMask(4096, 128)


def _brute_blocks(s, block, window=None, chunk=None):
    return len({(i // block, j // block) for i in range(s) for j in range(i + 1)
                if (window is None or j > i - window) and (chunk is None or j // chunk == i // chunk)})


@settings(max_examples=60, deadline=None)
@given(st.integers(1, 90), st.integers(1, 40), st.integers(1, 100), st.sampled_from(["window", "chunk", None]))
def test_block_counts_equal_the_mask(s, block, size, kind):
    window, chunk = (size if kind == "window" else None), (size if kind == "chunk" else None)
    assert causal_block_pairs(s, block, window, chunk) == _brute_blocks(s, block, window, chunk)


# ----------------------------------------------------------------------------- refused where no rate is published


def test_flex_is_refused_where_no_rate_is_published(registry, tmp_path, capsys):
    runtime = apply_options(registry.runtime("fsdp2"), {"attention_kernel": "flex"})
    assert runtime.timing.attention_block_tokens == FLEX_BLOCK_TOKENS
    assert sorted(d.architecture for d in runtime.timing.devices) == ["ampere", "hopper"]
    layout = ParallelSpec(dp=1, seq_len=2048, micro_batch_size=1, global_batch_size=1)
    b200 = registry.hardware_preset("b200").spec
    with pytest.raises(ConfigError) as refused:
        step_time(_one_layer(), layout, registry=registry, hardware=b200, runtime=runtime)
    message = str(refused.value)
    assert "\n" not in message and "attention_kernel=flex" in message and "'blackwell'" in message
    # No '*' entry: a device of no known architecture is refused too (absent is not zero) ...
    bare = attrs.evolve(registry.hardware_preset("h100-sxm").spec, architecture="tpu")
    with pytest.raises(ConfigError, match="attention_kernel=flex"):
        step_time(_one_layer(), layout, registry=registry, hardware=bare, runtime=runtime)
    # ... and setting the option back to sdpa restores every entry and drops the block size.
    assert apply_options(runtime, {"attention_kernel": "sdpa"}).timing == registry.runtime("fsdp2").timing
    from cli_run import estimate_json  # tests/cli_run.py

    status, doc = estimate_json(tmp_path, capsys, {"model": "llama3-8b", "hardware": "b200",
                                                   "parallel": {"dp": 8, "seq_len": 4096},
                                                   "runtime": {"name": "fsdp2", "options": {"attention_kernel": "flex"}}})
    assert status == 0 and doc["time"] is None
    assert doc["time_unavailable"].startswith("$.hardware.architecture: timing profile fsdp2 has no efficiencies for "
                                              "architecture 'blackwell' (attention_kernel=flex: FlexAttention has a "
                                              "published rate on hopper and ampere devices only")
