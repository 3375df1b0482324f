"""The userbuffers GEMMs of the kinds beyond the dense attention and MLP (docs/time.md "Userbuffers SM margins"):
Megatron-Core builds a Mamba mixer's and a Gated DeltaNet's in_proj / out_proj and a shared expert's linear_fc1 /
linear_fc2 with tp_comm_buffer_name fc1 / fc2 (NVIDIA/Megatron-LM@d98e8a6 ssm/mamba_mixer.py lines 291 and 447,
ssm/gated_delta_net/common.py 221 and 284, transformer/mlp.py 228 and 251), so under --tp-comm-overlap they take the
fc1 / fc2 userbuffers' SM margins; MLA's down projections and the MTP module's eh_proj carry names Megatron-Core's
TELinear runs no userbuffers for, which turn the overlap off (extensions/transformer_engine.py lines 1176-1186); and
--tp-comm-overlap without sequence parallelism is refused (training/arguments.py lines 1441-1442). Figures by hand."""

from __future__ import annotations

import types

import attrs
import pytest

from hp_core.api import build_registry, layer_context
from hp_core.engine.layout_checks import check_userbuffers_layout
from hp_core.engine.timing.gemm_seconds import userbuffers_margin_seconds, userbuffers_rerun_seconds
from hp_core.engine.timing.layer import layer_pricer
from hp_core.errors import ConfigError
from hp_core.runtime_options import apply_options
from hp_core.specs import ParallelSpec, PrecisionSpec
from hp_plugins.hardware.presets import PRESETS
from hp_plugins.kinds.hybrid import MoELayerConfig
from hp_plugins.kinds.mamba import Mamba2LayerConfig
from hp_plugins.kinds.mla import MLAConfig
from hp_plugins.kinds.qwen3_next import GDNConfig
from hp_plugins.runtimes.userbuffers import sm_margins

REGISTRY = build_registry(use_env=False)
H100 = next(p.spec for p in PRESETS if p.name == "h100-sxm")
TP2 = ParallelSpec(tp=2, sp=True, dp=4, seq_len=1024, micro_batch_size=2, global_batch_size=16)
T = 2048  # tokens a rank's TP GEMMs run over: micro-batch 2 x 1,024, gathered under SP
EVERY = ("fprop", "dgrad", "wgrad")
EXTRA = 132 / 116 - 1  # TE's default 16-SM margin on the H100's 132 SMs


def _rates(margins):
    # As tests/core/test_userbuffers_margin.py: every GEMM at matmul 0.5 of a 1e15 peak, backward twice the forward
    # (half of it the weight gradient), no recipe.
    return types.SimpleNamespace(gemm_table=None, mm_backward=2.0, matmul=0.5, peak=1e15, ub_margins=tuple(margins),
                                 sm_count=132, low_precision=False, gemm_scope="all", gemm_speedup=1.0,
                                 gemm_speedup_backward=1.0)


def _seconds(gemm):
    rows, out, inp = gemm
    return 2.0 * rows * out * inp / (0.5 * 1e15)


def _evaluate(kind, config, parallel=TP2, traits=frozenset()):
    return REGISTRY.layer_kind(kind, "$").evaluate(config, layer_context(parallel, PrecisionSpec(), "flash", traits=traits))


def test_the_mamba_mixers_in_and_out_projections_run_the_fc1_and_fc2_userbuffers():
    config = Mamba2LayerConfig(hidden_size=256, mamba_num_heads=8, mamba_head_dim=64, ssm_state_size=16, n_groups=4,
                               chunk_size=64)
    work = _evaluate("mamba2", config).work
    # in_proj: z, x (2 x 8 heads x 64), B, C (2 x 4 groups x 16) and dt (8) = 1,160 wide, over TP 2 580; out_proj reads
    # the inner 512 over TP 2. A layernorm-fused in_proj and a row-parallel out_proj: every pass.
    in_proj, out_proj = (T, 580, 256), (T, 256, 256)
    assert work.userbuffers_gemms == (("fc1", in_proj, EVERY), ("fc2", out_proj, EVERY))
    assert work.refused_userbuffers == ()
    # TE's default: fc2_fprop (pipeline) and fc1's dgrad and wgrad (bulk) leave 16 SMs; fc1_fprop and fc2_dgrad are ring
    # exchanges without a margin.
    fwd, bwd, wgrad = userbuffers_margin_seconds(work, _rates(sm_margins("te_default")))
    assert fwd == pytest.approx(_seconds(out_proj) * EXTRA)
    assert bwd == pytest.approx(2 * _seconds(in_proj) * EXTRA) and wgrad == pytest.approx(_seconds(in_proj) * EXTRA)
    assert userbuffers_margin_seconds(work, _rates(sm_margins("te_1x_default"))) == (0.0, 0.0, 0.0)


