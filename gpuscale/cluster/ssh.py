"""Clusters over SSH: distributed's :func:`~distributed.deploy.ssh.SSHCluster`
(``cluster.deploy: ssh``; docs/guide/beyond-one-host.md). The first host of
``cluster.ssh.hosts`` runs the scheduler, every other entry one worker process (GPU: a
``CUDAWorker`` per GPU).
"""

from __future__ import annotations

import json
import shlex
import sys

from ..decision import Decision
from ..errors import UserError, missing_module
from ..plan.memory import remote_memory_choice, rmm_pool, spilling_choice
from . import ClusterSpec, construct, per_host_entry, spec_for
from . import security as tls
from .kind import Kind


def _connect_options(ssh) -> dict:
    opts: dict = {}
    if ssh.username:
        opts["username"] = ssh.username
    if ssh.port != 22:
        opts["port"] = ssh.port
    if ssh.client_keys:
        opts["client_keys"] = list(ssh.client_keys)
    if ssh.known_hosts:
        opts["known_hosts"] = ssh.known_hosts
    return opts


def tls_config(credentials: str) -> dict:
    """Dask's configuration that makes every process SSHCluster starts speak TLS with these credentials."""
    return {
        "distributed.comm.require-encryption": True,
        "distributed.comm.tls.ca-file": credentials,
        **{
            f"distributed.comm.tls.{role}.{part}": credentials
            for role in ("scheduler", "worker", "client")
            for part in ("cert", "key")
        },
    }


