"""Regenerate docs/accuracy.md's table of the new architectures' kinds against the torch census.

Run: ``python benchmarks/census_hf_norms.py`` (the ``census`` extra: torch and
transformers). For every kind of the local-attention, state-space and
Qwen3-Next presets (and a Qwen3-Next variant with ``mlp_only_layers``, the only
way its ``gdn`` and ``gated_attention`` kinds appear), at 1024 and 4096 tokens,
eager attention, ``tp = 1``: the torch census's bytes per token kept between
forward and backward (transformers 5.25 layers under FakeTensorMode) beside the
formulas configured as transformers' modules run (the fsdp2 runtime's
``norm_implementation: transformers``: the ``fp32_norm_copy`` and
``upcast_cross_entropy`` traits, the eager softmax in fp32). Llama 4's MoE layers
are compared without their routed experts (``Llama4TextMoe`` runs every token
through every expert; :func:`llama4_rows`). The text between the
``census-hf-norms`` markers of docs/accuracy.md is replaced, atomically.
"""

from __future__ import annotations

import argparse
import contextlib
import functools
import json
import tempfile
from pathlib import Path

from hp_core.api import build_registry, model_from_config, model_from_preset
from hp_core.costs import LayerContext
from hp_core.engine.census import formulas_precision, formulas_records, run_census
from hp_core.io.files import atomic_write

ROOT = Path(__file__).resolve().parents[1]
PAGE = ROOT / "docs" / "accuracy.md"
START, END = "<!-- census-hf-norms:start -->", "<!-- census-hf-norms:end -->"
SEQ_LENS = (1024, 4096)
# What the fsdp2 runtime states of transformers' modules (hp_plugins.runtimes.fsdp2).
HF_TRAITS = frozenset({"fp32_norm_copy", "upcast_cross_entropy"})
# A Qwen3-Next variant whose layers 0 and 3 carry a dense MLP (transformers' mlp_only_layers): the gdn and
# gated_attention kinds, which the published config does not use.
QWEN3_NEXT_DENSE = ("qwen3-next-80b-a3b", {"mlp_only_layers": [0, 3], "num_hidden_layers": 4})
CASES = ("mistral-7b", "phi-3-mini", "phi-3-medium", "gemma-2-9b", "gemma-2-27b", "gemma-3-27b", "gpt-oss-20b",
         "gpt-oss-120b", "llama4-scout", "llama4-maverick", "mamba-codestral-7b", "nemotron-h-8b", "nemotron-h-56b",
         "nemotron-3-nano-30b-a3b", "qwen3-next-80b-a3b", "qwen3-next-80b-a3b+mlp_only_layers")


@functools.lru_cache(maxsize=None)
def registry():
    return build_registry(use_env=False)


@contextlib.contextmanager
def _model_ref(case: str):
    """The census's model reference and the formulas' model of *case*; a changed config's folder is removed on exit."""
    reg = registry()
    if not case.endswith("+mlp_only_layers"):
        yield case, model_from_preset(case, reg)
        return
    preset, changes = QWEN3_NEXT_DENSE
    cfg = {**reg.model(preset).hf_config, **changes}
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "config.json"
        path.write_text(json.dumps(cfg), encoding="utf-8")
        yield str(path), model_from_config(cfg, reg, name=case, source=str(path), where=str(path))


def _routed(tensor) -> bool:
    """A tensor of Llama4TextMoe's every-expert path: the experts' own, and the repeated, weighted input."""
    return (tensor.module.startswith("feed_forward.experts") or tensor.saved_by.startswith("feed_forward.experts")
            or (tensor.module == "feed_forward" and tensor.saved_by == "feed_forward"))


def llama4_rows(case: str, seq_len: int) -> tuple[float, float]:
    """Llama 4's MoE layer without its routed experts: (census, formulas) bytes per token.

    transformers' ``Llama4TextMoe.forward`` repeats every token to all experts
    (``hidden_states.repeat(num_experts, 1)`` scaled by the router's scores, zero
    but for the top-k) and ``Llama4TextExperts`` runs one ``bmm`` over all of them,
    so it keeps ``E`` experts' activations per token where a dispatching trainer
    keeps ``k``'s. What is compared instead: the census without the tensors of that
    path (saved by or in ``feed_forward.experts``, and the repeated input and scores
    ``feed_forward`` keeps) against the formulas without their routed-expert terms
    (``dispatched_tokens``, ``expert_*``): attention, norms, router and shared expert.
    """
    from hp_plugins.census.torch import measure_kind

    reg = registry()
    group = next(g for g in model_from_preset(case, reg).layers if g.kind == "moe")
    x = LayerContext(tp=1, cp=1, sp=False, ep=1, etp=1, micro_batch_size=1, seq_len=seq_len,
                     precision=formulas_precision("eager"), attention="eager", traits=HF_TRAITS)
    terms = reg.layer_kind("moe").evaluate(group.config, x).activations
    formulas = sum(t.bytes for t in terms if not (t.op == "dispatched_tokens" or t.op.startswith("expert_")))
    measured = measure_kind(reg.model(case).hf_config, "moe", seq_len, "eager", 1)
    census = measured.saved_bytes - sum(t.nbytes for t in measured.tensors if _routed(t))
    return census / seq_len, formulas / seq_len


@functools.lru_cache(maxsize=None)
def rows(case: str, seq_len: int) -> tuple[tuple[str, float, float], ...]:
    """(kind, census, formulas) bytes per token for every kind of *case* at *seq_len*."""
    reg = registry()
    with _model_ref(case) as (ref, model):
        run = run_census(reg, ref, "torch", seq_len, "eager", 1)
    formulas = formulas_records(model, reg, seq_len, "eager", formulas_precision("eager"), (1,), traits=HF_TRAITS)
    found = []
    for kind, record in sorted(run.records.items()):
        if kind == "moe" and case.startswith("llama4"):
            census, priced = llama4_rows(case, seq_len)
            found.append(("moe (without routed experts)", census, priced))
            continue
        found.append((kind, record.saved + record.saved_tp, formulas[kind].saved + formulas[kind].saved_tp))
    return tuple(found)


def section() -> str:
    lines = [START, "", "| model | kind | seq | census saved/token | formulas saved/token | difference |",
             "|---|---|---:|---:|---:|---:|"]
    worst = 0.0
    for case in CASES:
        for seq_len in SEQ_LENS:
            for kind, census, priced in rows(case, seq_len):
                error = (priced - census) / census
                worst = max(worst, abs(error))
                lines.append(f"| {case} | {kind} | {seq_len} | {census:,.0f} | {priced:,.0f} | {error * 100:+.2f}% |")
    lines += ["", f"Largest difference: {worst * 100:.2f}%.", "", END]
    return "\n".join(lines)


def main() -> None:
    page = PAGE.read_text(encoding="utf-8")
    head, rest = page.split(START, 1)
    _, tail = rest.split(END, 1)
    text = head + section() + tail

    def write(path: str) -> None:
        Path(path).write_text(text, encoding="utf-8")

    atomic_write(PAGE, write, ".md", flag=str(PAGE))


if __name__ == "__main__":
    argparse.ArgumentParser(description=__doc__.splitlines()[0]).parse_args()  # --help, and no stray arguments
    main()
