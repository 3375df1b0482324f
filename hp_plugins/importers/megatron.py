"""The ``megatron`` and ``megatron-args`` importers: a Megatron-LM job as its arguments state it.

``hp estimate --from megatron train.sh`` reads a launch script as
:mod:`hp_plugins.importers.shell` expands it (variables, arrays, ``$(( ... ))``), the
arguments after the launched ``*.py`` entry point read as Megatron-LM's, and torchrun's
``--nproc_per_node`` times ``--nnodes`` as the device count. ``--from megatron-args "--num-layers 32 ..."`` reads the
arguments alone (state ``--devices`` or ``--dp``).

What is mapped (Megatron-Core 0.14 ``megatron/training/arguments.py``, whose
defaults fill what a job leaves out):

* the model, as a Hugging Face style config the ``hf`` model format builds
  (``llama``; ``deepseek_v2`` with ``--multi-latent-attention``; ``qwen2_moe``
  for routed experts without MLA), then written inline: sizes, heads and query
  groups, ``--kv-channels``, ``--swiglu``, RMSNorm, biases
  (``--disable-bias-linear``, ``--add-qkv-bias``: q, k and v carry a bias with either, the output projection
  and the MLPs only without the first), per-head query/key norms (``--qk-layernorm``, of ``--normalization``'s
  type; ``--qk-l2-norm`` without a scale), a shared expert's sigmoid gate (``--moe-shared-expert-gate``), tied embeddings unless
  ``--untie-embeddings-and-output-weights``, the vocabulary (``--vocab-size``
  plus the NullTokenizer's EOD token, ``tokenizer.py``; ``pretrain_gpt.py``'s default GPT2BPETokenizer where
  no ``--tokenizer-type`` comes with ``--vocab-file`` and ``--merge-file``), MLA ranks and head
  sizes, experts, top-k, expert and shared-expert widths, ``--moe-layer-freq``
  (any pattern without MLA; with MLA leading dense layers, then every layer), capacity factor and padding, MTP,
  group-limited routing (``--moe-router-num-groups``, ``--moe-router-group-topk``);
* a hybrid model (``--hybrid-layer-pattern``: Mamba ``M``, attention ``*``, MLP ``-``, MoE ``E`` with
  ``--moe-latent-size``, pipeline segments ``|``, MTP depths ``/``; ``--mamba-num-heads``, ``--mamba-head-dim``,
  ``--mamba-state-dim``, ``--mamba-num-groups``) as Megatron-LM's ``HybridModel`` builds it, onto the ``nemotron_h``
  format's layer kinds (:mod:`hp_plugins.importers.megatron_hybrid`);
* the layout and batch: TP, PP, virtual stages, CP and its exchange, EP, expert
  TP (default: TP), sequence parallelism (on only with TP > 1), micro and
  global batch, sequence length; dp from the device count; uneven pipeline
  chunks (``--pipeline-model-parallel-layout``, ``--decoder-first/last-pipeline-num-layers``,
  ``--account-for-embedding/loss-in-pipeline-split``) as ``layers_per_stage``; ``--step-batch-size-schedule``
  as its first global batch (:func:`_step_batch_schedule`)
  (:mod:`hp_plugins.importers.megatron_options`);
* precision and optimizer: ``--bf16``/``--fp16`` (2-byte parameters),
  ``--accumulate-allreduce-grads-in-fp32`` (fp32 gradients; on with bf16;
  ``--grad-reduce-in-bf16`` with ``--bf16``: the option ``grad_reduce_in_fp32: false``),
  ``--use-distributed-optimizer`` (ZeRO-1, else 0), ``--optimizer adam|sgd``; under
  ``--use-precision-aware-optimizer`` the master parameters' and Adam moments' dtypes;
  ``--fp8-format``/``--fp8-recipe``/``--fp8-param-gather`` and ``--fp4-format``/``--fp4-recipe`` as the
  registered precision recipe stating those Megatron flags;
* recompute: ``--recompute-granularity full`` with ``uniform`` and 1 layer
  (every layer) or ``block`` and N (the first N layers of every chunk), or
  ``selective`` with ``--recompute-modules`` (default ``core_attn``), each
  module the switches the ``megatron`` runtime states for it;
* activation CPU offloading: ``--cpu-offloading-num-layers N`` as the first N layers offloading every tensor
  they keep (:func:`~hp_plugins.importers.megatron_options.cpu_offloading_plan`), refused with pipeline
  parallelism, recompute or per-layer CUDA graphs as Megatron-Core refuses it (on a hybrid model a warning line:
  its stack offloads nothing);
* the runtime ``megatron`` and its options (docs/runtimes.md):
  ``--cross-entropy-loss-fusion`` (off unless passed; on only with ``--cross-entropy-fusion-impl te``: the default
  ``native`` keeps the unfused loss's fp32 softmax), ``--attention-backend``,
  ``--no-bias-swiglu-fusion``, ``--activation-func-fp8-input-store``, ``--no-rope-fusion`` with rope positions (``rope_kernels: eager``),
  ``--moe-permute-fusion`` (off unless passed), ``--moe-grouped-gemm`` (off unless passed: a GPT model's experts
  as Megatron-Core's SequentialMLP, ``moe_grouped_gemm: false``; a hybrid model's are grouped whatever the flag),
  ``--use-transformer-engine-op-fuser`` with grouped routed experts as ``moe_fused_grouped_mlp: true`` and a
  warning line (Megatron-Core from 8d16c67 runs a gated MoE MLP under the fuser only with
  ``NVTE_CUTEDSL_FUSED_GROUPED_MLP=1``; an older one ran it unfused without it),
  ``--no-gradient-accumulation-fusion``, ``--make-vocab-size-divisible-by``, ``--ddp-bucket-size``; the overlaps
  ``--overlap-grad-reduce``, ``--overlap-param-gather``, ``--tp-comm-overlap`` (its ``--tp-comm-overlap-cfg``
  file, opened relative to the current directory as Megatron-LM opens it relative to its own, as
  ``tp_comm_overlap_cfg``), ``--overlap-moe-expert-parallel-comm`` and the pipeline sends (on under the interleaved schedule
  unless ``--no-overlap-p2p-communication``); the flex dispatcher's backend, DeepEP or HybridEP
  (``ep_all_to_all: deepep`` / ``hybridep``), HybridEP's ``--moe-hybridep-num-sms`` or ``--moe-flex-dispatcher-num-sms`` (``hybridep_num_sms``).
  From a launch script's environment, ``CUBLAS_WORKSPACE_CONFIG`` (its ``:SIZE:COUNT`` pairs) as
  ``cublas_workspace_kib``, the size of PyTorch's own cuBLAS workspaces.

Flags with no effect on memory or step time in this model (learning rate,
logging, data, checkpoints, seeds, ...: :data:`IGNORED`) are dropped quietly;
any other flag is named in one warning line.
"""

