"""A cluster made of the tasks of an ``srun``: dask-jobqueue's
:class:`~dask_jobqueue.slurm.SLURMRunner` (``cluster.deploy: srun``;
docs/guide/beyond-one-host.md). Rank 0 runs the scheduler, rank 1 the client, every further
rank a worker; they meet through the scheduler file in the working folder.
"""

from __future__ import annotations

import asyncio
import os
import pathlib

from ..decision import Decision
from ..errors import UserError, missing_module
from ..plan.memory import remote_memory_choice, rmm_pool
from . import ClusterSpec, construct, spec_for
from . import security as tls
from .kind import Kind


def scheduler_file() -> pathlib.Path:
    """Where the ranks meet: SLURMRunner's default name, in the working folder."""
    return pathlib.Path.cwd() / f"scheduler-{os.environ.get('SLURM_JOB_ID', '{job_id}')}.json"


def _runner_class():
    from dask_jobqueue.slurm import SLURMRunner

    class Runner(SLURMRunner):
        """SLURMRunner whose rank 0 writes the TLS credentials before its scheduler listens."""

        credentials: pathlib.Path | None = None

        async def before_scheduler_start(self) -> None:
            if self.credentials is not None:
                tls.write(tls.temporary(), self.credentials)

        async def before_worker_start(self) -> None:
            # the scheduler file is written after the credentials
            while not self.scheduler_file.exists():
                await asyncio.sleep(0.2)

    return Runner


class _Closing:
    """The runner as :func:`gpuscale.cluster.connect` closes it, with the credentials rank 0 wrote."""

    def __init__(self, runner, credentials: pathlib.Path | None):
        self.runner, self.credentials = runner, credentials
        self.scheduler_address = runner.scheduler_address

    def close(self) -> None:
        try:
            self.runner.close()
        finally:
            if self.credentials is not None:
                self.credentials.unlink(missing_ok=True)


class Srun(Kind, name="srun", cluster_class="dask_jobqueue.slurm.SLURMRunner"):
    """dask-jobqueue's ``SLURMRunner``: the tasks of an ``srun``, one role per rank."""

    def spec(self, plan) -> ClusterSpec:
        resolved, family, proto = plan.resolved, plan.family, plan.transport
        c = resolved.settings.cluster
        if proto.name != "tcp":
            raise UserError(
                f"cluster.deploy is srun, but --protocol {proto.name} is not wired for srun tasks",
                "use --protocol tcp (TLS by default) with --deploy srun",
            )
        gpu = plan.gpu_workers
        worker_class = "dask_cuda.CUDAWorker" if gpu else "distributed.Worker"
        worker_options: dict = {"nthreads": plan.layout.threads.value}
        if c.memory_limit != "auto":
            worker_options["memory_limit"] = c.memory_limit
        pool, rmm = rmm_pool(c, family) if gpu else (None, None)
        if pool is not None:
            worker_options["rmm_pool_size"] = pool
        ntasks = os.environ.get("SLURM_NTASKS")
        workers = int(ntasks) - 2 if ntasks and ntasks.isdigit() and not gpu else None
        kwargs = {
            "scheduler_file": str(scheduler_file()),
            "worker_class": worker_class,
            "worker_options": worker_options,
            "scheduler_options": {"dashboard_address": c.dashboard_address or ":0"},
        }
        choices = self.choices(
            plan,
            Decision(
                workers,
                "rule",
                f"{worker_class} on every srun task from rank 2 (rank 0: the "
                "scheduler, rank 1: this client)" + (": one per GPU it sees" if gpu else ""),
                "srun.workers",
                {"ntasks": ntasks},
            ),
            remote_memory_choice(resolved, "node"),
            rmm=rmm,
        )
        return spec_for(
            self,
            plan,
            workers=workers,
            rmm=rmm,
            notes=[
                "inside an allocation: srun -n N (N >= 3) gpuscale run WORKLOAD --deploy srun; rank 0 "
                "the scheduler, rank 1 this client, ranks 2.. workers, meeting through "
                f"{kwargs['scheduler_file']}"
            ],
            kwargs=kwargs,
            choices=choices,
        )

    def start(self, spec: ClusterSpec, security=None):
        from distributed import Client

        if not os.environ.get("SLURM_PROCID") or not os.environ.get("SLURM_JOB_ID"):
            raise UserError(
                "cluster.deploy is srun, but this process is not an srun task "
                "(no SLURM_PROCID / SLURM_JOB_ID)",
                "start it inside an allocation as `srun -n 3 gpuscale run WORKLOAD "
                "--deploy srun` (3 tasks or more), or use --deploy slurm",
            )
        try:
            Runner = _runner_class()
        except ImportError:
            raise missing_module(
                "dask_jobqueue",
                "cluster.deploy srun (dask-jobqueue's SLURMRunner)",
                "pip install 'gpuscale[slurm]'",
            ) from None

        kw = spec.kwargs
        sec = None
        creds = tls.beside(kw["scheduler_file"])
        if spec.security == "tls":
            sec = tls.every_role(creds)
            Runner.credentials = creds
        scheduler_options = {
            **kw["scheduler_options"],
            **({"security": sec, "protocol": "tls"} if sec else {}),
        }
        worker_options = {**kw["worker_options"], **({"security": sec} if sec else {})}

        def make():  # ranks other than 1 serve in here until the client is done, then exit
            return Runner(
                scheduler_file=kw["scheduler_file"],
                scheduler_options=scheduler_options,
                worker_class=kw["worker_class"],
                worker_options=worker_options,
            )

        runner = construct(spec, make)
        # SLURMRunner's own rpc to its scheduler has no credentials: its close would time out
        if sec is not None:
            from distributed import rpc

            runner.scheduler_comm = rpc(
                runner.scheduler_address, connection_args=sec.get_connection_args("client")
            )
        try:
            client = Client(runner.scheduler_address, security=sec)
        except BaseException:
            runner.close()
            raise
        return _Closing(runner, creds if sec else None), client
