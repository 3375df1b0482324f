"""The MTP module's own collectives under tensor parallelism, by hand: its call of the shared embedding and
``eh_proj``, Megatron-Core's column-parallel ``2h -> h`` projection, the last-dim all-gather of its output and, under
sequence parallelism, the scatter back (``megatron/core/transformer/multi_token_prediction.py`` ``_get_embeddings``
and ``_concat_embeddings`` at NVIDIA/Megatron-LM core_v0.16.0; ``hp_plugins/kinds/mtp.py``)."""

from __future__ import annotations

import pytest

from hp_core.costs import Collective
from hp_core.engine.prepare import prepare
from hp_core.specs import ParallelSpec
from hp_core.api import model_from_preset
from hp_plugins.kinds.mtp import eh_proj_collectives

# DeepSeek-V3: hidden 7168, bf16 activations; one 4,096-token sequence a micro-batch.
H, T, BF16 = 7168, 4096, 2
OUT = 58_720_256  # eh_proj's gathered output: 4096 tokens x 7168 x 2 bytes
IN = 117_440_512  # its gathered input [embedding; hidden]: 4096 x 14336 x 2 bytes


def _mtp(registry, **layout):
    model = model_from_preset("deepseek-v3", registry)
    run = prepare(model, ParallelSpec(seq_len=4096, **layout), registry=registry, runtime="megatron")
    index = next(i for i, group in enumerate(model.layers) if group.kind == "mtp")
    return run.costs[index]


def test_deepseek_v3_at_tp_2_with_sp_states_eh_proj_s_collectives(registry):
    # The column-parallel linear gathers its sequence-sharded input forward (a GEMM input, re-gathered where 'gather'
    # is recomputed) and reduce-scatters its gradient backward; the output's last-dim all-gather forward and the
    # scatter's all-gather of its gradient backward. (Megatron-LM refuses an MoE layer at TP > 1 without SP.)
    # Its embedding call first: LanguageModelEmbedding's reduce-scatter to the sequence-parallel region forward and
    # its all-gather backward, of the embedding's output (4096 x 7168 x 2 bytes). The output's gather and the
    # scatter's are plain mappings no TP overlap takes (not overlappable).
    embedding = (Collective("tp", "reduce_scatter", OUT, 1, 0), Collective("tp", "all_gather", OUT, 0, 1))
    expected = (Collective("tp", "all_gather", IN, 1, 0, rerun_switch="gather", gemm_input=True),
                Collective("tp", "reduce_scatter", IN, 0, 1),
                Collective("tp", "all_gather", OUT, 1, 1, overlappable=False))
    head = (Collective("tp", "all_gather", OUT, 1, 0), Collective("tp", "reduce_scatter", OUT, 0, 1))
    mtp = _mtp(registry, tp=2, sp=True, dp=32, ep=32)
    # The module's collectives end with its embedding's, eh_proj's, then the vocabulary-parallel head's.
    mine = embedding + expected + head
    assert mtp.work.collectives[-len(mine):] == mine


def test_the_same_from_the_kit_helper_and_none_at_tp_1(registry):
    from hp_core.api import layer_context
    from hp_core.specs import PrecisionSpec

    precision = PrecisionSpec(param_bytes=2, grad_bytes=4, master_param_bytes=4, optimizer="adam", moment_bytes=4,
                              activation_bytes=2)
    sp = layer_context(ParallelSpec(tp=2, sp=True, seq_len=4096), precision, "flash")
    assert [(c.op, c.bytes, c.forward_calls, c.backward_calls) for c in eh_proj_collectives(sp, H)] == [
        ("all_gather", IN, 1, 0), ("reduce_scatter", IN, 0, 1), ("all_gather", OUT, 1, 1)]
    # Two sequences a micro-batch: twice the bytes.
    two = layer_context(ParallelSpec(tp=2, sp=True, seq_len=4096, micro_batch_size=2, global_batch_size=2), precision, "flash")
    assert [c.bytes for c in eh_proj_collectives(two, H)] == [2 * IN, 2 * IN, 2 * OUT]
    # Without SP: the input whole on every rank (its gradient all-reduced backward) and the output's all-gather forward.
    plain = layer_context(ParallelSpec(tp=2, seq_len=4096), precision, "flash")
    assert eh_proj_collectives(plain, H) == (Collective("tp", "all_reduce", IN, 0, 1),
                                             Collective("tp", "all_gather", OUT, 1, 0, overlappable=False))
    assert eh_proj_collectives(layer_context(ParallelSpec(tp=1, seq_len=4096), precision, "flash"), H) == ()


def test_tp_1_states_only_the_layer_s_collectives(registry):
    # At TP 1 the module adds no TP collective: its work's collectives are its layer's (EP's dispatch and combine).
    mtp = _mtp(registry, dp=32, ep=32)
    assert {c.group for c in mtp.work.collectives} == {"ep"}
