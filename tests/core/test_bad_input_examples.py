"""The bad inputs a fuzzing campaign found answered wrongly (issue "Every bad input answered in one line"),
one test per class: each must end with exit status 2, one line on standard error naming the field or
file, no traceback and no file left behind (or, for the API, an ``HPError`` with the field's path).

Classes (the issue's examples): numbers past float range; deep nesting and alias bombs; the
Megatron-measured reader's missing or mistyped fields; absurd sizes that hung; bad inputs accepted
silently; work that grew with the input (divisors, workers); errors naming the wrong thing; output
files (SIGTERM temporaries, non-regular targets, one file mode); plugin isolation; the API's errors
and JSON forms.
"""

from __future__ import annotations

import contextlib
import copy
import io
import json
import os
import signal
import stat
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

from hp_core.api import build_registry, estimate, plan_recompute, search
from hp_core.bounds import MAX_DEVICES, MAX_LAYERS, MAX_NODES, MAX_SEQ_LEN
from hp_core.cli import main
from hp_core.errors import ConfigError, HPError, PluginError, SpecError
from hp_core.io.files import atomic_write
from hp_core.jsonforms import from_json, to_json
from hp_core.specs import HardwareSpec, ModelSpec, ParallelSpec

DATA = Path(__file__).resolve().parents[1] / "plugins" / "data"
PEAK_OK = {"source": "x", "stage_peak_gib": [10.0, 12.5]}


def hp(*argv: object, env: dict | None = None) -> tuple[int, str, str]:
    """``main(argv)`` in-process: ``(status, stdout, stderr)``."""
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            status = main([str(a) for a in argv])
        except SystemExit as exc:
            status = exc.code
    return status, out.getvalue(), err.getvalue()


def refused(*argv: object, naming: str, folder: Path | None = None) -> str:
    """Run *argv*; assert the contract (exit 2, one line naming *naming*, no traceback, no stray file); the line."""
    before = sorted(os.listdir(folder)) if folder is not None else None
    status, out, err = hp(*argv)
    assert status == 2, (argv, status, err)
    assert err.count("\n") == 1 and err.endswith("\n"), (argv, err)
    assert "Traceback" not in err
    assert naming in err, (argv, naming, err)
    assert len(err) < 1000, err  # a value is never echoed whole
    if folder is not None:
        assert sorted(os.listdir(folder)) == before, "a file was left behind"
    return err


def _cases_file(tmp_path: Path, measured: dict, **case: object) -> Path:
    doc = {"format": "hp-cases/1", "cases": [{
        "name": "tiny", "config": {"model": "llama3-8b", "num_layers": 4, "runtime": "megatron",
                                   "parallel": {"dp": 2, "tp": 2, "pp": 2, "sp": True, "seq_len": 2048}},
        "measured": measured, **case}]}
    path = tmp_path / "cases.yaml"
    path.write_text(yaml.safe_dump(doc))
    return path


def _census_file(tmp_path: Path, saved: object) -> Path:
    path = tmp_path / "census.yaml"
    path.write_text(yaml.safe_dump({"kinds": {"dense": {"saved": saved, "saved_tp": 0.0, "working": 0.0, "working_tp": 0.0,
                                                        "provenance": {"source": "a test"}}}}))
    return path


def _config(tmp_path: Path, **parts: object) -> Path:
    doc = {"model": "llama3-8b", "parallel": {"seq_len": 1024}, **parts}
    path = tmp_path / "run.yaml"
    path.write_text(yaml.safe_dump(doc))
    return path


# ------------------------------------------------------------------------ numbers past float range


