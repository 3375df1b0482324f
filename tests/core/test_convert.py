"""Config files (YAML, JSON, TOML) through the one converter: equal values from every
format, unknown keys and loose types refused with the field's path, recompute plans
and inline models structured by layer kind."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from hp_core.api import build_registry, estimate
from hp_core.io.convert import ConfigFile, InlineModel, inline_model, load_config, read_document, structure
from hp_core.errors import ConfigError
from hp_core.registry import Registry
from hp_core.specs import HardwareSpec, LayerGroup, ParallelSpec, RecomputeSpec, Setting
from hp_plugins.kinds.dense import DenseConfig
from hp_plugins.kinds.embedding import EmbeddingConfig
from hp_plugins.kinds.output import OutputConfig


@pytest.fixture
def reg() -> Registry:
    """The built-in plugins, built anew for this test."""
    return build_registry(use_env=False)


# One document, written in each format below. TOML has no null, so every value is stated.
DOC = {
    "model": "llama3-8b",
    "num_layers": 8,
    "parallel": {
        "dp": 2,
        "tp": 2,
        "pp": 2,
        "sp": True,
        "seq_len": 4096,
        "micro_batch_size": 1,
        "global_batch_size": 32,
        "layers_per_stage": [3, 5],
    },
    "runtime": "generic",
    "census": "formulas",
    "attention": "eager",
    "precision": {"grad_bytes": 2},
    "hardware": "h100-sxm",
    "recompute": {"default": "selective", "layers": {"0-3": "full", "4": ["softmax", "attBMM"]}},
}

TOML_DOC = """\
model = "llama3-8b"
num_layers = 8
runtime = "generic"
census = "formulas"
attention = "eager"
hardware = "h100-sxm"

[parallel]
dp = 2
tp = 2
pp = 2
sp = true
seq_len = 4096
micro_batch_size = 1
global_batch_size = 32
layers_per_stage = [3, 5]

[precision]
grad_bytes = 2

[recompute]
default = "selective"

