"""Property: every invalid layout or config file ends with exit status 2, exactly one
line on standard error, nothing on standard output and no traceback.

Inputs are drawn by hypothesis as command-line flags and as config files (YAML,
JSON, TOML) written to a temporary folder; ``main(argv)`` runs in-process.
The default model is Llama-3-8B: 32 layers, 32 attention heads, 8 KV heads.
"""

from __future__ import annotations

import contextlib
import io
import json
import string
import tempfile
from pathlib import Path
from typing import Any

import attrs
import pytest
import yaml
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from hp_core.api import build_registry
from hp_core.cli import main
from hp_core.io.convert import ConfigFile
from hp_core.specs import ParallelSpec, PrecisionSpec

HEADS = 32
LAYERS = 32
PRESETS = {"llama3-8b", "llama3-70b", "llama3-405b", "qwen2.5-7b", "qwen2.5-72b", "qwen3-32b"}
DEGREES = ("dp", "tp", "pp", "vpp", "cp", "ep", "etp")
POSITIVE_INTS = (*DEGREES, "micro_batch_size", "seq_len")
TOP_KEYS = {f.name for f in attrs.fields(ConfigFile)}
PARALLEL_KEYS = {f.name for f in attrs.fields(ParallelSpec)}
PRECISION_KEYS = {f.name for f in attrs.fields(PrecisionSpec)}

SETTINGS = settings(
    max_examples=60,
    deadline=None,
    database=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much],
)


# A case: argv, with "{dir}" standing for the temporary folder, and the files to write there.
Case = tuple[list[str], dict[str, str]]


def check(case: Case) -> None:
    argv, files = case
    with tempfile.TemporaryDirectory() as folder:
        for name, text in files.items():
            Path(folder, name).write_text(text, encoding="utf-8")
        args = [a.replace("{dir}", folder) for a in argv]
        out, err = io.StringIO(), io.StringIO()
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            try:
                status = main(args)
            except SystemExit as exc:
                status = exc.code
    stderr = err.getvalue()
    assert status == 2, (args, files, status, stderr)
    assert "Traceback" not in stderr, (args, files, stderr)
    assert stderr.endswith("\n") and stderr.count("\n") == 1, (args, files, stderr)
    assert out.getvalue() == "", (args, files, out.getvalue())


# ----------------------------------------------------------------------------- config files

BASE_PARALLEL = {"seq_len": 1024}


def _config(**parts: Any) -> dict:
    doc: dict[str, Any] = {"model": "llama3-8b", "parallel": dict(BASE_PARALLEL)}
    for key, value in parts.items():
        if key == "parallel":
            doc["parallel"].update(value)
        else:
            doc[key] = value
    return doc


def _toml_value(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float) and value != value:
        return "nan"
    if isinstance(value, float) and value in (float("inf"), float("-inf")):
        return "inf" if value > 0 else "-inf"
    if isinstance(value, (int, float, str)):
        return json.dumps(value, ensure_ascii=False)
    if isinstance(value, list):
        return "[" + ", ".join(_toml_value(v) for v in value) + "]"
    raise TypeError(value)


def _toml(doc: dict) -> str | None:
    """TOML of a two-level document of scalars and lists; None when TOML cannot hold it."""
    lines, tables = [], []
    try:
        for key, value in doc.items():
            if isinstance(value, dict):
                body = [f"{_toml_value(k)} = {_toml_value(v)}" for k, v in value.items()]
                tables.append(f"[{_toml_value(key)}]\n" + "\n".join(body))
            else:
                lines.append(f"{_toml_value(key)} = {_toml_value(value)}")
    except TypeError:
        return None
    return "\n".join(lines) + "\n\n" + "\n\n".join(tables) + "\n"


