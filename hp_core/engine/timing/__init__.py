"""Step time: compute, communication, pipeline bubble and optimizer step (docs/time.md).

:func:`time_run` (behind :func:`hp_core.api.step_time`) prices one training
step of one prepared layout on one device type, as the runtime's
:class:`~hp_core.specs.timing.TimingProfile` says its trainer runs. It
reuses the layer kinds' per-op FLOPs (``LayerCost.forward``) and evaluates
each layer group once; a stage then sums precomputed per-layer times, so a
layout search can ask it many times.

The model, with its sources (figures come from the profile, each sourced there):

* **Compute** per layer and micro-batch. Dense matmuls take
  ``flops / (peak * matmul)``; their backward ``matmul_backward_factor`` (2)
  times that (Narayanan et al. 2021, Section 5.1). Where the device states a
  measured :class:`~hp_core.specs.timing.GemmTable`, each GEMM whose shape it
  holds (a recorded weight over the micro-batch's tokens, a router's gating
  GEMM, the routed experts' grouped GEMMs) takes the efficiency measured for
  its forward, input-gradient and weight-gradient passes instead, the backward
  being the two gradient GEMMs (:func:`.gemm_seconds._matmul_seconds`). Where it
  states none but a :class:`~hp_core.specs.gemms.GemmShapeScale` (Hopper), each
  dense GEMM's pass takes ``matmul`` times the scale's factor for its shape
  (docs/time.md "Hopper GEMMs by shape"). Grouped (expert) GEMMs --
  the routed experts' FLOPs over the tokens a rank's experts process -- run at
  ``grouped_matmul * rows / (rows + grouped_half_rows)`` with ``rows`` the
  tokens per local expert (a roofline: reading an expert's weights costs
  ``half_rows`` rows of FLOPs). The fused attention core executes
  ``flash_causal_fraction`` (1/2) of its FLOPs under the causal mask (Dao
  2023, Section 3.1.1) and takes ``overhead + flops / (peak * efficiency)``
  per kernel call (a sliding-window or chunked layer's FLOPs are its exact
  pairs; under a block-sparse kernel, ``attention_block_tokens``, it runs the
  blocks its mask leaves not wholly empty: :mod:`hp_core.score_masks`), its backward ``attention_backward_factor`` (2.5) times the
  forward FLOPs (Dao 2023, Section 4.1); a core whose query/key head dim
  exceeds its value head dim (MLA) takes the device's ``mla_attention_*``
  figures where stated, and MLA's query/key assembly (rotary part, query and
  key concatenation, contiguous value: Megatron-Core
  ``MLASelfAttention.get_query_key_value_tensors``) moves its bytes through
  HBM each way. Eager attention computes the whole
  score matrix with batched GEMMs (masking after ``QK^T``) at the matmul
  efficiency. Elementwise ops are memory-bound: ``flops *
  elementwise_accesses_per_flop * activation_bytes / (HBM bandwidth * memory
  efficiency)``, their backward ``elementwise_backward_factor`` times that;
  an MoE layer also makes ``moe_permute_passes`` passes over its dispatched
  tokens each way (read and write; the first reads and the last writes the
  layer's own tokens), at the device's ``moe_permute_bandwidth`` plus
  ``moe_permute_overhead_seconds`` where stated, or, where the profile states
  its permutation counted op by op (``moe_permutation``: torchtitan's eager
  dispatchers), those accesses per routed row and per token, forward and
  backward apart, at the memory efficiency (re-run by an op-level SAC policy),
  and its router's kernels
  besides the gating GEMM take the device's ``moe_router_*_seconds`` (measured
  at 4096 tokens x 160 experts) scaled by its routed tokens times experts.
* **Precision recipes** (:mod:`hp_core.precision_recipes`, docs/precision.md): the linear
  layers' GEMMs (not those a layer keeps in the compute dtype,
  ``LayerWork.high_precision_gemms``) take their bf16 time over the device's measured kernel
  speedup (``DeviceEfficiency.gemm_speedups``: Transformer Engine's pre-quantized GEMM
  benchmark); quantizing their inputs and output gradients is memory-bound; SP all-gathers of
  GEMM inputs and parameter gathers move the recipe's bytes where it gathers quantized
  (:func:`.gemm_seconds._low_precision_seconds`, :mod:`.rates`); weights whose quantized copies the
  recipe caches are quantized once a step, on the first micro-batch, the stages' sum added to the
  step (in the optimizer step where an unoverlapped gradient-buffer gather casts them; every
  micro-batch under ZeRO-3, where nothing is cached: :mod:`.stage_weights`).
* **Frozen weights** (``LayerWork.frozen_matmul_flops``, ``frozen_gemms``: a LoRA base) run no
  weight-gradient GEMM (autograd computes a gradient only for an input that requires one): the
  backward loses those GEMMs' time as the two items above priced it
  (:func:`.gemm_seconds.frozen_seconds`).
* **Recompute**: full recompute re-runs the layer's forward, its
  communication included (Korthikanti et al. 2022, Section 5). A selective
  setting re-runs what its switches drop: any attention-core switch re-runs
  the attention core forward (Megatron-LM checkpoints ``core_attention`` as a
  unit), plus rewriting the dropped score-sized tensors; ``attUp`` re-runs the
  MLA up-projections (``2 * kv_lora_rank`` FLOPs per rebuilt element), those whose
  output FP8 attention keeps as the kernel's copies too (``ActivationTerm.rerun_bytes``:
  rebuilt, nothing saved);
  ``gather`` re-runs the SP all-gathers in backward; ``moeLayer`` re-runs the
  MoE block's forward (its GEMMs as the forward prices them, in the recipe, its
  router kernels and permutation, no shorter than the host time issuing them)
  and issues its dispatch and combine again (Megatron-LM's ``moe`` module,
  ``moe_layer.py``; :class:`~hp_core.costs.Rerun`); other switches rewrite
  what they drop (a read and a write of its bytes).
* **FSDP1 units** (:attr:`TimingProfile.fsdp1_units <hp_core.specs.timing.TimingProfile.fsdp1_units>`,
  the ``fsdp2`` option ``fsdp_implementation=fsdp1``): each body layer, one FSDP unit, adds the
  device's ``fsdp1_unit_seconds`` once per micro-batch, ``FSDP1_UNIT_FORWARD_SHARE`` (1/3) to its
  forward and the rest to its backward, not to a recompute (:func:`.layer._layer_time`): an
  empirical figure fitted to llm-foundry's MPT rows (docs/time.md, "FSDP1's per-unit time"); a
  device entry stating none is refused (:mod:`.rates`).
* **Offload** (``Setting.offload``): the offloaded bytes go to the host over
  the device's host link during the layer's forward and come back during its
  backward; what the layer's own forward, respectively backward with
  recompute, does not hide is exposed and counted as communication
  (:func:`offload_seconds`; Rhu et al. 2016, "vDNN", Section 3).
* **Communication** per collective (Thakur, Rabenseifner and Gropp 2005;
  NCCL's ``busbw`` convention, nccl-tests ``doc/PERFORMANCE.md``), over ``n``
  ranks, ``S`` bytes, bus bandwidth ``B`` (link bandwidth times the profile's
  bus efficiency) and per-step latency ``a``: ring all-reduce
  ``2 (n-1)/n S/B + 2 (n-1) a``; tree all-reduce ``2 (n-1)/n S/B + 2 log2(n) a``;
  all-gather, reduce-scatter and all-to-all ``(n-1)/n S/B + (n-1) a``;
  point-to-point ``S/B + a``; each collective call (not a send, nor a
  cross-node all-to-all whose hardware states its per-call latency) also costs
  the device's fixed ``collective_overhead_seconds`` (launch and
  synchronisation, fitted by SimuMax on B200). Every group is placed on the
  cluster by the layout's rank order (Megatron-Core's tp, cp, ep, dp, pp by
  default) and priced by the profile's collective model
  (:mod:`hp_core.collectives`: NCCL's multi-rail rings across nodes, tree,
  hierarchical and NVLS all-reduce). Each layer states the collectives it
  issues (:class:`~hp_core.costs.LayerWork`: group, operation, bytes, calls
  forward and backward, the switch whose recompute re-issues them, whether
  the trainer may overlap them); the step time prices exactly those and reads
  nothing of the layer's config. The built-in kinds state, through
  :mod:`hp_plugins.kit.work`: TP with SP an all-gather
  and a reduce-scatter per block (attention, MLP) forward and backward, plus
  the backward re-gathers when ``gather`` is recomputed; TP without SP an
  all-reduce per block each way (Shoeybi et al. 2019, Section 3;
  Korthikanti et al. 2022, Section 4.2.2). As the layout's ``cp_kind`` says,
  CP ring attention passes K/V
  around the ring ``cp - 1`` times forward and K/V and their gradients
  backward (Liu et al. 2023); CP all-to-all (Jacobs et al. 2023, Ulysses)
  exchanges q, k, v and the output each way. EP dispatches and combines the
  routed tokens (an all-to-all each) each way. PP sends each micro-batch's
  activation forward and its gradient back per chunk boundary. What is
  exposed is what the runtime's overlap schedule does not hide behind compute
  (:mod:`.overlap`: FSDP per layer, bucketed DP reductions, TP overlap with
  GEMMs, overlapped sends; :class:`~hp_core.specs.overlap.OverlapSchedule`).
* **Pipeline**: with per-micro-batch stage times ``t_s``, ``m`` micro-batches
  and ``v`` chunks per stage, ``T = m max(t_s) + (sum(t_s) - max(t_s)) / v``:
  for equal stages, ``(m + (p - 1)/v) t``, the bubble fraction
  ``(p - 1)/m`` of 1F1B and ``(p - 1)/(v m)`` of interleaved 1F1B (Narayanan
  et al. 2021, Section 2.2).
* **Data parallelism and the optimizer** after the last backward: gradients
  reduce-scattered (ZeRO >= 1; all-reduced at ZeRO-0) over the DP*CP group
  (the expert DP group for routed experts) and parameters all-gathered back
  (Rajbhandari et al. 2020); under ZeRO-3 parameters are gathered forward and
  backward and gradients reduce-scattered every micro-batch. The optimizer
  step is memory-bound: per element of the rank's shard its update moves what
  the run's optimizer states (:attr:`Optimizer.step_bytes
  <hp_core.types.Optimizer.step_bytes>`: AdamW reads and writes the master
  parameters and both moments and reads the gradient, Kingma and Ba 2015, and
  the master copy is cast to the model parameters), gradient clipping passes
  over the gradient ``optimizer_grad_passes`` times (all over the rank's
  shard), and the whole local gradient buffer is accessed
  ``grad_buffer_passes`` times (zeroing, a NaN check) plus
  ``grad_scale_passes`` times where there is more than one data-parallel
  replica (scaling by ``1/(DP*CP)``, the routed experts' buffer included:
  Megatron-Core ``distributed_data_parallel.py``). The FLOPs an optimizer
  states beyond its update (Muon's Newton-Schulz products) run at the
  ``matmul`` efficiency, their elementwise part as a layer's, on every rank;
  the states it needs whole under ZeRO are all-gathered over the group once
  per step, added to the DP time and not overlapped. The step is the
  pipeline plus the slowest stage's DP communication and optimizer step.
* **A whole run** against its kernels measured alone: where the profile's
  device entry states ``sustained_slowdown``, every GPU time above (compute,
  recompute, communication, pipeline sends, the DP reduction and the optimizer
  step; not offload's host-link copies) is multiplied by it. The figures
  above are kernel and NCCL microbenchmarks; a training run adds clock and
  cache effects, launch gaps and host work between kernels. The
  ``megatron-te`` Blackwell figure is fitted to measured Megatron-LM step
  times on B200 (``hp_plugins/runtimes/timing_profiles.py``).

Known limitations: routing is balanced (no straggler expert); kernels other
than those above (rotary embedding, router top-k, loss) are priced by their
counted elementwise FLOPs; GEMMs of shapes no table holds run at the one
``matmul`` efficiency; host overheads (Python, launch gaps, logging) are
priced only as part of a device's ``sustained_slowdown``, one factor for all
layouts; a kind that states no work
(:attr:`~hp_core.costs.LayerCost.work` ``None``) is refused rather than priced
without its traffic.

The package, by responsibility (this package re-exports the public names):

* :mod:`.results`: :class:`StepTime` and :class:`StageTime`, what a step time returns.
* :mod:`.collectives`: :func:`collective_seconds` and :func:`pipeline_seconds`.
* :mod:`.rates`: the per-call constants (dtype, peak, efficiencies, links).
* :mod:`.layer`: one layer's time per micro-batch (:class:`LayerPricer`, :func:`offload_seconds`).
* :mod:`.step`: :func:`time_run`, the stages, the pipeline, data parallelism and the optimizer step.
* :mod:`.stage_weights`: a stage's quantized weights, what a recipe gathers and their once-a-step quantization.
* :mod:`.tied_weights`: a weight tied across pipeline stages, its two copies' gradients all-reduced once a step.
"""

from hp_core.engine.timing.collectives import collective_seconds, pipeline_seconds
from hp_core.engine.timing.layer import LayerPricer, LayerSeconds, layer_pricer, offload_seconds
from hp_core.engine.timing.rates import compute_dtype
from hp_core.engine.timing.results import StageTime, StepTime
from hp_core.engine.timing.step import time_run

__all__ = [
    "LayerPricer",
    "LayerSeconds",
    "StageTime",
    "StepTime",
    "collective_seconds",
    "compute_dtype",
    "layer_pricer",
    "offload_seconds",
    "pipeline_seconds",
    "time_run",
]