[recompute.layers]
"0-3" = "full"
"4" = ["softmax", "attBMM"]
"""

BASE = {"model": "llama3-8b", "parallel": {"seq_len": 2048}}


def _write(tmp_path: Path, name: str, text: str) -> Path:
    path = tmp_path / name
    path.write_text(text, encoding="utf-8")
    return path


def _refused(data: dict, reg: Registry) -> ConfigError:
    with pytest.raises(ConfigError) as info:
        structure(data, ConfigFile, reg)
    assert "\n" not in str(info.value)
    return info.value


def _with(section: str, **values) -> dict:
    doc = json.loads(json.dumps(BASE))
    doc.setdefault(section, {}).update(values)
    return doc


# ----------------------------------------------------------------------------- formats


def test_yaml_json_and_toml_load_equal(tmp_path: Path, reg: Registry):
    from_yaml = load_config(_write(tmp_path, "run.yaml", yaml.safe_dump(DOC)), reg)
    from_yml = load_config(_write(tmp_path, "run.yml", yaml.safe_dump(DOC, default_flow_style=True)), reg)
    from_json = load_config(_write(tmp_path, "run.json", json.dumps(DOC)), reg)
    from_toml = load_config(_write(tmp_path, "run.toml", TOML_DOC), reg)
    assert from_yaml == from_json == from_toml == from_yml


@pytest.mark.parametrize("stated", [True, False, None])
def test_reshard_after_forward_loads_as_stated_from_every_format(tmp_path: Path, reg: Registry, stated):
    """true and false load as stated from YAML, JSON and TOML; left out (or null) it is None, the runtime's default
    (resolved where the run is prepared: tests/plugins/test_reshard_default.py)."""
    parallel = {"seq_len": 2048, "pp": 2} | ({} if stated is None else {"reshard_after_forward": stated})
    toml = "model = \"llama3-8b\"\n[parallel]\nseq_len = 2048\npp = 2\n" + (
        "" if stated is None else f"reshard_after_forward = {str(stated).lower()}\n")
    found = {load_config(_write(tmp_path, "run.yaml", yaml.safe_dump({"model": "llama3-8b", "parallel": parallel})), reg),
             load_config(_write(tmp_path, "run.json", json.dumps({"model": "llama3-8b", "parallel": parallel})), reg),
             load_config(_write(tmp_path, "run.toml", toml), reg)}
    assert len(found) == 1 and found.pop().parallel.reshard_after_forward is stated
    if stated is None:
        assert structure(_with("parallel", reshard_after_forward=None), ConfigFile, reg).parallel.reshard_after_forward is None


def test_loaded_values(tmp_path: Path, reg: Registry):
    config = load_config(_write(tmp_path, "run.toml", TOML_DOC), reg)
    assert isinstance(config, ConfigFile)
    assert config.model == "llama3-8b"
    assert config.num_layers == 8
    assert config.parallel == ParallelSpec(
        dp=2, tp=2, pp=2, sp=True, seq_len=4096, micro_batch_size=1, global_batch_size=32, layers_per_stage=(3, 5)
    )
    assert config.attention == "eager"
    assert dict(config.precision) == {"grad_bytes": 2}
    assert config.hardware == "h100-sxm"
    assert config.recompute.default == Setting(mode="selective")


def test_defaults_of_absent_parts(reg: Registry):
    config = structure(BASE, ConfigFile, reg)
    assert config.runtime == "generic"
    assert config.census == "formulas"
    assert config.attention is None
    assert config.precision is None
    assert config.hardware is None
    assert config.recompute is None
    assert config.num_layers is None
    assert config.parallel == ParallelSpec(seq_len=2048)


def test_inline_hardware(reg: Registry):
    config = structure({**BASE, "hardware": {"name": "Toy", "memory_bytes": 2**34, "devices_per_node": 4}}, ConfigFile, reg)
    assert config.hardware == HardwareSpec(name="Toy", memory_bytes=2**34, devices_per_node=4)


@pytest.mark.parametrize(("peaks", "path", "message"), [
    # A misspelt precision name would leave the recipe's peak unstated and be refused far from the typo.
    ({"bf16": 9.894e14, "FP8": 1.9789e15}, "$.hardware.peak_flops.FP8", "must be a precision name hp reads"),
    # An FP8 peak below the bf16 one gives an MFU against it above 100%: a misread figure.
    ({"bf16": 9.894e14, "fp8": 1e14}, "$.hardware.peak_flops.fp8", "must be at least the 16-bit peak"),
    ({"bf16": 2.25e15, "fp8": 4.5e15, "fp4": 2.2e15}, "$.hardware.peak_flops.fp4", "must be at least the 16-bit peak"),
])
def test_inline_hardware_peaks_hp_cannot_read_are_refused(reg: Registry, peaks, path, message):
    error = _refused({**BASE, "hardware": {"name": "Toy", "memory_bytes": 2**34, "peak_flops": peaks}}, reg)
    assert error.path == path and message in error.message


def test_an_inline_architecture_no_preset_or_profile_names_is_refused(reg: Registry):
    from hp_core.io.job import resolve_job

    hardware = {"name": "Toy", "memory_bytes": 2**34, "peak_flops": {"bf16": 1e15}}
    job = resolve_job(structure({**BASE, "hardware": {**hardware, "architecture": "hopper"}}, ConfigFile, reg), reg)
    assert job.hardware.architecture == "hopper"
    with pytest.raises(ConfigError, match=r"\$\.hardware\.architecture: 'hoper' is no architecture a hardware preset "
                                          "or timing profile names; did you mean 'hopper'"):
        resolve_job(structure({**BASE, "hardware": {**hardware, "architecture": "hoper"}}, ConfigFile, reg), reg)
    # A family nothing names and nothing resembles is a device of its own (an L40S, a Gaudi 3), as is a peak of FP8
    # equal to bf16 (Gaudi 3's datasheet: 1,835 TFLOP/s both) or a datasheet's fp64.
    gaudi = {**hardware, "architecture": "gaudi3", "peak_flops": {"bf16": 1.835e15, "fp8": 1.835e15, "fp64": 2e13}}
    assert resolve_job(structure({**BASE, "hardware": gaudi}, ConfigFile, reg), reg).hardware.architecture == "gaudi3"


# ----------------------------------------------------------------------------- unknown keys


def test_unknown_parallel_key_names_its_path(reg: Registry):
    error = _refused(_with("parallel", tq=2), reg)
    assert error.path.startswith("$.parallel")
    assert "tq" in error.path or "tq" in error.message
    assert str(error).startswith("$.parallel")


def test_unknown_top_level_key(reg: Registry):
    error = _refused({**BASE, "paralel": {"tp": 2}}, reg)
    assert error.path.startswith("$")
    assert "paralel" in str(error)


def test_unknown_precision_key(reg: Registry):
    error = _refused({**BASE, "precision": {"grad_byte": 2}}, reg)
    assert error.path.startswith("$.precision")
    assert "grad_byte" in str(error)


def test_unknown_recompute_key(reg: Registry):
    error = _refused({**BASE, "recompute": {"default": "none", "layer": {"0": "full"}}}, reg)
    assert error.path.startswith("$.recompute")
    assert "layer" in str(error)


def test_unknown_layer_config_key(reg: Registry):
    model = {"name": "tiny", "layers": [{"kind": "dense", "config": {**TINY_DENSE, "hiden_size": 1}}]}
    error = _refused({**BASE, "model": model}, reg)
    assert error.path.startswith("$.model.layers[0].config")
    assert "hiden_size" in str(error)


def test_unknown_layer_group_key(reg: Registry):
    model = {"name": "tiny", "layers": [{"kind": "dense", "config": TINY_DENSE, "repeat": 2}]}
    error = _refused({**BASE, "model": model}, reg)
    assert error.path.startswith("$.model.layers[0]")
    assert "repeat" in str(error)


# ----------------------------------------------------------------------------- strict types


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("tp", "2"),
        ("tp", 2.0),
        ("tp", True),
        ("tp", None),
        ("seq_len", "4096"),
        ("dp", [2]),
        ("sp", "yes"),
        ("sp", 1),
        ("sp", "true"),
        ("global_batch_size", "64"),
        ("reshard_after_forward", "yes"),
        ("reshard_after_forward", 1),
        ("reshard_after_forward", "false"),
    ],
)
def test_loose_types_refused(reg: Registry, field: str, value: object):
    error = _refused(_with("parallel", **{field: value}), reg)
    assert error.path == f"$.parallel.{field}"
    assert repr(value) in error.message


@pytest.mark.parametrize(("field", "value"), [("tp", 0), ("dp", -1), ("seq_len", 0), ("vpp", -4)])
def test_non_positive_degrees_refused(reg: Registry, field: str, value: int):
    error = _refused(_with("parallel", **{field: value}), reg)
    assert error.path == f"$.parallel.{field}"
    assert str(value) in error.message


def test_strict_types_in_a_yaml_file(tmp_path: Path, reg: Registry):
    path = _write(tmp_path, "run.yaml", 'model: llama3-8b\nparallel: {tp: "2", seq_len: 8}\n')
    with pytest.raises(ConfigError) as info:
        load_config(path, reg)
    assert info.value.path == "$.parallel.tp"
    path = _write(tmp_path, "run2.yaml", "model: llama3-8b\nparallel: {sp: yes_please, seq_len: 8}\n")
    with pytest.raises(ConfigError) as info:
        load_config(path, reg)
    assert info.value.path == "$.parallel.sp"


def test_top_level_string_fields_are_strict(reg: Registry):
    error = _refused({**BASE, "runtime": 3}, reg)
    assert error.path == "$.runtime"
    error = _refused({**BASE, "num_layers": "8"}, reg)
    assert error.path == "$.num_layers"


def test_missing_required_parts(reg: Registry):
    assert _refused({"parallel": {"seq_len": 8}}, reg).path == "$.model"
    assert _refused({"model": "llama3-8b"}, reg).path == "$.parallel"
    assert _refused({"model": "llama3-8b", "parallel": {}}, reg).path == "$.parallel.seq_len"


# ----------------------------------------------------------------------------- recompute


def test_recompute_mapping_parsed(reg: Registry):
    config = structure({**BASE, "recompute": {"default": "none", "layers": {"0-3": "full", "4": ["softmax"]}}}, ConfigFile, reg)
    expected = RecomputeSpec(
        default=Setting(mode="none"),
        layers=((0, 3, Setting(mode="full")), (4, 4, Setting(mode="switches", switches=frozenset({"softmax"})))),
    )
    assert config.recompute == expected
    assert [config.recompute.setting_of(i).mode for i in range(6)] == ["full"] * 4 + ["switches", "none"]
    assert config.recompute.setting_of(4).switches == frozenset({"softmax"})


def test_recompute_shorthand(reg: Registry):
    assert structure({**BASE, "recompute": "full"}, ConfigFile, reg).recompute == RecomputeSpec(default=Setting(mode="full"))
    assert structure({**BASE, "recompute": ["ffAct", "normOp"]}, ConfigFile, reg).recompute == RecomputeSpec(
        default=Setting(mode="switches", switches=frozenset({"ffAct", "normOp"}))
    )


def test_recompute_in_a_yaml_file(tmp_path: Path, reg: Registry):
    text = 'model: llama3-8b\nparallel: {seq_len: 8}\nrecompute: {default: none, layers: {"0-3": full, "4": [softmax]}}\n'
    config = load_config(_write(tmp_path, "run.yaml", text), reg)
    assert config.recompute.layers == ((0, 3, Setting(mode="full")), (4, 4, Setting(mode="switches", switches={"softmax"})))


@pytest.mark.parametrize(
    "recompute",
    [
        {"layers": {"3-1": "full"}},
        {"layers": {"a-b": "full"}},
        {"layers": {"0": "sometimes"}},
        {"layers": ["0-3"]},
        {"default": 5},
        7,
    ],
)
def test_bad_recompute_refused(reg: Registry, recompute: object):
    error = _refused({**BASE, "recompute": recompute}, reg)
    assert error.path.startswith("$.recompute")


# ----------------------------------------------------------------------------- inline models

TINY_DENSE = {"hidden_size": 64, "num_attention_heads": 4, "num_key_value_heads": 2, "intermediate_size": 128}


def test_inline_model_with_dense_configs(reg: Registry):
    model = {
        "name": "tiny",
        "layers": [
            {"kind": "embedding", "config": {"vocab_size": 1000, "hidden_size": 64}},
            {"kind": "dense", "count": 3, "config": TINY_DENSE},
            {"kind": "dense", "config": {**TINY_DENSE, "intermediate_size": 256, "qk_norm": True}},
            {"kind": "output", "config": {"vocab_size": 1000, "hidden_size": 64}},
        ],
    }
    config = structure({**BASE, "model": model}, ConfigFile, reg)
    assert isinstance(config.model, InlineModel)
    assert config.model.name == "tiny"
    groups = config.model.layers
    assert [g.kind for g in groups] == ["embedding", "dense", "dense", "output"]
    assert [g.count for g in groups] == [1, 3, 1, 1]
    assert groups[0] == LayerGroup("embedding", EmbeddingConfig(vocab_size=1000, hidden_size=64), 1)
    assert groups[1].config == DenseConfig(**TINY_DENSE)
    assert groups[2].config == DenseConfig(**{**TINY_DENSE, "intermediate_size": 256, "qk_norm": True})
    assert groups[3].config == OutputConfig(vocab_size=1000, hidden_size=64)

    spec = inline_model(config.model, source="test")
    result = estimate(spec, config.parallel, registry=reg)
    assert result.parameters.by_kind["dense"] > 0
    assert result.parameters.by_kind["embedding"] == 1000 * 64


def test_inline_model_layer_config_is_validated(reg: Registry):
    model = {"name": "tiny", "layers": [{"kind": "dense", "config": {**TINY_DENSE, "num_key_value_heads": 3}}]}
    error = _refused({**BASE, "model": model}, reg)
    assert error.path.startswith("$.model.layers[0].config")
    assert "num_key_value_heads" in str(error)


def test_inline_model_layer_config_is_strict(reg: Registry):
    model = {"name": "tiny", "layers": [{"kind": "dense", "config": {**TINY_DENSE, "hidden_size": "64"}}]}
    error = _refused({**BASE, "model": model}, reg)
    assert error.path == "$.model.layers[0].config.hidden_size"


def test_unknown_kind_refused_with_its_path(reg: Registry):
    model = {"name": "tiny", "layers": [{"kind": "mamba", "config": {}}]}
    error = _refused({**BASE, "model": model}, reg)
    assert error.path == "$.model.layers[0].kind"
    assert "mamba" in error.message
    assert "dense" in error.message  # the known kinds are listed


def test_unknown_kind_in_a_later_group(reg: Registry):
    model = {"name": "tiny", "layers": [{"kind": "dense", "config": TINY_DENSE}, {"kind": "moee"}]}
    assert _refused({**BASE, "model": model}, reg).path == "$.model.layers[1].kind"


def test_blocked_kind_is_unknown():
    reg = build_registry(blocked=["hp_plugins.kinds.dense"], use_env=False)
    model = {"name": "tiny", "layers": [{"kind": "dense", "config": TINY_DENSE}]}
    assert _refused({**BASE, "model": model}, reg).path == "$.model.layers[0].kind"


# ----------------------------------------------------------------------------- malformed files


@pytest.mark.parametrize(
    "text",
    [
        "model: [llama3-8b\n",
        "parallel: {tp: 2\n",
        "a: b: c\n",
        "model: 'unterminated\n",
        "- a\nb: c\n",
        "!!python/object:os.system {}\n",
    ],
)
def test_malformed_yaml_is_a_config_error(tmp_path: Path, reg: Registry, text: str):
    path = _write(tmp_path, "bad.yaml", text)
    with pytest.raises(ConfigError) as info:
        load_config(path, reg)
    assert "bad.yaml" in str(info.value)
    assert "\n" not in str(info.value)


@pytest.mark.parametrize(("name", "text"), [("bad.json", '{"model": "llama3-8b",}'), ("bad.toml", "model = \n[parallel\n")])
def test_malformed_json_and_toml(tmp_path: Path, reg: Registry, name: str, text: str):
    with pytest.raises(ConfigError) as info:
        load_config(_write(tmp_path, name, text), reg)
    assert name in str(info.value)
    assert "\n" not in str(info.value)


@pytest.mark.parametrize("text", ["", "just a string\n", "- 1\n- 2\n", "42\n"])
def test_yaml_that_is_not_a_mapping(tmp_path: Path, reg: Registry, text: str):
    with pytest.raises(ConfigError) as info:
        load_config(_write(tmp_path, "list.yaml", text), reg)
    assert info.value.path == "$"


def test_missing_file(tmp_path: Path):
    with pytest.raises(ConfigError) as info:
        read_document(tmp_path / "absent.yaml")
    assert "absent.yaml" in str(info.value)


def test_read_document_by_suffix(tmp_path: Path):
    assert read_document(_write(tmp_path, "a.json", '{"x": [1, 2]}')) == {"x": [1, 2]}
    assert read_document(_write(tmp_path, "a.toml", "x = [1, 2]\n")) == {"x": [1, 2]}
    assert read_document(_write(tmp_path, "a.yaml", "x: [1, 2]\n")) == {"x": [1, 2]}
    assert read_document(_write(tmp_path, "a.conf", "x: [1, 2]\n")) == {"x": [1, 2]}


@pytest.mark.parametrize(
    ("doc", "path"),
    [
        ({"model": "llama3-8b", "parallel": 5}, "$.parallel"),
        ({"model": "llama3-8b", "parallel": [1]}, "$.parallel"),
        ({"model": 5, "parallel": {"seq_len": 8}}, "$.model"),
        ({"model": "llama3-8b", "parallel": {"seq_len": 8}, "hardware": 1.5}, "$.hardware"),
    ],
)
def test_wrong_shape_section_message_is_readable(reg: Registry, doc: dict, path: str):
    error = _refused(doc, reg)
    assert error.path == path
    for internal in ("not iterable", "AttributeError", "has no attribute"):
        assert internal not in error.message
