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

import contextlib
import os
import signal
import sys
import tempfile
import threading
from pathlib import Path
from typing import Any, Callable, Iterator

from hp_core.errors import ConfigError

__all__ = ["STDOUT_NAMES", "atomic_write", "check_png", "file_mode", "pyplot", "replace_marked"]


# Targets written as a stream, in place: standard output.
STDOUT_NAMES = ("-", "/dev/stdout", "/dev/fd/1", "/proc/self/fd/1")


def file_mode() -> int:
    """The mode of every file the planner writes: what a plain ``open()`` makes (0666 less the umask)."""
    mask = os.umask(0)
    os.umask(mask)
    return 0o666 & ~mask


@contextlib.contextmanager
def _removed_on_signal(temporary: str) -> Iterator[None]:
    """Remove *temporary* if SIGTERM or SIGHUP arrives meanwhile, then die of that signal as before.

    Outside the main thread (where Python cannot install handlers) the
    ``finally`` of :func:`atomic_write` is the only cleanup.
    """
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous: dict[int, Any] = {}

    def handler(signum: int, frame: Any) -> None:
        Path(temporary).unlink(missing_ok=True)
        for number, old in previous.items():
            signal.signal(number, old)
        old = previous.get(signum)
        if callable(old):
            old(signum, frame)
        else:
            os.kill(os.getpid(), signum)  # the default action, now that the handler is restored

    for number in (signal.SIGTERM, getattr(signal, "SIGHUP", None)):
        if number is not None:
            previous[number] = signal.signal(number, handler)
    try:
        yield
    finally:
        for number, old in previous.items():
            signal.signal(number, old)


def _write_stream(write: Callable[[str], None], suffix: str, flag: str) -> None:
    """Write through a temporary file, then copy it to standard output."""
    handle, temporary = tempfile.mkstemp(prefix=".hp-stdout.", suffix=suffix)
    os.close(handle)
    try:
        with _removed_on_signal(temporary):
            write(temporary)
            data = Path(temporary).read_bytes()
    except OSError as exc:
        raise ConfigError(flag, f"cannot write standard output: {exc.strerror or exc}") from None
    finally:
        Path(temporary).unlink(missing_ok=True)
    sys.stdout.flush()
    buffer = getattr(sys.stdout, "buffer", None)
    if buffer is not None:
        buffer.write(data)
        buffer.flush()
    else:  # a text stream (tests redirect standard output to one)
        sys.stdout.write(data.decode("utf-8", errors="replace"))


def atomic_write(path: str | os.PathLike, write: Callable[[str], None], suffix: str, flag: str = "--csv") -> None:
    """Write through *write(temporary path)* in the target's folder, then replace the target.

    The folder is created where missing; the temporary file is removed on
    every way out (an error, Ctrl-C, SIGTERM or SIGHUP). The file gets
    :func:`file_mode`. A symbolic link is followed (the file it points to is
    replaced, the link kept); ``-`` (or ``/dev/stdout``) writes to standard
    output; any other target that is not a regular file (a device, a FIFO, a
    folder) is refused.

    Raises:
        ConfigError: Named *flag*, naming the file: it is not a regular file,
            the folder cannot be created or the file cannot be written (a path
            through a file, no permission, a full disk).
    """
    if str(path) in STDOUT_NAMES:
        _write_stream(write, suffix, flag)
        return
    if "\0" in str(path):
        raise ConfigError(flag, f"cannot write {str(path)!r}: a file name holds no NUL character")
    target = Path(os.path.realpath(path))
    if target.exists() and not target.is_file():
        kind = "a folder" if target.is_dir() else "not a regular file (a device, FIFO or socket)"
        raise ConfigError(flag, f"cannot write {path}: it is {kind}; name a file, or - for standard output")
    try:
        target.parent.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise ConfigError(flag, f"cannot write {path}: cannot create its folder {target.parent}: {exc.strerror or exc}") from None
    try:
        handle, temporary = tempfile.mkstemp(prefix=f".{target.name}.", suffix=suffix, dir=target.parent)
    except OSError as exc:
        raise ConfigError(flag, f"cannot write {path}: {exc.strerror or exc}") from None
    try:
        with _removed_on_signal(temporary):
            os.close(handle)
            # mkstemp makes the file private (0600); every output gets one mode (file_mode).
            os.chmod(temporary, file_mode())
            write(temporary)
            os.replace(temporary, target)
    except BaseException as exc:
        Path(temporary).unlink(missing_ok=True)
        if isinstance(exc, OSError):
            raise ConfigError(flag, f"cannot write {path}: {exc.strerror or exc}") from None
        raise


def check_png(path: str | os.PathLike, flag: str = "--plot") -> None:
    """Refuse a plot path that does not end in ``.png``."""
    if str(path) not in STDOUT_NAMES and not str(path).lower().endswith(".png"):
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


def replace_marked(path: str | os.PathLike, start: str, end: str, block: str) -> None:
    """Replace the text of *path* from the *start* marker to the *end* marker, both included, by *block*
    (which carries the markers itself), atomically: how the benchmark scripts refresh a generated section of a page.

    Raises:
        ConfigError: Named ``--write``: a marker is missing from the page, or the page cannot be written.
    """
    try:
        page = Path(path).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError("--write", f"cannot read {path}: {getattr(exc, 'strerror', None) or exc}") from None
    first = page.find(start)
    last = page.find(end, first + len(start)) if first >= 0 else -1
    if last < 0:
        raise ConfigError("--write", f"{path}: the {start} / {end} markers are missing (or the end comes first)")
    page = page[:first] + block + page[last + len(end):]

    def write(temporary: str) -> None:
        Path(temporary).write_text(page, encoding="utf-8")

    atomic_write(path, write, Path(path).suffix, flag="--write")
