"""Tables that fit the terminal without cutting a value: :class:`FitTable`.

A :class:`FitTable` decides its column widths at render time, for the width it is given:

* a column is never narrower than its longest word (its longest cell, for a ``no_wrap``
  column), so text wraps between words; a path longer than its column breaks after a ``/``;
* the space left goes first to the columns that then fit on one line;
* ``optional`` columns are left out, last first, while a row does not fit on one line; the
  caption names them;
* when even the longest words do not fit side by side, each row is shown as lines of
  ``header: value``.
"""

from __future__ import annotations

import copy
import dataclasses
import re
from typing import Iterable

from rich.cells import cell_len
from rich.console import Console, ConsoleOptions, RenderResult
from rich.measure import Measurement
from rich.table import Column, Table
from rich.text import Text

_WORD = re.compile(r"\S+")
_PIECE = re.compile(r"[^/]+/?|/")  # a path's pieces, each ending at its "/"


def _need(word: str) -> int:
    """The narrowest a word can be shown: whole, or a path broken after its slashes."""
    return max(map(cell_len, _PIECE.findall(word))) if "/" in word else cell_len(word)


def _lines(text: Text) -> list[str]:
    return text.plain.splitlines() or [""]


class FitTable(Table):
    """A :class:`rich.table.Table` whose values are never cut (see the module). Use it as a
    Table; ``add_column(..., optional=True)`` marks a column that may be left out."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.optional: set[int] = set()

    def add_column(self, *args, optional: bool = False, **kwargs) -> None:
        super().add_column(*args, **kwargs)
        if optional:
            self.optional.add(len(self.columns) - 1)

    # -- measuring --------------------------------------------------------------------
    def _cells(self, console: Console, column: Column, header: bool = True) -> list:
        """The column's cells (with its header when shown and asked for), str markup made Text."""
        cells = ([column.header] if header and self.show_header else []) + list(column._cells)
        return [_text(console, c) for c in cells]

    def _span(self, console: Console, options: ConsoleOptions, column: Column) -> tuple[int, int]:
        """(need, want): the narrowest the column can be without cutting a value, and the width
        that puts every cell on one line."""
        need = want = 1
        for cell in self._cells(console, column):
            if isinstance(cell, Text):
                lines = _lines(cell)
                longest = max(map(cell_len, lines))
                words = [_need(w) for line in lines for w in _WORD.findall(line)] or [0]
                need, want = max(need, longest if column.no_wrap else max(words)), max(want, longest)
            else:
                m = Measurement.get(console, options, cell)
                need, want = max(need, m.minimum), max(want, m.maximum)
        return need, want

    def _overhead(self, kept: list[int]) -> int:
        """Borders and padding of a table of these columns."""
        probe = copy.copy(self)
        probe.columns = [dataclasses.replace(self.columns[i], _index=n) for n, i in enumerate(kept)]
        return probe._extra_width + sum(probe._get_padding_width(n) for n in range(len(kept)))

    # -- laying out -------------------------------------------------------------------
    def _layout(self, console: Console, options: ConsoleOptions) -> tuple[list[int], list[int]] | None:
        """(kept columns, their widths), or None when the longest words do not fit side by side."""
        spans = [self._span(console, options, c) for c in self.columns]
        kept = list(range(len(self.columns)))
        dropped = sorted(self.optional, reverse=True)
        while dropped and sum(spans[i][1] for i in kept) + self._overhead(kept) > options.max_width:
            kept.remove(dropped.pop(0))
        room = options.max_width - self._overhead(kept)
        widths = {i: spans[i][0] for i in kept}
        if sum(widths.values()) > room:
            return None
        extra = room - sum(widths.values())
        short = {i: spans[i][1] - widths[i] for i in kept}
        for i in sorted(kept, key=short.get):  # first, whole columns onto one line, narrowest first
            if 0 < short[i] <= extra:
                widths[i], extra, short[i] = spans[i][1], extra - short[i], 0
        wanted = sum(short.values())
        for i in kept:  # then the rest shared by what each still wants
            widths[i] += extra * short[i] // wanted if wanted else 0
        return kept, [widths[i] for i in kept]

    def __rich_console__(self, console: Console, options: ConsoleOptions) -> RenderResult:
        layout = self._layout(console, options)
        if layout is None:
            yield from self._stacked(console, options.max_width)
            return
        kept, widths = layout
        grid = copy.copy(self)
        grid.columns = [
            dataclasses.replace(
                self.columns[i],
                _index=n,
                width=w,
                overflow="fold",
                _cells=[_break_paths(c, w) for c in self._cells(console, self.columns[i], header=False)],
            )
            for n, (i, w) in enumerate(zip(kept, widths))
        ]
        left_out = [
            _text(console, self.columns[i].header).plain for i in range(len(self.columns)) if i not in kept
        ]
        if left_out:
            note = (
                f"not shown at {options.max_width} columns: {', '.join(left_out)} (a wider terminal "
                "shows them; --json has every field)"
            )
            grid.caption = f"{grid.caption}\n{note}" if grid.caption else note
            grid.caption_justify = "left"
        width = sum(widths) + self._overhead(kept)  # titles wrap at the table's width: paths break at a "/"
        grid.title = _break_paths(_text(console, grid.title), width) if grid.title else None
        grid.caption = _break_paths(_text(console, grid.caption), width) if grid.caption else None
        yield from Table.__rich_console__(grid, console, options)

    def _stacked(self, console: Console, width: int) -> Iterable[Text]:
        """Each row as lines of ``header: value`` (headers shown) or ``label`` then its value."""
        if self.title:
            yield _break_paths(_text(console, self.title), width)
        columns = [self._cells(console, c, header=False) for c in self.columns]
        for row in zip(*columns):
            for column, cell in zip(self.columns, row):
                if isinstance(cell, Text) and not cell.plain.strip():
                    continue
                head = _text(console, column.header).plain if self.show_header else ""
                if isinstance(cell, Text):
                    label = (f"{head}: " if head else "", "bold")
                    cell = _break_paths(Text.assemble(label, cell, overflow="fold"), width)
                yield cell
            if self.show_header:
                yield Text("")
        if self.caption:
            yield _break_paths(_text(console, self.caption), width)


def _text(console: Console, value):
    """A str (rich markup) as the Text rich makes of it; anything else as it is."""
    return console.render_str(value, highlight=False) if isinstance(value, str) else value


def _break_paths(cell, width: int):
    """A Text cell whose words wider than ``width`` are paths, broken after a ``/`` to fit."""
    if not isinstance(cell, Text) or max(map(cell_len, _lines(cell))) <= width:
        return cell
    cuts: list[int] = []
    for m in _WORD.finditer(cell.plain):
        if "/" not in m.group() or cell_len(m.group()) <= width:
            continue
        used, pos = 0, m.start()
        for piece in _PIECE.findall(m.group()):
            if used and used + cell_len(piece) > width:
                cuts.append(pos)
                used = 0
            used += cell_len(piece)
            pos += len(piece)
    if not cuts:
        return cell
    return Text("\n").join(cell.divide(cuts))
