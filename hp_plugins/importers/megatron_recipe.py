"""The megatron importer's precision recipe: ``--fp8-format``/``--fp8-recipe``/``--fp8-param-gather`` (with
``--reuse-grad-buf-for-mxfp8-param-ag`` under MXFP8) or ``--fp4-format``/``--fp4-recipe``, matched against the Megatron
flags every registered recipe states (``PrecisionRecipe.flags['megatron']``), so a plugin's recipe imports too
(:func:`precision_recipe`; the other argument groups are :mod:`hp_plugins.importers.megatron_options`')."""

from __future__ import annotations

from typing import Any

from hp_core.errors import ConfigError
from hp_plugins.importers.shell import parse_megatron_args

__all__ = ["precision_recipe"]


# The flags that choose a recipe; the others a recipe states (amax history, its reduction) are its settings.
_CHOOSING = ("fp8-format", "fp8-recipe", "fp8-param-gather", "reuse-grad-buf-for-mxfp8-param-ag", "fp4-format", "fp4-recipe",
             "fp4-param-gather")
# What the low-precision parameter gather is stated by: relaxed together where no recipe gathers so.
_PARAM_GATHER = ("fp8-param-gather", "fp4-param-gather", "reuse-grad-buf-for-mxfp8-param-ag")


# The precision flags that take a value (arguments.py, transformer_config.py at NVIDIA/Megatron-LM@d98e8a6).
_VALUED = ("fp8-format", "fp8-recipe", "fp8-amax-history-len", "fp8-amax-compute-algo", "fp4-format", "fp4-recipe")


def _flag_map(tokens: tuple[str, ...]) -> dict[str, Any]:
    """A recipe's Megatron flags as ``{flag: its value, or True for a bare flag}``."""
    return {name: values[0] if values else True for name, values in parse_megatron_args(list(tokens)).items()}