def test_numbers_past_float_range_are_refused_by_field(tmp_path):
    refused("estimate", "--memory", "9" * 400 + "GiB", naming="--memory")
    refused("estimate", "--seq-len", str(10**300), naming="--seq-len")
    refused("estimate", "--seq-len", str(2**40), naming="--seq-len")  # priced an MFU of 119% before
    refused("estimate", "--census", _census_file(tmp_path, 1e308), naming="$.kinds.dense.saved")
    for peak in (float("inf"), float("nan"), 0):
        refused("validate", _cases_file(tmp_path, {"source": "x", "stage_peak_gib": [peak, 12.5]}),
                naming="$.cases[0].measured.stage_peak_gib")
    hardware = {"name": "x", "memory_bytes": 80 * 2**30, "peak_flops": {"bf16": 0}}
    refused("estimate", _config(tmp_path, hardware=hardware), naming="$.hardware.peak_flops")
    refused("search", "--model", "llama3-8b", "--hardware", "h100-sxm", "--devices", "8", "--workers",
            "92233720368547758070", naming="--workers")


# ------------------------------------------------------------------------ deep nesting, alias bombs

BOMB = "a: &a [x, x, x, x, x, x, x, x, x]\n" + "".join(
    f"{chr(98 + i)}: &{chr(98 + i)} [*{chr(97 + i)}, *{chr(97 + i)}, *{chr(97 + i)}, *{chr(97 + i)}, *{chr(97 + i)}, "
    f"*{chr(97 + i)}, *{chr(97 + i)}, *{chr(97 + i)}, *{chr(97 + i)}]\n" for i in range(8))


@pytest.mark.parametrize("depth", [900, 5000])
def test_deep_documents_are_refused_naming_the_file(tmp_path, depth):
    deep_yaml = "model: " + "[" * depth + "]" * depth + "\n"
    deep_json = '{"model": ' + "[" * depth + "]" * depth + "}"
    (tmp_path / "run.yaml").write_text(deep_yaml)
    (tmp_path / "run.json").write_text(deep_json)
    (tmp_path / "census.yaml").write_text("kinds: " + "[" * depth + "]" * depth + "\n")
    (tmp_path / "cases.json").write_text('{"format": "hp-cases/1", "cases": ' + "[" * depth + "]" * depth + "}")
    refused("estimate", tmp_path / "run.yaml", naming="run.yaml")
    refused("estimate", tmp_path / "run.json", naming="run.json")
    refused("estimate", "--census", tmp_path / "census.yaml", naming="census.yaml")
    refused("validate", tmp_path / "cases.json", naming="cases.json")


def test_alias_bombs_are_refused_at_once(tmp_path):
    assert len(BOMB) < 600
    for name, argv in (("run.yaml", ["estimate"]), ("census.yaml", ["estimate", "--census"]), ("cases.yaml", ["validate"])):
        (tmp_path / name).write_text(BOMB)
        started = time.perf_counter()
        line = refused(*argv, tmp_path / name, naming=name)
        assert time.perf_counter() - started < 5
        assert f"{MAX_NODES:,}" in line


# ------------------------------------------------------------------------ the Megatron-measured reader


def _megatron(tmp_path: Path, change) -> Path:
    document = json.loads((DATA / "megatron_measured.json").read_text())
    case = copy.deepcopy(document["cases"][0])
    change(case)
    path = tmp_path / "megatron_measured.json"
    path.write_text(json.dumps({**document, "cases": [case]}))
    return path


