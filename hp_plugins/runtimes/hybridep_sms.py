"""The SMs each built-in trainer gives NVIDIA HybridEP's dispatch and combine kernels: the defaults of the runtime
option ``hybridep_num_sms``, which the ``hybridep`` collective model prices at (its published figures depend on
it; ``hp_plugins/collectives/hybridep.py``). Each is a timing profile's ``collective_sms["hybridep"]``.
"""

from __future__ import annotations

from hp_core.specs.timing import Sourced

__all__ = ["MEGATRON_HYBRIDEP_SMS", "TORCHTITAN_HYBRIDEP_SMS"]

# Megatron-Bridge's performance recipes, which the megatron runtime's HybridEP rows ran: moe_hybridep_num_sms = 32
# (scripts/performance/utils/overrides.py _set_common_perf_overrides, NVIDIA-NeMo/Megatron-Bridge v0.3.0 to v0.4.0,
# e.g. @0fbfe7d). Megatron-Core's own default differs by release: 16 (TransformerConfig.moe_hybridep_num_sms,
# megatron/core/transformer/transformer_config.py at core_v0.16.0 and core_v0.17.0), None from core_v0.17.1 (DeepEP's
# default: 24 SMs within one NVLink domain, 8 across, csrc/hybrid_ep/config.cuh Configurer, deepseek-ai/DeepEP@41cad94).
MEGATRON_HYBRIDEP_SMS = Sourced(
    32, "Megatron-Bridge performance recipes: moe_hybridep_num_sms = 32 (scripts/performance/utils/overrides.py "
        "_set_common_perf_overrides, NVIDIA-NeMo/Megatron-Bridge v0.3.0 to v0.4.0, e.g. @0fbfe7d)")
# torchtitan: _NUM_SMS_DISPATCH = _NUM_SMS_COMBINE = 16, passed to HybridEPBuffer(num_sms_dispatch_api=...,
# num_sms_combine_api=...) in get_buffer (torchtitan/distributed/deepep/hybridep.py, pytorch/torchtitan@b5bcd76;
# since 156db2e, "[HybridEP] Support hybridEP for GB200 with NVL72").
TORCHTITAN_HYBRIDEP_SMS = Sourced(
    16, "torchtitan: _NUM_SMS_DISPATCH = _NUM_SMS_COMBINE = 16, HybridEPBuffer's num_sms_dispatch_api and "
        "num_sms_combine_api (torchtitan/distributed/deepep/hybridep.py get_buffer, pytorch/torchtitan@b5bcd76)")
# NeMo AutoModel: MoEConfig.moe_hybridep_num_sms defaults to 24 (nemo_automodel/components/moe/megatron/
# token_dispatcher.py, NVIDIA-NeMo/Automodel@3746a1a); no built-in runtime is AutoModel's: such a run sets the fsdp2
# runtime's hybridep_num_sms to 24 (its default is torchtitan's 16).