@st.composite
def as_file(draw: st.DrawFn, doc: dict, extra_argv: list[str] | None = None) -> Case:
    """*doc* written as YAML, JSON or TOML and passed as the config file."""
    formats = ["yaml", "json"]
    toml = _toml(doc)
    if toml is not None:
        formats.append("toml")
    fmt = draw(st.sampled_from(formats))
    text = {"yaml": lambda: yaml.safe_dump(doc), "json": lambda: json.dumps(doc), "toml": lambda: toml}[fmt]()
    name = f"run.{fmt}"
    return ["estimate", "{dir}/" + name, *(extra_argv or [])], {name: text}


def layout_case(flags: dict[str, int | str], *, extra_file: dict | None = None) -> st.SearchStrategy[Case]:
    """The same layout as command-line flags or as a config file."""
    argv = []
    for name, value in flags.items():
        argv.append(f"--{name.replace('_', '-')}={value}")
    in_file = {name: value for name, value in flags.items()}
    return st.one_of(
        st.just((["estimate", *argv], {})),
        as_file(_config(parallel=in_file, **(extra_file or {}))),
    )


# ----------------------------------------------------------------------------- invalid layouts

tp_not_dividing_heads = st.integers(1, 4 * HEADS).filter(lambda tp: HEADS % tp).flatmap(lambda tp: layout_case({"tp": tp}))

pp_beyond_layers = st.integers(LAYERS + 1, 4 * LAYERS).flatmap(lambda pp: layout_case({"pp": pp, "dp": 1, "tp": 1}))

pp_beyond_truncated_layers = st.integers(1, 16).flatmap(
    lambda n: st.integers(n + 1, 2 * n + 2).map(
        lambda pp: (["estimate", f"--num-layers={n}", f"--pp={pp}", "--dp=1", "--tp=1"], {})
    )
)

non_positive_value = st.tuples(st.sampled_from(POSITIVE_INTS + ("global_batch_size",)), st.integers(-10_000, 0)).flatmap(
    lambda nv: layout_case({nv[0]: nv[1]})
)

non_integer_value = st.tuples(
    st.sampled_from(POSITIVE_INTS),
    st.one_of(
        st.text(max_size=8),
        st.floats(),
        st.booleans(),
        st.none(),
        st.lists(st.integers(1, 8), max_size=2),
    ),
).flatmap(lambda nv: as_file(_config(parallel={nv[0]: nv[1]})))

non_integer_flag = st.tuples(
    st.sampled_from(POSITIVE_INTS + ("global_batch_size", "num_layers")),
    st.one_of(st.text(alphabet=string.ascii_letters + ".-_ ", min_size=1, max_size=8), st.floats().map(repr)).filter(
        lambda text: not text.strip().lstrip("+-").isdigit()
    ),
).map(lambda nv: (["estimate", f"--{nv[0].replace('_', '-')}={nv[1]}"], {}))

non_boolean_sp = st.one_of(st.integers(), st.text(max_size=6), st.floats(), st.lists(st.booleans(), max_size=2)).flatmap(
    lambda value: as_file(_config(parallel={"sp": value}))
)


@st.composite
def batch_not_divisible(draw: st.DrawFn) -> Case:
    mbs = draw(st.integers(1, 8))
    dp = draw(st.integers(1, 8))
    assume(mbs * dp > 1)
    gbs = draw(st.integers(1, 512).filter(lambda g: g % (mbs * dp)))
    return draw(layout_case({"micro_batch_size": mbs, "dp": dp, "global_batch_size": gbs, "tp": 1}))


vpp_without_pp = st.integers(2, 64).flatmap(lambda vpp: layout_case({"vpp": vpp, "pp": 1}))

cp_not_dividing_seq = st.tuples(st.integers(2, 16), st.integers(1, 4096)).filter(lambda cs: cs[1] % cs[0]).flatmap(
    lambda cs: layout_case({"cp": cs[0], "seq_len": cs[1], "tp": 1, "dp": 1})
)

uneven_split = st.integers(2, LAYERS).filter(lambda pp: LAYERS % pp).flatmap(lambda pp: layout_case({"pp": pp, "dp": 1, "tp": 1}))

