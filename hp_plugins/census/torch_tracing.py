"""The torch census's tracker: which storages an op made, which are alive, which autograd saved.

A ``TorchDispatchMode`` (:func:`make_tracker`) sees every op's outputs and keys
each storage by ``untyped_storage()._cdata`` while a ``StorageWeakRef`` says it
lives (``data_ptr`` is 0 under fake mode); :func:`switch_of` attributes a saved
storage to the recompute switch that would drop it; :func:`live_peak` is the
most the backward held at once. Used by :mod:`hp_plugins.census.torch_layers`.
"""

from __future__ import annotations

from typing import Any

import attrs

__all__ = ["SavedTensor", "live_peak", "make_tracker", "switch_of"]


@attrs.frozen
class SavedTensor:
    """One storage autograd saved, as the census saw it.

    Attributes:
        nbytes: The storage's bytes (the whole storage, a view keeps it alive).
        dtype: Its dtype, e.g. ``torch.float32``.
        shape: The shape of the first tensor saved on it.
        op: The aten op that produced it.
        module: The module that produced it (dotted path in the layer).
        saved_by: The module whose forward saved it.
        switch: The recompute switch that drops it, or ``None``.
    """

    nbytes: int
    dtype: str
    shape: tuple[int, ...]
    op: str
    module: str
    saved_by: str
    switch: str | None


# ----------------------------------------------------------------------------- the tracker


class _Entry:
    __slots__ = ("key", "nbytes", "op", "module", "module_class", "flags", "cdata")

    def __init__(self, key: int, nbytes: int, op: str, module: str, module_class: str, flags: frozenset[str], cdata: int) -> None:
        self.key, self.nbytes, self.op, self.module, self.module_class, self.flags, self.cdata = (
            key, nbytes, op, module, module_class, flags, cdata
        )


def make_tracker(torch: Any) -> Any:
    """A ``TorchDispatchMode`` that sees every op's outputs and knows which storages are alive."""
    from torch.multiprocessing.reductions import StorageWeakRef
    from torch.utils._python_dispatch import TorchDispatchMode
    from torch.utils._pytree import tree_flatten

    class Tracker(TorchDispatchMode):
        def __init__(self) -> None:
            super().__init__()
            self.entries: dict[int, _Entry] = {}
            self.alive: dict[int, Any] = {}  # key -> StorageWeakRef
            self.by_cdata: dict[int, int] = {}
            self.events: list[tuple[int, int]] = []  # (+1 allocated / -1 freed, key)
            self.modules: list[tuple[str, str]] = [("", "")]
            self._next = 0

        def sweep(self) -> None:
            for key in [key for key, ref in self.alive.items() if ref.expired()]:
                del self.alive[key]
                entry = self.entries[key]
                if self.by_cdata.get(entry.cdata) == key:
                    del self.by_cdata[entry.cdata]
                self.events.append((-1, key))

        def entry(self, tensor: Any, op: str = "", flags: frozenset[str] = frozenset()) -> _Entry:
            storage = tensor.untyped_storage()
            cdata = storage._cdata
            key = self.by_cdata.get(cdata)
            if key is not None and not self.alive[key].expired():
                return self.entries[key]
            key, self._next = self._next, self._next + 1
            module, module_class = self.modules[-1]
            self.entries[key] = _Entry(key, storage.nbytes(), op, module, module_class, flags, cdata)
            self.alive[key] = StorageWeakRef(storage)
            self.by_cdata[cdata] = key
            self.events.append((1, key))
            return self.entries[key]

        def __torch_dispatch__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
            self.sweep()
            out = func(*args, **(kwargs or {}))
            name = func.overloadpacket.__name__
            inputs = [self.entry(t) for t in tree_flatten((args, kwargs or {}))[0] if isinstance(t, torch.Tensor)]
            flags: set[str] = set()
            module, module_class = self.modules[-1]
            if name in ("_softmax", "softmax", "_safe_softmax") and module_class.endswith("Attention"):
                flags.add("softmax")
            if name in ("tanh", "max") and module_class.endswith("Attention"):
                # Gemma 2's soft-cap tanh and GPT-OSS's row maximum: score-sized tensors the core's recompute rebuilds.
                flags.add("softmax")
            if name == "_to_copy" and any("softmax" in e.flags for e in inputs):
                flags.add("headCast")
            if module.endswith("act_fn") or module_class.endswith("Activation"):
                flags.add("act")
            if name == "mul" and any("act" in e.flags for e in inputs):
                flags.add("act")
            outputs = [t for t in tree_flatten(out)[0] if isinstance(t, torch.Tensor)]
            for index, tensor in enumerate(outputs):
                extra = set(flags)
                if name == "native_dropout" and module_class.endswith("Attention"):
                    extra.add("dropout" if index == 1 else "attBMM")
                self.entry(tensor, name, frozenset(extra))
            return out

    return Tracker()


def switch_of(entry: _Entry, saved_by: tuple[str, str], switches: tuple[str, ...], norm_modules: set[str]) -> str | None:
    """The switch that drops a saved storage, by what produced it and which module saved it."""
    found = None
    if "headCast" in entry.flags:
        found = "headCast"
    elif "softmax" in entry.flags:
        found = "softmax"
    elif "dropout" in entry.flags:
        found = "dropout"
    elif "attBMM" in entry.flags:
        found = "attBMM"
    elif entry.module in norm_modules or saved_by[0] in norm_modules:
        found = "normOp"
    elif "act" in entry.flags:
        found = "ffAct"
    elif saved_by[1].endswith("Attention") and "attUp" in switches:
        # MLA: what the attention's own matmuls save are the up-projected heads.
        found = "attUp"
    return found if found in switches else None


def live_peak(tracker: Any, start: int, excluded: set[int]) -> int:
    """The most bytes alive at once from event *start* on (the backward), excluded storages aside."""
    alive: set[int] = set()
    tracker.at_peak = set()
    for sign, key in tracker.events[:start]:
        if sign > 0:
            alive.add(key)
        else:
            alive.discard(key)
    current = sum(tracker.entries[k].nbytes for k in alive if k not in excluded)
    peak = current
    tracker.at_peak = {k for k in alive if k not in excluded}
    for sign, key in tracker.events[start:]:
        if key in excluded:
            continue
        if sign > 0:
            alive.add(key)
            current += tracker.entries[key].nbytes
            if current > peak:
                peak = current
                tracker.at_peak = {k for k in alive if k not in excluded}
        elif key in alive:
            alive.discard(key)
            current -= tracker.entries[key].nbytes
    return peak

