"""Census sources without torch: choosing one, the file source's checks, a record applied to an estimate, hp census."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from hp_core.api import estimate
from hp_core.engine.census import apply_record, formulas_records, part_bytes, resolve_source
from hp_core.cli import main
from hp_core.errors import ConfigError
from hp_core.specs import ParallelSpec, PrecisionSpec, RecomputeSpec, Setting
from hp_core.types import CensusBytes, CensusRecord
from hp_plugins.census.file import load_census_file, write_census_file

PROVENANCE = {"source": "hand-written for a test", "seq_len": 1024}


def _record(**extra) -> dict:
    entry = {"saved": 1000, "saved_tp": 64000, "working": 500, "working_tp": 2000, "provenance": PROVENANCE}
    entry.update(extra)
    return entry


def _write(tmp_path: Path, kinds: dict, name: str = "census.yaml") -> Path:
    path = tmp_path / name
    path.write_text(yaml.safe_dump({"model": "llama3-8b", "kinds": kinds}), encoding="utf-8")
    return path


# ----------------------------------------------------------------------------- choosing a source


def test_sources_are_chosen_by_name_or_by_a_file_path(registry, tmp_path):
    assert resolve_source(registry, "formulas").name == "formulas"
    assert resolve_source(registry, "torch").name == "torch"
    path = _write(tmp_path, {"dense": _record()})
    source = resolve_source(registry, str(path))
    assert source.name == "file"
    assert str(path) in source.description
    with pytest.raises(ConfigError, match=r"\$\.census: unknown census source 'nope'; known: file, formulas, torch"):
        resolve_source(registry, "nope")
    with pytest.raises(ConfigError, match="does not exist"):
        resolve_source(registry, str(tmp_path / "missing.yaml"))


# ----------------------------------------------------------------------------- the file source's checks


@pytest.mark.parametrize(
    ("entry", "path", "message"),
    [
        (_record(colour="red"), "$.kinds.dense.colour", "unknown key"),
        (_record(saved=-1), "$.kinds.dense.saved", "must not be negative"),
        (_record(working="lots"), "$.kinds.dense.working", "must be a number"),
        ({k: v for k, v in _record().items() if k != "saved_tp"}, "$.kinds.dense.saved_tp", "saved is stated without saved_tp"),
        ({k: v for k, v in _record().items() if k != "working"}, "$.kinds.dense.working", "working_tp is stated without working"),
        ({k: v for k, v in _record().items() if k != "provenance"}, "$.kinds.dense.provenance", "missing"),
        (_record(provenance={"seq_len": 1024}), "$.kinds.dense.provenance.source", "missing"),
        (_record(per_op={"soft max": {"saved": 0, "saved_tp": 1}}), "$.kinds.dense.per_op.soft max", "is not a recompute switch name"),
        (_record(per_op={"softmax": {"saved_tp": 1}}), "$.kinds.dense.per_op.softmax.saved", "without saved"),
        (_record(per_op={"softmax": {"saved": 0, "saved_tp": 70000}}), "$.kinds.dense.per_op", "more than the record keeps"),
        (_record(provenance={"source": "x", "seq_len": 4096}), "$.kinds.dense.provenance.seq_len", "measured at seq_len=4096"),
    ],
)
def test_a_bad_census_file_is_refused_with_the_path(tmp_path, entry, path, message):
    file = _write(tmp_path, {"dense": entry})
    with pytest.raises(ConfigError) as caught:
        load_census_file(file, seq_len=1024)
    assert caught.value.path == f"{file} {path}"
    assert message in caught.value.message
    assert "\n" not in str(caught.value)


def test_a_census_file_that_is_not_a_mapping_or_lacks_kinds_is_refused(tmp_path):
    bad = tmp_path / "bad.json"
    bad.write_text("[1, 2]", encoding="utf-8")
    with pytest.raises(ConfigError, match=r"bad.json \$: must be a mapping"):
        load_census_file(bad)
    empty = tmp_path / "empty.yaml"
    empty.write_text("model: x\n", encoding="utf-8")
    with pytest.raises(ConfigError, match=r"empty.yaml \$\.kinds: missing"):
        load_census_file(empty)
    broken = tmp_path / "broken.json"
    broken.write_text("{", encoding="utf-8")
    with pytest.raises(ConfigError, match="is not valid JSON"):
        load_census_file(broken)


def test_census_records_refuse_malformed_switches_and_parts_larger_than_the_whole():
    with pytest.raises(ValueError, match=r"\['no pe'\] are not switch names"):
        CensusRecord(1, 1, 0, 0, per_op={"no pe": CensusBytes(0, 1)})
    with pytest.raises(ValueError, match="more than the record keeps"):
        CensusRecord(1, 1, 0, 0, per_op={"softmax": CensusBytes(2, 0)})
    with pytest.raises(ValueError, match="non-negative"):
        CensusBytes(-1, 0)


def test_a_census_file_round_trips_and_is_written_atomically(tmp_path):
    records = {
        "dense": CensusRecord(1000.0, 64000.0, 500.0, 2000.0, dict(PROVENANCE),
                              per_op={"softmax": CensusBytes(0.0, 40000.0)}, policies={"selective": CensusBytes(1000.0, 10000.0)})
    }
    for name in ("out.yaml", "out.json"):
        path = write_census_file(tmp_path / name, records, "llama3-8b")
        assert load_census_file(path, 1024) == records
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out.json", "out.yaml"]  # no temporary file left
    with pytest.raises(ConfigError, match="no folder"):
        write_census_file(tmp_path / "nowhere" / "x.yaml", records)


# ----------------------------------------------------------------------------- a record priced


def _dense_cost(registry, context):
    from hp_plugins.kinds.dense import DenseConfig

    config = DenseConfig(hidden_size=4096, num_attention_heads=32, num_key_value_heads=8, intermediate_size=14336)
    return registry.layer_kind("dense"), registry.layer_kind("dense").evaluate(config, context)


def test_a_record_becomes_per_op_terms_a_working_set_and_a_policy_measured_whole(registry, llama8b):
    from hp_core.api import layer_context

    context = layer_context(ParallelSpec(tp=2, sp=True, seq_len=1024), PrecisionSpec(), "flash")
    kind, cost = _dense_cost(registry, context)
    record = CensusRecord(1000.0, 64000.0, 500.0, 2000.0, dict(PROVENANCE),
                          per_op={"softmax": CensusBytes(0.0, 40000.0), "normOp": CensusBytes(400.0, 0.0)},
                          policies={"selective": CensusBytes(1000.0, 10000.0)})
    priced = apply_record(cost, record, kind, context)
    # 1024 tokens, sp = tp = 2: 1024 * (1000/2 + 64000/2) = 33,280,000 bytes.
    assert priced.kept_bytes == 33_280_000
    assert {t.op: (t.bytes, t.switch) for t in priced.activations} == {
        "census.saved": (33_280_000 - 20_480_000 - 204_800, None),
        "census.softmax": (20_480_000, "softmax"),  # 1024 * 40000 / 2
        "census.normOp": (204_800, "normOp"),  # 1024 * 400 / 2
    }
    assert priced.kept_under(frozenset({"softmax"})) == 12_800_000
    assert priced.kept_under(frozenset({"softmax", "normOp"})) == 12_595_200
    # The kind's selective set, measured whole: 1024 * (1000/2 + 10000/2).
    assert priced.kept_under(kind.selective) == 5_632_000
    assert priced.working_bytes == 1024 * (500 // 2 + 2000 // 2)
    assert priced.input_bytes == cost.input_bytes  # full recompute keeps the input, as the formulas say
    assert part_bytes(CensusBytes(3.0, 0.0), context) == 1536


def test_a_census_file_changes_the_estimate_exactly_as_its_numbers_say(registry, llama8b, tmp_path):
    parallel = ParallelSpec(dp=1, tp=2, sp=True, seq_len=1024)
    file = _write(tmp_path, {"dense": _record(per_op={"softmax": {"saved": 0, "saved_tp": 40000}},
                                              policies={"selective": {"saved": 1000, "saved_tp": 10000}})})
    plain = estimate(llama8b, parallel, registry=registry)
    measured = estimate(llama8b, parallel, registry=registry, census=str(file))
    stage, base = measured.stages[0], plain.stages[0]
    # 32 dense layers, one micro-batch in flight, 33,280,000 bytes each.
    assert stage.activations_by_kind["dense"] == 32 * 33_280_000
    assert stage.activations_by_kind["embedding"] == base.activations_by_kind["embedding"]
    assert stage.activations_by_kind["output"] == base.activations_by_kind["output"]
    assert measured.provenance["census"] == "file"
    assert measured.provenance["kinds"] == {"embedding": "formulas", "dense": "census:file", "output": "formulas"}
    softmax = estimate(llama8b, parallel, registry=registry, census=str(file), recompute=RecomputeSpec(default=Setting.parse(["softmax"])))
    assert softmax.stages[0].activations_by_kind["dense"] == 32 * 12_800_000
    selective = estimate(llama8b, parallel, registry=registry, census=str(file), recompute=RecomputeSpec(default=Setting.parse("selective")))
    assert selective.stages[0].activations_by_kind["dense"] == 32 * 5_632_000


def test_the_file_source_refuses_a_policy_naming_a_switch_the_kind_lacks(registry, llama8b, tmp_path):
    file = _write(tmp_path, {"dense": _record(policies={"softmax+attUp": {"saved": 1, "saved_tp": 1}})})
    with pytest.raises(ConfigError, match="policy 'softmax\\+attUp' must be 'selective' or switches"):
        estimate(llama8b, ParallelSpec(seq_len=1024), registry=registry, census=str(file))


# ----------------------------------------------------------------------------- the formulas as a census


def test_the_formulas_stated_as_a_census_split_by_tensor_parallelism(registry, llama8b):
    from hp_core.engine.census import formulas_precision

    records = formulas_records(llama8b, registry, 1024, "eager", formulas_precision("eager"), (1, 2))
    dense = records["dense"]
    # Not split by TP: both norms' input and output, 4 * 2h = 32,768 bytes per token.
    assert dense.saved == 32768
    # Split: q and k, v repeated to 32 heads (3 * 32 * 128 * 2), the output (8192), the fp32 softmax
    # (32 * 1024 * 4) and its bf16 cast (32 * 1024 * 2), the SwiGLU's four 14336-wide tensors.
    assert dense.saved_tp == 3 * 8192 + 8192 + 131072 + 65536 + 4 * 28672 == 344064
    assert dense.per_op["softmax"] == CensusBytes(0.0, 131072.0)
    assert dense.per_op["headCast"] == CensusBytes(0.0, 65536.0)
    assert dense.per_op["normOp"] == CensusBytes(16384.0, 0.0)
    assert records["embedding"].saved == 8
    assert records["output"].saved_tp == 128256 * 4


def test_the_estimate_never_imports_torch():
    code = (
        "import sys\n"
        "from hp_core.api import build_registry, estimate, model_from_preset\n"
        "from hp_core.specs import ParallelSpec\n"
        "r = build_registry(use_env=False)\n"
        "estimate(model_from_preset('llama3-8b', r), ParallelSpec(seq_len=1024), registry=r)\n"
        "assert 'torch' not in sys.modules and 'transformers' not in sys.modules\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True)


def test_the_torch_source_without_torch_says_how_to_install_it(monkeypatch, registry, llama8b):
    monkeypatch.setitem(sys.modules, "torch", None)
    with pytest.raises(ConfigError, match=r"\$\.census: the torch census needs torch and transformers .*pip install 'hp-planner\[census\]'"):
        estimate(llama8b, ParallelSpec(seq_len=1024), registry=registry, census="torch")


# ----------------------------------------------------------------------------- hp census


def test_hp_census_formulas_json_and_out_file_feed_hp_estimate(tmp_path, capsys):
    out = tmp_path / "llama.json"
    assert main(["census", "--model", "llama3-8b", "--source", "formulas", "--seq-len", "1024", "--json", "--out", str(out)]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["source"] == "formulas" and doc["tp_degrees"] == [1, 2]
    dense = doc["kinds"]["dense"]
    assert (dense["saved"], dense["saved_tp"]) == (32768, 344064)
    assert {"working", "working_tp", "provenance"} <= set(dense)
    assert dense["provenance"]["seq_len"] == 1024
    assert load_census_file(out)["dense"].saved_tp == 344064
    assert main(["estimate", "--census", str(out), "--seq-len", "1024", "--json"]) == 0
    estimated = json.loads(capsys.readouterr().out)
    assert estimated["provenance"]["kinds"]["dense"] == "census:file"


def test_hp_census_bad_input_is_one_line_and_exit_2(tmp_path, capsys):
    assert main(["census", "--model", "llama3-8b", "--source", "formulas", "--out", str(tmp_path / "x.txt")]) == 2
    err = capsys.readouterr().err
    assert err.startswith("hp census: error: --out: a census file ends in .yaml") and err.count("\n") == 1
    assert main(["census", "--model", "no-such-model", "--source", "formulas"]) == 2
    assert "no such preset or config file" in capsys.readouterr().err
    assert main(["census", "--model", "llama3-8b", "--source", "nope"]) == 2
    assert "--source: unknown census source 'nope'" in capsys.readouterr().err
    bad = tmp_path / "bad.yaml"
    bad.write_text("kinds: {dense: {saved: 1, provenance: {source: a GPU run}}}\n", encoding="utf-8")
    assert main(["estimate", "--census", str(bad)]) == 2
    err = capsys.readouterr().err
    assert err == f"hp estimate: error: {bad} $.kinds.dense.saved_tp: missing: saved is stated without saved_tp; state both (0 where nothing is split)\n"


def test_a_census_naming_a_switch_its_kind_lacks_is_refused_where_it_is_used(registry, llama8b, tmp_path):
    # A kind owns its switch names, so the file reads any name; the run refuses one the kind lacks.
    file = _write(tmp_path, {"dense": _record(per_op={"softmx": {"saved": 0, "saved_tp": 1}})})
    with pytest.raises(ConfigError) as caught:
        estimate(llama8b, ParallelSpec(seq_len=1024), registry=registry, census=str(file))
    assert caught.value.path == "census file: kinds.dense.per_op"
    assert "layer kind dense has no recompute switch ['softmx']" in caught.value.message


def test_hp_census_reads_a_config_file_like_every_other_command(tmp_path, capsys):
    job = tmp_path / "job.yaml"
    job.write_text("model: llama3-8b\nparallel: {dp: 4, tp: 2, sp: true, seq_len: 1024}\n", encoding="utf-8")
    assert main(["census", str(job), "--source", "formulas", "--json"]) == 0
    from_file = json.loads(capsys.readouterr().out)
    assert main(["census", "--model", "llama3-8b", "--source", "formulas", "--seq-len", "1024", "--json"]) == 0
    from_flags = json.loads(capsys.readouterr().out)
    from_file.pop("seconds"), from_flags.pop("seconds")
    assert from_file == from_flags and from_file["seq_len"] == 1024
    # An inline stack too: the formulas need no Hugging Face config.
    inline = tmp_path / "inline.yaml"
    inline.write_text(
        "model:\n  name: tiny\n  layers:\n"
        "    - {kind: embedding, config: {vocab_size: 1000, hidden_size: 256}}\n"
        "    - {kind: dense, count: 2, config: {hidden_size: 256, num_attention_heads: 4, num_key_value_heads: 2,"
        " intermediate_size: 512}}\n"
        "    - {kind: output, config: {vocab_size: 1000, hidden_size: 256}}\n"
        "parallel: {seq_len: 512}\n", encoding="utf-8")
    assert main(["census", str(inline), "--source", "formulas", "--json"]) == 0
    tiny = json.loads(capsys.readouterr().out)
    assert tiny["model"] == "tiny" and tiny["seq_len"] == 512 and set(tiny["kinds"]) == {"embedding", "dense", "output"}
    assert main(["census", "--source", "formulas"]) == 2
    assert capsys.readouterr().err.startswith("hp census: error: --model: name the model")
