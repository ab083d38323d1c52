"""Files written whole or not at all, never through a link: every file gpuscale creates beside a
path you chose.

:func:`written` yields an open temporary sibling of ``path`` (made by ``mkstemp``); when the
block ends without an exception the file is flushed to disk and linked into place (never over
an existing name) or, with ``replace``, renamed over the old file. The temporary file is
removed on every way out, an interruption included.
"""

from __future__ import annotations

import contextlib
import errno
import os
import pathlib
import stat
import tempfile
from typing import IO, Iterator

from .errors import UserError
from .interrupts import signals_deferred

TMP_SUFFIX = ".gpuscale-tmp"
REFUSED_FIX = (
    "gpuscale never writes through a link or over another user's file: remove it, or choose a "
    "path in a folder only you can write"
)


def umask() -> int:
    """This process's umask (read without changing it for good)."""
    mask = os.umask(0)
    os.umask(mask)
    return mask


def _refusal(path, what: str, st: os.stat_result, folder: bool = False) -> UserError | None:
    if stat.S_ISLNK(st.st_mode):
        try:
            target = os.readlink(path)
        except OSError:
            target = "?"
        return UserError(
            f"{what} {path} is a symbolic link (to {target}, made by uid {st.st_uid})", REFUSED_FIX
        )
    if st.st_uid != os.geteuid():
        return UserError(
            f"{what} {path} belongs to uid {st.st_uid}, not to you (uid {os.geteuid()})", REFUSED_FIX
        )
    if folder and stat.S_ISDIR(st.st_mode):
        return None
    if not stat.S_ISREG(st.st_mode) or st.st_nlink != 1:
        return UserError(
            f"{what} {path} is not a plain file of its own (a hard link or a special file)", REFUSED_FIX
        )
    return None


def check_target(path: str | os.PathLike, what: str = "file", folder: bool = False) -> None:
    """Refuse (UserError, one line naming ``what``) a link, another user's file, a hard link
    or a special file at ``path``; nothing there, or a plain file (``folder``: a folder) of
    this user's, passes."""
    try:
        st = os.lstat(path)
    except (FileNotFoundError, NotADirectoryError):
        return
    refused = _refusal(path, what, st, folder)
    if refused is not None:
        raise refused


FOLDER_FIX = (
    "gpuscale writes records and logs only in folders of yours that no other user can change: "
    "remove the link or pick such a folder (e.g. --results-dir under your home)"
)


def own_folder(
    path: str | os.PathLike, what: str = "folder", create: bool = True, flag: str | None = None
) -> pathlib.Path:
    """``path`` (absolute, ``~`` expanded) as a folder of this user's, made where missing (0777
    less the umask, one level at a time). Refused in one line (UserError naming ``what``): a
    link on the way that another user made (root's and yours are followed and checked), the
    folder owned by another user (root aside), it or one above it writable by every user
    without the sticky bit."""
    p = pathlib.Path(path).expanduser().absolute()
    me = os.geteuid()
    cur = pathlib.Path(p.anchor)
    for i, part in enumerate(p.parts[1:], 1):
        cur = cur / part
        last = i == len(p.parts) - 1
        try:
            st = os.lstat(cur)
        except FileNotFoundError:
            if not create:
                return p
            with contextlib.suppress(FileExistsError):  # another process (or user) made it first
                os.mkdir(cur)
            st = os.lstat(cur)
        if stat.S_ISLNK(st.st_mode):
            if st.st_uid not in (me, 0):
                raise _refusal(cur, what, st) or UserError(f"{what} {cur} is a link", FOLDER_FIX)
            target = pathlib.Path(os.path.realpath(cur))
            rest = pathlib.Path(*p.parts[i + 1 :]) if not last else None
            own_folder(target if rest is None else target / rest, what, create, flag)
            return p
        if not stat.S_ISDIR(st.st_mode):
            raise UserError(
                f"{what} {p} cannot be made: {cur} is not a folder",
                f"pass {flag + ' ' if flag else ''}a folder (one that exists, or under one)",
            )
        _check_folder(cur, st, me, what, last)
    return p


def _check_folder(path: pathlib.Path, st: os.stat_result, me: int, what: str, last: bool) -> None:
    if last and st.st_uid not in (me, 0):
        raise UserError(
            f"{what} {path} belongs to uid {st.st_uid}, not to you (uid {me}): they can change what is in it",
            FOLDER_FIX,
        )
    if st.st_mode & stat.S_IWOTH and not st.st_mode & stat.S_ISVTX:
        raise UserError(
            f"{what} {path} is writable by every user, without the sticky bit (mode {st.st_mode & 0o7777:o})",
            FOLDER_FIX,
        )


def own_file(path: str | os.PathLike, what: str = "file", append: bool = False) -> int:
    """A descriptor open for reading and writing on ``path`` (``append``: every write at its
    end), created (mode 0600) if absent, never through a link nor on another user's file, a
    hard link or a special file (UserError naming ``what``). The caller closes it."""
    flags = os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK
    try:
        fd = os.open(path, flags | (os.O_APPEND if append else 0), 0o600)
    except OSError as e:
        if e.errno in (errno.ELOOP, errno.EACCES, errno.EPERM, errno.ENXIO):
            check_target(path, what)  # names the link or the owner
        raise
    refused = _refusal(path, what, os.fstat(fd))
    if refused is not None:
        os.close(fd)
        raise refused
    return fd


@contextlib.contextmanager
def written(
    path: str | os.PathLike,
    *,
    replace: bool = False,
    text: bool = False,
    mode: int | None = None,
    what: str = "file",
) -> Iterator[tuple[IO, str]]:
    """``(file, temp_path)`` to write ``path`` through. ``mode``: the file's permissions (default
    0666 less the umask). Raises OSError (``FileExistsError`` when ``path`` exists and ``replace``
    is false), or UserError for a link or another user's file at ``path``."""
    path = pathlib.Path(path)
    check_target(path, what)
    tmp = None
    try:
        with signals_deferred():
            fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=TMP_SUFFIX)
        with os.fdopen(fd, "w" if text else "wb") as f:
            yield f, tmp
            f.flush()
            os.fchmod(f.fileno(), 0o666 & ~umask() if mode is None else mode)  # this file, not a name
            os.fsync(f.fileno())  # also what a writer wrote through ``temp_path`` itself
        if replace:
            os.replace(tmp, path)
        else:
            os.link(tmp, path)
    finally:
        if tmp is not None:
            with contextlib.suppress(OSError):
                os.unlink(tmp)