def precision_recipe(a: Any, registry: Any, unmapped: list[str]) -> str | None:
    """The registered recipe whose Megatron flags the arguments state (module docstring), or ``None``.

    Raises:
        ConfigError: both FP8 and FP4 are stated (arguments.py refuses it), or no registered recipe
            states the arguments' choice.
    """
    for flag in _VALUED:  # argparse refuses one of these with nothing after it ("expected one argument")
        if a.values(flag) == []:
            raise ConfigError(f"--{flag}", "takes a value and none follows it; state one")
    fp8, fp4 = a.value("fp8-format"), a.value("fp4-format")
    if fp8 is not None and fp8 not in ("e4m3", "hybrid"):  # arguments.py choices
        raise ConfigError("--fp8-format", f"expected e4m3 or hybrid, got {fp8!r}")
    if fp8 is not None and fp4 is not None:
        raise ConfigError("--fp4-format", "Megatron-LM takes --fp4-format or --fp8-format, not both; state one")
    history = a.value("fp8-amax-history-len", int)  # an int in arguments.py: a word there is refused
    # Without its format Megatron-LM reads none of a format's settings.
    for fmt, given, settings in (("fp8-format", fp8, {"fp8-recipe": a.value("fp8-recipe"), "fp8-amax-history-len": history,
                                                      "fp8-amax-compute-algo": a.value("fp8-amax-compute-algo")}),
                                 ("fp4-format", fp4, {"fp4-recipe": a.value("fp4-recipe")})):
        unmapped += [f"--{flag} {value} without --{fmt}: Megatron-LM quantizes nothing then; priced in bf16"
                     for flag, value in settings.items() if given is None and value is not None]
    # Parameters kept in the low-precision format: Megatron-Core refuses fp8_param without FP8 ("fp8_param must be
    # used together with fp8 mode", transformer_config.py) and arguments.py --fp4-param-gather without --fp4-format;
    # arguments.py asserts --fp8-param-gather (not the FP4 one) only with the distributed optimizer or FSDP
    # (NVIDIA/Megatron-LM@d98e8a6, validate_args).
    for gather, fmt, given in (("fp8-param-gather", "fp8-format", fp8), ("fp4-param-gather", "fp4-format", fp4)):
        if not a.flag(gather):
            continue
        if given is None:
            raise ConfigError(f"--{gather}", f"Megatron-LM refuses it without --{fmt}; state --{fmt} or drop it")
        if gather == "fp8-param-gather" and not any(
                a.flag(f) for f in ("use-distributed-optimizer", "use-megatron-fsdp", "use-torch-fsdp2")):
            raise ConfigError(f"--{gather}", "Megatron-LM asserts it only with the distributed optimizer or FSDP; add "
                                             "--use-distributed-optimizer or drop it")
    if fp8 is None and fp4 is None:
        return None
    # Megatron-Core's defaults (transformer_config.py at core_v0.18.0, arguments.py at core_v0.14.0).
    job: dict[str, Any] = {}
    if fp8 is not None:
        job.update({"fp8-format": fp8, "fp8-recipe": a.value("fp8-recipe", str, "delayed"),
                    "fp8-amax-history-len": str(history if history is not None else 1),
                    "fp8-amax-compute-algo": a.value("fp8-amax-compute-algo", str, "most_recent")})
        if a.flag("fp8-param-gather"):
            job["fp8-param-gather"] = True
        # Megatron-Core reads it with MXFP8 parameters alone (optimizer_config.py, param_and_grad_buffer.py at d98e8a6):
        # the parameter all-gather lands in the gradient buffer, no parameter buffer beside the MXFP8 weights.
        if a.flag("reuse-grad-buf-for-mxfp8-param-ag") and a.flag("use-megatron-fsdp"):
            # arguments.py sets reuse_grad_buf_for_mxfp8_param_ag false under Megatron-FSDP, whatever its strategy
            # (NVIDIA/Megatron-LM@d98e8a6; Megatron-Bridge deactivates it there too).
            unmapped.append("--reuse-grad-buf-for-mxfp8-param-ag: Megatron-LM turns it off under --use-megatron-fsdp; "
                            "priced without it")
        elif a.flag("reuse-grad-buf-for-mxfp8-param-ag"):
            if job["fp8-recipe"] == "mxfp8" and job.get("fp8-param-gather"):
                job["reuse-grad-buf-for-mxfp8-param-ag"] = True
            else:
                unmapped.append("--reuse-grad-buf-for-mxfp8-param-ag: changes nothing without --fp8-recipe mxfp8 and "
                                "--fp8-param-gather (Megatron-Core reads it with MXFP8 parameters alone)")
    else:
        job.update({"fp4-format": fp4, "fp4-recipe": a.value("fp4-recipe", str, "nvfp4")})
        if a.flag("fp4-param-gather"):
            job["fp4-param-gather"] = True
    recipes = [(r, _flag_map(r.flags["megatron"])) for r in registry.precision_recipes if "megatron" in r.flags]

    def matching(ignore: tuple[str, ...]) -> list:
        # With the parameter gather relaxed, only a recipe gathering in the compute dtype is the stated one's stand-in.
        relaxed = bool(set(ignore) & set(_PARAM_GATHER))
        return [(r, flags) for r, flags in recipes
                if all(flags.get(k) == job.get(k) for k in _CHOOSING if k not in ignore)
                and not (relaxed and set(flags) & set(_PARAM_GATHER))]

    stated = " ".join(f"--{k}" if v is True else f"--{k} {v}" for k, v in job.items() if k in _CHOOSING)
    # Relaxed in turn: the FP8 format (E4M3 gradients for E5M2 ones or the reverse: the same byte an element and
    # the same FP8 GEMM rate), then the low-precision parameter gather.
    attempts: list[tuple[str, ...]] = [()]
    if fp8 is not None:
        attempts.append(("fp8-format",))
    if job.get("fp8-param-gather") or job.get("fp4-param-gather"):
        attempts.append(attempts[-1] + _PARAM_GATHER)
    found, ignored = [], ()
    for ignored in attempts:
        found = matching(ignored)
        if found:
            break
    if not found:
        raise ConfigError("--fp8-recipe" if fp8 is not None else "--fp4-recipe",
                          f"no registered precision recipe states {stated} (docs/precision.md lists them; "
                          "hp plugins shows each recipe's flags); state a recipe a plugin registers")
    if len(found) > 1:
        raise ConfigError("--fp8-recipe" if fp8 is not None else "--fp4-recipe",
                          f"{stated} is stated by more than one registered recipe "
                          f"({', '.join(r.name for r, _ in found)}); a plugin's recipe must state flags of its own")
    recipe, flags = found[0]
    if "fp8-format" in ignored and flags.get("fp8-format") != fp8:
        unmapped.append(f"--fp8-format {fp8}: priced as {recipe.name} (--fp8-format {flags.get('fp8-format')}): "
                        "E4M3 and E5M2 take one byte an element and the same FP8 GEMM rate")
    if "fp8-param-gather" in ignored and job.get("fp8-recipe") == "mxfp8" and not job.get("reuse-grad-buf-for-mxfp8-param-ag"):
        unmapped.append("--fp8-param-gather under --fp8-recipe mxfp8 without --reuse-grad-buf-for-mxfp8-param-ag: "
                        "Megatron-Core then keeps a parameter buffer beside the MXFP8 weights (optimizer_config.py warns "
                        f"of the memory), which hp does not price; priced as {recipe.name}, with bf16 parameters and gathers")
    elif "fp8-param-gather" in ignored:
        unmapped.append(f"--{'fp8' if fp8 else 'fp4'}-param-gather: no registered recipe gathers {recipe.name}'s "
                        "parameters in their low-precision format; priced with bf16 parameters and gathers")
    for key, value in flags.items():
        # The amax reduction (most_recent or max) changes nothing hp prices; the history's length, the
        # delayed-scaling state's bytes (hp_core/engine/precision.py scaling_state_bytes).
        if key not in _CHOOSING and key != "fp8-amax-compute-algo" and job.get(key) != value:
            unmapped.append(f"--{key} {job.get(key)}: priced as {recipe.name}'s {value}")
    return recipe.name
