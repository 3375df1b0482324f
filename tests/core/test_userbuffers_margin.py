"""Transformer Engine's userbuffers SM margins (hp_plugins.runtimes.userbuffers; docs/time.md): a GEMM its overlap
runs with ``set_sm_margin`` is tiled for ``sm_count - num_sm`` SMs and priced at its time times
``sm_count / (sm_count - num_sm)``. Figures by hand."""

from __future__ import annotations

import json
import re
import types

import attrs
import pytest

from hp_core.api import build_registry, layer_context
from hp_core.costs import LayerWork
from hp_core.engine.timing.gemm_seconds import margin_factor, userbuffers_margin_seconds, userbuffers_rerun_seconds
from hp_core.errors import ConfigError
from hp_core.runtime_options import apply_options
from hp_core.specs import ParallelSpec, PrecisionSpec
from hp_plugins.hardware.presets import PRESETS
from hp_plugins.kinds.dense import DenseConfig
from cli_run import run  # tests/cli_run.py
from hp_plugins.runtimes.userbuffers import CONFIGS, custom_margins, read_custom, resolve_custom, sm_margins

REGISTRY = build_registry(use_env=False)
PRESETS_BY_NAME = {p.name: p.spec for p in PRESETS}
T, H, I = 2048, 1024, 4096  # tokens on the rank (gathered), hidden, MLP width
QKV, PROJ, FC1, FC2 = (T, 3 * H // 2, H), (T, H, H // 2), (T, 2 * I // 2, H), (T, H, I // 2)  # TP 2


def _rates(margins, sm_count=132, low_precision=False):
    # No GEMM table: every GEMM at matmul 0.5 of a 1e15 peak; backward twice the forward, half of it the weight gradient.
    return types.SimpleNamespace(gemm_table=None, mm_backward=2.0, matmul=0.5, peak=1e15, ub_margins=tuple(margins),
                                 sm_count=sm_count, low_precision=low_precision, gemm_scope="all", gemm_speedup=2.0,
                                 gemm_speedup_backward=1.6, gemm_pass_speedups=())


def _work(**kw):
    gemms = (QKV, PROJ, FC1, FC2)
    return LayerWork(gemms=gemms, userbuffers_gemms=tuple(zip(("qkv", "proj", "fc1", "fc2"), gemms)), **kw)


def _seconds(gemm):
    rows, out, inp = gemm
    return 2.0 * rows * out * inp / (0.5 * 1e15)


def test_the_margin_is_the_devices_sms_over_those_left_to_the_gemm():
    assert margin_factor(132, 16) == pytest.approx(132 / 116)
    assert margin_factor(148, 32) == pytest.approx(148 / 116)
    assert margin_factor(132, 0) == 1.0
    with pytest.raises(ConfigError, match=r"^\$\.runtime\.options\.tp_comm_overlap_cfg: a userbuffers GEMM's num_sm 132 "
                                          r"leaves the GEMM none of the device's 132 SMs"):
        margin_factor(132, 132)
    # In a layer the message names the GEMM whose num_sm it is.
    with pytest.raises(ConfigError, match=r"fc2_fprop's num_sm 140 leaves the GEMM none of the device's 132 SMs"):
        userbuffers_margin_seconds(_work(), _rates((("fc2_fprop", 140),)))


def test_te_default_and_named_configs_state_their_margins():
    # TE's get_default_config (base.py at d0067d0): pipeline (proj_fprop, fc2_fprop) and bulk (qkv/fc1 dgrad and
    # wgrad) at 16 SMs with a margin; the ring exchanges (qkv_fprop, fc1_fprop, proj_dgrad, fc2_dgrad) 1 SM, none.
    assert sm_margins("te_default") == (("qkv_dgrad", 16), ("qkv_wgrad", 16), ("proj_fprop", 16), ("fc1_dgrad", 16),
                                        ("fc1_wgrad", 16), ("fc2_fprop", 16))
    assert CONFIGS["te_default"]["qkv_fprop"] == ("ring_exchange", 1, False)
    assert sm_margins("te_1x_default") == ()
    # Megatron-Bridge's named configs (comm_overlap.py at 067f987): the bulk GEMMs without a margin, the pipeline
    # forward GEMMs with one; the FP8 ones run proj and fc2 forward as ring exchanges with a 1-SM margin.
    assert sm_margins("userbuffers_bf16_h100_h8192_tp4_mbs1_seqlen8192") == (("proj_fprop", 24), ("fc2_fprop", 16))
    assert sm_margins("userbuffers_bf16_b200_h16384_tp4_cp2_mbs1_seqlen8192") == (("proj_fprop", 32), ("fc2_fprop", 8))
    assert sm_margins("userbuffers_fp8_h100_h8192_tp4_mbs1_seqlen8192") == (("proj_fprop", 1), ("fc2_fprop", 1))


def test_each_margin_gemm_pass_pays_its_own_time_times_the_factor_less_one():
    extra = 132 / 116 - 1
    fwd, bwd, wgrad = userbuffers_margin_seconds(_work(), _rates(sm_margins("te_default")))
    # Forward: proj's and fc2's (pipeline); backward: qkv's and fc1's input-gradient and weight-gradient passes, each
    # the forward's time (matmul_backward_factor 2, half of it each).
    assert fwd == pytest.approx((_seconds(PROJ) + _seconds(FC2)) * extra)
    assert bwd == pytest.approx(2 * (_seconds(QKV) + _seconds(FC1)) * extra)
    assert wgrad == pytest.approx((_seconds(QKV) + _seconds(FC1)) * extra)
    # A named config's margins: proj 24 and fc2 16 SMs of 132, forward only.
    fwd, bwd, _ = userbuffers_margin_seconds(_work(), _rates(sm_margins("userbuffers_bf16_h100_h8192_tp4_mbs1_seqlen8192")))
    assert fwd == pytest.approx(_seconds(PROJ) * (132 / 108 - 1) + _seconds(FC2) * (132 / 116 - 1)) and bwd == 0.0


def test_a_quantized_gemm_pays_the_margin_on_its_quantized_time_and_a_frozen_one_no_weight_gradient():
    extra = 132 / 116 - 1
    r = _rates(sm_margins("te_default"), low_precision=True)
    # The recipe's speedups: forward 2, backward 1.6; fc1 kept in the compute dtype (its bf16 time).
    fwd, bwd, wgrad = userbuffers_margin_seconds(_work(high_precision_gemms=(FC1,)), r)
    assert fwd == pytest.approx((_seconds(PROJ) + _seconds(FC2)) / 2 * extra)
    assert bwd == pytest.approx((2 * _seconds(QKV) / 1.6 + 2 * _seconds(FC1)) * extra)
    # qkv frozen: its weight-gradient pass does not run.
    _, bwd, wgrad = userbuffers_margin_seconds(_work(frozen_gemms=(QKV,)), _rates(sm_margins("te_default")))
    assert bwd == pytest.approx((_seconds(QKV) + 2 * _seconds(FC1)) * extra) and wgrad == pytest.approx(_seconds(FC1) * extra)


def test_a_margin_needs_the_devices_sm_count():
    with pytest.raises(ConfigError, match="sm_count"):
        userbuffers_margin_seconds(_work(), _rates(sm_margins("te_default"), sm_count=None))
    # Without a margin none is needed.
    assert userbuffers_margin_seconds(_work(), _rates((), sm_count=None)) == (0.0, 0.0, 0.0)


def test_a_checkpointed_mlp_re_run_pays_fc2s_forward_margin_again():
    # Megatron-Core's mlp module re-runs FC1 and FC2 forward through their userbuffers (te_checkpoint): under TE's
    # default fc2_fprop (pipeline, 16 SMs) is tiled for 116 of 132 SMs again; fc1_fprop is a ring exchange, no margin.
    r = _rates(sm_margins("te_default"))
    assert userbuffers_rerun_seconds(_work(), r, (("fc1", 2), ("fc2", 3))) == pytest.approx(_seconds(FC2) * (132 / 116 - 1))
    assert userbuffers_rerun_seconds(_work(), r, (("fc1", 2),)) == 0.0  # FC1 alone re-run: no forward margin
    # Megatron-Bridge's bf16 H100 config: fc2 forward 16 SMs, proj 24 (not re-run by the mlp module).
    named = _rates(sm_margins("userbuffers_bf16_h100_h8192_tp4_mbs1_seqlen8192"))
    assert userbuffers_rerun_seconds(_work(), named, (("fc1", 2), ("fc2", 3))) == pytest.approx(_seconds(FC2) * (132 / 116 - 1))
    assert userbuffers_rerun_seconds(_work(), _rates(sm_margins("te_1x_default")), (("fc1", 2), ("fc2", 3))) == 0.0
    with pytest.raises(ConfigError, match="sm_count"):
        userbuffers_rerun_seconds(_work(), _rates(sm_margins("te_default"), sm_count=None), (("fc1", 2), ("fc2", 3)))
    with pytest.raises(ConfigError, match=r"fc2_fprop's num_sm 132 leaves the GEMM none of the device's 132 SMs"):
        userbuffers_rerun_seconds(_work(), _rates((("fc2_fprop", 132),)), (("fc2", 3),))


def test_the_dense_mlp_states_the_userbuffers_gemms_its_re_run_runs_again():
    config = DenseConfig(hidden_size=H, num_attention_heads=16, num_key_value_heads=4, intermediate_size=I)
    tp2 = ParallelSpec(tp=2, sp=True, dp=4, seq_len=1024, micro_batch_size=2, global_batch_size=16)
    kind = REGISTRY.layer_kind("dense", "$")
    whole = kind.evaluate(config, layer_context(tp2, PrecisionSpec(), "flash", traits=frozenset({"dense_mlp_checkpoint"})))
    # By place: fc1 and fc2 are the layer's last two GEMMs (after qkv and proj).
    assert whole.work.rerun("ffFc1").userbuffers_linears == (("fc1", 2), ("fc2", 3))
    fc1_only = kind.evaluate(config, layer_context(tp2, PrecisionSpec(), "flash"))
    assert fc1_only.work.rerun("ffFc1").userbuffers_linears == (("fc1", 2),)


def test_the_dense_layer_marks_its_attention_and_mlp_linears_as_userbuffers_gemms():
    config = DenseConfig(hidden_size=H, num_attention_heads=16, num_key_value_heads=4, intermediate_size=I)
    tp2 = ParallelSpec(tp=2, sp=True, dp=4, seq_len=1024, micro_batch_size=2, global_batch_size=16)
    cost = REGISTRY.layer_kind("dense", "$").evaluate(config, layer_context(tp2, PrecisionSpec(), "flash"))
    # qkv: H + 2 x 4 KV heads of 64 = 1,536 wide, over TP 2; proj 1,024 / 2 in; fc1 gated 2 x 4,096 / 2; fc2 4,096 / 2 in.
    every = ("fprop", "dgrad", "wgrad")  # layernorm-fused column-parallel and row-parallel linears: every pass
    assert cost.work.userbuffers_gemms == (("qkv", (T, 768, H), every), ("proj", (T, H, 512), every),
                                           ("fc1", (T, 4096, H), every), ("fc2", (T, H, 2048), every))
    assert all(g in cost.work.gemms for _, g, _ in cost.work.userbuffers_gemms)


def test_presets_state_their_sm_counts():
    counts = {p.name: p.spec.sm_count for p in PRESETS}
    assert counts["h100-sxm"] == counts["h200"] == 132
    assert counts["b200"] == counts["b200-simumax"] == 148 and counts["a100-80gb"] == 108
    # The counts CUDA enumerates (each preset's sm_source): the GB200 and GB300 enable 152, the B300 148, not
    # Blackwell Ultra's full 160.
    assert counts["gb200"] == counts["gb300"] == 152 and counts["b300"] == 148
    assert counts["ascend-910b"] is None


def test_te_defaults_16_sm_margin_on_the_blackwell_presets():
    # TE's default pipeline and bulk GEMMs leave 16 SMs: 148 / 132 = 1.1212 on the B200 and B300, 152 / 136 = 1.1176
    # on the GB200 and GB300 (160 / 144 = 1.1111 before the B300 and GB300 took their enumerated counts).
    for name, factor in (("b200", 1.1212), ("b300", 1.1212), ("gb200", 1.1176), ("gb300", 1.1176)):
        assert margin_factor(PRESETS_BY_NAME[name].sm_count, 16) == pytest.approx(factor, abs=5e-5)


def test_the_runtime_option_sets_the_schedules_margins():
    megatron = REGISTRY.runtime("megatron")
    assert megatron.timing.schedule.userbuffers_sm_margins == sm_margins("te_default")
    named = apply_options(megatron, {"tp_comm_overlap": True,
                                     "tp_comm_overlap_cfg": "userbuffers_bf16_h100_h8192_tp4_mbs1_seqlen8192"})
    assert named.timing.schedule.userbuffers_sm_margins == (("proj_fprop", 24), ("fc2_fprop", 16))
    with pytest.raises(ConfigError):
        apply_options(megatron, {"tp_comm_overlap_cfg": "no_such_config"})
    # torch's async TP (fsdp2) launches no userbuffers kernel: no margin.
    assert REGISTRY.runtime("fsdp2").timing.schedule.userbuffers_sm_margins == ()


# A custom config (Megatron-LM's --tp-comm-overlap-cfg file) laid over TE's defaults as initialize_ub does
# (transformer_engine/pytorch/module/base.py lines 516-569 at NVIDIA/TransformerEngine@d0067d0).
CUSTOM = {"fc2_fprop": {"method": "pipeline", "num_sm": 16, "set_sm_margin": 1},
          "qkv_dgrad": {"method": "bulk", "num_sm": 4, "set_sm_margin": 0}}


def test_a_custom_config_keeps_te_defaults_for_what_it_does_not_state():
    config = resolve_custom(read_custom(CUSTOM, "$.x"))
    # Stated: fc2_fprop 16 SMs with a margin, qkv_dgrad 4 SMs without one.
    assert config["fc2_fprop"] == ("pipeline", 16, True) and config["qkv_dgrad"] == ("bulk", 4, False)
    # Not stated: TE's defaults, the ring exchanges 1 SM without a margin, the other pipeline and bulk GEMMs 16 with one.
    assert config["qkv_fprop"] == config["proj_dgrad"] == ("ring_exchange", 1, False)
    assert config["proj_fprop"] == ("pipeline", 16, True) and config["fc1_wgrad"] == ("bulk", 16, True)
    # So the margins are te_default's less qkv_dgrad's.
    assert custom_margins(read_custom(CUSTOM, "$.x")) == (("qkv_wgrad", 16), ("proj_fprop", 16), ("fc1_dgrad", 16),
                                                          ("fc1_wgrad", 16), ("fc2_fprop", 16))
    # A GEMM made a ring exchange keeps its default method's SMs and margin unless it states them: the defaults are
    # get_default_config's of the list the GEMM sits in, updated with the file's fields after.
    assert resolve_custom({"fc2_fprop": {"method": "ring_exchange"}})["fc2_fprop"] == ("ring_exchange", 16, True)
    # A dgrad moved off bulk moves to its method's list and its defaults (ring exchange: 1 SM, no margin).
    assert resolve_custom({"qkv_dgrad": {"method": "ring_exchange"}})["qkv_dgrad"] == ("ring_exchange", 1, False)
    # An empty config is TE's default.
    assert custom_margins({}) == sm_margins("te_default")


def test_a_custom_configs_margin_prices_its_gemm_at_132_over_116_on_an_h100():
    extra = 132 / 116 - 1  # h100-sxm states 132 SMs; 16 of them left to the communication kernel
    assert PRESETS_BY_NAME["h100-sxm"].sm_count == 132
    fwd, bwd, wgrad = userbuffers_margin_seconds(_work(), _rates(custom_margins(read_custom(CUSTOM, "$.x"))))
    # Forward: proj (TE's default pipeline margin) and fc2 (the file's) at 132/116 of their time; backward: qkv's
    # weight-gradient pass (its dgrad states no margin) and fc1's two passes, each the forward's time.
    assert fwd == pytest.approx((_seconds(PROJ) + _seconds(FC2)) * extra)
    assert bwd == pytest.approx((_seconds(QKV) + 2 * _seconds(FC1)) * extra)
    assert wgrad == pytest.approx((_seconds(QKV) + _seconds(FC1)) * extra)
    # Only fc2_fprop with a margin (the Megatron-LM CI case's file): fc2's forward alone, 132/116 of its time.
    only = {name: {"set_sm_margin": False} for name in ("proj_fprop", "qkv_dgrad", "qkv_wgrad", "fc1_dgrad", "fc1_wgrad")}
    fwd, bwd, _ = userbuffers_margin_seconds(_work(), _rates(custom_margins(only)))
    assert fwd + _seconds(FC2) == pytest.approx(_seconds(FC2) * 132 / 116) and bwd == 0.0


def test_the_runtime_option_takes_a_custom_config_in_a_config_file():
    megatron = REGISTRY.runtime("megatron")
    custom = apply_options(megatron, {"tp_comm_overlap": True, "tp_comm_overlap_cfg": CUSTOM})
    assert custom.timing.schedule.userbuffers_sm_margins == custom_margins(read_custom(CUSTOM, "$"))
    assert custom.option_values["tp_comm_overlap_cfg"]["qkv_dgrad"] == {"method": "bulk", "num_sm": 4,
                                                                         "set_sm_margin": False}
    bad = {"fc3_fprop": {}}
    with pytest.raises(ConfigError, match=r"^\$\.runtime\.options\.tp_comm_overlap_cfg\.fc3_fprop: unknown GEMM"):
        apply_options(megatron, {"tp_comm_overlap_cfg": bad})
    with pytest.raises(ConfigError, match=r"tp_comm_overlap_cfg\.fc2_fprop\.num_sms: unknown field"):
        apply_options(megatron, {"tp_comm_overlap_cfg": {"fc2_fprop": {"num_sms": 4}}})
    with pytest.raises(ConfigError, match=r"tp_comm_overlap_cfg\.fc2_fprop\.method: expected one of ring_exchange, "
                                          r"pipeline, bulk, external, got 'ring'"):
        apply_options(megatron, {"tp_comm_overlap_cfg": {"fc2_fprop": {"method": "ring"}}})


@pytest.mark.parametrize(("cfg", "message"), [
    ({"qkv_fprop": {"method": "pipeline"}}, "qkv_fprop: Transformer Engine refuses the 'pipeline' method on an all-gather"),
    ({"qkv_dgrad": {"method": "ring_exchange"}, "qkv_wgrad": {"num_sm": 2}}, "qkv_wgrad: Transformer Engine refuses a config"),
    ({"proj_wgrad": {"method": "bulk"}}, "proj_wgrad: Transformer Engine takes only the 'external' method"),
    ({"qkv_fprop": {"atomic_gemm": True}}, "proj_fprop: Transformer Engine needs qkv_fprop and proj_fprop both"),
    ({"fc2_fprop": {"num_sm": 2.5}}, "fc2_fprop.num_sm: expected an integer"),
    ({"fc2_fprop": {"set_sm_margin": 2}}, "fc2_fprop.set_sm_margin: expected true or false"),
    ({"fc2_fprop": None}, "fc2_fprop: expected a mapping of its fields"),
])
def test_a_custom_config_is_refused_where_initialize_ub_refuses_it(cfg, message):
    with pytest.raises(ConfigError, match=re.escape(message)):
        read_custom(cfg, "$.x")


def test_the_importer_reads_the_tp_comm_overlap_cfg_file(tmp_path, monkeypatch, capsys):
    args = ("--num-layers 2 --hidden-size 1024 --num-attention-heads 16 --seq-length 2048 --max-position-embeddings 2048 "
            "--micro-batch-size 1 --global-batch-size 8 --tensor-model-parallel-size 2 --sequence-parallel "
            "--tp-comm-overlap --bf16 --vocab-size 32000")
    (tmp_path / "ub.yaml").write_text("fc2_fprop:\n  method: pipeline\n  num_sm: 16\n  set_sm_margin: 1\n"
                                      "qkv_dgrad:\n  method: bulk\n  num_sm: 4\n  set_sm_margin: 0\n", encoding="utf-8")
    monkeypatch.chdir(tmp_path)  # Megatron-LM opens the path relative to the working directory; so does hp
    status, out, err = run(capsys, "estimate", "--from", "megatron-args", args + " --tp-comm-overlap-cfg ub.yaml",
                           "--devices", "8", "--hardware", "h100-sxm", "--json")
    assert status == 0 and "tp-comm-overlap-cfg" not in err
    options = json.loads(out)["provenance"]["runtime_options"]
    assert options["tp_comm_overlap_cfg"] == read_custom(CUSTOM, "$")
    # Without --tp-comm-overlap Megatron-LM does not read it: named, not read.
    status, _, err = run(capsys, "estimate", "--from", "megatron-args",
                         args.replace("--tp-comm-overlap ", "") + " --tp-comm-overlap-cfg missing.yaml",
                         "--devices", "8", "--hardware", "h100-sxm")
    assert status == 0 and "--tp-comm-overlap-cfg missing.yaml: not read, as Megatron-LM reads it only with" in err
    bad = {"list.yaml": "- qkv_fprop\n", "gemm.yaml": "fc3_fprop: {method: bulk}\n",
           "key.yaml": "fc2_fprop: {num_sms: 4}\n", "method.yaml": "fc2_fprop: {method: ring}\n",
           "broken.yaml": "fc2_fprop: [1\n"}
    for name, text in bad.items():
        (tmp_path / name).write_text(text, encoding="utf-8")
    for name, message in (("missing.yaml", "error: --tp-comm-overlap-cfg: missing.yaml: cannot be read: No such file or "
                                           "directory; Megatron-LM opens it relative to the training process's working "
                                           "directory: run hp from there or give its absolute path"),
                          ("list.yaml", "error: --tp-comm-overlap-cfg list.yaml: must hold a mapping of GEMM names"),
                          ("gemm.yaml", "error: --tp-comm-overlap-cfg gemm.yaml: fc3_fprop: unknown GEMM; Transformer "
                                        "Engine's userbuffers GEMMs are qkv_fprop,"),
                          ("key.yaml", "error: --tp-comm-overlap-cfg key.yaml: fc2_fprop.num_sms: unknown field; "
                                       "Transformer Engine's initialize_ub takes method, num_sm,"),
                          ("method.yaml", "error: --tp-comm-overlap-cfg method.yaml: fc2_fprop.method: expected one of "
                                          "ring_exchange, pipeline, bulk, external, got 'ring'"),
                          ("broken.yaml", "error: --tp-comm-overlap-cfg broken.yaml: is not valid YAML")):
        status, out, err = run(capsys, "estimate", "--from", "megatron-args", args + f" --tp-comm-overlap-cfg {name}",
                               "--devices", "8", "--hardware", "h100-sxm")
        assert status == 2 and message in err and "Traceback" not in err and len(err.strip().splitlines()) == 1, err


def test_the_command_line_says_a_custom_config_goes_in_a_config_file(capsys):
    # --runtime-option takes a name only; a mapping (a custom config) is a config file's or an importer's.
    status, _, err = run(capsys, "estimate", "--runtime", "megatron", "--tp", "2", "--sp", "--devices", "8",
                         "--runtime-option", "tp_comm_overlap=true",
                         "--runtime-option", 'tp_comm_overlap_cfg={"fc2_fprop":{"num_sm":3}}')
    assert status == 2 and len(err.strip().splitlines()) == 1
    assert "$.runtime.options.tp_comm_overlap_cfg: expected one of te_default, te_1x_default, " in err
    assert "or a mapping (in a config file, not from --runtime-option: docs/runtimes.md), got '{" in err
