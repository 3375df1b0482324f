"""Megatron-Core's SequentialMLP: the ``megatron`` runtime's ``moe_grouped_gemm: false``.

Without ``--moe-grouped-gemm`` (TransformerConfig.moe_grouped_gemm, default False, NVIDIA/Megatron-LM@d98e8a6)
Megatron-Core builds ``SequentialMLP`` (megatron/core/transformer/moe/experts.py): each local expert an MLP whose FC1
and FC2 are plain Transformer Engine linears over that expert's tokens, one expert after another. hp prices those
GEMMs at the dense GEMM rates of each expert's shape and counts each expert's linears in the host floor; what a layer
keeps is the same (the experts save the same tensors either way: their inputs are views of the permuted tokens).
The figures are by hand for the small MoE-only layer of test_megatron_moe_recompute (h 64, 8 routed experts of width
32, top-2, a shared expert of 48, 128 tokens, EP 2: 4 local experts of 64 rows).
"""

from __future__ import annotations

import shlex

import attrs
import pytest

from hp_core.api import apply_options
from hp_core.engine.timing.gemm_seconds import _matmul_seconds
from hp_plugins.importers.megatron import import_megatron_args
from hp_plugins.kinds.hybrid import MLPLayerConfig

from test_megatron_moe_recompute import REGISTRY, RUNTIME, _cost, _rates_for

SEQUENTIAL = apply_options(RUNTIME, {"moe_grouped_gemm": False})


def test_the_option_turns_the_trait_on_and_the_kit_marks_the_experts():
    (option,) = [o for o in RUNTIME.options if o.name == "moe_grouped_gemm"]
    assert option.default is True and option.type == "bool"
    assert "moe_sequential_experts" not in RUNTIME.traits and "moe_sequential_experts" in SEQUENTIAL.traits
    grouped, sequential = _cost(), _cost(runtime=SEQUENTIAL)
    assert grouped.work.sequential_experts is False and sequential.work.sequential_experts is True
    # 128 tokens x top-2 over EP 2's 4 local experts: 64 rows each; FC1 (gate and up) 64 x 64 and FC2 64 x 32.
    assert sequential.work.expert_gemms == ((4, 64.0, 64, 64), (4, 64.0, 64, 32))
    # Nothing else about the layer changes: the same kept tensors, FLOPs and collectives.
    assert sequential.activations == grouped.activations and sequential.forward == grouped.forward
    assert attrs.evolve(sequential.work, sequential_experts=False) == grouped.work
    # A dense layer has no experts to mark.
    mlp = MLPLayerConfig(hidden_size=64, intermediate_size=32)
    assert _cost(mlp, kind="mlp", runtime=SEQUENTIAL).work.sequential_experts is False


@pytest.mark.parametrize("hardware", ["h100-sxm", "b200", "gb300", "a100-80gb"])
def test_sequential_experts_price_as_the_same_gemms_listed_dense(hardware):
    """Each local expert's GEMMs priced as if the layer listed them among its dense GEMMs (the device's table or shape
    scale, else its matmul figure), not at the grouped figures."""
    r = _rates_for(hardware=hardware)
    work = _cost(runtime=SEQUENTIAL).work
    grouped = work.grouped_flops
    dense = _cost().forward.matmul_flops - grouped
    each = tuple((rows, out, inp) for experts, rows, out, inp in work.expert_gemms for _ in range(experts))
    assert sum(2 * rows * out * inp for rows, out, inp in each) == grouped == 2 * 4 * 64 * 64 * (64 + 32)
    listed = attrs.evolve(work, gemms=work.gemms + each, expert_gemms=(), grouped_flops=0.0, sequential_experts=False)
    assert _matmul_seconds(dense, grouped, work, r) == pytest.approx(_matmul_seconds(dense + grouped, 0.0, listed, r), rel=1e-12)
    # And not the grouped price.
    assert _matmul_seconds(dense, grouped, work, r) != pytest.approx(
        _matmul_seconds(dense, grouped, attrs.evolve(work, sequential_experts=False), r), rel=1e-6)


MOE_ARGS = ("--num-layers 2 --hidden-size 64 --num-attention-heads 4 --ffn-hidden-size 128 --num-experts 8 "
            "--moe-ffn-hidden-size 32 --moe-router-topk 2 --moe-token-dispatcher-type alltoall --disable-bias-linear "
            "--swiglu --normalization RMSNorm --position-embedding-type rope --untie-embeddings-and-output-weights "
            "--vocab-size 1000 --make-vocab-size-divisible-by 8 --seq-length 128 --micro-batch-size 1 "
            "--expert-model-parallel-size 2")


def test_the_importer_reads_moe_grouped_gemm():
    imported = import_megatron_args(shlex.split(MOE_ARGS), REGISTRY, devices=2)
    assert imported.document["runtime"]["options"]["moe_grouped_gemm"] is False  # Megatron-Core's default
    assert imported.unmapped == ()
    grouped = import_megatron_args(shlex.split(MOE_ARGS + " --moe-grouped-gemm"), REGISTRY, devices=2)
    assert grouped.document["runtime"]["options"]["moe_grouped_gemm"] is True


def test_the_op_fuser_flag_states_the_fused_mlp(capsys):
    # Megatron-Core from 8d16c67 (experts.py _is_fused_impl_supported at d98e8a6) runs a gated MoE MLP under the fuser
    # only with NVTE_CUTEDSL_FUSED_GROUPED_MLP=1: the flag with grouped experts is the fused grouped MLP.
    from hp_core.cli import main

    argv = MOE_ARGS + " --moe-grouped-gemm --use-transformer-engine-op-fuser"
    imported = import_megatron_args(shlex.split(argv), REGISTRY, devices=2)
    assert imported.document["runtime"]["options"]["moe_fused_grouped_mlp"] is True
    (line,) = [u for u in imported.unmapped if u.startswith("--use-transformer-engine-op-fuser")]
    assert "NVTE_CUTEDSL_FUSED_GROUPED_MLP=1" in line and "--runtime-option moe_fused_grouped_mlp=false" in line
    # Without grouped experts (SequentialMLP) the fuser has nothing to fuse: nothing stated, a line says so.
    sequential = import_megatron_args(shlex.split(MOE_ARGS + " --use-transformer-engine-op-fuser"), REGISTRY, devices=2)
    assert "moe_fused_grouped_mlp" not in sequential.document["runtime"]["options"]
    assert [u for u in sequential.unmapped if "op-fuser" in u] == [
        "--use-transformer-engine-op-fuser: no grouped routed experts for its fused grouped MLP; the layers are priced "
        "as Transformer Engine's unfused modules"]
    # The stated option can be turned off again, as the line says.
    assert main(["estimate", "--from", "megatron-args", argv, "--devices", "2", "--runtime-option",
                 "moe_fused_grouped_mlp=false", "--json"]) == 0
    assert '"moe_fused_grouped_mlp": false' in capsys.readouterr().out.replace("'", '"')
