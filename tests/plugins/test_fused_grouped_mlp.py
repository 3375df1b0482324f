"""Transformer Engine's fused grouped MLP: the ``megatron`` runtime's ``moe_fused_grouped_mlp``.

TE's operation fuser replaces GroupedLinear, a scaled SwiGLU (or GPT-OSS's clamped GeGLU) and GroupedLinear by
cuDNN front-end grouped-GEMM kernels that run the activation and the quantization of its output in FC1's epilogue
and their gradients in FC2's input-gradient epilogue, under an MXFP8 or NVFP4 recipe on compute capability 10 only
(transformer_engine/pytorch/ops/fused/grouped_mlp.py at NVIDIA/TransformerEngine@d0067d0). The figures are by hand
for the small MoE-only layer of test_megatron_moe_recompute (h 64, 8 routed experts of width 32, top-2, SwiGLU, a
shared expert of 48, 128 tokens, EP 2: 4 local experts, 256 routed rows a rank).
"""

from __future__ import annotations

import attrs
import pytest

from hp_core.api import apply_options
from hp_core.engine.timing.gemm_seconds import _recipe_seconds
from hp_core.engine.timing.layer import _layer_time

from test_megatron_moe_recompute import RUNTIME, SMALL, _cost, _rates_for

FUSED = apply_options(RUNTIME, {"moe_fused_grouped_mlp": True})
# The experts' SwiGLU: SiLU's 5 ops and the gate product, over 256 rows of width 32.
SWIGLU_OPS = (5 + 1) * 256 * 32


def test_the_option_marks_the_experts_activation_and_nothing_else():
    (option,) = [o for o in RUNTIME.options if o.name == "moe_fused_grouped_mlp"]
    assert option.default is False and "moe_fused_grouped_mlp" in FUSED.traits
    plain, fused = _cost(), _cost(runtime=FUSED)
    assert plain.work.epilogue_activation_flops == 0 and fused.work.epilogue_activation_flops == SWIGLU_OPS == 49_152
    # The same kept tensors, FLOPs and GEMMs: only the record of which ops the epilogues take.
    assert fused.activations == plain.activations and fused.forward == plain.forward
    assert attrs.evolve(fused.work, epilogue_activation_flops=0.0) == plain.work


def test_mxfp8_on_blackwell_drops_the_activation_pass_and_two_quantizations():
    plain, fused = _cost(), _cost(runtime=FUSED)
    r = _rates_for("mxfp8", "b200")
    assert r.epilogue_activation
    unfused, epilogue = (_layer_time(c, c.work, False, frozenset(), r) for c in (plain, fused))
    # The activation's ops at the layer's bytes per op, forward and (elementwise_backward_factor times) backward.
    activation = SWIGLU_OPS * r.el_bytes_per_flop / r.memory
    # FC2's input (4 local experts of 64 rows, width 32: 4 x 64 x 32 elements) is quantized in FC1's epilogue, FC1's
    # output gradient (4 x 64 x 64: gate and up) in FC2's input-gradient epilogue.
    fc2_input, fc1_grad = 4 * 64 * 32, 4 * 64 * 64
    dense, grouped = fused.forward.matmul_flops - fused.work.grouped_flops, fused.work.grouped_flops
    q_plain = _recipe_seconds(dense, grouped, plain.work, r, 0.0, 0.0)[2:]
    q_fused = _recipe_seconds(dense, grouped, fused.work, r, 0.0, 0.0)[2:]
    assert q_plain[0] - q_fused[0] == pytest.approx(fc2_input * r.quant_input_fwd / r.memory, rel=1e-9)
    assert q_plain[1] - q_fused[1] == pytest.approx((fc2_input * r.quant_input_bwd + fc1_grad * r.quant_grad) / r.memory,
                                                    rel=1e-9)
    assert unfused.forward_seconds - epilogue.forward_seconds == pytest.approx(
        activation + fc2_input * r.quant_input_fwd / r.memory, rel=1e-9)
    assert unfused.backward_seconds - epilogue.backward_seconds == pytest.approx(
        r.el_backward * activation + (fc2_input * r.quant_input_bwd + fc1_grad * r.quant_grad) / r.memory, rel=1e-9)