bad_schedule = st.text(max_size=12).filter(lambda s: s not in ("1f1b", "interleaved_1f1b")).flatmap(
    lambda s: as_file(_config(parallel={"schedule": s}))
)

bad_layers_per_stage = st.lists(st.integers(0, 40), min_size=1, max_size=4).filter(
    lambda counts: not (len(counts) == 2 and sum(counts) == LAYERS)
).map(lambda counts: (["estimate", "--pp=2", "--dp=1", "--tp=1", "--layers-per-stage=" + ",".join(map(str, counts))], {}))


# ----------------------------------------------------------------------------- invalid names

_NAME = st.text(alphabet=string.ascii_lowercase + string.digits + "-._", min_size=1, max_size=12)

unknown_preset = _NAME.map(lambda n: f"no-such-model-{n}").flatmap(
    lambda name: st.one_of(st.just((["estimate", f"--model={name}"], {})), as_file(_config(model=name)))
)

unknown_registry_name = st.tuples(st.sampled_from(["hardware", "runtime", "census"]), _NAME.map(lambda n: f"zz-{n}")).flatmap(
    lambda fv: st.one_of(st.just((["estimate", f"--{fv[0]}={fv[1]}"], {})), as_file(_config(**{fv[0]: fv[1]})))
)

unknown_kind = _NAME.filter(lambda n: n not in ("dense", "embedding", "output")).flatmap(
    lambda kind: as_file(_config(model={"name": "tiny", "layers": [{"kind": kind, "config": {}}]}))
)

bad_recompute_flag = st.lists(
    st.text(alphabet=string.ascii_letters, min_size=1, max_size=8).filter(
        lambda s: s not in ("attBMM", "headCast", "dropout", "softmax", "normOp", "gather", "ffAct", "none", "full", "selective")
    ),
    min_size=1,
    max_size=3,
).map(lambda switches: (["estimate", "--recompute=" + "+".join(switches)], {}))


# ----------------------------------------------------------------------------- runtime options, schedules, recipes

_REGISTRY = build_registry(use_env=False)
SCHEDULES = {s.name for s in _REGISTRY.schedules}
RECIPES = {r.name for r in _REGISTRY.precision_recipes}
_MEGATRON_OPTIONS = {o.name: o for o in _REGISTRY.runtime("megatron").options}
_BOOLEANS = {"true", "yes", "on", "1", "false", "no", "off", "0"}
# Any text a flag's value may hold, line breaks and control characters included.
_TEXT = st.text(alphabet=string.printable + "\u00e9\u2028", max_size=12)
_SEARCH = ["search", "--model=llama3-8b", "--devices=8", "--hardware=h100-sxm"]


def _option_value(option) -> st.SearchStrategy[str]:
    """A value *option* refuses: not a boolean, not an integer at least its minimum, not one of its choices."""
    if option.type == "bool":
        return _TEXT.filter(lambda v: v.strip().lower() not in _BOOLEANS)
    if option.type == "int":
        return st.one_of(st.integers(-1000, int(option.minimum) - 1).map(str), _TEXT.filter(lambda v: not v.strip().isdigit()))
    return _TEXT.filter(lambda v: v.strip() not in option.choices)


_assignment = st.one_of(
    _TEXT.filter(lambda t: "=" not in t or not t.partition("=")[0].strip()),  # no NAME=VALUE
    st.tuples(st.from_regex(r"[a-z_][a-z0-9_]{0,14}", fullmatch=True).filter(lambda k: k not in _MEGATRON_OPTIONS), _TEXT).map(lambda kv: f"{kv[0]}={kv[1]}"),  # unknown name
    st.sampled_from(sorted(_MEGATRON_OPTIONS)).flatmap(
        lambda name: _option_value(_MEGATRON_OPTIONS[name]).map(lambda v: f"{name}={v}")),  # a value it refuses
)

