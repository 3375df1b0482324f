"""The plugin framework: a fresh manager per test, built-ins by dotted name, one-off
plugins passed in code, blocking, and the errors a misbehaving plugin causes.

Every test builds its own manager (``get_plugin_manager``) and registry
(``Registry.from_manager``); nothing is shared between tests.
"""

from __future__ import annotations

from importlib.metadata import entry_points as installed_entry_points

import attrs
import pytest

from hp_core.collectives import CollectiveModel
from hp_core.api import build_registry
from hp_core.errors import PluginError
from hp_core.hookspecs import HOOKS
from hp_core.manager import BLOCK_ENV, DEFAULT_PLUGINS, ENTRY_POINT_GROUP, get_plugin_manager
from hp_core.markers import hookimpl
from hp_core.precision_recipes import GemmOperand, PrecisionRecipe
from hp_core.registry import Registry
from hp_core.schedules import Schedule
from hp_core.importers import ImportedJob, Importer
from hp_core.errors import ConfigError
from hp_core.models import model_from_config
from hp_core.specs import HardwareSpec, LayerGroup, ModelSpec, PrecisionSpec
from hp_core.costs import LayerCost
from hp_core.types import (
    CaseFormat, CensusSource, Exporter, HardwarePreset, LayerAspect, LayerKind, ModelFormat, ModelPreset, Optimizer,
    Runtime,
)

IN_CODE = "(registered in code)"


@pytest.fixture(autouse=True)
def _no_block_env(monkeypatch: pytest.MonkeyPatch) -> None:
    """Tests state their own blocking; a developer's HP_BLOCK_PLUGINS must not leak in."""
    monkeypatch.delenv(BLOCK_ENV, raising=False)


# ----------------------------------------------------------------------------- records


@attrs.frozen
class ToyConfig:
    """A minimal layer config: layer kinds need an attrs config type."""

    width: int = 8


def _evaluate_toy(config: ToyConfig, context: object) -> LayerCost:
    return LayerCost(params=(), activations=(), input_bytes=0, working_bytes=0)


def _layer_kind(name: str) -> LayerKind:
    return LayerKind(name=name, config_type=ToyConfig, evaluate=_evaluate_toy, description="a toy kind for tests")


def _census_source(name: str) -> CensusSource:
    return CensusSource(name=name, provide=lambda request: {}, description="no records")


def _runtime(name: str) -> Runtime:
    return Runtime(name=name, precision=PrecisionSpec(grad_bytes=2), attention="eager", description="test runtime")


def _hardware(name: str) -> HardwarePreset:
    return HardwarePreset(name=name, spec=HardwareSpec(name="Toy accelerator", memory_bytes=16 * 2**30), provenance="made up")


def _model(name: str) -> ModelPreset:
    return ModelPreset(
        name=name,
        hf_config={
            "model_type": "llama",
            "hidden_size": 256,
            "intermediate_size": 512,
            "num_hidden_layers": 2,
            "num_attention_heads": 4,
            "num_key_value_heads": 2,
            "vocab_size": 1000,
        },
        provenance="made up for tests",
    )


def _exporter(name: str) -> Exporter:
    return Exporter(name=name, runtime="generic", export=lambda plan, model, parallel, *, registry: "--toy-flags",
                    description="writes a made-up flag")


def _toy_model(config, *, name, source, where):
    """A model format's builder: one embedding, ``depth`` toy layers (a made-up format for tests)."""
    return ModelSpec(name=name, layers=(LayerGroup("toy", ToyConfig(width=config["width"]), config["depth"]),), source=source)


def _model_format(name: str) -> ModelFormat:
    return ModelFormat(name=name, build=_toy_model, model_types=(f"{name}-type",), description="a made-up format")


def _case_format(name: str) -> CaseFormat:
    return CaseFormat(name=name, accepts=lambda document: False, read=lambda document, registry: [],
                      description="reads nothing")


def _optimizer(name: str) -> Optimizer:
    return Optimizer(name=name, state_bytes=lambda s, p: 3, step_bytes=lambda s, p: 10, description="three bytes a parameter")


def _layer_aspect(name: str) -> LayerAspect:
    """An aspect of a built-in kind that restates its own activations."""
    return LayerAspect(name=name, kind="dense", aspect="activations",
                       evaluate=lambda config, context, cost: cost.activations, description="the kind's own terms")