@pytest.mark.parametrize(("recipe", "hardware"), [("bf16", "b200"), ("fp8-delayed", "b200"), ("fp8-current", "h100-sxm")])
def test_elsewhere_transformer_engine_runs_them_unfused(recipe, hardware):
    # fuse_grouped_mlp_ops returns the ops unfused without an MXFP8 or NVFP4 recipe; is_supported is false off
    # compute capability 10 (Hopper has no MXFP8 recipe here either).
    plain, fused = _cost(), _cost(runtime=FUSED)
    r = _rates_for(recipe, hardware)
    assert not r.epilogue_activation
    a, b = (_layer_time(c, c.work, False, frozenset(), r) for c in (plain, fused))
    assert (a.forward_seconds, a.backward_seconds) == (b.forward_seconds, b.backward_seconds)


@pytest.mark.parametrize("order", ["together", "fused first", "sequential first"])
def test_the_fused_mlp_needs_grouped_experts(order):
    # SequentialMLP (moe_grouped_gemm false) builds no GroupedLinear for TE's fuser to replace: a one-line refusal at
    # whichever option comes second.
    from hp_core.errors import ConfigError

    why = ("Transformer Engine's fused grouped MLP replaces the grouped linears of Megatron-Core's TEGroupedMLP, which "
           "SequentialMLP (moe_grouped_gemm false) does not build; state moe_grouped_gemm: true or drop "
           "moe_fused_grouped_mlp")
    with pytest.raises(ConfigError) as refused:
        if order == "together":
            apply_options(RUNTIME, {"moe_fused_grouped_mlp": True, "moe_grouped_gemm": False})
        elif order == "fused first":
            apply_options(FUSED, {"moe_grouped_gemm": False})
        else:
            apply_options(apply_options(RUNTIME, {"moe_grouped_gemm": False}), {"moe_fused_grouped_mlp": True})
    expected = (f"$.runtime.options.moe_grouped_gemm: false cannot hold with moe_fused_grouped_mlp true: {why}"
                if order == "fused first" else f"$.runtime.options.moe_fused_grouped_mlp: true needs moe_grouped_gemm true: {why}")
    assert str(refused.value) == expected
    # Either alone, or false with true's default, is accepted.
    assert "moe_sequential_experts" in apply_options(RUNTIME, {"moe_grouped_gemm": False, "moe_fused_grouped_mlp": False}).traits


def test_the_refusal_is_one_cli_line(capsys):
    from cli_run import run

    status, _, err = run(capsys, "estimate", "--model", "mixtral-8x7b", "--ep", "8", "--dp", "8", "--seq-len", "4096",
                         "--runtime", "megatron", "--hardware", "b200", "--precision", "mxfp8",
                         "--runtime-option", "moe_grouped_gemm=false", "--runtime-option", "moe_fused_grouped_mlp=true")
    assert status != 0 and "Traceback" not in err
    (line,) = err.strip().splitlines()
    assert "$.runtime.options.moe_fused_grouped_mlp: true needs moe_grouped_gemm true" in line


def test_expert_tensor_parallelism_is_refused_one_line(capsys):
    # Megatron-Core asserts TEGroupedMLP._is_fused_impl_supported under the op fuser, false where the experts'
    # tensor-parallel group has more than one rank (transformer/moe/experts.py at NVIDIA/Megatron-LM@d98e8a6).
    from cli_run import run

    args = ("estimate", "--model", "mixtral-8x7b", "--tp", "2", "--sp", "--ep", "4", "--dp", "8", "--seq-len", "4096",
            "--runtime", "megatron", "--hardware", "b200", "--precision", "mxfp8")
    status, _, err = run(capsys, *args, "--etp", "2", "--runtime-option", "moe_fused_grouped_mlp=true")
    assert status != 0 and "Traceback" not in err
    (line,) = err.strip().splitlines()
    assert ("$.parallel.etp: etp 2: Megatron-Core's fused grouped MLP (moe_fused_grouped_mlp) does not support expert "
            "tensor parallelism") in line
    # Expert TP 1 beside TP 2 is accepted, and etp 2 without the option.
    assert run(capsys, *args, "--etp", "1", "--runtime-option", "moe_fused_grouped_mlp=true")[0] == 0
    assert run(capsys, *args, "--etp", "2")[0] == 0