bad_runtime_option = st.tuples(st.sampled_from([["estimate"], _SEARCH]), _assignment).map(
    lambda ca: ([*ca[0], "--runtime=megatron", f"--runtime-option={ca[1]}"], {})
)

_schedule_list = st.one_of(
    st.lists(st.sampled_from(sorted(SCHEDULES)), min_size=1, max_size=3).map(lambda ns: ns + ns[:1]),  # one twice
    st.lists(_TEXT.filter(lambda n: n.strip() not in SCHEDULES and "," not in n), min_size=1, max_size=2).map(
        lambda ns: ns + ["1f1b"]),  # an unknown one, or none at all
)

bad_schedule_flag = st.one_of(
    _TEXT.filter(lambda n: n.strip() not in SCHEDULES).map(lambda n: (["estimate", f"--schedule={n}"], {})),
    # A schedule with a chunk count it does not run: dualpipev 2 per stage, the rest (but interleaved) 1.
    st.sampled_from(sorted(SCHEDULES - {"interleaved_1f1b"})).map(
        lambda n: (["estimate", f"--schedule={n}", "--pp=2", "--dp=1", "--tp=1",
                    "--vpp=1" if n == "dualpipev" else "--vpp=4"], {})),
    _schedule_list.map(lambda ns: ([*_SEARCH, "--schedules=" + ",".join(ns)], {})),
)

_recipe_list = st.one_of(
    st.lists(st.sampled_from(sorted(RECIPES)), min_size=1, max_size=3).map(lambda ns: ns + ns[-1:]),  # one twice
    st.lists(_TEXT.filter(lambda n: n.strip() not in RECIPES and "," not in n), min_size=1, max_size=2).map(
        lambda ns: ["bf16"] + ns),  # an unknown one
)

bad_precision = st.one_of(
    _TEXT.filter(lambda n: n.strip() not in RECIPES).map(lambda n: (["estimate", f"--precision={n}"], {})),
    _recipe_list.map(lambda ns: ([*_SEARCH, "--precision=" + ",".join(ns)], {})),
    # A recipe or optimizer that is not a name (precision.recipe, precision.optimizer in a file).
    st.tuples(st.sampled_from(["recipe", "optimizer"]),
              st.one_of(st.integers(), st.booleans(), st.lists(st.integers(), max_size=2), st.just(""))).flatmap(
        lambda fv: as_file(_config(precision={fv[0]: fv[1]}))),
)


# ----------------------------------------------------------------------------- unknown keys

_KEY = st.from_regex(r"[a-z_][a-z0-9_]{0,14}", fullmatch=True)

unknown_top_key = _KEY.filter(lambda k: k not in TOP_KEYS).flatmap(lambda k: as_file({**_config(), k: 1}))

unknown_parallel_key = _KEY.filter(lambda k: k not in PARALLEL_KEYS).flatmap(lambda k: as_file(_config(parallel={k: 2})))

unknown_precision_key = _KEY.filter(lambda k: k not in PRECISION_KEYS).flatmap(lambda k: as_file(_config(precision={k: 2})))

unknown_recompute_key = _KEY.filter(lambda k: k not in ("default", "layers")).flatmap(
    lambda k: as_file(_config(recompute={"default": "none", k: "full"}))
)

TINY_DENSE = {"hidden_size": 64, "num_attention_heads": 4, "num_key_value_heads": 2, "intermediate_size": 128}
DENSE_KEYS = {
    "hidden_size", "num_attention_heads", "num_key_value_heads", "intermediate_size", "head_dim", "gated_mlp",
    "hidden_act", "attention_bias", "attention_out_bias", "mlp_bias", "qk_norm", "norm", "attention_dropout",
    "hidden_dropout",
}  # fmt: skip

unknown_layer_config_key = _KEY.filter(lambda k: k not in DENSE_KEYS).flatmap(
    lambda k: as_file(_config(model={"name": "tiny", "layers": [{"kind": "dense", "config": {**TINY_DENSE, k: 1}}]}))
)