@pytest.mark.parametrize("change, path", [
    (lambda c: c["training_config"]["batch"].pop("seq_length"), "$.cases[0].training_config.batch.seq_length"),
    (lambda c: c["training_config"]["parallelism"].update(tensor_model_parallel_size="1"),
     "$.cases[0].training_config.parallelism.tensor_model_parallel_size"),
    (lambda c: c["training_config"].update(batch=[1, 2]), "$.cases[0].training_config.batch"),
    (lambda c: c["measured"].update(per_stage_peak_derived=[]), "$.cases[0].measured.per_stage_peak_derived"),
    (lambda c: c["measured"]["per_stage_peak_derived"]["stage0_ranks_0-3"].pop("max_allocated_gib"),
     "$.cases[0].measured.per_stage_peak_derived"),
    (lambda c: c["measured"]["timing_by_mbc"][0].update(real_ms=None), "$.cases[0].measured.timing_by_mbc[0].real_ms"),
    (lambda c: c.pop("case_id"), "$.cases[0].case_id"),
    (lambda c: c["training_config"].update(optimizer="adam"), "$.cases[0].training_config.optimizer"),
    (lambda c: c["training_config"].update(optimizer={}), "$.cases[0].training_config.optimizer.distributed_optimizer"),
    (lambda c: c["training_config"]["model_hf"].update(vocab_size=0), "$.cases[0].training_config.model_hf.vocab_size"),
    (lambda c: c["measured"]["per_stage_peak_derived"]["stage0_ranks_0-3"].update(max_allocated_gib=-5.0),
     "$.cases[0].measured.per_stage_peak_derived"),
])
def test_megatron_measured_fields_are_checked_with_their_path(tmp_path, change, path):
    refused("validate", _megatron(tmp_path, change), naming=path)


# ------------------------------------------------------------------------ absurd sizes


def _hf(tmp_path: Path, preset: str, **fields: object) -> Path:
    from hp_plugins.models.presets import hp_models

    config = next(m.hf_config for m in hp_models() if m.name == preset)
    (tmp_path / "config.json").write_text(json.dumps({**config, **fields}))
    return tmp_path


def test_absurd_sizes_are_refused_before_work(tmp_path):
    started = time.perf_counter()
    refused("search", "--model", "llama3-8b", "--hardware", "h100-sxm", "--devices", str(2**40), naming="--devices")
    refused("search", "--model", "llama3-8b", "--hardware", "h100-sxm", "--devices", str(10**9), naming="--devices")
    refused("search", "--model", "llama3-8b", "--hardware", "h100-sxm", "--devices", "8", "--global-batch-size",
            str(2**31), naming="--global-batch-size")
    inline = {"name": "big", "layers": [{"kind": "dense", "count": 10**9, "config": {
        "hidden_size": 64, "num_attention_heads": 4, "num_key_value_heads": 4, "intermediate_size": 128}}]}
    refused("estimate", _config(tmp_path, model=inline), naming="$.model.layers[0].count")
    for layers in (10**8, 10**9, 2**63):
        refused("estimate", "--model", _hf(tmp_path, "llama3-8b", num_hidden_layers=layers), naming="$.num_hidden_layers")
    refused("estimate", "--model", _hf(tmp_path, "deepseek-v3", num_hidden_layers=0), naming="$.num_hidden_layers")
    assert time.perf_counter() - started < 30


def test_a_search_too_large_is_refused_with_its_size_and_the_limit():
    # DeepSeek-V3 on MAX_DEVICES devices: about 16.5 million candidates.
    line = refused("search", "--model", "deepseek-v3", "--hardware", "h100-sxm", "--devices", str(MAX_DEVICES),
                   naming="$.devices")
    assert "candidate layouts, more than 5,000,000 (MAX_SEARCH_LAYOUTS)" in line


# ------------------------------------------------------------------------ accepted silently before


def test_inputs_accepted_silently_before_are_refused(tmp_path):
    refused("estimate", _config(tmp_path, attention="2"), naming="$.attention")
    for rate in (-1.0, float("nan"), float("inf")):
        hardware = {"name": "x", "memory_bytes": 80 * 2**30, "peak_flops": {"bf16": rate}}
        refused("estimate", _config(tmp_path, hardware=hardware), naming="$.hardware.peak_flops")
    refused("validate", _cases_file(tmp_path, {"source": "x", "stage_peak_gib": [-5.0, 12.5]}),
            naming="$.cases[0].measured.stage_peak_gib")
    refused("validate", _cases_file(tmp_path, {**PEAK_OK, "steps": ""}), naming="$.cases[0].measured.steps")
    path = tmp_path / "empty.yaml"
    path.write_text(yaml.safe_dump({"format": "hp-cases/1", "cases": {}}))
    refused("validate", path, naming="$.cases")
    path.write_text(yaml.safe_dump({"format": "hp-cases/1", "cases": []}))
    refused("validate", path, naming="$.cases")
    refused("estimate", "--seq-len", str(MAX_SEQ_LEN + 1), naming="MAX_SEQ_LEN")
    # An explicit num_key_value_heads: 0 was read as absent (all heads); absent is not zero.
    refused("estimate", "--model", _hf(tmp_path, "llama3-8b", num_key_value_heads=0), naming="num_key_value_heads")


