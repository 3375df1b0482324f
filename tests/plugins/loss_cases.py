"""The output head's cost under each fsdp2 ``loss_implementation`` on one small case, shared by the loss tests
(test_chunked_loss.py, test_compiled_loss.py): 2 sequences of *seq_len* tokens, hidden 64, vocabulary 1000."""

from __future__ import annotations

from hp_core.costs import LayerContext
from hp_core.runtime_options import apply_options
from hp_plugins.kinds.output import OutputConfig, evaluate_output


def loss_cost(registry, loss: str, seq_len: int = 40, tp: int = 1, sp: bool = False, reduce_dtype: str = "fp32"):
    """The head's :class:`~hp_core.costs.LayerCost` with ``loss_implementation`` *loss* and a fused norm."""
    runtime = apply_options(registry.runtime("fsdp2"), {"loss_implementation": loss, "norm_implementation": "fused",
                                                        "reduce_dtype": reduce_dtype})
    x = LayerContext(tp=tp, cp=1, sp=sp, ep=1, etp=1, micro_batch_size=2, seq_len=seq_len,
                     precision=runtime.precision, attention="flash", traits=runtime.traits)
    return evaluate_output(OutputConfig(vocab_size=1000, hidden_size=64), x)