# ----------------------------------------------------------------------------- malformed documents


def _yaml_refuses(text: str) -> bool:
    try:
        yaml.safe_load(text)
    except yaml.YAMLError:
        return True
    return False


# Texts YAML cannot parse: an unclosed flow collection or quote, a tab indent, a
# mapping value where none may be, an unknown tag; with random text around it.
_BROKEN = st.sampled_from(["[", "{", "key: [1, 2", "a: b: c", "'open", '"open', "- a\nb: c", "!!python/object:x {}", "\t-\tx"])

unparseable_yaml = st.tuples(_BROKEN, st.text(alphabet=string.printable, max_size=20)).map(
    lambda bt: bt[0] + bt[1]
).filter(_yaml_refuses).map(lambda text: (["estimate", "{dir}/run.yaml"], {"run.yaml": text}))

def _as_read(text: str) -> str:
    """The text as ``read_text`` returns it (universal newlines)."""
    return text.replace("\r\n", "\n").replace("\r", "\n")


random_yaml_text = st.text(max_size=40).filter(
    lambda t: _yaml_refuses(_as_read(t)) or not isinstance(yaml.safe_load(_as_read(t)), dict)
).map(
    lambda text: (["estimate", "{dir}/run.yaml"], {"run.yaml": text})
)

_SCALARS = st.one_of(st.none(), st.booleans(), st.integers(), st.floats(), st.text(max_size=10))
not_a_mapping = st.one_of(_SCALARS, st.lists(_SCALARS, max_size=4)).map(
    lambda value: (["estimate", "{dir}/run.yaml"], {"run.yaml": yaml.safe_dump(value)})
)

not_a_mapping_section = st.tuples(
    st.sampled_from(["parallel", "recompute", "precision", "hardware", "model"]),
    st.one_of(st.integers(), st.floats(), st.booleans(), st.lists(st.integers(), min_size=1, max_size=3)),
).flatmap(lambda sv: as_file({**_config(), sv[0]: sv[1]}))

unparseable_json = st.sampled_from(['{"model": "llama3-8b",}', "{", "[1, 2", '{"a" 1}', "nul"]).map(
    lambda text: (["estimate", "{dir}/run.json"], {"run.json": text})
)

unparseable_toml = st.sampled_from(["model = ", "[parallel", "a = [1, 2", "= 3", 'model = "x"\nmodel = "y"']).map(
    lambda text: (["estimate", "{dir}/run.toml"], {"run.toml": text})
)

bad_hf_config = st.sampled_from(["gpt9", "bert", "LLAMA", ""]).map(
    lambda model_type: (
        ["estimate", "--model={dir}"],
        {"config.json": json.dumps({"model_type": model_type, "hidden_size": 64, "num_attention_heads": 4})},
    )
)


# ----------------------------------------------------------------------------- the properties

LAYOUTS = {
    "tp_not_dividing_heads": tp_not_dividing_heads,
    "pp_beyond_layers": pp_beyond_layers,
    "pp_beyond_truncated_layers": pp_beyond_truncated_layers,
    "non_positive_value": non_positive_value,
    "batch_not_divisible": batch_not_divisible(),
    "vpp_without_pp": vpp_without_pp,
    "cp_not_dividing_seq": cp_not_dividing_seq,
    "uneven_split": uneven_split,
    "bad_layers_per_stage": bad_layers_per_stage,
}