# ------------------------------------------------------------------------ work that grew with the input


def test_divisors_come_from_the_factorization():
    from hp_core.engine.search.first_phase import _divisors

    started = time.perf_counter()
    assert _divisors(999_999_937 * 2) == [1, 2, 999_999_937, 1_999_999_874]  # a prime near 1e9
    assert _divisors(2**31) == [2**k for k in range(32)]
    assert _divisors(720) == [d for d in range(1, 721) if 720 % d == 0]
    assert time.perf_counter() - started < 1


def test_search_starts_no_more_workers_than_cpus():
    from hp_core.cli.search import task_executor

    with task_executor("process", None, 200) as pool:
        expected = min(200, os.cpu_count() or 1)
        if expected == 1:
            assert pool is None
        else:
            assert pool._max_workers == expected


# ------------------------------------------------------------------------ errors naming the right thing


def test_errors_name_the_field_or_file(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    # "hp estimate --sp 2" read "2" as the config file and said "2: cannot be read".
    line = refused("estimate", "--sp", "2", naming="config: no such config file: '2'")
    assert "takes no value" in line

    def full_disk(temporary: str) -> None:
        raise OSError(28, "No space left on device")

    with pytest.raises(ConfigError, match=f"--csv: cannot write {tmp_path / 'out.csv'}: No space left on device"):
        atomic_write(tmp_path / "out.csv", full_disk, ".csv")
    assert os.listdir(tmp_path) == []


# ------------------------------------------------------------------------ output files


def test_sigterm_while_writing_leaves_no_temporary(tmp_path):
    script = (
        "import os, signal, sys\n"
        "from hp_core.io.files import atomic_write\n"
        "def write(temporary):\n"
        "    open(temporary, 'w').write('half')\n"
        "    os.kill(os.getpid(), signal.SIGTERM)\n"
        "    import time; time.sleep(5)\n"
        "atomic_write(sys.argv[1], write, '.png', flag='--plot')\n"
    )
    result = subprocess.run([sys.executable, "-c", script, str(tmp_path / "good.png")], capture_output=True, timeout=60)
    assert result.returncode == -signal.SIGTERM
    assert os.listdir(tmp_path) == []


def test_output_targets_that_are_not_files(tmp_path, capsys):
    def write(temporary: str) -> None:
        Path(temporary).write_text("a,b\n")

    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    with pytest.raises(ConfigError, match="not a regular file"):
        atomic_write(fifo, write, ".csv")
    assert stat.S_ISFIFO(os.stat(fifo).st_mode)
    with pytest.raises(ConfigError, match="not a regular file"):
        atomic_write("/dev/null", write, ".csv")
    assert stat.S_ISCHR(os.stat("/dev/null").st_mode)
    with pytest.raises(ConfigError, match="a folder"):
        atomic_write(tmp_path, write, ".csv")
    # A symbolic link: the file it points to is replaced, the link kept.
    (tmp_path / "real.csv").write_text("old")
    (tmp_path / "link.csv").symlink_to(tmp_path / "real.csv")
    atomic_write(tmp_path / "link.csv", write, ".csv")
    assert (tmp_path / "link.csv").is_symlink() and (tmp_path / "real.csv").read_text() == "a,b\n"
    # "-": standard output, as a stream.
    capsys.readouterr()
    atomic_write("-", write, ".csv")
    assert capsys.readouterr().out == "a,b\n"
    assert sorted(os.listdir(tmp_path)) == ["fifo", "link.csv", "real.csv"]


def test_every_output_gets_one_file_mode(tmp_path):
    from hp_core.types import CensusRecord
    from hp_plugins.census.file import write_census_file

    old = os.umask(0o022)
    try:
        atomic_write(tmp_path / "a.csv", lambda t: Path(t).write_text("x"), ".csv")
        write_census_file(tmp_path / "c.yaml", {"dense": CensusRecord(1.0, 0.0, 0.0, 0.0, {"source": "a test"})})
    finally:
        os.umask(old)
    assert stat.S_IMODE(os.stat(tmp_path / "a.csv").st_mode) == 0o644
    assert stat.S_IMODE(os.stat(tmp_path / "c.yaml").st_mode) == 0o644


# ------------------------------------------------------------------------ plugins


class _Dist:
    """A distribution as importlib.metadata lists it: a name and its entry points."""

    def __init__(self, name: str, entry_points: list) -> None:
        self.metadata = {"Name": name, "name": name}
        self.entry_points = entry_points
        self.version = "1.0"


def _with_entry_points(monkeypatch, tmp_path: Path, modules: dict[str, str], points: dict[str, str]) -> None:
    """Install modules (name -> source) on sys.path and entry points (name -> 'module') of group hp."""
    import importlib.metadata

    import hp_core.manager

    for name, source in modules.items():
        (tmp_path / f"{name}.py").write_text(source)
        monkeypatch.delitem(sys.modules, name, raising=False)
    monkeypatch.syspath_prepend(str(tmp_path))
    eps = [importlib.metadata.EntryPoint(name, value, "hp") for name, value in points.items()]
    monkeypatch.setattr(importlib.metadata, "distributions", lambda: [_Dist("fake-plugins", eps)])
    monkeypatch.setattr(hp_core.manager, "declares_entry_points", lambda group: True)


GOOD_KIND = """
from hp_core.markers import hookimpl
"""


@pytest.mark.parametrize("source, what", [
    ("raise ImportError('no module named torch_extras')", "ImportError: no module named torch_extras"),
    ("import sys\nsys.exit(3)", "called sys.exit(3)"),
])
def test_a_plugin_that_fails_to_import_is_named_and_can_be_blocked(monkeypatch, tmp_path, source, what):
    _with_entry_points(monkeypatch, tmp_path, {"hp_broken_plugin": source}, {"broken-one": "hp_broken_plugin"})
    status, out, err = hp("plugins", "--json")
    assert status == 0 and err == ""
    broken = json.loads(out)["broken"]
    assert [b["plugin"] for b in broken] == ["broken-one"] and what in broken[0]["error"]
    line = refused("estimate", naming="plugin broken-one")
    assert what in line and "HP_BLOCK_PLUGINS=broken-one" in line
    for name in ("broken-one", "hp_broken_plugin"):  # by entry-point name and by module name
        monkeypatch.setenv("HP_BLOCK_PLUGINS", name)
        status, out, err = hp("estimate", "--json")
        assert status == 0 and err == "", err
    monkeypatch.delenv("HP_BLOCK_PLUGINS")


def test_an_entry_point_named_like_a_builtin_is_reported(monkeypatch, tmp_path):
    _with_entry_points(monkeypatch, tmp_path, {"hp_shadow": GOOD_KIND}, {"hp_plugins.kinds.dense": "hp_shadow"})
    status, out, err = hp("plugins", "--json")
    (broken,) = json.loads(out)["broken"]
    assert broken["plugin"] == "hp_plugins.kinds.dense" and "named like a built-in plugin" in broken["error"]
    refused("estimate", naming="named like a built-in plugin")


EXITING_KIND = """
import attrs
from hp_core.markers import hookimpl
from hp_core.types import LayerKind
import hp_plugins.kinds.dense as dense_module

def evaluate(config, context):
    raise SystemExit(0)

@hookimpl
def hp_layer_kinds():
    (dense,) = list(dense_module.hp_layer_kinds())
    yield attrs.evolve(dense, name="exiting", evaluate=evaluate)
"""


def test_an_evaluator_calling_sys_exit_is_a_named_plugin_error(monkeypatch, tmp_path):
    _with_entry_points(monkeypatch, tmp_path, {"hp_exiting": EXITING_KIND}, {"exiting-kind": "hp_exiting"})
    inline = {"name": "x", "layers": [{"kind": "exiting", "config": {
        "hidden_size": 64, "num_attention_heads": 4, "num_key_value_heads": 4, "intermediate_size": 128}}]}
    line = refused("estimate", _config(tmp_path, model=inline), naming="plugin exiting")
    assert "SystemExit" in line and "HP_BLOCK_PLUGINS=exiting" in line
    # Blocking the kind name the error shows leaves the kind out.
    monkeypatch.setenv("HP_BLOCK_PLUGINS", "exiting")
    refused("estimate", _config(tmp_path, model=inline), naming="$.model.layers[0]")


def test_a_plugin_raising_in_a_registration_hook_is_listed_as_broken():
    class Raising:
        __name__ = "raising"

        from hp_core.markers import hookimpl

        @hookimpl
        def hp_runtimes(self):
            raise RuntimeError("boom")

    with pytest.raises(PluginError, match="plugin raising: hook hp_runtimes raised RuntimeError: boom; HP_BLOCK_PLUGINS=raising"):
        build_registry([Raising()])
    registry = build_registry([Raising()], broken_ok=True)
    assert [(b.plugin, b.error) for b in registry.broken] == [("raising", "hook hp_runtimes raised RuntimeError: boom")]
    assert registry.runtime("generic")  # the others still load


# ------------------------------------------------------------------------ the API


@pytest.fixture(scope="module")
def registry():
    return build_registry()


def test_invalid_specs_raise_hp_errors_with_the_field(registry):
    for build, field in ((lambda: ParallelSpec(tp=0, seq_len=8), "tp"), (lambda: ParallelSpec(seq_len=2**40), "seq_len"),
                         (lambda: ParallelSpec(sp="yes", seq_len=8), "sp"), (lambda: ParallelSpec(zero=7, seq_len=8), "zero"),
                         (lambda: HardwareSpec(name="x", memory_bytes=1, peak_flops={"bf16": float("nan")}), "peak_flops.bf16"),
                         (lambda: ParallelSpec(dp=2**20, tp=2, seq_len=8), "dp")):
        with pytest.raises(HPError) as error:
            build()
        assert isinstance(error.value, SpecError) and isinstance(error.value, ValueError)
        assert error.value.path == field
    with pytest.raises(ConfigError) as error:
        estimate("llama3-8b", {"tp": 3, "seq_len": 8}, registry=registry)
    assert error.value.path.startswith("$.parallel")
    with pytest.raises(ConfigError) as error:
        estimate("llama3-8b", {"tp": 0, "seq_len": 8}, registry=registry)
    assert error.value.path == "parallel.tp"


def test_names_are_taken_wherever_a_spec_is(registry):
    by_name = estimate("llama3-8b", {"dp": 4, "tp": 2, "sp": True, "seq_len": 8192}, registry=registry, hardware="h100-sxm")
    from hp_core.api import model_from_preset

    by_spec = estimate(model_from_preset("llama3-8b", registry), ParallelSpec(dp=4, tp=2, sp=True, seq_len=8192),
                       registry=registry, hardware=registry.hardware_preset("h100-sxm").spec)
    assert by_name == by_spec
    with pytest.raises(ConfigError, match="hardware: unknown hardware preset 'h100'"):
        estimate("llama3-8b", {"seq_len": 8}, registry=registry, hardware="h100")


def test_every_result_round_trips_through_its_json_form(registry):
    model = ModelSpec(name="tiny", layers=registry.models and __import__("hp_core.api", fromlist=["x"]).model_from_preset(
        "llama3-8b", registry).with_body_layers(4, registry.kinds_placed("body")).layers)
    parallel = ParallelSpec(dp=2, tp=2, pp=2, sp=True, seq_len=2048)
    results = [
        model, parallel, registry.hardware_preset("h100-sxm").spec,
        estimate(model, parallel, registry=registry, hardware="h100-sxm"),
        plan_recompute(model, parallel, registry=registry, hardware="h100-sxm"),
        search(model, registry=registry, devices=8, hardware="h100-sxm", global_batch_size=16, seq_len=2048, top=3),
    ]
    for result in results:
        text = json.dumps(to_json(result))
        assert from_json(json.loads(text), type(result), registry=registry) == result, type(result).__name__
    with pytest.raises(ConfigError, match="needs the registry"):
        from_json(to_json(model), ModelSpec)


@pytest.mark.parametrize("preset, devices, batch, fixed", [("llama3-8b", 16, 64, {}), ("mixtral-8x7b", 32, 128, {}),
                                                           ("llama3-8b", 64, 256, {"tp": 2})])
def test_the_search_size_counted_before_it_starts_is_what_it_enumerates(registry, preset, devices, batch, fixed):
    from hp_core.api import model_from_preset
    from hp_core.engine.search.first_phase import count_candidates
    from hp_core.engine.search.layouts import zero_levels

    model = model_from_preset(preset, registry)
    result = search(model, registry=registry, devices=devices, hardware="h100-sxm", global_batch_size=batch, seq_len=4096,
                    fixed=fixed, top=1)
    body = sum(group.count for group in model.layers if group.kind in registry.kinds_placed("body"))
    experts = any(group.kind == "moe" for group in model.layers)
    zeros = len(zero_levels(registry.runtime("generic")))
    assert count_candidates(devices, fixed, body, batch, experts, zeros) == result.considered


API_PROBES = {
    "census": lambda r, m, p: estimate(m, p, registry=r, census=3),
    "attention": lambda r, m, p: estimate(m, p, registry=r, attention="2"),
    "registry": lambda r, m, p: estimate(m, p, registry=None),
    "reserve_bytes": lambda r, m, p: plan_recompute(m, p, registry=r, hardware="h100-sxm", reserve_bytes="1"),
    "offload[0]": lambda r, m, p: plan_recompute(m, p, registry=r, hardware="h100-sxm", offload=[2.0]),
    "fixed.tp": lambda r, m, p: search(m, registry=r, devices=8, hardware="h100-sxm", global_batch_size=8, seq_len=1024,
                                       fixed={"tp": "2"}),
    "hardware": lambda r, m, p: estimate(m, p, registry=r, hardware=5),
    "model": lambda r, m, p: estimate({"name": "x"}, p, registry=r),
    "parallel": lambda r, m, p: estimate(m, None, registry=r),
    "config.json": lambda r, m, p: __import__("hp_core.api", fromlist=["x"]).model_from_config([], r, name="x", source="y"),
    "$.recompute": lambda r, m, p: estimate(m, p, registry=r, recompute=["nah"]),
}


@pytest.mark.parametrize("field", sorted(API_PROBES))
def test_api_misuse_is_an_hp_error_naming_the_argument(registry, field):
    from hp_core.api import model_from_preset

    model = model_from_preset("llama3-8b", registry)
    with pytest.raises(HPError) as error:
        API_PROBES[field](registry, model, ParallelSpec(seq_len=1024))
    assert str(error.value).startswith(field), str(error.value)