def _schedule(name: str) -> Schedule:
    """GPipe's figures for equal stages: every micro-batch kept, (m + p - 1) t."""
    return Schedule(name=name, in_flight=lambda layout, stage: (layout.micro_batches,),
                    pipeline_seconds=lambda layout, stages: (layout.micro_batches + layout.pp - 1) * stages[0].seconds,
                    default_micro_batches=lambda pp, vpp: pp, description="all forwards first")
def _collective_model(name: str) -> CollectiveModel:
    return CollectiveModel(name=name, seconds=lambda call: 1e-3, description="one millisecond a call")


# One factory per hook: a new hook in HOOKS without a factory fails
# test_every_hook_has_a_test below, so every hook stays exercised.
def _precision_recipe(name: str) -> PrecisionRecipe:
    fp8 = GemmOperand("e4m3", "tensor_current")
    return PrecisionRecipe(name=name, description="probe", source="test", weights=fp8, activations=fp8, gradients=fp8)


RECORD_FACTORIES = {
    "hp_layer_kinds": _layer_kind,
    "hp_census_sources": _census_source,
    "hp_runtimes": _runtime,
    "hp_hardware": _hardware,
    "hp_models": _model,
    "hp_exporters": _exporter,
    "hp_model_formats": _model_format,
    "hp_case_formats": _case_format,
    "hp_layer_aspects": _layer_aspect,
    "hp_optimizers": _optimizer,
    "hp_precision_recipes": _precision_recipe,
    "hp_schedules": _schedule,
    "hp_collective_models": _collective_model,
    "hp_importers": lambda name: Importer(name=name, read=lambda source, registry: ImportedJob({}),
                                          description="reads nothing"),
}

# How a registry looks a record up by name, per hook.
LOOKUPS = {
    "hp_layer_kinds": Registry.layer_kind,
    "hp_census_sources": Registry.census_source,
    "hp_runtimes": Registry.runtime,
    "hp_hardware": Registry.hardware_preset,
    "hp_models": Registry.model,
    "hp_exporters": Registry.exporter,
    "hp_model_formats": Registry.model_format,
    "hp_case_formats": Registry.case_format,
    "hp_layer_aspects": Registry.layer_aspect,
    "hp_schedules": Registry.schedule,
    "hp_optimizers": Registry.optimizer,
    "hp_precision_recipes": Registry.precision_recipe,
    "hp_collective_models": Registry.collective_model,
    "hp_importers": Registry.importer,
}


def _one_off_plugin(hook_name: str, records: list[object], class_name: str = "OneOff") -> object:
    """An instance of a new class implementing *hook_name*, yielding *records*."""

    def impl(self):
        yield from records

    impl.__name__ = hook_name
    return type(class_name, (), {hook_name: hookimpl(impl)})()


def _names(items) -> list[str]:
    return [item.name for item in items]


# ----------------------------------------------------------------------------- built-ins


def test_builtins_are_registered_by_dotted_name():
    manager = get_plugin_manager(use_env=False)
    registered = dict(manager.list_name_plugin())
    for dotted in DEFAULT_PLUGINS:
        assert registered.get(dotted) is not None, f"{dotted} is not registered"
    assert "hp_plugins.kinds.dense" in registered
    assert registered["hp_plugins.kinds.dense"].__name__ == "hp_plugins.kinds.dense"


def test_each_call_builds_a_fresh_manager():
    first = get_plugin_manager(use_env=False)
    second = get_plugin_manager(plugins=[_one_off_plugin("hp_layer_kinds", [_layer_kind("fresh-kind")])], use_env=False)
    assert first is not second
    assert "OneOff" in dict(second.list_name_plugin())
    assert "OneOff" not in dict(first.list_name_plugin())
    assert "fresh-kind" not in _names(Registry.from_manager(first).layer_kinds)


def test_builtin_records_and_providers():
    registry = Registry.from_manager(get_plugin_manager(use_env=False))
    assert {"dense", "embedding", "output"} <= set(_names(registry.layer_kinds))
    assert "generic" in _names(registry.runtimes)
    assert "formulas" in _names(registry.census_sources)
    assert "llama3-8b" in _names(registry.models)
    dense = registry.provider("hp_layer_kinds", "dense")
    assert dense.plugin == "hp_plugins.kinds.dense"
    assert dense.distribution == "hp-planner"
    assert [p.plugin for p in registry.plugins] == sorted(DEFAULT_PLUGINS)


