"""Files written whole or not at all: the one rule for ``--output``, run records and bench
ledgers.

:func:`written` yields an open temporary sibling of ``path`` (``.NAME.XXXX.gpuscale-tmp``)
and its name; when the block ends without an exception the file is flushed to disk and put
in place: linked (``os.link`` fails if the name exists, so nothing is ever overwritten) or,
with ``replace``, renamed over the old file. The temporary file is removed on every way out,
a Ctrl-C or SIGTERM included: its creation runs with interruptions deferred
(:func:`gpuscale.errors.signals_deferred`), so a signal cannot land between the file being
made and its name reaching the ``finally`` that removes it.

>>> import pathlib, tempfile
>>> d = pathlib.Path(tempfile.mkdtemp())
>>> with written(d / "a.txt", text=True) as (f, tmp):
...     _ = f.write("hello")
>>> (d / "a.txt").read_text(), sorted(p.name for p in d.iterdir())
('hello', ['a.txt'])
"""
from __future__ import annotations

import contextlib
import os
import pathlib
import tempfile
from typing import IO, Iterator

from ..errors import signals_deferred

TMP_SUFFIX = ".gpuscale-tmp"


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


@contextlib.contextmanager
def written(path: str | os.PathLike, *, replace: bool = False, text: bool = False,
            mode: int | None = None) -> Iterator[tuple[IO, str]]:
    """``(file, temp_path)`` to write ``path`` through; see the module. ``mode``: the file's
    permissions (default: what ``open`` would give, 0666 less the umask). Raises OSError
    (``FileExistsError`` when ``path`` exists and ``replace`` is false) for the caller to
    turn into its own one-line error."""
    path = pathlib.Path(path)
    tmp = None
    try:
        with signals_deferred():
            fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=TMP_SUFFIX)
        with os.fdopen(fd, "w" if text else "wb") as f:
            yield f, tmp
            f.flush()
            os.fsync(f.fileno())  # also what a writer wrote through ``temp_path`` itself
        os.chmod(tmp, 0o666 & ~_umask() if mode is None else mode)
        if replace:
            os.replace(tmp, path)
        else:
            os.link(tmp, path)
    finally:
        if tmp is not None:
            with contextlib.suppress(OSError):
                os.unlink(tmp)