from __future__ import annotations

import shlex
from pathlib import Path
from typing import Any, Mapping

import attrs

from hp_core.errors import ConfigError
from hp_core.importers import ImportedJob, Importer
from hp_core.markers import hookimpl
from hp_core.models import model_from_config
from hp_plugins.importers.megatron_hybrid import hybrid_model, hybrid_pattern, hybrid_split, with_mtp
from hp_plugins.importers.megatron_layers import TOKENIZER_VOCABS, ffn_size, hf_config, vocab_size
from hp_plugins.importers.megatron_options import (bf16_layers, cpu_offloading, cpu_offloading_plan, megatron_model,
                                                   pipeline_split, trainer_options)
from hp_plugins.importers.megatron_recipe import precision_recipe
from hp_plugins.importers.shell import parse_megatron_args, read_megatron_script
from hp_plugins.kinds.mtp import with_repeated_module
from hp_plugins.runtimes.blas_option import workspace_config_kib

__all__ = ["IGNORED", "TOKENIZER_VOCABS", "cpu_offloading_plan", "hp_importers", "import_megatron_args", "parse_megatron_args",
           "read_megatron_script"]

# No effect on what hp prices (memory, step time): optimisation hyper-parameters, data, logging (timer detail
# included), checkpoints (their format, strictness, retention and the asynchronous writer), initialisation, routing-loss details and the expert-bias update rate, RoPE scaling details,
# the forced balanced routing of benchmarks (hp prices every expert its share of tokens anyway), flags
# Megatron-Core ignores for mcore models (--use-flash-attn), attention-mask and
# softmax flags that act only on the unfused path priced by --attention-backend.
IGNORED = frozenset("""
mtp-loss-scaling-factor lr-warmup-init finetune auto-detect-ckpt-format no-ckpt-fully-parallel-save
lr min-lr lr-decay-style lr-warmup-iters lr-warmup-fraction lr-decay-iters lr-decay-samples lr-warmup-samples
weight-decay adam-beta1 adam-beta2 adam-eps sgd-momentum clip-grad seed init-method-std train-iters train-samples
initial-loss-scale min-loss-scale loss-scale-window hysteresis log-interval log-throughput log-timers-to-tensorboard
log-memory-to-tensorboard log-params-norm log-num-zeros-in-grad log-validation-ppl-to-tensorboard
tensorboard-dir tensorboard-log-interval wandb-project wandb-exp-name wandb-save-dir save load save-interval
eval-interval eval-iters data-path split mock-data data-cache-path num-workers dataloader-type distributed-backend
distributed-timeout-minutes use-mcore-models transformer-impl no-create-attention-mask-in-dataloader use-flash-attn
rotary-base rotary-scaling-factor apply-layernorm-1p enable-experimental attention-softmax-in-fp32 no-masked-softmax-fusion no-bias-dropout-fusion
tokenizer-model vocab-file merge-file moe-router-score-function moe-router-pre-softmax
moe-router-load-balancing-type moe-router-topk-scaling-factor moe-aux-loss-coeff
moe-z-loss-coeff moe-router-dtype group-query-attention fp8-margin fp8-interval
exit-interval exit-duration-in-mins ckpt-format no-save-optim no-save-rng no-load-optim no-load-rng
decoupled-lr decoupled-min-lr manual-gc calculate-per-token-loss profile profile-step-start profile-step-end profile-ranks
record-memory-history tiktoken-pattern no-mmap-bin-files logging-level no-check-for-nan-in-loss-and-grad
init-model-with-meta-device lr-decay-samples lr-warmup-samples rerun-mode manual-gc-interval mscale mscale-all-dim
moe-router-bias-update-rate te-rng-tracker moe-router-force-load-balancing
timing-log-level dist-ckpt-strictness async-save use-persistent-ckpt-worker save-retain-interval wandb-entity
eval-global-batch-size dist-ckpt-optim-fully-reshardable dist-ckpt-save-pre-mcore-014
""".split())

