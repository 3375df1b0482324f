"""Realistic mistakes in a config file given to ``hp estimate``: each is one line on standard error naming
the field as the file reads it, exit status 2, nothing on standard output.

The job is Llama-3-70B (80 layers, 64 attention heads) on dp=2 tp=8 pp=4 (64 devices), as in
docs/quickstart.md; each case changes one thing in it.
"""

from __future__ import annotations

import pytest

from cli_run import run

JOB = "model: llama3-70b\nruntime: megatron\nhardware: h100-sxm\n"
LAYOUT = "dp: 2, tp: 8, sp: true, pp: 4, seq_len: 8192, global_batch_size: 64"


@pytest.mark.parametrize(
    ("text", "line"),
    [
        # A misspelt field is named, not only the required field it leaves missing.
        (JOB + "parallel: {dp: 2, tp: 8, pp: 4, seq_lenn: 8192}\n",
         "$.parallel: unknown keys ['seq_lenn']; remove them or check the spelling"),
        (JOB + "paralel: {" + LAYOUT + "}\n",
         "$: unknown keys ['paralel']; remove them or check the spelling"),
        ("modle: llama3-70b\nparallel: {" + LAYOUT + "}\n",
         "$: unknown keys ['modle']; remove them or check the spelling"),
        # A model the file names is the file's field, not the --model flag.
        ("model: llama3-7b\nparallel: {" + LAYOUT + "}\n",
         "$.model: no such preset or config file: llama3-7b; run 'hp models' for presets"),
        (JOB + "parallel: {dp: -2, tp: 8, pp: 4, seq_len: 8192}\n",
         "$.parallel.dp: dp must be a positive integer, got -2"),
        (JOB + "parallel: {dp: 2, tp: 8, pp: 4}\n",
         "$.parallel.seq_len: required field missing"),
        (JOB + "parallel: {dp: 2, tp: 8, pp: 4, seq_len: 8192, layers_per_stage: [20, 20, 20, 19]}\n",
         "$.parallel.layers_per_stage: counts add up to 79, the model has 80 layers"),
        (JOB + "parallel: {dp: 2, tp: 8, pp: 4, seq_len: 8192, micro_batch_size: 3, global_batch_size: 64}\n",
         "$.parallel.global_batch_size: global_batch_size=64 must be a multiple of micro_batch_size*dp=6"),
        ("model: llama3-70b\nhardware: h100\nparallel: {" + LAYOUT + "}\n",
         "$.hardware: unknown hardware preset 'h100'; known: a100-80gb, ascend-910b, b200, b200-simumax, b300, gb200, gb300, h100-sxm, h200, h800"),
    ],
)
def test_a_config_file_mistake_is_one_line_naming_the_field(capsys, tmp_path, text, line):
    job = tmp_path / "job.yaml"
    job.write_text(text, encoding="utf-8")
    status, out, err = run(capsys, "estimate", job)
    assert (status, out, err) == (2, "", f"hp estimate: error: {line}\n")


def test_a_model_flag_of_hp_search_is_named_as_the_flag(capsys):
    status, out, err = run(capsys, "search", "--model", "llama3-7b", "--devices", "8", "--hardware", "h100-sxm")
    assert (status, out) == (2, "")
    assert err == "hp search: error: --model: no such preset or config file: llama3-7b; run 'hp models' for presets\n"
