"""Files the CLI writes on request: atomic replacement and the optional plotting library.

:func:`atomic_write` writes through a temporary file in the target's folder and
moves it over the target (``os.replace``), so a reader never sees half a
file; a path that cannot be written is a :class:`~hp_core.errors.ConfigError`
(one line on the command line, exit status 2). :func:`pyplot` imports
matplotlib (the optional extra ``plots``) with its file-only backend, or says
in one line how to install it. ``hp potentials`` (:mod:`hp_core.io.potentials_output`)
and ``hp search`` (:mod:`hp_core.io.search_output`) write their CSV and PNG files
through both.
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path
from typing import Any, Callable

from hp_core.errors import ConfigError

__all__ = ["atomic_write", "check_png", "pyplot"]


def atomic_write(path: str | os.PathLike, write: Callable[[str], None], suffix: str, flag: str = "--csv") -> None:
    """Write through *write(temporary path)* in the target's folder, then replace the target.

    The folder is created where missing; the temporary file is removed when
    *write* fails.

    Raises:
        ConfigError: Named *flag*: the folder cannot be created or the file
            cannot be written (a path through a file, no permission, a full disk).
    """
    target = Path(path)
    try:
        target.parent.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise ConfigError(flag, f"cannot write {target}: cannot create its folder {target.parent}: {exc.strerror or exc}") from None
    try:
        handle, temporary = tempfile.mkstemp(prefix=f".{target.name}.", suffix=suffix, dir=target.parent)
    except OSError as exc:
        raise ConfigError(flag, f"cannot write {target}: {exc.strerror or exc}") from None
    os.close(handle)
    try:
        # mkstemp makes the file private (0600); give it what a plain open() would (0666 less the umask).
        mask = os.umask(0)
        os.umask(mask)
        os.chmod(temporary, 0o666 & ~mask)
        write(temporary)
        os.replace(temporary, target)
    except BaseException as exc:
        Path(temporary).unlink(missing_ok=True)
        if isinstance(exc, OSError):
            raise ConfigError(flag, f"cannot write {target}: {exc.strerror or exc}") from None
        raise


def check_png(path: str | os.PathLike, flag: str = "--plot") -> None:
    """Refuse a plot path that does not end in ``.png``."""
    if not str(path).lower().endswith(".png"):
        raise ConfigError(flag, f"the plot is a PNG file ending in .png, got {path}")


def pyplot(flag: str = "--plot") -> Any:
    """``matplotlib.pyplot`` on the ``Agg`` backend (files only, no display).

    Raises:
        ConfigError: matplotlib is not installed: ``pip install 'hp-planner[plots]'``.
    """
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        raise ConfigError(flag, "a plot needs matplotlib: pip install 'hp-planner[plots]'") from None
    return plt
