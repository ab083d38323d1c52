"""Run records: the ``Result`` model and the functions that find, load and write them."""

from __future__ import annotations

from .records.results import Result, find, latest, load, write

__all__ = ["Result", "find", "latest", "load", "write"]
