"""The ``gpuscale`` command's entry point (``python -m gpuscale`` too): the command line
(:func:`gpuscale.cli.main`), or one line where Dask cannot start in this process."""

from __future__ import annotations

import re
import sys

MALFORMED = re.compile(r"A dask config file at (?P<path>'.*?') is malformed(?P<rest>.*)", re.S)
"""How ``import dask`` says that it could not read one of the user's Dask config files."""


def main() -> None:
    try:
        from .cli import main as command_line
    except ValueError as e:
        m = MALFORMED.match(str(e))
        if m is None:
            raise
        sys.stderr.write(f"gpuscale: error: {_config_problem(m['path'], m['rest'])}\n")
        sys.exit(2)
    command_line()


def _config_problem(path: str, rest: str) -> str:
    """One bounded line: which of Dask's config files is malformed, where, and the fix."""
    words = " ".join(rest.replace("original error message:", "").split()).lstrip(" -:,")
    where = re.search(r"line (\d+), column (\d+)", rest)
    detail = (f"line {where[1]}, column {where[2]}: " if where else "") + words.split(' in "')[0]
    printable = "".join(c if c.isprintable() else "?" for c in f"{path} ({detail[:160]})")
    return (
        f"Dask's config file {printable} is malformed, so Dask cannot start; correct or "
        "remove it (Dask reads the YAML files in ~/.config/dask, /etc/dask and $DASK_CONFIG)"
    )
