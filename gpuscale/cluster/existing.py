"""An existing scheduler, named by its address or by Dask's scheduler file: connect, start nothing."""

from __future__ import annotations

import contextlib
import json
import logging
import pathlib
import socket
import sys
import time
import warnings
from typing import Iterator
from urllib.parse import urlsplit

from .. import _dask_compat, trust
from ..decision import Decision
from ..errors import UserError
from ..plan.memory import rmm_choice
from ..wire import protocols
from . import ClusterSpec
from . import security as tls
from .kind import Kind


def address_from_file(path, *, trusted: bool) -> str:
    """The scheduler address in Dask's scheduler file (unless ``trusted``, only one of yours)."""
    p = pathlib.Path(path).expanduser()
    try:
        address = json.loads(trust.read_trusted(p, "scheduler file", trusted))["address"]
    except UserError:
        raise
    except FileNotFoundError:
        raise UserError(
            f"scheduler file {path} does not exist",
            "give the --scheduler-file that `gpuscale cluster up` wrote (is it still running?)",
        ) from None
    except (OSError, ValueError, KeyError, TypeError):
        raise UserError(
            f"scheduler file {path} is not a Dask scheduler file (no 'address')",
            "give the file `gpuscale cluster up --scheduler-file` or `dask scheduler` wrote",
        ) from None
    return str(address)


def answers(address: str, timeout_s: float = 2.0, tries: int = 3) -> bool:
    """Whether anything still listens at the scheduler's address (any of ``tries`` connection
    attempts over about ``timeout_s`` seconds; True for an address without host:port)."""
    parts = urlsplit(address if "://" in address else f"tcp://{address}")
    if not parts.hostname or not parts.port:
        return True
    for i in range(tries):
        try:
            with socket.create_connection((parts.hostname, parts.port), timeout=timeout_s / tries):
                return True
        except OSError:
            if i + 1 < tries:
                time.sleep(timeout_s / tries / 2)
    return False


class _DropReconnect(logging.Filter):
    def filter(self, record: logging.LogRecord) -> bool:
        return not (
            str(record.msg).startswith(("Failed to reconnect to scheduler", "Batched Comm Closed"))
            or (record.levelno >= logging.ERROR and record.exc_info is not None)
        )


@contextlib.contextmanager
def reconnect_reported() -> Iterator[None]:
    """Drop distributed's client's "Failed to reconnect to scheduler" line and the tracebacks
    of its cut comms for the block (the run says so in one line)."""
    logs = [logging.getLogger("distributed.client"), logging.getLogger("distributed.batched")]
    f = _DropReconnect()
    for log in logs:
        log.addFilter(f)
    try:
        yield
    finally:
        for log in logs:
            log.removeFilter(f)


class Existing(Kind, name="existing", cluster_class="distributed.Client (existing scheduler)"):
    """A running scheduler: connect to it, start nothing."""

    def spec(self, plan) -> ClusterSpec:
        resolved, family, proto = plan.resolved, plan.family, plan.transport
        settings, src = resolved.settings, resolved.sources
        notes = ["workers, threads and memory are whatever the running cluster has"]
        if settings.scheduler_file:
            if settings.scheduler:
                raise UserError(
                    f"both a scheduler address ({settings.scheduler}, from {src.get('scheduler')}) and "
                    f"a scheduler file ({settings.scheduler_file}, from {src.get('scheduler-file')}) "
                    "were given",
                    "give one: --scheduler ADDRESS or --scheduler-file PATH",
                )
            address = address_from_file(settings.scheduler_file, trusted=settings.cluster.trust_files)
            notes.append(f"address read from the scheduler file {settings.scheduler_file}")
        else:
            address = settings.scheduler
        if "://" not in address:
            address = f"{proto.name}://{address}"
        used = protocols.of_address(address)
        if used.name == "tls":
            used = protocols.get("tcp")
        theirs = Decision(
            None, "cluster", f"whatever the running cluster at {address} has", "cluster.running"
        )
        how = "scheduler file" if settings.scheduler_file else "scheduler address"
        choices = {
            "protocol": Decision(
                used.name,
                how if used.name != settings.protocol else src.get("protocol", "default"),
                None,
                "protocol.running",
            ),
            "transports": used.transports_choice(settings.cluster.ucx, {}, src),
            "workers": theirs,
            "threads_per_worker": theirs,
            "memory_limit": theirs,
            "rmm_pool_size": rmm_choice(resolved, family),
        }
        return ClusterSpec(
            kind=self.name,
            cls=self.cluster_class,
            family=family.name,
            protocol=used.name,
            scheduler=address,
            connect_timeout=settings.cluster.connect_timeout,
            notes=notes,
            kwargs={"address": address, "timeout": settings.cluster.connect_timeout},
            choices=choices,
        )

    def start(self, spec: ClusterSpec, security=None):
        from distributed import Client

        kwargs = dict(spec.kwargs)
        if spec.security == "tls":
            kwargs["security"] = security or tls.load(spec.credentials)
        try:
            with warnings.catch_warnings(record=True) as seen:
                warnings.simplefilter("always")
                client = Client(**kwargs)
        except (OSError, TimeoutError) as e:
            hint = ""
            if spec.security != "tls":
                hint = (
                    " (a `gpuscale cluster up` scheduler speaks TLS: give its "
                    "tls:// address with --credentials, or --scheduler-file)"
                )
            raise UserError(
                f"no scheduler answered at {spec.scheduler} within "
                f"{spec.connect_timeout:g} s ({type(e).__name__}){hint}",
                "start one (`dask scheduler`) or fix --scheduler / the profile's address",
            ) from None
        for w in seen:  # distributed's own paragraph of versions becomes one line
            if issubclass(w.category, _dask_compat.version_mismatch_warning()):
                sys.stderr.write(f"gpuscale: warning: {versions_differ(client.get_versions())}\n")
            else:
                warnings.warn_explicit(w.message, w.category, w.filename, w.lineno)
        return None, client


def versions_differ(versions: dict, most: int = 4) -> str:
    """One line naming the first ``most`` packages whose versions differ between here and the cluster."""
    here = versions["client"]["packages"]
    there = [versions["scheduler"]["packages"], *(w["packages"] for w in versions["workers"].values())]
    parts = []
    for name in sorted({k for packages in (here, *there) for k in packages}):
        other = {v.get(name) for v in there} - {here.get(name)}
        if other:
            parts.append(f"{name} {here.get(name)} here, {', '.join(sorted(map(str, other)))} on the cluster")
    more = f" and {len(parts) - most} more" if len(parts) > most else ""
    return (
        f"the cluster's versions differ from this process's ({'; '.join(parts[:most])}{more}): "
        "tasks may fail to load or give other results; run this client in the cluster's environment"
    )