def test_registry_is_sorted_by_name():
    # Registered in an order that is not alphabetical, by two plugins.
    late = _one_off_plugin("hp_layer_kinds", [_layer_kind("zzz-kind"), _layer_kind("aaa-kind")], "LateKinds")
    early = _one_off_plugin("hp_layer_kinds", [_layer_kind("mmm-kind")], "EarlyKinds")
    registry = Registry.from_manager(get_plugin_manager(plugins=[late, early], use_env=False))
    for hook_name in HOOKS:
        items = getattr(registry, hook_name.removeprefix("hp_"))
        assert _names(items) == sorted(_names(items)), hook_name
    names = _names(registry.layer_kinds)
    assert names[0] == "aaa-kind"
    assert names[-1] == "zzz-kind"
    assert {"dense", "mmm-kind"} <= set(names)
    assert [p.plugin for p in registry.plugins] == sorted(p.plugin for p in registry.plugins)


# ----------------------------------------------------------------------------- one-off plugins


def test_one_off_class_adds_a_layer_kind():
    class MyPlugin:
        @hookimpl
        def hp_layer_kinds(self):
            yield _layer_kind("my-kind")

    registry = Registry.from_manager(get_plugin_manager(plugins=[MyPlugin()], use_env=False))
    kind = registry.layer_kind("my-kind")
    assert kind.config_type is ToyConfig
    provider = registry.provider("hp_layer_kinds", "my-kind")
    assert provider.plugin == "MyPlugin"
    assert provider.distribution == IN_CODE
    assert "MyPlugin" in [p.plugin for p in registry.plugins]
    # The built-ins are still there.
    assert "dense" in _names(registry.layer_kinds)


def test_build_registry_accepts_a_one_off_plugin():
    registry = build_registry([_one_off_plugin("hp_runtimes", [_runtime("my-runtime")])], use_env=False)
    assert registry.runtime("my-runtime").precision.grad_bytes == 2
    assert registry.provider("hp_runtimes", "my-runtime").distribution == IN_CODE


def test_every_hook_has_a_test():
    assert set(RECORD_FACTORIES) == set(HOOKS)
    assert set(LOOKUPS) == set(HOOKS)
    for hook_name, record_type in HOOKS.items():
        assert isinstance(RECORD_FACTORIES[hook_name]("probe"), record_type)


@pytest.mark.parametrize("hook_name", sorted(HOOKS))
def test_every_hook_is_collected(hook_name: str):
    name = f"one-off-{hook_name.removeprefix('hp_').replace('_', '-')}"
    record = RECORD_FACTORIES[hook_name](name)
    plugin = _one_off_plugin(hook_name, [record])
    registry = Registry.from_manager(get_plugin_manager(plugins=[plugin], use_env=False))

    items = getattr(registry, hook_name.removeprefix("hp_"))
    assert record in items
    assert LOOKUPS[hook_name](registry, name) == record
    provider = registry.provider(hook_name, name)
    assert provider.plugin == "OneOff"
    assert provider.distribution == IN_CODE
    # Without the plugin the record is absent: the hook, not a built-in, supplied it.
    bare = Registry.from_manager(get_plugin_manager(use_env=False))
    assert record not in getattr(bare, hook_name.removeprefix("hp_"))


def test_a_hook_returning_none_yields_nothing():
    class Quiet:
        @hookimpl
        def hp_models(self):
            return None

    bare = Registry.from_manager(get_plugin_manager(use_env=False))
    registry = Registry.from_manager(get_plugin_manager(plugins=[Quiet()], use_env=False))
    assert registry.models == bare.models


# ----------------------------------------------------------------------------- misbehaving plugins


def test_duplicate_name_names_both_plugins():
    class DupDense:
        @hookimpl
        def hp_layer_kinds(self):
            yield _layer_kind("dense")

    manager = get_plugin_manager(plugins=[DupDense()], use_env=False)
    with pytest.raises(PluginError) as info:
        Registry.from_manager(manager)
    message = str(info.value)
    assert "hp_plugins.kinds.dense" in message
    assert "DupDense" in message
    assert "'dense'" in message
    assert "hp_plugins.kinds.dense" in info.value.plugin and "DupDense" in info.value.plugin
    assert "\n" not in message


