"""How a cluster's processes talk: the transports (:mod:`.protocols`, a registry), how results
reach the client (:mod:`.gather`), how soon Dask's control messages leave (:mod:`.messages`) and
how long a worker may stop answering (:mod:`.liveness`): each module's rule (``choose``) beside
the settings it gives Dask."""
