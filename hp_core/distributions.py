"""Installed distributions, read without :mod:`importlib.metadata` where that is safe.

Importing ``importlib.metadata`` alone costs a short ``hp`` command a sixth of
its run. :func:`distribution_version` and :func:`declares_entry_points` scan
the folders of :data:`sys.path` the way ``importlib.metadata``'s path finder
does, once per folder and modification time, and defer to
``importlib.metadata`` wherever it could see more (a zip on the path, another
distribution finder, metadata they cannot read plainly).
``tests/core/test_distributions.py`` checks both against ``importlib.metadata``
for every installed distribution.
"""

from __future__ import annotations

import functools
import os
import re
import stat
import sys

__all__ = ["declares_entry_points", "distribution_version", "planner_version"]

_DISTRIBUTION = "hp-planner"
_UNKNOWN = "0+unknown"  # running from a bare source tree
_INFO_SUFFIXES = (".dist-info", ".egg-info")
_HEADER = re.compile(r"([\041-\071\073-\176]*):")  # a header line's name, as email.feedparser's headerRE
_MISSING = (FileNotFoundError, IsADirectoryError, NotADirectoryError, PermissionError)  # importlib.metadata's read_text


def planner_version() -> str:
    """hp-planner's installed version (``0+unknown`` from a bare source tree), looked up once per process."""
    return distribution_version(_DISTRIBUTION) or _UNKNOWN


def _normalize(name: str) -> str:
    """PEP 503 normalization with underscores (``importlib.metadata.Prepared.normalize``)."""
    return re.sub(r"[-_.]+", "-", name).lower().replace("-", "_")


@functools.lru_cache(maxsize=None)
def _folder(root: str, folder: str, mtime_ns: int) -> tuple[tuple[tuple[str, str], ...], tuple[tuple[str, str], ...]]:
    """The metadata folders in the path entry *root*: ``(infos, eggs)``, each ``(name key, path)`` in listing order.

    ``infos`` are the ``*.dist-info`` / ``*.egg-info`` children keyed by the
    normalized name; ``eggs`` the ``EGG-INFO`` of a ``*.egg`` folder keyed by
    its legacy name, as ``importlib.metadata.Lookup`` files them. Cached by
    the absolute *folder* and its modification time, so an installation is seen.
    """
    try:
        children = os.listdir(root or ".")
    except OSError:
        return (), ()
    base = os.path.basename(root).lower()
    infos, eggs = [], []
    for child in children:
        low = child.lower()
        if low.endswith(_INFO_SUFFIXES):
            infos.append((_normalize(low.rpartition(".")[0].partition("-")[0]), os.path.join(root, child)))
        elif base.endswith(".egg") and low == "egg-info":
            eggs.append((base.rpartition(".")[0].partition("-")[0].replace("-", "_"), os.path.join(root, child)))
    return tuple(infos), tuple(eggs)


def _metadata_folders() -> list[tuple[tuple[tuple[str, str], ...], tuple[tuple[str, str], ...]]] | None:
    """:func:`_folder` of every :data:`sys.path` entry in order; None where ``importlib.metadata`` could see more."""
    from importlib.machinery import PathFinder

    for finder in sys.meta_path:
        if finder is not PathFinder and getattr(finder, "find_distributions", None) is not None:
            return None  # another distribution finder
    folders = []
    for root in sys.path:
        if not isinstance(root, str):
            return None
        try:
            mode = os.stat(root or ".")
        except OSError:
            continue  # not there: nothing to find
        if not stat.S_ISDIR(mode.st_mode):
            return None  # a zip file, which importlib.metadata also reads
        # A relative entry ('' is the working folder) is cached under the folder it names now.
        key = root if os.path.isabs(root) else os.path.abspath(root or ".")
        folders.append(_folder(root, key, mode.st_mtime_ns))
    return folders


def _read(path: str) -> str | None:
    """A metadata file's text; None where missing (as ``importlib.metadata`` reads it)."""
    try:
        with open(path, encoding="utf-8") as handle:
            return handle.read()
    except _MISSING:
        return None


def _version_header(text: str) -> str | None:
    """The ``Version`` header of a core metadata document, as the ``email`` parser reads it; None if unsure."""
    found = None
    for line in re.split(r"\r\n|\r|\n", text):
        if not line:
            break  # the end of the headers
        if line[0] in " \t":
            if found is not None:
                return None  # a folded Version header: leave it to the email parser
            continue
        header = _HEADER.match(line)
        if header is None:
            break  # not a header: the body begins
        if found is not None:
            return found
        if header.group(1).lower() == "version":
            found = line[header.end():].lstrip(" \t")
    return found


def _scan_version(name: str) -> str | None:
    """The version ``importlib.metadata.version(name)`` returns, read directly; None if not found or unsure."""
    folders = _metadata_folders()
    if folders is None:
        return None
    normalized, legacy = _normalize(name), name.lower().replace("-", "_")
    for infos, eggs in folders:
        for path in [p for key, p in infos if key == normalized] + [p for key, p in eggs if key == legacy]:
            try:
                text = _read(os.path.join(path, "METADATA")) or _read(os.path.join(path, "PKG-INFO")) or _read(path)
            except (OSError, ValueError):
                return None
            return _version_header(text) if text else None  # the first found is the one importlib.metadata reads
    return None


@functools.lru_cache(maxsize=None)
def distribution_version(name: str) -> str | None:
    """The installed version of the distribution *name*, or None when it is not installed.

    Looked up once per process; the same answer as
    ``importlib.metadata.version``, which is asked only where the direct
    reading is unsure.
    """
    found = _scan_version(name)
    if found is not None:
        return found
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version(name)
    except PackageNotFoundError:
        return None


def declares_entry_points(group: str) -> bool:
    """Whether an installed distribution may declare entry points of *group*.

    False only when every distribution ``importlib.metadata`` would list was
    read and none has a ``[group]`` section in its ``entry_points.txt``; then
    loading the group would load nothing and need not import
    ``importlib.metadata``.
    """
    folders = _metadata_folders()
    if folders is None:
        return True
    for infos, eggs in folders:
        for _, path in (*infos, *eggs):
            try:
                text = _read(os.path.join(path, "entry_points.txt"))
            except (OSError, ValueError):
                return True  # importlib.metadata would raise: let the loader say so
            if text is None:
                continue
            for line in text.splitlines():
                line = line.strip()
                # importlib.metadata.Sectioned: a section header is a stripped line in brackets.
                if line.startswith("[") and line.endswith("]") and line.strip("[]") == group:
                    return True
    return False