def test_duplicate_between_two_one_off_plugins():
    first = _one_off_plugin("hp_hardware", [_hardware("twin")], "FirstHardware")
    second = _one_off_plugin("hp_hardware", [_hardware("twin")], "SecondHardware")
    with pytest.raises(PluginError) as info:
        Registry.from_manager(get_plugin_manager(plugins=[first, second], use_env=False))
    assert "FirstHardware" in str(info.value)
    assert "SecondHardware" in str(info.value)
    assert "'twin'" in str(info.value)


def test_hook_that_raises_names_the_plugin():
    class Exploding:
        @hookimpl
        def hp_runtimes(self):
            raise RuntimeError("boom")

    manager = get_plugin_manager(plugins=[Exploding()], use_env=False)
    with pytest.raises(PluginError) as info:
        Registry.from_manager(manager)
    assert info.value.plugin == "Exploding"
    assert "Exploding" in str(info.value)
    assert "hp_runtimes" in str(info.value)
    assert "boom" in str(info.value)


def test_hook_that_raises_while_yielding_names_the_plugin():
    class HalfWay:
        @hookimpl
        def hp_models(self):
            yield _model("half-way")
            raise ValueError("ran out")

    with pytest.raises(PluginError) as info:
        Registry.from_manager(get_plugin_manager(plugins=[HalfWay()], use_env=False))
    assert info.value.plugin == "HalfWay"
    assert "ran out" in str(info.value)


@pytest.mark.parametrize("wrong", [{"name": "dense"}, "my-kind", 42])
def test_wrong_record_type_names_the_plugin(wrong: object):
    class WrongType:
        @hookimpl
        def hp_layer_kinds(self):
            yield wrong

    with pytest.raises(PluginError) as info:
        Registry.from_manager(get_plugin_manager(plugins=[WrongType()], use_env=False))
    assert info.value.plugin == "WrongType"
    assert "LayerKind" in str(info.value)
    assert type(wrong).__name__ in str(info.value)


def test_record_of_another_hook_is_the_wrong_type():
    plugin = _one_off_plugin("hp_runtimes", [_hardware("not-a-runtime")], "Confused")
    with pytest.raises(PluginError) as info:
        Registry.from_manager(get_plugin_manager(plugins=[plugin], use_env=False))
    assert info.value.plugin == "Confused"
    assert "Runtime" in str(info.value)
    assert "HardwarePreset" in str(info.value)


def test_misspelled_hook_fails_check_pending():
    class Misspelt:
        @hookimpl
        def hp_layer_kind(self):  # the hook is hp_layer_kinds
            yield _layer_kind("never-seen")

    with pytest.raises(PluginError) as info:
        get_plugin_manager(plugins=[Misspelt()], use_env=False)
    assert info.value.plugin == "Misspelt"
    assert "hp_layer_kind" in str(info.value)


def test_unmarked_misspelling_is_ignored():
    # Without the hookimpl marker a method is not a hook implementation at all.
    class Unmarked:
        def hp_layer_kind(self):
            raise AssertionError("never called")

    manager = get_plugin_manager(plugins=[Unmarked()], use_env=False)
    assert "Unmarked" in dict(manager.list_name_plugin())
    Registry.from_manager(manager)


def test_same_plugin_name_twice_is_a_plugin_error():
    one = _one_off_plugin("hp_layer_kinds", [_layer_kind("kind-one")], "Twice")
    two = _one_off_plugin("hp_layer_kinds", [_layer_kind("kind-two")], "Twice")
    with pytest.raises(PluginError) as info:
        get_plugin_manager(plugins=[one, two], use_env=False)
    assert "Twice" in str(info.value)


# ----------------------------------------------------------------------------- blocking


def test_blocking_a_builtin_removes_its_records():
    registry = Registry.from_manager(get_plugin_manager(blocked=["hp_plugins.models.presets"], use_env=False))
    assert registry.models == ()
    # The other built-ins are untouched.
    assert "dense" in _names(registry.layer_kinds)
    assert "generic" in _names(registry.runtimes)