FILES = {
    "non_integer_value": non_integer_value,
    "non_integer_flag": non_integer_flag,
    "non_boolean_sp": non_boolean_sp,
    "bad_schedule": bad_schedule,
    "unknown_preset": unknown_preset,
    "unknown_registry_name": unknown_registry_name,
    "unknown_kind": unknown_kind,
    "bad_recompute_flag": bad_recompute_flag,
    "unknown_top_key": unknown_top_key,
    "unknown_parallel_key": unknown_parallel_key,
    "unknown_precision_key": unknown_precision_key,
    "unknown_recompute_key": unknown_recompute_key,
    "unknown_layer_config_key": unknown_layer_config_key,
    "unparseable_yaml": unparseable_yaml,
    "random_yaml_text": random_yaml_text,
    "not_a_mapping": not_a_mapping,
    "not_a_mapping_section": not_a_mapping_section,
    "unparseable_json": unparseable_json,
    "unparseable_toml": unparseable_toml,
    "bad_hf_config": bad_hf_config,
    "bad_runtime_option": bad_runtime_option,
    "bad_schedule_flag": bad_schedule_flag,
    "bad_precision": bad_precision,
}


@SETTINGS
@given(case=st.one_of(*LAYOUTS.values()))
def test_invalid_layout_is_one_line_exit_2(case: Case):
    check(case)


@SETTINGS
@given(case=st.one_of(*FILES.values()))
def test_invalid_config_is_one_line_exit_2(case: Case):
    check(case)


@pytest.mark.parametrize("name", sorted({**LAYOUTS, **FILES}))
def test_each_generator_draws_invalid_input(name: str):
    """Each generator on its own, a few draws: a broken generator cannot hide behind the others."""
    strategy = {**LAYOUTS, **FILES}[name]

    @settings(max_examples=5, deadline=None, database=None, suppress_health_check=list(HealthCheck))
    @given(case=strategy)
    def inner(case: Case) -> None:
        check(case)

    inner()


def test_check_accepts_nothing_valid():
    """The property's checker fails on a valid run, so the properties above can fail."""
    with pytest.raises(AssertionError):
        check((["estimate", "--tp=2"], {}))
    with pytest.raises(AssertionError):
        check((["estimate", "{dir}/run.yaml"], {"run.yaml": yaml.safe_dump(_config(parallel={"tp": 4}))}))


# ----------------------------------------------------------------------------- single cases


def test_inline_model_without_layers():
    check((["estimate", "{dir}/run.yaml"], {"run.yaml": yaml.safe_dump(_config(model={"name": "tiny", "layers": []}))}))


def test_unhashable_model_type():
    check((["estimate", "--model={dir}"], {"config.json": json.dumps({"model_type": ["llama"]})}))


@pytest.mark.parametrize("argv, message", [
    (["search", "--model=llama3-8b", "--devices=8", "--hardware=h100-sxm", "--schedules=1f1b,zb_h1,1f1b"],
     "hp search: error: argument --schedules: '1f1b' is listed twice in '1f1b,zb_h1,1f1b'; list each once "
     "(see hp search --help)\n"),
    (["search", "--model=llama3-8b", "--devices=8", "--hardware=h100-sxm", "--schedules=1f1b,,zb_h1"],
     "hp search: error: argument --schedules: name each schedule between the commas, e.g. 1f1b,zb_h1; "
     "got '1f1b,,zb_h1' (see hp search --help)\n"),
    (["recompute", "--model=llama3-8b", "--hardware=h100-sxm", "--offload=0.5,0.50"],
     "hp recompute: error: argument --offload: 0.5 is listed twice in '0.5,0.50'; list each once "
     "(see hp recompute --help)\n"),
])
def test_a_comma_list_names_each_entry_once(argv, message, capsys):
    check((argv, {}))
    with pytest.raises(SystemExit):
        main(argv)
    assert capsys.readouterr().err == message


def test_a_precision_field_of_the_wrong_type_is_reported_at_its_own_path(tmp_path, capsys):
    path = tmp_path / "run.yaml"
    path.write_text(yaml.safe_dump(_config(precision={"recipe": 8})), encoding="utf-8")
    assert main(["estimate", str(path)]) == 2
    assert capsys.readouterr().err == ("hp estimate: error: $.precision.recipe: recipe must be a precision recipe's name "
                                       "(see 'hp plugins'), got 8\n")
