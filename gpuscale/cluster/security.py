"""Who may talk to a cluster: TLS through distributed's :class:`~distributed.Security`.

:func:`apply` decides whether a spec's cluster speaks TLS (``cluster.security``): under
``auto``, a cluster kept up for others or on other hosts does, with temporary self-signed
credentials; a cluster of this process alone does not; a running scheduler does when its
address is ``tls://``. UCX has no TLS.
"""

from __future__ import annotations

import os
import pathlib

from .. import atomic, trust
from ..decision import Decision
from ..errors import UserError, missing_module

REMOTE = ("ssh", "slurm", "srun")
"""Deploy targets whose processes run on other hosts: TLS by default, through a credentials file."""
SUFFIX = ".tls.pem"


def beside(scheduler_file: str | os.PathLike) -> pathlib.Path:
    """The credentials file beside a scheduler file: ``scheduler.json`` -> ``scheduler.tls.pem``."""
    p = pathlib.Path(scheduler_file).expanduser()
    return p.with_name(p.stem + SUFFIX)


def _source(resolved) -> str:
    return resolved.sources.get("cluster.security", "default")


def _ucx_refusal(proto_name: str, why: str) -> UserError:
    return UserError(
        f"{why}, but {proto_name.upper()} has no TLS: anyone who reaches its ports could run code as you",
        f"use --protocol tcp (TLS), or pass --security off to run {proto_name} "
        "unprotected on a network you trust",
    )


def apply(spec, resolved, proto, *, served: bool = False):
    """``spec`` with its ``security`` / ``credentials`` fields, the ``security`` choice and,
    for TLS on a cluster it starts, ``protocol="tls"`` among the class's keyword arguments."""
    if spec.kind == "existing":
        return _for_client(spec, resolved)
    setting = resolved.settings.cluster.security
    source = _source(resolved)
    encrypts = proto.name == "tcp"
    if setting == "off":
        rule = "off, set by you: plain " + proto.name
        if served:
            rule += " (anyone who reaches the scheduler's port can run code on the workers)"
        value = "off"
    elif setting == "tls" or served or spec.kind in REMOTE:
        if not encrypts:
            raise _ucx_refusal(
                proto.name,
                "this cluster is protected with TLS (cluster.security "
                f"{setting}{'' if setting == 'tls' else ' for cluster up'})",
            )
        value = "tls"
        why = "set by you" if setting == "tls" else "auto: a cluster kept up for other processes is protected"
        if spec.kind in REMOTE and setting == "auto" and not served:
            why = "auto: a cluster on other hosts is protected"
        kept = ""
        if served:
            kept = (
                ", written for clients to one file readable by its owner only (mode 0600) beside the "
                "scheduler file"
            )
        if spec.kind == "srun":
            kept += (
                ", written by rank 0 beside the scheduler file (mode "
                "0600) before its scheduler listens, read there by every rank"
            )
        rule = f"{why}: TLS with a temporary CA and certificate (distributed's Security.temporary)" + (
            kept or ", held in memory by this process"
        )
    else:
        value = "off"
        rule = (
            f"auto: this process's own cluster, plain {proto.name} on "
            f"{spec.kwargs.get('host') or 'its bind address'} for the life of the run"
        )
    kwargs = dict(spec.kwargs)
    if value == "tls" and spec.kind not in REMOTE:  # the remote kinds set it at start
        kwargs["protocol"] = "tls"
    return _secured(spec, value, source if setting != "auto" else "rule", rule, setting, kwargs=kwargs)


def _secured(spec, value: str, source: str, rule: str, setting: str, **update):
    """``spec`` with ``security`` = ``value``, the fields in ``update`` and the ``security`` choice."""
    choice = Decision(value, source, rule, extra={"setting": setting})
    return spec.model_copy(
        update={"security": value, **update, "choices": {**spec.choices, "security": choice}}
    )