def test_blocking_the_dense_plugin_removes_the_dense_kind():
    manager = get_plugin_manager(blocked=["hp_plugins.kinds.dense"], use_env=False)
    assert manager.is_blocked("hp_plugins.kinds.dense")
    assert dict(manager.list_name_plugin()).get("hp_plugins.kinds.dense") is None
    registry = Registry.from_manager(manager)
    assert "dense" not in _names(registry.layer_kinds)
    assert {"embedding", "output"} <= set(_names(registry.layer_kinds))


def test_blocking_lets_a_replacement_take_the_name():
    class MyDense:
        @hookimpl
        def hp_layer_kinds(self):
            yield _layer_kind("dense")

    registry = build_registry([MyDense()], blocked=["hp_plugins.kinds.dense"], use_env=False)
    assert registry.layer_kind("dense").config_type is ToyConfig
    assert registry.provider("hp_layer_kinds", "dense").plugin == "MyDense"


def test_blocking_a_one_off_plugin_by_name():
    plugin = _one_off_plugin("hp_layer_kinds", [_layer_kind("blocked-kind")], "Unwanted")
    registry = build_registry([plugin], blocked=["Unwanted"], use_env=False)
    assert "blocked-kind" not in _names(registry.layer_kinds)


def test_blocked_plugin_is_not_listed_as_loaded():
    registry = Registry.from_manager(get_plugin_manager(blocked=["hp_plugins.models.presets"], use_env=False))
    assert "hp_plugins.models.presets" not in [p.plugin for p in registry.plugins]


