"""click's lazy loading of subcommands: a command is named by ``"MODULE:NAME"`` (a module of
:mod:`gpuscale.cli`) and its module is imported when the command runs or its own help is shown,
so each command module imports what it needs at its top and ``gpuscale --help`` imports none of
them."""

from __future__ import annotations

import importlib
from typing import Any

import click

from .base import Group


def load(path: str) -> Any:
    """The object ``NAME`` of the module ``gpuscale.cli.MODULE``, for ``path`` ``"MODULE:NAME"``."""
    module, _, name = path.partition(":")
    return getattr(importlib.import_module(f"{__package__}.{module}"), name)


class LazyGroup(Group):
    """A group whose commands are named in ``commands_by_path``: name -> (``"MODULE:NAME"``, the first
    sentence of the command's help). Its ``--help`` and the shell's completion list the commands
    with that sentence, importing none of them; a command's module is imported when the command
    is resolved (to run it or to show its own help)."""

    def __init__(self, *args, commands_by_path: dict[str, tuple[str, str]], **kwargs):
        super().__init__(*args, **kwargs)
        self.commands_by_path = commands_by_path

    def list_commands(self, ctx):
        return sorted(self.commands_by_path)

    def get_command(self, ctx, name):
        return load(self.commands_by_path[name][0]) if name in self.commands_by_path else None

    def format_commands(self, ctx, formatter):
        rows = [(name, self.commands_by_path[name][1]) for name in self.list_commands(ctx)]
        with formatter.section("Commands"):
            formatter.write_dl(rows)

    def shell_complete(self, ctx, incomplete):
        """The commands starting with ``incomplete``, each with its sentence cut as click cuts a
        command's help for the shell, then this group's options."""
        from click.shell_completion import CompletionItem

        names = [n for n in self.list_commands(ctx) if n.startswith(incomplete)]
        cut = [click.Command(n, help=self.commands_by_path[n][1]).get_short_help_str() for n in names]
        return [CompletionItem(n, help=h) for n, h in zip(names, cut)] + click.Command.shell_complete(
            self, ctx, incomplete
        )


class Deferred:
    """A command's callback named by ``"MODULE:NAME"``, imported when the command runs: a command
    whose flags are cheap to build (``gpuscale run WORKLOAD``, ``gpuscale explain WORKLOAD``)
    shows its ``--help`` without importing what its work needs. Called with the command's
    parameters, it calls ``NAME(*args, **parameters)``."""

    def __init__(self, path: str, *args: Any):
        self.path, self.args = path, args

    def __call__(self, **kwargs: Any) -> Any:
        return load(self.path)(*self.args, **kwargs)
