"""Files gpuscale reads that another user may have written: who can change them
(:func:`who_else_can_change`), reading them only when trusted or with a warning, and reading
them with bounds (one-line UserErrors; YAML syntax errors stay :class:`yaml.YAMLError`).
"""

from __future__ import annotations

import os
import pathlib
import stat
import sys
from typing import Any

from .errors import UserError

MAX_INPUT_BYTES = 1 << 20
"""A profile or bench spec larger than this (1 MiB) is refused before it is parsed."""
MAX_YAML_VALUES = 100_000
"""The most values (scalars, lists, mappings) a YAML document may hold with its aliases expanded."""
TRUST_FLAG = "--trust-cluster-files"
TRUST_SETTING = "cluster.trust-files"


def who_else_can_change(path: str | os.PathLike, st: os.stat_result | None = None) -> str | None:
    """Why a user other than this one (or root) can change ``path`` (``st``: its stat, if taken
    already); None when nobody else can."""
    p = pathlib.Path(path)
    st = st if st is not None else os.stat(p)
    me = os.geteuid()
    if st.st_uid not in (me, 0):
        return f"it is owned by uid {st.st_uid} ({_user(st.st_uid)}), not by you (uid {me})"
    if st.st_mode & (stat.S_IWGRP | stat.S_IWOTH):
        return (
            f"it is writable by {'others' if st.st_mode & stat.S_IWOTH else 'its group'} "
            f"(mode {stat.S_IMODE(st.st_mode):04o})"
        )
    return folder_problem(p.absolute().parent)


def folder_problem(folder: str | os.PathLike) -> str | None:
    """Why another user can replace the files in ``folder``, or None."""
    fst = os.stat(folder)
    me = os.geteuid()
    if fst.st_uid not in (me, 0):
        return f"its folder {folder} is owned by uid {fst.st_uid} ({_user(fst.st_uid)})"
    if fst.st_mode & (stat.S_IWGRP | stat.S_IWOTH) and not fst.st_mode & stat.S_ISVTX:
        return (
            f"its folder {folder} is writable by others without the sticky bit "
            f"(mode {stat.S_IMODE(fst.st_mode):04o}): anyone who can write there can replace it"
        )
    return None


def _user(uid: int) -> str:
    import pwd

    try:
        return pwd.getpwuid(uid).pw_name
    except KeyError:
        return "no such user"


def open_regular(path: str | os.PathLike, what: str):
    """``path`` open for reading (a binary file object) when it is a regular file: a FIFO does
    not block the open (``O_NONBLOCK``), and it, a device (a link to ``/dev/zero``) or a folder
    is a UserError naming ``what``; ``FileNotFoundError`` / ``PermissionError`` propagate."""
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    st = os.fstat(fd)
    if not stat.S_ISREG(st.st_mode):
        os.close(fd)
        kinds = ((stat.S_ISFIFO, "a FIFO"), (stat.S_ISDIR, "a folder"), (stat.S_ISSOCK, "a socket"))
        kind = next((name for test, name in kinds if test(st.st_mode)), "a device")
        raise UserError(f"{what} {path} is {kind}, not a file", f"give a {what} that is a regular file")
    os.set_blocking(fd, True)
    return os.fdopen(fd, "rb")


def read_trusted(path: str | os.PathLike, what: str, trusted: bool, limit: int = MAX_INPUT_BYTES) -> bytes:
    """The content of ``path`` (``what`` names it), a regular file of at most ``limit`` bytes,
    checked and read through one open file. Unless ``trusted``, a file another user can change
    is a UserError naming the flag."""
    with open_regular(path, what) as f:
        why = None if trusted else who_else_can_change(path, os.fstat(f.fileno()))
        if why:
            raise UserError(
                f"{what} {path} could be written by another user: {why}; whoever wrote it "
                "could run code in this process through the cluster it names",
                f"use a {what} of your own, or pass {TRUST_FLAG} (setting {TRUST_SETTING}: "
                "true) if you trust whoever can write it",
            )
        return _bounded(f, path, what, limit)


def warn_if_others_can_change(path: str | os.PathLike, what: str, *, folder: bool = False) -> None:
    """One warning line on stderr when another user can change ``path``, or (``folder``)
    replace the files in its folder. Never raises."""
    try:
        why = folder_problem(pathlib.Path(path).absolute().parent) if folder else who_else_can_change(path)
    except OSError:
        return
    if why:
        then = (
            "clients refuse a scheduler file there unless they pass " + TRUST_FLAG
            if folder
            else "keep it in a folder only you can write (chmod go-w)"
        )
        sys.stderr.write(
            f"gpuscale: warning: {what} {path} could be changed by another user: {why}; {then}\n"
        )
        sys.stderr.flush()


def read_bounded(path: str | os.PathLike, what: str, limit: int = MAX_INPUT_BYTES) -> str:
    """The text of ``path``, a regular file, refused in one line when it is over ``limit`` bytes."""
    with open_regular(path, what) as f:
        return _bounded(f, path, what, limit).decode("utf-8", errors="replace")


def _bounded(f, path, what: str, limit: int) -> bytes:
    size = os.fstat(f.fileno()).st_size
    data = f.read(limit + 1)
    if size > limit or len(data) > limit:
        raise UserError(
            f"{what} {path} is {max(size, len(data)):,} bytes, more than the {limit:,} gpuscale reads",
            f"give a {what} of at most {limit >> 10} KiB",
        )
    return data


def load_yaml(text: str, what: str, limit: int = MAX_YAML_VALUES) -> Any:
    """``yaml.safe_load(text)``, refusing (UserError) a document over ``limit`` values with its
    aliases expanded, one that refers to itself, or one nested too deeply to read."""
    import yaml

    class Loader(yaml.SafeLoader):
        def get_single_node(self):
            node = super().get_single_node()
            if node is not None:
                _count_values(node, limit, what)
            return node

    try:
        return yaml.load(text, Loader=Loader)  # noqa: S506 - a SafeLoader
    except RecursionError:
        raise UserError(f"{what} is nested too deeply to read", "flatten the YAML") from None


def _count_values(root, limit: int, what: str) -> int:
    """Values under ``root`` with every alias expanded; over ``limit`` or a cycle is a UserError."""
    import yaml

    sizes: dict[int, int] = {}
    busy: set[int] = set()

    def size(node) -> int:
        key = id(node)
        if key in sizes:
            return sizes[key]
        if key in busy:
            raise UserError(
                f"{what} holds a YAML alias that refers to itself (line {node.start_mark.line + 1})",
                "remove the alias (*name) inside its own anchor (&name)",
            )
        busy.add(key)
        n = 1
        if isinstance(node, yaml.SequenceNode):
            n += sum(size(c) for c in node.value)
        elif isinstance(node, yaml.MappingNode):
            n += sum(size(k) + size(v) for k, v in node.value)
        busy.discard(key)
        if n > limit:
            raise UserError(
                f"{what} holds more than {limit:,} values once its YAML aliases (*name) are expanded",
                "write the values out, or use fewer aliases",
            )
        sizes[key] = n
        return n

    return size(root)