def test_a_shared_experts_fc1_runs_its_forward_alone_through_the_userbuffers():
    config = MoELayerConfig(hidden_size=256, num_experts=8, num_experts_per_tok=2, moe_intermediate_size=128,
                            shared_expert_intermediate_size=128)
    work = _evaluate("moe_only", config).work
    # Gated: fc1 2 x 128 over TP 2 = 128 wide; fc2 reads 128 / 2. The fc1 is a TEColumnParallelLinear (its norm the
    # MoE layer's), which Megatron-Core gives no bulk overlap: its forward alone; fc2 row-parallel.
    fc1, fc2 = (T, 128, 256), (T, 256, 64)
    assert work.userbuffers_gemms == (("fc1", fc1, ("fprop",)), ("fc2", fc2, EVERY))
    # Forward: fc2_fprop's margin; backward: none (fc1's dgrad and wgrad run no userbuffers, fc2_dgrad is a ring
    # exchange).
    fwd, bwd, wgrad = userbuffers_margin_seconds(work, _rates(sm_margins("te_default")))
    assert fwd == pytest.approx(_seconds(fc2) * EXTRA) and bwd == 0.0 and wgrad == 0.0
    # The moe module's re-run of the block (the router's gate, then the shared linears) runs them again, by place.
    assert work.rerun("moeLayer").userbuffers_linears == (("fc1", 1), ("fc2", 2))


def test_the_moe_blocks_re_run_pays_the_shared_experts_forward_margin_again():
    config = MoELayerConfig(hidden_size=4096, num_experts=8, num_experts_per_tok=2, moe_intermediate_size=2048,
                            shared_expert_intermediate_size=8192)
    parallel = attrs.evolve(TP2, ep=2, seq_len=4096)
    kind = REGISTRY.layer_kind("moe_only", "$")
    megatron = REGISTRY.runtime("megatron")
    context = layer_context(parallel, PrecisionSpec(), "flash", traits=megatron.traits)
    cost = kind.evaluate(config, context)

    def seconds(cfg, recomputed):
        runtime = apply_options(megatron, {"tp_comm_overlap": True, "tp_comm_overlap_cfg": cfg})
        # Without the host's launch floor (TimingProfile.host), which sets a Megatron-Core MoE layer's forward here.
        timing = attrs.evolve(runtime.timing, host=None)
        pricer = layer_pricer(parallel, hardware=H100, timing=timing, precision=PrecisionSpec(), attention="flash")
        return pricer.price(cost, config, kind, context, full=False, recomputed=recomputed)

    margin, none = seconds("te_default", frozenset({"moeLayer"})), seconds("te_1x_default", frozenset({"moeLayer"}))
    # The forward pays fc2_fprop's margin once, the block's re-run once more: the same seconds.
    forward_margin = margin.forward_seconds - none.forward_seconds
    assert forward_margin > 0
    assert margin.recompute_seconds - none.recompute_seconds == pytest.approx(forward_margin)
    # Without the re-run, none.
    plain = seconds("te_default", frozenset()), seconds("te_1x_default", frozenset())
    assert plain[0].recompute_seconds == plain[1].recompute_seconds


def test_a_checkpointed_mlp_re_runs_its_own_fc1_not_the_mixers():
    # A Gated DeltaNet layer with a dense MLP runs two fc1 GEMMs: the mixer's in_proj and the MLP's linear_fc1.
    config = GDNConfig(hidden_size=256, linear_num_key_heads=4, linear_num_value_heads=8, linear_key_head_dim=32,
                       linear_value_head_dim=32, intermediate_size=512)
    work = _evaluate("gdn", config, traits=frozenset({"dense_mlp_checkpoint"})).work
    # in_proj: q, k (2 x 4 x 32), v, z (2 x 8 x 32) and b, a (2 x 8) = 784, over TP 2 392; out_proj reads 256 / 2.
    # The MLP: gated fc1 2 x 512 / 2, fc2 reads 512 / 2. Layernorm-fused column and row-parallel: every pass.
    gdn_in, gdn_out, fc1, fc2 = (T, 392, 256), (T, 256, 128), (T, 512, 256), (T, 256, 256)
    assert work.userbuffers_gemms == (("fc1", gdn_in, EVERY), ("fc2", gdn_out, EVERY), ("fc1", fc1, EVERY),
                                      ("fc2", fc2, EVERY))
    rerun = work.rerun("ffFc1")
    assert [work.gemms[p] for _, p in rerun.userbuffers_linears] == [fc1, fc2]
    # Its re-run pays the MLP's fc2 forward margin again, not the mixer's out_proj's (at peak x matmul, 0.5e15).
    assert userbuffers_rerun_seconds(work, _rates(sm_margins("te_default")), rerun.userbuffers_linears) == \
        pytest.approx(_seconds(fc2) * EXTRA)


@pytest.mark.parametrize(("q_lora_rank", "refused"), [(64, ("q_down_proj", "kv_down_proj")),
                                                      (None, ("q_proj", "kv_down_proj"))])
