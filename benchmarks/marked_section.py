"""``--write`` of the fit scripts: a page's generated section replaced, or the one-line reason it cannot be."""

from __future__ import annotations

from hp_core.errors import ConfigError
from hp_core.io.files import replace_marked

__all__ = ["write_section"]


def write_section(page, start: str, end: str, text: str) -> None:
    """Replace *page*'s section between the *start* and *end* markers by *text* (which carries them), atomically
    (:func:`hp_core.io.files.replace_marked`); a missing marker or an unwritable page exits with its one line."""
    try:
        replace_marked(page, start, end, text)
    except ConfigError as exc:
        raise SystemExit(str(exc)) from None