def test_block_env_variable_blocks(monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setenv(BLOCK_ENV, " hp_plugins.models.presets , hp_plugins.hardware.presets ")
    manager = get_plugin_manager()
    assert manager.is_blocked("hp_plugins.models.presets")
    assert manager.is_blocked("hp_plugins.hardware.presets")
    registry = Registry.from_manager(manager)
    assert registry.models == ()
    assert registry.hardware == ()
    assert "dense" in _names(registry.layer_kinds)


def test_block_env_variable_is_ignored_without_use_env(monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setenv(BLOCK_ENV, "hp_plugins.models.presets")
    manager = get_plugin_manager(use_env=False)
    assert not manager.is_blocked("hp_plugins.models.presets")
    registry = Registry.from_manager(manager)
    assert "llama3-8b" in _names(registry.models)
    # build_registry follows the same switch.
    assert build_registry(use_env=True).models == ()
    assert "llama3-8b" in _names(build_registry(use_env=False).models)


def test_block_env_and_blocked_argument_combine(monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setenv(BLOCK_ENV, "hp_plugins.models.presets")
    registry = build_registry(blocked=["hp_plugins.hardware.presets"])
    assert registry.models == ()
    assert registry.hardware == ()


# ----------------------------------------------------------------------------- entry points


def test_entry_points_load_nothing_extra_here():
    declared = {ep.name for ep in installed_entry_points(group=ENTRY_POINT_GROUP)}
    without = {name for name, plugin in get_plugin_manager(use_env=False).list_name_plugin() if plugin is not None}
    manager = get_plugin_manager(entry_points=True, use_env=False)
    with_eps = {name for name, plugin in manager.list_name_plugin() if plugin is not None}
    assert with_eps - without == declared
    assert without <= with_eps
    registry = Registry.from_manager(manager)
    assert "dense" in _names(registry.layer_kinds)


# ----------------------------------------------------------------------------- model and case formats


def test_a_model_format_plugin_reads_its_model_type():
    registry = Registry.from_manager(get_plugin_manager(plugins=[_one_off_plugin("hp_model_formats", [_model_format("toy")])],
                                                        use_env=False))
    model = model_from_config({"model_type": "toy-type", "width": 16, "depth": 3}, registry, name="t", source="test")
    assert model.layers == (LayerGroup("toy", ToyConfig(width=16), 3),)
    # The built-in Hugging Face format still reads its own types.
    assert "llama" in registry.model_format("hf").model_types
    with pytest.raises(ConfigError, match=r"model_type 'mamba9' is not supported; .*toy-type.*hp_model_formats"):
        model_from_config({"model_type": "mamba9"}, registry, name="m", source="test")


def test_two_formats_may_not_claim_one_model_type():
    clash = ModelFormat(name="clash", build=_toy_model, model_types=("llama",))
    with pytest.raises(PluginError, match=r"model_type 'llama' is also read by model format"):
        Registry.from_manager(get_plugin_manager(plugins=[_one_off_plugin("hp_model_formats", [clash])], use_env=False))


def test_hp_validate_reads_a_case_format_plugin(tmp_path):
    from hp_core.io.validate import MeasuredCase, load_cases
    from hp_core.specs import ParallelSpec

    def read(document, registry):
        model = model_from_config(document["model"], registry, name="toy", source="test")
        return [MeasuredCase(name="toy-run", model=model, parallel=ParallelSpec(seq_len=8), runtime="generic",
                             stage_peak_bytes=(document["peak"],), source="made up")]

    fmt = CaseFormat(name="toy-runs", accepts=lambda document: "toy_runs" in document, read=read)
    registry = build_registry([_one_off_plugin("hp_case_formats", [fmt])], use_env=False)
    path = tmp_path / "runs.json"
    path.write_text('{"toy_runs": 1, "peak": 1024, "model": {"model_type": "llama", "hidden_size": 64, '
                    '"intermediate_size": 128, "num_hidden_layers": 2, "num_attention_heads": 4, "vocab_size": 100}}')
    (case,) = load_cases(path, registry)
    assert (case.name, case.stage_peak_bytes, len(case.model.layers)) == ("toy-run", (1024,), 3)


# ----------------------------------------------------------------------------- layer aspects


def test_an_aspect_refines_a_built_in_kind_everywhere():
    import attrs

    from hp_core.api import estimate, model_from_preset, step_time
    from hp_core.specs import ParallelSpec

    def no_norm_outputs(config, context, cost):
        return tuple(t for t in cost.activations if not t.op.endswith("norm_out"))

    aspect = LayerAspect(name="fused-norms", kind="dense", aspect="activations", evaluate=no_norm_outputs)
    plain = build_registry(use_env=False)
    refined = build_registry([_one_off_plugin("hp_layer_aspects", [aspect])], use_env=False)
    assert refined.layer_aspect("fused-norms") == aspect and refined.layer_kind("dense") != plain.layer_kind("dense")
    model = model_from_preset("llama3-8b", plain)
    layout = ParallelSpec(dp=1, tp=2, sp=True, seq_len=1024)
    base = estimate(model, layout, registry=plain).stages[0].activations_by_kind["dense"]
    less = estimate(model, layout, registry=refined).stages[0].activations_by_kind["dense"]
    # Two norm outputs per layer, 1,024 x 4,096 x 2 bytes split over 2 by SP: 4 MiB a layer, 32 layers.
    assert base - less == 32 * 2 * 1024 * 4096 * 2 // 2
    # The work is untouched, so the step time's communication is too.
    h100 = plain.hardware_preset("h100-sxm").spec
    assert (step_time(model, layout, registry=refined, hardware=h100).communication_seconds
            == step_time(model, layout, registry=plain, hardware=h100).communication_seconds)


def test_aspects_of_unknown_kinds_or_twice_one_field_are_refused():
    keep = lambda config, context, cost: cost.activations  # noqa: E731
    stray = LayerAspect(name="stray", kind="no-such-kind", aspect="activations", evaluate=keep)
    with pytest.raises(PluginError, match="states the activations of layer kind 'no-such-kind', which no plugin provides"):
        Registry.from_manager(get_plugin_manager([_one_off_plugin("hp_layer_aspects", [stray])], use_env=False))
    one = LayerAspect(name="one", kind="dense", aspect="work", evaluate=lambda c, x, cost: cost.work)
    two = LayerAspect(name="two", kind="dense", aspect="work", evaluate=lambda c, x, cost: cost.work)
    with pytest.raises(PluginError, match="states the work of layer kind 'dense', as aspect 'one' does"):
        Registry.from_manager(get_plugin_manager([_one_off_plugin("hp_layer_aspects", [one, two])], use_env=False))
    wrong = LayerAspect(name="wrong", kind="dense", aspect="work", evaluate=lambda c, x, cost: "not a work")
    registry = Registry.from_manager(get_plugin_manager([_one_off_plugin("hp_layer_aspects", [wrong])], use_env=False))
    from hp_core.api import estimate, model_from_preset
    from hp_core.specs import ParallelSpec

    with pytest.raises(PluginError, match="aspect work of kind dense is not a valid work"):
        estimate(model_from_preset("llama3-8b", registry), ParallelSpec(seq_len=1024), registry=registry)