def test_mla_builds_linears_megatron_core_runs_no_userbuffers_for(q_lora_rank, refused):
    config = MLAConfig(hidden_size=256, num_attention_heads=8, kv_lora_rank=32, qk_nope_head_dim=32,
                       qk_rope_head_dim=16, v_head_dim=32, q_lora_rank=q_lora_rank, intermediate_size=512)
    work = _evaluate("mla", config).work
    assert work.refused_userbuffers == refused
    # Its linear_proj ('proj', 8 x 32 / 2 in) and the MLP's linears are still marked; the layer prices none of them.
    assert [name for name, _, _ in work.userbuffers_gemms] == ["proj", "fc1", "fc2"]


def test_an_mla_layer_is_priced_without_the_overlap_megatron_core_turns_off():
    config = MLAConfig(hidden_size=256, num_attention_heads=8, kv_lora_rank=32, qk_nope_head_dim=32,
                       qk_rope_head_dim=16, v_head_dim=32, q_lora_rank=64, intermediate_size=512)
    kind = REGISTRY.layer_kind("mla", "$")
    megatron = REGISTRY.runtime("megatron")
    context = layer_context(TP2, PrecisionSpec(), "flash", traits=megatron.traits)
    cost = kind.evaluate(config, context)

    def seconds(options, refused=None):
        runtime = apply_options(megatron, options)
        pricer = layer_pricer(TP2, hardware=H100, timing=runtime.timing, precision=PrecisionSpec(), attention="flash")
        layer = cost if refused is None else attrs.evolve(cost, work=attrs.evolve(cost.work, refused_userbuffers=refused))
        return pricer.price(layer, config, kind, context, full=False, recomputed=frozenset())

    on, off = seconds({"tp_comm_overlap": True}), seconds({"tp_comm_overlap": False})
    # The same layer time with the overlap asked for and not: no split collectives, no SM margin.
    assert on == off
    # The same layer without the refused names (as if its down projections ran userbuffers) would be priced with both.
    assert seconds({"tp_comm_overlap": True}, refused=()) != off
    # torch's async TP (fsdp2) runs no userbuffers: the names turn nothing off there (the flag alone is read).
    assert not REGISTRY.runtime("fsdp2").timing.schedule.userbuffers
    assert apply_options(megatron, {"tp_comm_overlap": True}).timing.schedule.userbuffers


def test_tp_comm_overlap_without_sequence_parallelism_is_refused_as_megatron_lm_does():
    schedule = apply_options(REGISTRY.runtime("megatron"), {"tp_comm_overlap": True}).timing.schedule
    no_sp = attrs.evolve(TP2, sp=False)
    with pytest.raises(ConfigError, match=r"^\$\.parallel\.sp: tp_comm_overlap \(--tp-comm-overlap\) at tp=2 needs "
                                          r"sequence parallelism, as Megatron-LM asserts; set parallel\.sp true or "
                                          r"tp_comm_overlap false$"):
        check_userbuffers_layout(no_sp, schedule)
    check_userbuffers_layout(TP2, schedule)  # with SP
    check_userbuffers_layout(attrs.evolve(no_sp, tp=1, dp=8), schedule)  # TP 1: nothing to overlap, accepted
    check_userbuffers_layout(no_sp, attrs.evolve(schedule, tp_comm_overlap=False))
    # torch's async TP is not Megatron-LM's flag.
    check_userbuffers_layout(no_sp, attrs.evolve(schedule, userbuffers=False))


def test_an_estimate_refuses_it_too(capsys):
    from cli_run import run  # tests/cli_run.py

    args = ("--num-layers 2 --hidden-size 1024 --num-attention-heads 16 --seq-length 2048 --max-position-embeddings 2048 "
            "--micro-batch-size 1 --global-batch-size 8 --tensor-model-parallel-size 2 --tp-comm-overlap --bf16 "
            "--vocab-size 32000")
    status, _, err = run(capsys, "estimate", "--from", "megatron-args", args, "--devices", "8", "--hardware", "h100-sxm")
    assert status != 0 and "tp_comm_overlap (--tp-comm-overlap) at tp=2 needs sequence parallelism" in err
    status, _, _ = run(capsys, "estimate", "--from", "megatron-args", args + " --sequence-parallel", "--devices", "8",
                       "--hardware", "h100-sxm")
    assert status == 0


def test_the_mtp_modules_eh_proj_turns_the_overlap_off_for_the_module():
    from hp_core.engine.prepare import with_sublayers
    from hp_core.specs import LayerGroup
    from hp_plugins.kinds.hybrid import AttentionLayerConfig
    from hp_plugins.kinds.mtp import MTPConfig, evaluate_mtp

    group = LayerGroup("attention", AttentionLayerConfig(hidden_size=256, num_attention_heads=8, num_key_value_heads=4,
                                                         head_dim=64))
    x = with_sublayers(layer_context(TP2, PrecisionSpec(), "flash"), REGISTRY)
    work = evaluate_mtp(MTPConfig(vocab_size=1024, hidden_size=256, layer=group), x).work
    # Its inner attention layer's qkv and proj are still listed; eh_proj's name turns them off (and its own).
    assert work.refused_userbuffers == ("mtp_eh_proj",)
    assert [name for name, _, _ in work.userbuffers_gemms] == ["qkv", "proj"]