class Ssh(Kind, name="ssh", cluster_class="distributed.deploy.ssh.SSHCluster"):
    """distributed's ``SSHCluster``: the scheduler on the first host, a worker process per further entry."""

    def spec(self, plan) -> ClusterSpec:
        resolved, family, proto = plan.resolved, plan.family, plan.transport
        c, ssh = resolved.settings.cluster, resolved.settings.cluster.ssh
        hosts = list(ssh.hosts or ())
        if len(hosts) < 2:
            raise UserError(
                f"cluster.deploy is ssh but cluster.ssh.hosts names {len(hosts)} host(s)",
                "list the scheduler's host first, then one entry per worker process, e.g. "
                "--ssh-hosts node1,node1,node2 (or in a profile, see clusters/ssh.yaml)",
            )
        gpu = plan.gpu_workers
        worker_class = "dask_cuda.CUDAWorker" if gpu else "distributed.Nanny"
        threads = plan.layout.threads.value
        worker_options: dict = {"nthreads": threads} if threads else {}
        if c.memory_limit != "auto":
            worker_options["memory_limit"] = c.memory_limit
        pool, rmm = rmm_pool(c, family) if gpu else (None, None)
        if pool is not None:
            worker_options["rmm_pool_size"] = pool
        knobs = plan.gpu_knobs  # as on local GPUs (theirs not known here); None for CPU workers
        if knobs is not None:
            worker_options.update(knobs.options)
        scheduler_options = {"host": hosts[0], "port": 0, "dashboard_address": c.dashboard_address or ":0"}
        if proto.name != "tcp":  # the workers take the scheme of the scheduler's address
            scheduler_options["protocol"] = proto.name
        kwargs = {
            "hosts": hosts,
            "connect_options": _connect_options(ssh),
            "worker_options": worker_options,
            "scheduler_options": scheduler_options,
            "worker_class": worker_class,
            "remote_python": ssh.remote_python or sys.executable,
        }
        n = len(hosts) - 1
        per = "one worker per GPU of each host" if gpu else f"{n} worker process(es)"
        choices = self.choices(
            plan,
            Decision(
                None if gpu else n,
                "rule",
                f"{worker_class} on each entry after the first: {per}",
                "ssh.workers",
            ),
            remote_memory_choice(resolved, "host"),
            where={
                "hosts": Decision(
                    hosts,
                    resolved.sources.get("cluster.ssh.hosts", "flag"),
                    f"scheduler on {hosts[0]}; {per} on {', '.join(hosts[1:])} "
                    "(one per entry after the first)",
                    "ssh.hosts",
                )
            },
            transports=knobs.transports if knobs is not None else None,
            rmm=rmm,
            rest=knobs.choices if knobs is not None else {"spilling": spilling_choice(family)},
        )
        return spec_for(
            self,
            plan,
            workers=None if gpu else n,
            rmm=rmm,
            notes=[f"scheduler on {hosts[0]} over ssh; workers: {worker_class} on {', '.join(hosts[1:])}"],
            kwargs=kwargs,
            choices=choices,
            dask_config=knobs.dask_config if knobs is not None else {},
        )

    def start(self, spec: ClusterSpec, security=None):
        import importlib.util

        import dask.config
        from distributed import Client, SSHCluster

        if importlib.util.find_spec("asyncssh") is None:
            raise missing_module(
                "asyncssh", "cluster.deploy ssh (distributed's SSHCluster)", "pip install 'gpuscale[ssh]'"
            ) from None

        kwargs = dict(spec.kwargs)
        config: dict = {}
        if spec.security == "tls":
            if not spec.credentials:
                raise UserError(
                    "an ssh cluster with TLS needs its credentials in a file every host reads",
                    "give `cluster up` a --scheduler-file on a filesystem the hosts share (the "
                    "credentials go beside it), or --security off on a network you trust",
                )
            config = tls_config(spec.credentials)
            kwargs["scheduler_options"] = {**kwargs["scheduler_options"], "protocol": "tls"}
            kwargs["security"] = security or tls.load(spec.credentials)
        # SSHCluster hands this process's Dask configuration to every remote process
        with dask.config.set({**config, **spec.dask_config}):
            cluster = construct(spec, lambda: SSHCluster(**kwargs))
        try:
            return cluster, Client(cluster)
        except BaseException:
            cluster.close()
            raise

    def commands(self, spec: ClusterSpec) -> list[str]:
        """The ssh commands SSHCluster runs for this spec."""
        kw = spec.kwargs
        protocol = "tls" if spec.security == "tls" else None
        opts = kw["connect_options"]
        ssh = (
            ["ssh"]
            + (["-p", str(opts["port"])] if "port" in opts else [])
            + [f"-i {k}" for k in opts.get("client_keys", [])]
        )

        def on(host, *argv):
            target = f"{opts['username']}@{host}" if opts.get("username") else host
            return " ".join([*ssh, target, *argv])

        sched_opts = dict(kw["scheduler_options"], **({"protocol": protocol} if protocol else {}))
        spec_cli = (kw["remote_python"], "-m", "distributed.cli.dask_spec")
        scheduler = json.dumps({"cls": "distributed.Scheduler", "opts": sched_opts})
        worker = json.dumps({0: {"cls": kw["worker_class"], "opts": kw["worker_options"]}})
        return [on(kw["hosts"][0], *spec_cli, "--spec", shlex.quote(scheduler))] + [
            on(host, *spec_cli, "SCHEDULER_ADDRESS", "--spec", shlex.quote(worker))
            for host in kw["hosts"][1:]
        ]

    def per_host(self, spec: ClusterSpec) -> dict[str, dict]:
        """Per host of ``cluster.ssh.hosts``: whether it runs the scheduler, and its workers."""
        kw = spec.kwargs
        hosts, opts, cls = kw["hosts"], kw["worker_options"], kw["worker_class"]
        gpu = cls == "dask_cuda.CUDAWorker"
        out = {h: {"scheduler": h == hosts[0], "worker_entries": hosts[1:].count(h)} for h in hosts}
        threads = opts.get("nthreads") or (spec.choices.get("threads_per_worker") or {}).get("rule")
        for host, e in out.items():
            n = e["worker_entries"]
            if n:
                workers = (
                    (f"{n} x {cls}: one worker per GPU of {host}" + (" each" if n > 1 else "")) if gpu else n
                )
                e.update(per_host_entry(spec, cls, workers, threads))
        return out