class _Args:
    """The parsed arguments, each read once; what is left unread is reported."""

    def __init__(self, args: dict[str, list[str]]) -> None:
        self.args, self.read = args, set()

    def flag(self, name: str) -> bool:
        self.read.add(name)
        return name in self.args

    def value(self, name: str, kind: type = str, default: Any = None) -> Any:
        self.read.add(name)
        values = self.args.get(name)
        if not values:
            return default
        try:
            return kind(values[0])
        except ValueError:
            raise ConfigError(f"--{name}", f"expected {kind.__name__}, got {values[0]!r}") from None

    def values(self, name: str) -> list[str] | None:
        self.read.add(name)
        return self.args.get(name)

    def unread(self) -> list[str]:
        return [f"--{name}{' ' + ' '.join(v) if v else ''}: not mapped" for name, v in self.args.items()
                if name not in self.read and name not in IGNORED]


def _recompute(a: _Args, model, registry, counts: list[int], unmapped: list[str]) -> Any:
    granularity = a.value("recompute-granularity")
    method, layers, modules = a.value("recompute-method"), a.value("recompute-num-layers", int), a.values("recompute-modules")
    if granularity is None:
        return None
    if granularity == "full":
        if method in ("uniform", "block") and layers is None:
            # Megatron-LM's default for --recompute-num-layers changed between releases (1, then None,
            # megatron/training/arguments.py), so an unstated count is refused rather than guessed.
            raise ConfigError("--recompute-num-layers", f"--recompute-method {method} needs it; state it")
        if method == "uniform" and layers == 1:
            return "full"
        if method == "block":
            ranges, start = {}, 0
            for count in counts:
                if min(layers or 0, count):
                    ranges[f"{start}-{start + min(layers, count) - 1}"] = "full"
                start += count
            return {"default": "none", "layers": ranges} if ranges else None
        unmapped.append(f"--recompute-method {method} --recompute-num-layers {layers}: a group of layers keeping one "
                        "input is not a per-layer plan; priced as every layer fully recomputed")
        return "full"
    runtime = registry.runtime("megatron")
    body = [registry.layer_kind(group.kind) for group in model.layers for _ in range(group.count)
            if registry.layer_kind(group.kind).placement == "body"]
    known = runtime.recompute_modules or {}
    chosen = modules if modules else ["core_attn"]
    for module in chosen:
        if module not in known:
            unmapped.append(f"--recompute-modules {module}: not among the modules the megatron runtime prices "
                            f"({', '.join(known)})")
    per_layer = []
    for kind in body:
        switches = set()
        for module in chosen:
            acts = module in known and runtime.module_acts_on(module, kind.name)
            switches |= set(known.get(module, ())) & set(kind.switches) if acts else set()
        per_layer.append(sorted(switches))
    ranges, start = {}, 0
    for index in range(1, len(per_layer) + 1):
        if index == len(per_layer) or per_layer[index] != per_layer[start]:
            if per_layer[start]:
                ranges[f"{start}-{index - 1}"] = per_layer[start]
            start = index
    return {"default": "none", "layers": ranges} if ranges else None


