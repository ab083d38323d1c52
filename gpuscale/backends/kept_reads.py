"""The user's Parquet reads, built once per set of files while a session is open.

``dd.read_parquet`` lists the files, reads a footer and builds the frame's metadata each time it
is called. Inside a session a call with the arguments, Dask DataFrame config and files (names,
sizes, modification times) of an earlier one returns a copy of that collection
(``DataFrame.copy()``: the same expression, a new collection the user may assign to); rule
``reads.kept`` in docs/decisions.md. Reads of anything but local files, and calls whose arguments
cannot be tokenized, are Dask's each time. Installed by the session through
:func:`gpuscale._dask_compat.reads_through`.
"""

from __future__ import annotations

import glob
import os
import threading
from typing import Any, Callable

LIMIT = 256
"""Reads kept before the memo starts again (a session's queries name a few dozen tables)."""


class KeptReads:
    """``kept(args, kwargs, read)``: a copy of the collection an earlier call with the same key
    returned, else ``read(*args, **kwargs)``, kept."""

    def __init__(self, limit: int = LIMIT):
        self.limit = limit
        self._kept: dict[str, Any] = {}
        self._lock = threading.Lock()

    def __call__(self, args: tuple, kwargs: dict, read: Callable):
        key = read_key(args, kwargs)
        if key is None:
            return read(*args, **kwargs)
        with self._lock:
            kept = self._kept.get(key)
        if kept is None:
            kept = read(*args, **kwargs)
            with self._lock:
                if len(self._kept) >= self.limit:
                    self._kept.clear()
                self._kept[key] = kept
        return kept.copy()


def read_key(args: tuple, kwargs: dict) -> str | None:
    """A token of the call, the Dask DataFrame config and the files it reads; None where the
    path is not local files or an argument cannot be tokenized."""
    path = args[0] if args else kwargs.get("path")
    files = files_of(path)
    if files is None:
        return None
    import dask
    from dask.base import tokenize

    try:
        config = dask.config.get("dataframe", {})
        return tokenize(args[1:], sorted(kwargs.items()), config, files, ensure_deterministic=True)
    except Exception:  # noqa: BLE001 - an argument Dask cannot tokenize: not kept
        return None


def files_of(path) -> tuple | None:
    """(name, size, modification time) of every local file under ``path`` (a file, a folder, a
    glob, or a list of those); None for anything else (a URL, a file-like object)."""
    paths = [path] if isinstance(path, (str, os.PathLike)) else path
    if not isinstance(paths, (list, tuple)) or not paths:
        return None
    out: list[tuple] = []
    for p in paths:
        if not isinstance(p, (str, os.PathLike)):
            return None
        p = os.fspath(p)
        if "://" in p and not p.startswith("file://"):
            return None
        p = p.removeprefix("file://")
        names = sorted(glob.glob(p)) if glob.has_magic(p) else [p]
        for name in names:
            try:
                if os.path.isdir(name):
                    for root, dirs, found in os.walk(name):
                        dirs.sort()
                        out += [_stat(os.path.join(root, f)) for f in sorted(found)]
                else:
                    out.append(_stat(name))
            except OSError:
                return None  # Dask says what is missing
    return tuple(out)


def _stat(name: str) -> tuple:
    st = os.stat(name)
    return (name, st.st_size, st.st_mtime_ns)
