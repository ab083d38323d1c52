"""Run records, importable as ``gpuscale.results``: the ``Result`` model and the functions that
find, load and write records (``gpuscale/records/results.py`` holds them)."""

from __future__ import annotations

from .records.results import Result, find, latest, load, write

__all__ = ["Result", "find", "latest", "load", "write"]