def _for_client(spec, resolved):
    """A running scheduler: TLS when its address is ``tls://``, with the credentials found."""
    setting = resolved.settings.cluster.security
    c = resolved.settings.cluster
    address = spec.scheduler
    scheme = address.split("://", 1)[0]
    creds, creds_source = None, None
    if c.credentials:
        creds = pathlib.Path(c.credentials).expanduser()
        creds_source = resolved.sources.get("cluster.credentials", "flag")
    elif resolved.settings.scheduler_file:
        near = beside(resolved.settings.scheduler_file)
        if near.exists():
            creds, creds_source = near, "beside the scheduler file"
    if scheme != "tls":
        if setting == "tls":
            raise UserError(
                f"cluster.security is tls ({_source(resolved)}), but the scheduler address "
                f"{address} is not tls://",
                "give its tls:// address (or --scheduler-file), or drop --security tls",
            )
        return _secured(
            spec, "off", "scheduler address", f"the scheduler's address is {scheme}://: no TLS", setting
        )
    if setting == "off":
        raise UserError(
            f"cluster.security is off ({_source(resolved)}), but the scheduler at {address} "
            "accepts TLS clients only",
            "drop --security off and give its credentials with --credentials PATH (or --scheduler-file)",
        )
    if creds is None:
        where = (
            f" (none beside {resolved.settings.scheduler_file}: {beside(resolved.settings.scheduler_file)})"
            if resolved.settings.scheduler_file
            else ""
        )
        raise UserError(
            f"the scheduler at {address} accepts TLS clients only and no credentials were given{where}",
            "pass --credentials PATH, the *.tls.pem file `gpuscale cluster up` "
            "wrote beside its scheduler file (or --scheduler-file PATH to find it there)",
        )
    check_credentials(creds, c.trust_files)
    why = f"the scheduler's address is tls://: TLS with the credentials in {creds} ({creds_source})"
    return _secured(spec, "tls", "scheduler address", why, setting, credentials=str(creds))


def check_credentials(path: pathlib.Path, trusted: bool) -> None:
    """Refuse, in one line, credentials missing, unreadable, not PEM or (unless ``trusted``) not yours."""
    if not path.is_file():
        raise UserError(
            f"credentials file {path} does not exist",
            "give the *.tls.pem file `gpuscale cluster up` wrote beside its scheduler file",
        )
    try:
        trust.read_trusted(path, "credentials file", trusted)
    except PermissionError:
        raise UserError(
            f"credentials file {path} is not readable by this user (uid {os.getuid()}): the "
            "cluster it protects accepts only its owner's clients",
            "run as the user who started the cluster, or ask them for a copy of your own (chmod 600)",
        ) from None
    check_pem(path)


def check_pem(path: pathlib.Path) -> None:
    """Refuse, in one line, a credentials file that ``ssl`` cannot read as a CA, certificate and key."""
    import ssl

    try:
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
        context.load_verify_locations(cafile=str(path))
        context.load_cert_chain(str(path))
    except (ssl.SSLError, ValueError) as e:
        why = getattr(e, "reason", None) or str(e) or type(e).__name__
        raise UserError(
            f"credentials file {path} is not a PEM file holding a CA certificate, a certificate "
            f"and its key ({why})",
            "give the *.tls.pem file `gpuscale cluster up` wrote beside its scheduler file",
        ) from None


def load(path: str | os.PathLike):
    """A client's :class:`~distributed.Security` from a credentials file, encryption required."""
    from distributed import Security

    p = str(pathlib.Path(path).expanduser())
    return Security(tls_ca_file=p, tls_client_cert=p, tls_client_key=p, require_encryption=True)


def every_role(path: str | os.PathLike):
    """A :class:`~distributed.Security` whose every role reads the credentials file at ``path``."""
    from distributed import Security

    p = str(pathlib.Path(path).expanduser())
    return Security(
        require_encryption=True,
        tls_ca_file=p,
        tls_client_cert=p,
        tls_client_key=p,
        tls_scheduler_cert=p,
        tls_scheduler_key=p,
        tls_worker_cert=p,
        tls_worker_key=p,
    )


def as_client(sec):
    """A worker's :class:`~distributed.Security` as a client's: where only the worker role is
    set, the client role takes the worker's certificate and key."""
    if sec is None or sec.tls_client_cert or not sec.tls_worker_cert:
        return sec
    from distributed import Security

    return Security(
        require_encryption=sec.require_encryption,
        tls_ca_file=sec.tls_ca_file,
        tls_client_cert=sec.tls_worker_cert,
        tls_client_key=sec.tls_worker_key,
    )


def temporary():
    """New credentials for a cluster this process starts (:meth:`distributed.Security.temporary`)."""
    from distributed import Security

    try:
        return Security.temporary()
    except ImportError:
        raise missing_module(
            "cryptography", "TLS (cluster.security tls)", "pip install cryptography"
        ) from None


def write(security, path: pathlib.Path) -> pathlib.Path:
    """Write ``security``'s key and certificate to ``path`` (mode 0600, atomically); returns ``path``."""
    pem = security.tls_client_key.strip() + "\n" + security.tls_client_cert.strip() + "\n"
    with atomic.written(path, replace=True, mode=0o600, what="credentials file") as (f, _):
        f.write(pem.encode())
    return path