# Bytes per element of the precision-aware optimizer's dtypes (arguments.py --main-params-dtype, --exp-avg-dtype,
# --exp-avg-sq-dtype choices; TE's FusedAdam keeps fp8 states as one byte with a scale per tensor).
_WIDTHS = {"fp32": 4, "fp16": 2, "bf16": 2, "fp8": 1}


def _optimizer_widths(a: _Args, unmapped: list[str]) -> dict[str, int]:
    """``--use-precision-aware-optimizer`` (Transformer Engine's FusedAdam): the master parameters' and the two
    moments' widths as ``master_param_bytes`` and ``moment_bytes`` (their mean: hp states one width for both
    moments, exact when it is whole); without the flag Megatron-LM reads none of them."""
    flags = {name: a.value(name, str, "fp32") for name in ("main-params-dtype", "exp-avg-dtype", "exp-avg-sq-dtype",
                                                            "main-grads-dtype")}
    if not a.flag("use-precision-aware-optimizer"):
        return {}
    for name, value in flags.items():
        if value not in _WIDTHS:
            raise ConfigError(f"--{name}", f"expected one of {', '.join(_WIDTHS)}, got {value!r}")
    found: dict[str, int] = {}
    if flags["main-params-dtype"] != "fp32":
        found["master_param_bytes"] = _WIDTHS[flags["main-params-dtype"]]
    pair = _WIDTHS[flags["exp-avg-dtype"]] + _WIDTHS[flags["exp-avg-sq-dtype"]]
    if pair != 8:
        found["moment_bytes"] = -(-pair // 2)
        if pair % 2:
            unmapped.append(f"--exp-avg-dtype {flags['exp-avg-dtype']} --exp-avg-sq-dtype {flags['exp-avg-sq-dtype']}: "
                            f"{pair} bytes for the two moments, priced as {found['moment_bytes']} each")
    if flags["main-grads-dtype"] != "fp32":
        unmapped.append(f"--main-grads-dtype {flags['main-grads-dtype']}: not mapped; the gradient buffer priced as "
                        "--grad-reduce-in-bf16 / --accumulate-allreduce-grads-in-fp32 state it")
    return found


# Megatron-FSDP's sharding strategies (arguments.py --data-parallel-sharding-strategy) as ZeRO levels.
_FSDP_ZERO = {"no_shard": 0, "optim": 1, "optim_grads": 2, "optim_grads_params": 3}


def _zero(a: _Args, unmapped: list[str]) -> int:
    """ZeRO level: the distributed optimizer's 1, else 0; under ``--use-megatron-fsdp`` its strategy's level."""
    strategy = a.value("data-parallel-sharding-strategy", str)
    distributed = a.flag("use-distributed-optimizer")
    if not a.flag("use-megatron-fsdp"):
        return 1 if distributed else 0
    if strategy is None:  # arguments.py default: no_shard up to core_v0.17, optim_grads_params from core_v0.18
        raise ConfigError("--data-parallel-sharding-strategy", "its default changed between Megatron-Core releases "
                                                               "(no_shard, then optim_grads_params); state it")
    if strategy not in _FSDP_ZERO:
        raise ConfigError("--data-parallel-sharding-strategy", f"expected one of {', '.join(_FSDP_ZERO)}, got {strategy!r}")
    unmapped.append(f"--use-megatron-fsdp --data-parallel-sharding-strategy {strategy}: priced as ZeRO-{_FSDP_ZERO[strategy]} "
                    "by hp's per-layer sharding model, not Megatron-FSDP's own buffers")
    return _FSDP_ZERO[strategy]


def _router_groups(a: _Args) -> dict[str, int]:
    """Group-limited routing: Megatron-Core limits a token to ``--moe-router-group-topk`` of
    ``--moe-router-num-groups`` expert groups only when the former is set, and then requires the latter
    (``transformer_config.py`` ``__post_init__``; ``moe_utils.topk_routing_with_score_function``)."""
    groups, chosen = a.value("moe-router-num-groups", int), a.value("moe-router-group-topk", int)
    if not chosen:
        return {}
    if not groups:
        raise ConfigError("--moe-router-num-groups", "--moe-router-group-topk needs it (Megatron-Core requires both); state it")
    experts, top_k = a.value("num-experts", int) or 0, a.value("moe-router-topk", int, 2)
    if groups < 1 or experts % groups:
        raise ConfigError("--moe-router-num-groups", f"must divide --num-experts {experts}, got {groups}")
    if not 1 <= chosen <= groups:
        raise ConfigError("--moe-router-group-topk", f"must be at least 1 and at most --moe-router-num-groups {groups}, "
                                                     f"got {chosen}")
    if top_k > chosen * experts // groups:
        raise ConfigError("--moe-router-group-topk", f"its {chosen} groups hold {chosen * experts // groups} experts, "
                                                     f"fewer than --moe-router-topk {top_k}")
    return {"router_num_groups": groups, "router_group_topk": chosen}


# num_microbatches_calculator.py StepBatchsizeNumMicroBatchesCalculator._parse_numeric_value (NVIDIA/Megatron-LM@d98e8a6):
# a threshold's suffix K, M, B or T multiplies it by 1e3, 1e6, 1e9 or 1e12.
_SUFFIXES = {"K": 10**3, "M": 10**6, "B": 10**9, "T": 10**12}


def _step_batch_schedule(text: str | None, unmapped: list[str]) -> int | None:
    """The global batch at step 0 of ``--step-batch-size-schedule "THRESHOLD:BATCH ..."`` (Megatron-Core
    ``num_microbatches_calculator.py`` ``StepBatchsizeNumMicroBatchesCalculator``, NVIDIA/Megatron-LM@d98e8a6:
    thresholds in tokens, or samples, with an optional K/M/B/T suffix; the batch of the highest threshold reached
    applies). hp prices one batch, the first; the later ones are named in a warning line."""
    if text is None:
        return None
    pairs = []
    for item in text.replace(",", " ").split():
        threshold, _, batch = item.partition(":")
        number = threshold.strip().upper()
        scale = _SUFFIXES.get(number[-1:], 1)
        try:
            pairs.append((int(float(number[:-1] if scale != 1 else number) * scale), int(batch)))
        except ValueError:
            raise ConfigError("--step-batch-size-schedule", f"expected THRESHOLD:BATCH pairs, got {item!r}") from None
    # The calculator's _validate_schedule: the first threshold 0, the thresholds strictly increasing.
    if not pairs or pairs[0][0] != 0:
        raise ConfigError("--step-batch-size-schedule", f"{text!r}: the first threshold must be 0")
    if any(later[0] <= earlier[0] for earlier, later in zip(pairs, pairs[1:])):
        raise ConfigError("--step-batch-size-schedule", f"{text!r}: the thresholds must be strictly increasing")
    if len(pairs) > 1:
        later = ", ".join(f"{batch} from {threshold:,}" for threshold, batch in pairs[1:])
        unmapped.append(f"--step-batch-size-schedule {text}: priced at its first global batch {pairs[0][1]}; "
                        f"the later batches ({later} tokens or samples) are not priced")
    return pairs[0][1]


def import_megatron_args(tokens: list[str], registry, devices: int | None = None, name: str = "megatron-job",
                         env: Mapping[str, str] | None = None) -> ImportedJob:
    """An ``hp`` config document from Megatron-LM's arguments (module docstring); *env*: the launch's environment
    variables, of which ``CUBLAS_WORKSPACE_CONFIG`` sizes PyTorch's cuBLAS workspaces (``cublas_workspace_kib``)."""
    a = _Args(parse_megatron_args(tokens))
    unmapped: list[str] = []
    source = f"Megatron-LM arguments ({name})"
    hybrid = hybrid_pattern(a, unmapped)
    mtp_layers = None
    if hybrid is None:
        hf = hf_config(a, unmapped)
        model = model_from_config(hf, registry, name=name, source=source, where="--from megatron")
    else:  # --hybrid-layer-pattern: Megatron-LM's HybridModel (hp_plugins/importers/megatron_hybrid.py)
        hidden = a.value("hidden-size", int)
        if hidden is None:
            raise ConfigError("--hidden-size", "required to build the model; state it")
        model, mtp_layers = hybrid_model(a, hybrid, vocab_size(a, unmapped), ffn_size(a, hidden), name, source, unmapped)
    # What the HF format has no key for: hidden dropout (Megatron's default 0.1), the experts' capacity.
    capacity = a.value("moe-expert-capacity-factor", float)
    changes = {"hidden_dropout": a.value("hidden-dropout", float, 0.1)}
    if capacity is not None:
        changes.update(capacity_factor=capacity, pad_to_capacity=a.flag("moe-pad-expert-input-to-capacity"))
    changes.update(_router_groups(a))

    def finish(built, warnings: list[str]):
        built = megatron_model(a, built, warnings)
        return attrs.evolve(built, layers=tuple(
            attrs.evolve(g, config=attrs.evolve(g.config, **{k: v for k, v in changes.items() if hasattr(g.config, k)}))
            for g in built.layers))

    model = finish(model, unmapped)
    tp = a.value("tensor-model-parallel-size", int, 1)
    pp = a.value("pipeline-model-parallel-size", int, 1)
    if hybrid is not None:
        if mtp_layers is not None:  # the depth's layers as the main pattern's (warnings said once, there)
            inner = finish(attrs.evolve(model, layers=mtp_layers), []).layers
            model = with_mtp(model, hybrid.depths, tuple(attrs.evolve(g, count=1) for g in inner for _ in range(g.count)))
        vpp, counts = hybrid_split(a, hybrid, pp)
    else:
        mtp = hf.get("num_nextn_predict_layers", 0)
        if not mtp and a.value("mtp-num-layers", int):
            mtp = a.value("mtp-num-layers", int)
            unmapped.append(f"--mtp-num-layers {mtp}: MTP layers are mapped only with --multi-latent-attention; "
                            "priced without them")
        vpp, counts = pipeline_split(a, hf["num_hidden_layers"], mtp, pp, unmapped)
    # --mtp-use-repeated-layer (a TransformerConfig field, argument_utils.py's --mtp-use-repeated-layer): one MTP layer
    # built and applied at every depth (multi_token_prediction.py MultiTokenPredictionBlock at NVIDIA/Megatron-LM@d98e8a6),
    # hp's mtp kind applied that many times with its parameters once (hp_plugins/kinds/mtp.py).
    if a.flag("mtp-use-repeated-layer"):
        model = with_repeated_module(model)
    experts = a.value("num-experts", int)
    parallel: dict[str, Any] = {
        "tp": tp, "pp": pp, "vpp": vpp, "cp": a.value("context-parallel-size", int, 1),
        "cp_kind": "a2a" if a.value("cp-comm-type") == "a2a" else "p2p",
        "ep": a.value("expert-model-parallel-size", int, 1),
        "etp": a.value("expert-tensor-parallel-size", int, tp) if experts else 1,
        "sp": a.flag("sequence-parallel") and tp > 1, "zero": _zero(a, unmapped),
        "micro_batch_size": a.value("micro-batch-size", int, 1), "seq_len": a.value("seq-length", int),
    }
    if a.value("global-batch-size", int) is not None:
        parallel["global_batch_size"] = a.value("global-batch-size", int)
    schedule = _step_batch_schedule(a.value("step-batch-size-schedule"), unmapped)
    if schedule is not None:
        if "global_batch_size" in parallel:  # arguments.py validate_args raises ValueError for the pair
            raise ConfigError("--step-batch-size-schedule", "Megatron-LM refuses it with --global-batch-size; state one")
        parallel["global_batch_size"] = schedule
    if parallel["seq_len"] is None:
        raise ConfigError("--seq-length", "required; state it")
    if len(set(counts)) > 1:
        parallel["layers_per_stage"] = counts
    precision: dict[str, Any] = {}
    fp32_grads = a.flag("accumulate-allreduce-grads-in-fp32")
    if a.flag("fp16") and not fp32_grads:
        precision["grad_bytes"] = 2  # fp16 without fp32 accumulation keeps fp16 main gradients
    bf16_grads = a.flag("bf16") and a.flag("grad-reduce-in-bf16")  # arguments.py: turns accumulation in fp32 off
    optimizer = a.value("optimizer", str, "adam")
    if optimizer == "sgd":
        precision["optimizer"] = "sgd_momentum"
    elif optimizer != "adam":
        unmapped.append(f"--optimizer {optimizer}: not mapped; priced as Adam")
    precision.update(_optimizer_widths(a, unmapped))
    # --cross-entropy-loss-fusion with --cross-entropy-fusion-impl te (Transformer Engine's parallel_cross_entropy) is
    # the runtime's cross_entropy_fusion; the default impl, native (megatron/core/model_parallel_config.py
    # cross_entropy_fusion_impl = 'native' at NVIDIA/Megatron-LM@d98e8a6), is megatron/core/fusions/
    # fused_cross_entropy.py, which runs VocabParallelCrossEntropy's logits.float() and saves the fp32 softmax for
    # backward, as the unfused vocab_parallel_cross_entropy does: cross_entropy_fusion false in memory.
    impl = a.value("cross-entropy-fusion-impl", str, "native")
    options: dict[str, Any] = {
        "cross_entropy_fusion": a.flag("cross-entropy-loss-fusion") and impl == "te",
        "swiglu_fusion": not a.flag("no-bias-swiglu-fusion"),
        "activation_func_fp8_input_store": a.flag("activation-func-fp8-input-store"),
        "moe_permute_fusion": a.flag("moe-permute-fusion"),
        # --moe-grouped-gemm (TransformerConfig.moe_grouped_gemm, default False): without it a GPT model's MoE layers
        # are Megatron-Core's SequentialMLP, each local expert's linears as their own GEMMs (the runtime's
        # moe_grouped_gemm option). A hybrid model's are TEGroupedMLP whatever the flag: hybrid_layer_specs.py builds
        # its MoE spec with moe_grouped_gemm=True (NVIDIA/Megatron-LM@d98e8a6).
        "moe_grouped_gemm": a.flag("moe-grouped-gemm") or hybrid is not None,
        "gradient_accumulation_fusion": not a.flag("no-gradient-accumulation-fusion"),
    }
    bucket = a.value("ddp-bucket-size", int)  # arguments.py --ddp-bucket-size (default None: Megatron's own)
    if bucket is not None:
        options["ddp_bucket_size"] = bucket
    fuser = a.flag("use-transformer-engine-op-fuser")
    if fuser and not (a.value("num-experts", int) and options["moe_grouped_gemm"]):
        unmapped.append("--use-transformer-engine-op-fuser: no grouped routed experts for its fused grouped MLP; the "
                        "layers are priced as Transformer Engine's unfused modules")
    elif fuser:
        # TransformerConfig.use_transformer_engine_op_fuser: TEGroupedMLP asserts _is_fused_impl_supported(), which at
        # NVIDIA/Megatron-LM@d98e8a6 (transformer/moe/experts.py lines 286-289 and 382-456, since 8d16c67, 2026-07-22)
        # refuses a gated MLP without NVTE_CUTEDSL_FUSED_GROUPED_MLP=1: a run of it had the variable set, and TE fused
        # its experts where the recipe and device allow (the runtime's moe_fused_grouped_mlp prices exactly that).
        options["moe_fused_grouped_mlp"] = True
        unmapped.append("--use-transformer-engine-op-fuser: stated as moe_fused_grouped_mlp true (Megatron-Core from "
                        "8d16c67 runs a gated MoE MLP under the fuser only with NVTE_CUTEDSL_FUSED_GROUPED_MLP=1; "
                        "Transformer Engine fuses it under MXFP8 or NVFP4 on Blackwell, elsewhere runs it unfused); an "
                        "older Megatron-Core without the variable ran it unfused: --runtime-option "
                        "moe_fused_grouped_mlp=false")
    if bf16_grads:
        options["grad_reduce_in_fp32"] = False
    if a.value("attention-backend") is not None:
        options["attention_backend"] = a.value("attention-backend")
    # arguments.py --no-rope-fusion (dest apply_rope_fusion, on by default; validate_args turns it off where the
    # positions are not rope): the rotation in eager torch ops (the megatron runtime's rope_kernels option).
    if a.flag("no-rope-fusion") and a.value("position-embedding-type", str, "learned_absolute") in ("rope", "mrope"):
        options["rope_kernels"] = "eager"
    if a.value("make-vocab-size-divisible-by") is not None:
        options["make_vocab_size_divisible_by"] = a.value("make-vocab-size-divisible-by", int)
    options.update(trainer_options(a, pp, vpp, parallel["ep"], unmapped))
    if (env or {}).get("CUBLAS_WORKSPACE_CONFIG") is not None:
        try:
            options["cublas_workspace_kib"] = workspace_config_kib(env["CUBLAS_WORKSPACE_CONFIG"])
        except ValueError as exc:
            raise ConfigError("CUBLAS_WORKSPACE_CONFIG", str(exc)) from None
    recipe = precision_recipe(a, registry, unmapped)
    if recipe is not None:
        precision["recipe"] = recipe
    precision.update(bf16_layers(a, recipe, unmapped))
    document: dict[str, Any] = {
        "model": {"name": name, "layers": [{"kind": g.kind, "count": g.count, "config": attrs.asdict(g.config)}
                                           for g in model.layers]},
        "parallel": parallel,
        "runtime": {"name": "megatron", "options": options},
    }
    if precision:
        document["precision"] = precision
    offload = cpu_offloading(a, pp, a.value("num-layers", int, sum(counts)), bool(hybrid), unmapped)
    recompute = offload or _recompute(a, model, registry, counts, unmapped)
    if recompute is not None:
        document["recompute"] = recompute
    return ImportedJob(document, tuple(unmapped + a.unread()), devices)


def _read_script(source: str, *, registry) -> ImportedJob:
    path = Path(source)
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError(str(path), f"cannot be read: {exc}") from None
    environment: dict[str, str] = {}
    tokens, devices = read_megatron_script(text, environment)
    return import_megatron_args(tokens, registry, devices, name=path.stem, env=environment)


def _read_args(source: str, *, registry) -> ImportedJob:
    try:
        tokens = shlex.split(source, comments=True)
    except ValueError as exc:
        raise ConfigError("--from megatron-args", f"the arguments do not parse: {exc}") from None
    return import_megatron_args(tokens, registry)


@hookimpl
def hp_importers():
    yield Importer(name="megatron", read=_read_script, exporter="megatron",
                   description="a Megatron-LM launch script (torchrun ... pretrain_gpt.py --num-layers ...)")
    yield Importer(name="megatron-args", read=_read_args, reads_text=True, exporter="megatron",
                   description="Megatron-LM arguments given as text (\"--num-layers 32 --hidden-size 4096 ...\")")
