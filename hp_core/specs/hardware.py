"""A device type: memory, peak throughput and links."""

from __future__ import annotations

from typing import Any, Mapping

import attrs

from hp_core.bounds import MAX_MEMORY_BYTES, short_repr
from hp_core.errors import SpecError
from hp_core.validators import bounded_int, optional, positive_int, positive_number, is_finite

__all__ = ["HardwareSpec"]


# The precision names a peak is read under: the compute dtypes (hp_core.engine.timing.rates._DTYPES), the GEMM
# dtypes of the recipes' formats (hp_core.precision_recipes.FORMATS), and the other figures datasheets print.
PEAK_DTYPES = ("bf16", "fp16", "fp32", "tf32", "fp64", "fp8", "fp6", "fp4", "int8", "int4")
# The low-precision dtypes whose dense peak is at least the 16-bit one on every device that has them (twice on Hopper
# and Blackwell for fp8, 4 to 6 times for fp4, the same on Gaudi 3 for fp8): one below it is a misread figure.
_FASTER_THAN_16_BIT = ("fp8", "fp6", "fp4")


def _peak_flops(instance: Any, attribute: attrs.Attribute, value: Any) -> None:
    """Precision name -> a positive, finite FLOP/s figure (a zero would divide a step time by zero)."""
    if not isinstance(value, Mapping):
        raise SpecError("peak_flops", f"peak_flops must map precision names to FLOP/s, got {short_repr(value)}")
    for key, rate in value.items():
        if not isinstance(key, str):
            raise SpecError("peak_flops", f"peak_flops keys must be precision names, got {short_repr(key)}")
        if key not in PEAK_DTYPES:
            raise SpecError(f"peak_flops.{key}", f"peak_flops.{key} must be a precision name hp reads (one of "
                            f"{', '.join(PEAK_DTYPES)}), got {key!r}; check the spelling")
        if isinstance(rate, bool) or not isinstance(rate, (int, float)) or not is_finite(rate) or not rate > 0:
            raise SpecError(f"peak_flops.{key}", f"peak_flops.{key} must be a positive finite number of FLOP/s, got {short_repr(rate)}")
    half = max((value[k] for k in ("bf16", "fp16") if k in value), default=None)
    for key in _FASTER_THAN_16_BIT:
        if key in value and half is not None and value[key] < half:
            raise SpecError(f"peak_flops.{key}", f"peak_flops.{key} must be at least the 16-bit peak ({half:.4g} FLOP/s), "
                            f"got {value[key]:.4g}; a device's dense {key} peak is never below it: state the dense figure")


def _pair(instance: Any, attribute: attrs.Attribute, value: Any) -> None:
    """A ``(forward, backward)`` pair of positive numbers."""
    if not isinstance(value, tuple) or len(value) != 2:
        raise SpecError(attribute.name, f"{attribute.name} must be (forward, backward), got {value!r}")
    for v in value:
        positive_number(instance, attribute, v)


