"""Step time at scale against the public measured runs of ``tests/plugins/data/scale_measured.json``.

Run: ``python benchmarks/scale_validation.py [--write]``.

Prices every row marked calibration or held-out (``split_rule`` in the data
file: the split was fixed before anything was fitted) with the runtime and the
trainer options it ran with, on the hardware it ran on, and prints per row the
measured and estimated step time, the error and the communication exposed and
hidden on stage 0, then per class (multi-node FSDP, multi-node Megatron-Core,
single-node FSDP, single-node MoE, multi-node MoE) the calibration and the held-out rows'
errors apart. Then the same for llm-foundry's MPT benchmark rows of
``tests/plugins/data/scale_measured_mpt.json`` (Composer FSDP on H100, A100 80GB
and A100 40GB; classes single- and multi-node FSDP per device), then Megatron-Bridge's bf16
Megatron-Core rows of ``tests/plugins/data/scale_measured_mbridge.json`` (GPT-OSS 120B on 64 H100 or
B200; NVIDIA's DGX Cloud NeMo recipes: Llama 3.1 8B on 8 to 128 H100s, Llama 3.1 70B and 405B and
GPT-3 175B on 32 to 2,304, Nemotron-4 15B and 340B on 16 to 2,048, and NeMo's Grok-1 314B on 8 to 2,048, an
MoE class with the GPT-OSS H100 rows, whose two collections are also reported apart), priced with the ``megatron``
runtime's defaults and as run. No figure is
fitted to these rows. Last, the rows stating torchtitan's logged memory (``measured.memory_gib``, its max reserved)
against hp's reserved bytes. ``--write`` replaces the text between the ``scale-validation``, the ``mpt-validation``,
the ``mbridge-validation`` and the ``scale-memory`` markers of docs/time.md (atomically).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests" / "plugins"))

from scale_cases import mbridge_report, memory_report, mpt_report, report  # noqa: E402

from hp_core.api import build_registry  # noqa: E402
from hp_core.io.files import atomic_write  # noqa: E402

PAGE = ROOT / "docs" / "time.md"
START, END = "<!-- scale-validation:start -->", "<!-- scale-validation:end -->"
MPT_START, MPT_END = "<!-- mpt-validation:start -->", "<!-- mpt-validation:end -->"
MBRIDGE_START, MBRIDGE_END = "<!-- mbridge-validation:start -->", "<!-- mbridge-validation:end -->"
MEMORY_START, MEMORY_END = "<!-- scale-memory:start -->", "<!-- scale-memory:end -->"


def _replace(page: str, start: str, end: str, text: str) -> str:
    if start not in page or end not in page:
        raise SystemExit(f"{PAGE}: the {start} / {end} markers are missing")
    return page[: page.index(start)] + f"{start}\n\n{text}\n{end}" + page[page.index(end) + len(end):]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--write", action="store_true", help="rewrite the table in docs/time.md")
    args = parser.parse_args()
    registry = build_registry(use_env=False)
    text, mpt, mbridge, memory = report(registry), mpt_report(registry), mbridge_report(registry), memory_report(registry)
    print(text, end="")
    print()
    print(mpt, end="")
    print()
    print(mbridge, end="")
    print()
    print(memory, end="")
    if args.write:
        page = _replace(PAGE.read_text(encoding="utf-8"), START, END, text)
        page = _replace(page, MPT_START, MPT_END, mpt)
        page = _replace(page, MBRIDGE_START, MBRIDGE_END, mbridge)
        page = _replace(page, MEMORY_START, MEMORY_END, memory)

        def write(temporary: str) -> None:
            Path(temporary).write_text(page, encoding="utf-8")

        atomic_write(PAGE, write, ".md", flag=str(PAGE))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