def test_nvfp4_drops_the_activation_pass_but_quantizes_apart():
    # Under NVFP4 TE's fused kernels write FC2's input (FC1's epilogue) and FC1's output gradient (FC2's dgrad
    # epilogue) in bf16, each then group-quantized by a kernel of its own (grouped_mlp.py at TE@d0067d0,
    # fuser_forward fc2_in = d_tensor, fuser_backward fc1_dy_bf16): only the activation pass goes.
    plain, fused = _cost(), _cost(runtime=FUSED)
    r = _rates_for("nvfp4", "b200")
    assert r.epilogue_activation and not r.epilogue_quantization
    dense, grouped = fused.forward.matmul_flops - fused.work.grouped_flops, fused.work.grouped_flops
    assert (_recipe_seconds(dense, grouped, plain.work, r, 0.0, 0.0)
            == _recipe_seconds(dense, grouped, fused.work, r, 0.0, 0.0))
    unfused, epilogue = (_layer_time(c, c.work, False, frozenset(), r) for c in (plain, fused))
    activation = SWIGLU_OPS * r.el_bytes_per_flop / r.memory
    assert unfused.forward_seconds - epilogue.forward_seconds == pytest.approx(activation, rel=1e-9)
    assert unfused.backward_seconds - epilogue.backward_seconds == pytest.approx(r.el_backward * activation, rel=1e-9)


def test_a_layer_kept_in_bf16_runs_unfused():
    # A layer outside the FP8 autocast (high_precision_layers_*: LayerWork.quantized false) reaches TE's op fuser with
    # no recipe, and fuse_grouped_mlp_ops leaves its ops unfused (ops/fuser.py: recipe None outside fp8 autocast).
    plain, fused = _cost(), _cost(runtime=FUSED)
    r = _rates_for("mxfp8", "b200")
    a, b = (_layer_time(c, attrs.evolve(c.work, quantized=False), False, frozenset(), r) for c in (plain, fused))
    assert (a.forward_seconds, a.backward_seconds) == (b.forward_seconds, b.backward_seconds)


@pytest.mark.parametrize(("fields", "fused"), [
    ({}, True),  # SwiGLU (gated SiLU)
    ({"expert_activation": "clamped_swiglu"}, True),  # GPT-OSS's clamped GeGLU: Megatron-Core's quick-GELU GLU
    ({"expert_activation": "mlp", "hidden_act": "relu2"}, True),  # an ungated squared ReLU (Nemotron-H's experts)
    ({"hidden_act": "gelu"}, False),  # a gated GELU (GeGLU)
    ({"expert_activation": "mlp", "hidden_act": "gelu"}, False),  # an ungated GELU
])
def test_an_activation_the_fuser_does_not_run_is_refused(fields, fused):
    # Megatron-Core asserts TEGroupedMLP._is_fused_impl_supported under the op fuser: a gated SiLU or quick-GELU and
    # an ungated squared ReLU only (transformer/moe/experts.py at NVIDIA/Megatron-LM@d98e8a6).
    from hp_core.errors import ConfigError
    from hp_plugins.kit.experts import fused_mlp_activation

    config = attrs.evolve(SMALL, **fields)
    assert fused_mlp_activation(config) is fused
    assert _cost(config).work.epilogue_activation_flops == 0  # without the option: nothing to refuse, nothing fused
    if fused:
        assert _cost(config, runtime=FUSED).work.epilogue_activation_flops > 0
    else:
        with pytest.raises(ConfigError) as raised:
            _cost(config, runtime=FUSED)
        assert raised.value.path == "$.runtime.options.moe_fused_grouped_mlp"
        assert "has no fused grouped MLP" in str(raised.value) and fields["hidden_act"] in str(raised.value)
