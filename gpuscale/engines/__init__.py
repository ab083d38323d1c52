"""The engine a session runs a user's DataFrame plan on: Dask's expression translated into
Polars (:mod:`.from_dask`), run by Polars or cudf-polars (:mod:`.run`), its answer built as Dask's
(:mod:`.answer`); :mod:`.scope` routes the computes of a session's block there."""
