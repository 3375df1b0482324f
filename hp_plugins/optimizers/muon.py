"""Muon: momentum orthogonalised by Newton-Schulz for hidden matrices, AdamW for the rest (Jordan et al. 2024).

Muon ("MomentUm Orthogonalized by Newton-schulz", Keller Jordan et al. 2024,
https://kellerjordan.github.io/posts/muon/; reference implementation
``KellerJordan/Muon`` ``muon.py``) keeps one momentum buffer per element of a
2-D hidden weight and replaces the update of each such matrix by an
approximately orthogonal one. The input embedding, the output head and every
1-D parameter (norm scales, biases) are optimized by AdamW, as the reference's
``MuonWithAuxAdam`` and Megatron-Core's ``get_megatron_muon_optimizer`` (its
``is_embedding_or_output_parameter`` and 1-D parameters to Adam) do. What is
which comes from the layer kinds: the matrices a family states a rank holds
(:attr:`ParamCount.matrices <hp_core.costs.ParamCount.matrices>`) are Muon's
unless the family is the embedding or the output head
(:attr:`~hp_core.costs.ParamCount.embedding_or_output`); its other elements,
and every family that states no matrices, are AdamW's (an upper bound for a
third-party kind that states none).

Memory, per element: ``moment_bytes`` for Muon's elements, ``2 * moment_bytes``
for AdamW's, with the precision's master copy for both.

Step: the fused update's traffic (:mod:`hp_plugins.optimizers.update`) with
one state for Muon's elements and two for AdamW's, and the orthogonalisation
of every Muon matrix, ``zeropower_via_newtonschulz5`` of the reference with
its default 5 steps. For an ``m x n`` matrix with ``m <= n`` (it transposes a
tall one), it normalises ``X`` by its Frobenius norm (``2 m n`` FLOPs for the
norm, ``m n`` for the division), then per step computes ``A = X X^T``
(``2 m^2 n``), ``B = b A + c A A`` (``2 m^3`` for ``A A``, ``3 m^2``
elementwise) and ``X = a X + B X`` (``2 m^2 n``, ``2 m n`` elementwise), and
``muon_update`` scales the result (``m n``)::

    matmul FLOPs      = steps * (4 m^2 n + 2 m^3)
    elementwise FLOPs = steps * (3 m^2 + 2 m n) + 3 m n + m n

(the norm's square root and the scalars' arithmetic are left out; the bf16
copies the iteration reads and writes are not priced). Each rank orthogonalises
the matrices it holds: under tensor parallelism its own shard, as Megatron-Core
does with ``muon_tp_mode="blockwise"`` (its default; ``duplicated`` and
``distributed`` gather the TP shards first, which is not priced here). Under ZeRO
(1 and up) a rank holds a shard of each matrix's momentum: it gathers the whole
momentum of its matrices over the data-parallel group once per step (an
all-gather of ``moment_bytes`` per Muon element, priced as a data-parallel
collective that nothing overlaps), orthogonalises the whole matrices and keeps
its shard of the update, as Distributed Muon does (Liu et al. 2025, "Muon is
Scalable for LLM Training", arXiv:2502.16982); so every rank runs the
Newton-Schulz FLOPs of all the matrices it holds a shard of. The gathered
matrix and the iteration's copies live only during the optimizer step, outside
the memory estimate's peak points.
"""

from __future__ import annotations

from fractions import Fraction

import attrs

from hp_core.costs import Flops
from hp_core.markers import hookimpl
from hp_core.specs.precision import PrecisionSpec
from hp_core.types import Optimizer, ParamSlice
from hp_plugins.optimizers.update import per_element, update_bytes

__all__ = ["MuonStepFlops", "NS_STEPS", "hp_optimizers", "muon_elements", "muon_optimizer", "newton_schulz_flops"]

# Newton-Schulz steps: the reference's muon_update(ns_steps=5) and Megatron-Core's muon_num_ns_steps default.
NS_STEPS = 5


def muon_elements(s: ParamSlice) -> int:
    """The slice's elements Muon updates: its matrices', unless it is the embedding or the output head."""
    return 0 if s.param.embedding_or_output else s.matrix_elements


def newton_schulz_flops(rows: int, columns: int, steps: int = NS_STEPS) -> Flops:
    """FLOPs of ``zeropower_via_newtonschulz5`` on one ``rows x columns`` matrix and the update's scale (module docstring)."""
    m, n = min(rows, columns), max(rows, columns)
    return Flops(matmul_flops=steps * (4 * m * m * n + 2 * m ** 3),
                 elementwise_flops=steps * (3 * m * m + 2 * m * n) + 3 * m * n + m * n)


def muon_state_bytes(s: ParamSlice, p: PrecisionSpec) -> Fraction | int:
    """Per element, exactly: one momentum buffer for Muon's elements, AdamW's two moments for the rest."""
    muon = muon_elements(s)
    return per_element(muon * p.moment_bytes + (s.elements - muon) * 2 * p.moment_bytes, s.elements)


def muon_step_bytes(s: ParamSlice, p: PrecisionSpec) -> Fraction | int:
    """Per element: the fused update with one state for Muon's elements and two for AdamW's."""
    muon = muon_elements(s)
    moved = (muon * Fraction(update_bytes(p, p.moment_bytes))
             + (s.elements - muon) * Fraction(update_bytes(p, 2 * p.moment_bytes)))
    return per_element(moved, s.elements)


@attrs.frozen
class MuonStepFlops:
    """``step_flops`` of Muon with *steps* Newton-Schulz iterations: those of every Muon matrix of a slice.

    A record rather than a closure, so that equal optimizers compare equal and pickle.
    """

    steps: int = NS_STEPS

    def __call__(self, s: ParamSlice, p: PrecisionSpec) -> Flops:
        if s.param.embedding_or_output:
            return Flops()
        matmul = elementwise = 0
        for count, rows, columns in s.matrices:
            one = newton_schulz_flops(rows, columns, self.steps)
            matmul += count * one.matmul_flops
            elementwise += count * one.elementwise_flops
        return Flops(matmul_flops=matmul, elementwise_flops=elementwise)


def muon_gather_bytes(s: ParamSlice, p: PrecisionSpec) -> int:
    """The momentum of the slice's Muon matrices, gathered whole where ZeRO shards it."""
    return muon_elements(s) * p.moment_bytes


def muon_optimizer(name: str = "muon", steps: int = NS_STEPS, description: str | None = None) -> Optimizer:
    """A Muon optimizer record with *steps* Newton-Schulz iterations (the built-in ``muon``: 5)."""
    return Optimizer(
        name=name, state_bytes=muon_state_bytes, step_bytes=muon_step_bytes,
        step_flops=MuonStepFlops(steps), gather_bytes=muon_gather_bytes,
        description=description or (
            f"Muon (Jordan et al. 2024): one momentum buffer and {steps} Newton-Schulz steps per hidden matrix, "
            "AdamW for embedding, head and 1-D parameters; ZeRO gathers each matrix's momentum"),
    )


@hookimpl
def hp_optimizers():
    yield muon_optimizer()