@attrs.frozen(kw_only=True)
class HardwareSpec:
    """One accelerator type and the links around it.

    A field left ``None`` is not stated; whatever needs it refuses with an
    error instead of assuming a value.

    Attributes:
        name: Display name.
        memory_bytes: Device memory.
        peak_flops: Dense peak FLOP/s by precision name (``"bf16"``, ``"fp8"``, ...).
        devices_per_node: Devices sharing the intra-node link.
        intra_node_bandwidth_bytes_per_second: Per-device unidirectional bandwidth within a node.
        inter_node_bandwidth_bytes_per_second: Per-device unidirectional bandwidth across nodes.
        host_link_bandwidth_bytes_per_second: Per-device bandwidth to host memory (offload).
        architecture: The device family a timing profile keys its achieved
            efficiencies by (``"ampere"``, ``"hopper"``, ``"blackwell"``,
            ``"ascend-910b"``; see :class:`hp_core.specs.timing.TimingProfile`).
        memory_bandwidth_bytes_per_second: Device memory (HBM) bandwidth.
        intra_node_latency_seconds: Latency of one step of a collective within a node.
        inter_node_latency_seconds: Latency of one step of a collective across nodes.
        inter_node_all_to_all_latency_seconds: Latency of one all-to-all call spanning nodes,
            its peers progressed concurrently (one round), fixed time per call included
            (``None``: not stated; such a call is then charged :attr:`inter_node_latency_seconds`
            per peer across nodes, see :class:`hp_core.collectives.Fabric`).
        nics_per_node: Network adapters per node (``None``: one per device,
            each at :attr:`inter_node_bandwidth_bytes_per_second`).
        nic_bandwidth_bytes_per_second: One adapter's unidirectional bandwidth
            (``None``: :attr:`inter_node_bandwidth_bytes_per_second`).
        rail_optimized: The network connects adapter ``i`` of every node to the
            same leaf switch (rail ``i``), so traffic between ranks of the same
            local index stays on one rail; recorded and shown, priced alike
            (NCCL's PXN routes other traffic over NVLink to the rail's GPU).
        nvls_bandwidth_bytes_per_second: In-switch (NVLink SHARP) all-reduce
            bus bandwidth within a node, per device; ``None``: the fabric has
            none, and all-reduce runs as a ring or tree.
        gemm_rate_scale: This machine's GEMM rate over what its architecture's
            efficiencies give at its peak (a part whose peak grows with a power
            limit its GEMMs do not follow); ``None``: 1, the efficiencies as stated.
        large_gemm_speedup: How much faster this machine runs a dense GEMM of
            at least :attr:`large_gemm_flops` FLOPs than its architecture's
            efficiencies price it (they were measured on another machine of the
            family); ``None``: 1, the efficiencies as stated.
        large_gemm_flops: The FLOPs (``2 m n k``) from which a GEMM takes
            :attr:`large_gemm_speedup`; stated with it or not at all.
        attention_rate_scale: ``(forward, backward)``: this machine's fused attention rate over what its
            architecture's attention efficiencies give at its peak, for attention whose q/k and v head dims are
            equal; ``None``: 1, as stated (benchmarks/attention_rate_level.py).
        mla_attention_rate_scale: The same for wider q/k than v (MLA); ``None``: 1.
        sm_count: Streaming multiprocessors the device enables (``cudaDeviceProp.multiProcessorCount``): what a
            GEMM that leaves some to a communication kernel (Transformer Engine's userbuffers with an SM margin,
            docs/time.md) runs on less them; ``None``: not stated, and a run that needs it is refused.
    """

    name: str
    memory_bytes: int = attrs.field(validator=bounded_int(MAX_MEMORY_BYTES, what="1 PiB, MAX_MEMORY_BYTES"))
    peak_flops: Mapping[str, float] = attrs.field(factory=dict, validator=_peak_flops)
    devices_per_node: int | None = attrs.field(default=None, validator=optional(positive_int))
    intra_node_bandwidth_bytes_per_second: float | None = attrs.field(default=None, validator=optional(positive_number))
    inter_node_bandwidth_bytes_per_second: float | None = attrs.field(default=None, validator=optional(positive_number))
    host_link_bandwidth_bytes_per_second: float | None = attrs.field(default=None, validator=optional(positive_number))
    architecture: str | None = None
    memory_bandwidth_bytes_per_second: float | None = attrs.field(default=None, validator=optional(positive_number))
    intra_node_latency_seconds: float | None = attrs.field(default=None, validator=optional(positive_number))
    inter_node_latency_seconds: float | None = attrs.field(default=None, validator=optional(positive_number))
    inter_node_all_to_all_latency_seconds: float | None = attrs.field(default=None, validator=optional(positive_number))
    nics_per_node: int | None = attrs.field(default=None, validator=optional(positive_int))
    nic_bandwidth_bytes_per_second: float | None = attrs.field(default=None, validator=optional(positive_number))
    rail_optimized: bool | None = attrs.field(default=None, validator=optional(attrs.validators.instance_of(bool)))
    nvls_bandwidth_bytes_per_second: float | None = attrs.field(default=None, validator=optional(positive_number))
    gemm_rate_scale: float | None = attrs.field(default=None, validator=optional(positive_number))
    large_gemm_speedup: float | None = attrs.field(default=None, validator=optional(positive_number))
    large_gemm_flops: float | None = attrs.field(default=None, validator=optional(positive_number))
    attention_rate_scale: tuple[float, float] | None = attrs.field(default=None, validator=optional(_pair))
    mla_attention_rate_scale: tuple[float, float] | None = attrs.field(default=None, validator=optional(_pair))
    sm_count: int | None = attrs.field(default=None, validator=optional(positive_int))

    @large_gemm_flops.validator
    def _check_large_gemm(self, attribute: attrs.Attribute, value: Any) -> None:
        if (value is None) != (self.large_gemm_speedup is None):
            raise SpecError("large_gemm_flops", "large_gemm_flops and large_gemm_speedup go together (the GEMM size, "
                                                "2 m n k FLOPs, from which the speedup holds): state both or neither")

    def nic_share_bytes_per_second(self) -> float | None:
        """One device's share of its node's network bandwidth: ``nics * nic_bandwidth / devices_per_node``.

        With one adapter per device that is the adapter's bandwidth; ``None``
        when neither the adapters nor :attr:`inter_node_bandwidth_bytes_per_second` are stated.
        """
        nic = self.nic_bandwidth_bytes_per_second or self.inter_node_bandwidth_bytes_per_second
        if nic is None:
            return None
        if self.nics_per_node is None or self.devices_per_node is None:
            return nic
        return nic * self.nics_per_node / self.devices_per_node
