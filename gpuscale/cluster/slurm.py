"""Clusters in SLURM jobs: dask-jobqueue's :class:`~dask_jobqueue.SLURMCluster`
(``cluster.deploy: slurm``; docs/guide/beyond-one-host.md). The scheduler runs in this
process; each job runs ``processes`` workers (GPU: ``dask cuda worker``, one per GPU).
"""

from __future__ import annotations

import shlex
import sys

from ..decision import Decision
from ..errors import UserError, missing_module
from ..plan.memory import rmm_pool, spilling_choice
from . import ClusterSpec, construct, per_host_entry, spec_for
from . import security as tls
from .kind import Kind

GPU_WORKER = "dask cuda worker"  # run as `python -m dask cuda worker`


def _job_kwargs(spec: ClusterSpec, security) -> dict:
    """The job class's keyword arguments, as SLURMCluster hands them to each job."""
    job = {k: v for k, v in spec.kwargs.items() if k not in ("n_workers", "scheduler_options")}
    job["protocol"] = "tls://" if security is not None else None
    job["security"] = security
    return job


class Slurm(Kind, name="slurm", cluster_class="dask_jobqueue.SLURMCluster"):
    """dask-jobqueue's ``SLURMCluster``: workers in SLURM jobs, the scheduler in this process."""

    def spec(self, plan) -> ClusterSpec:
        resolved, family, proto = plan.resolved, plan.family, plan.transport
        src = resolved.sources
        c, sl = resolved.settings.cluster, resolved.settings.cluster.slurm
        if proto.name != "tcp":
            raise UserError(
                f"cluster.deploy is slurm, but --protocol {proto.name} is not wired for SLURM jobs",
                "use --protocol tcp (TLS by default) with --deploy slurm",
            )
        if sl.cores < sl.processes:
            raise UserError(
                f"cluster.slurm.cores is {sl.cores} but cluster.slurm.processes is {sl.processes}: "
                "each worker process needs at least one core",
                "raise cores or lower processes",
            )
        gpu = plan.gpu_workers
        threads = plan.layout.threads.value
        workers = sl.jobs * sl.processes
        extra: list[str] = []
        pool, rmm = rmm_pool(c, family) if gpu else (None, None)
        if pool is not None:
            extra += ["--rmm-pool-size", str(pool)]
            if c.rmm.maximum_pool_size is not None:
                extra += ["--rmm-maximum-pool-size", str(c.rmm.maximum_pool_size)]
        knobs = plan.gpu_knobs  # as on local GPUs, as flags; None for CPU workers
        prologue: list[str] = []
        if knobs is not None:
            for k, v in knobs.options.items():
                flag = "--" + k.replace("_", "-")
                if isinstance(v, bool):
                    extra.append(flag if v else flag.replace("--enable-", "--disable-"))
                else:
                    extra += [flag, str(v)]
            prologue = [f"export {k}={shlex.quote(v)}" for k, v in knobs.environ.items()]
        job = {
            "cores": sl.cores,
            "memory": sl.memory,
            "processes": sl.processes,
            "queue": sl.queue,
            "account": sl.account,
            "walltime": sl.walltime,
            "job_extra_directives": list(sl.job_extra),
            "python": sl.python or sys.executable,
            "log_directory": sl.log_directory,
            "worker_extra_args": extra,
            "job_name": "gpuscale-worker",
            **({"job_script_prologue": prologue} if prologue else {}),
        }
        if gpu:
            job["worker_command"] = GPU_WORKER
        scheduler_options: dict = {"dashboard_address": c.dashboard_address or ":0"}
        if c.host:
            scheduler_options["host"] = c.host
        kwargs = {"n_workers": workers, "scheduler_options": scheduler_options, **job}
        worker = (
            f"`python -m {GPU_WORKER}` (one worker per GPU of the node)"
            if gpu
            else "dask-jobqueue's default worker (python -m distributed.cli.dask_worker)"
        )
        per_job = f"{sl.cores} core(s), {sl.memory}, {sl.processes} worker process(es) of {threads} thread(s)"
        choices = self.choices(
            plan,
            Decision(
                None if gpu else workers,
                "rule",
                f"{worker} in each job: {'one per GPU' if gpu else f'{sl.jobs} x {sl.processes}'}",
                "slurm.workers",
            ),
            Decision(
                sl.memory,
                src.get("cluster.slurm.memory", "default"),
                f"per job, split between its {sl.processes} worker process(es)",
                "slurm.memory",
            ),
            where={
                "jobs": Decision(
                    sl.jobs,
                    src.get("cluster.slurm.jobs", "default"),
                    f"{sl.jobs} SLURM job(s) submitted at start, each {per_job}",
                    "slurm.jobs",
                )
            },
            rmm=rmm,
            rest=knobs.choices if knobs is not None else {"spilling": spilling_choice(family)},
        )
        where = f"partition {sl.queue}" if sl.queue else "the default partition"
        return spec_for(
            self,
            plan,
            workers=None if gpu else workers,
            memory_limit=sl.memory,
            rmm=rmm,
            notes=[
                f"scheduler in this process; workers: {worker} in {sl.jobs} SLURM job(s) on {where} (sbatch)"
            ],
            kwargs=kwargs,
            choices=choices,
        )

    def start(self, spec: ClusterSpec, security=None):
        from distributed import Client

        try:
            from dask_jobqueue import SLURMCluster
        except ImportError:
            raise missing_module(
                "dask_jobqueue",
                "cluster.deploy slurm (dask-jobqueue's SLURMCluster)",
                "pip install 'gpuscale[slurm]'",
            ) from None

        sec = None
        if spec.security == "tls":
            if not spec.credentials:
                raise UserError(
                    "a SLURM cluster with TLS needs its credentials in a file the compute nodes read",
                    "give `cluster up` a --scheduler-file on a filesystem the nodes share (the "
                    "credentials go beside it), or --security off on a network you trust",
                )
            sec = tls.every_role(spec.credentials)
        kwargs = dict(spec.kwargs)
        job = _job_kwargs(spec, sec)
        cluster = construct(
            spec,
            lambda: SLURMCluster(
                n_workers=kwargs["n_workers"],
                scheduler_options=kwargs["scheduler_options"],
                security=sec,
                protocol=job.pop("protocol"),
                **{k: v for k, v in job.items() if k != "security"},
            ),
        )
        try:
            return cluster, Client(cluster, security=sec)
        except BaseException:
            cluster.close()
            raise

    def commands(self, spec: ClusterSpec) -> list[str]:
        """The job script SLURMCluster submits for this spec, line by line (dask-jobqueue's
        ``SLURMJob.job_script()``; nothing is started), with placeholders for what is known at
        start only."""
        try:
            from dask_jobqueue.slurm import SLURMJob
        except ImportError:
            return ["(the job script needs dask-jobqueue: pip install 'gpuscale[slurm]')"]

        sec = tls.every_role(spec.credentials or "CREDENTIALS_FILE") if spec.security == "tls" else None
        scheme = "tls" if sec is not None else "tcp"
        job = SLURMJob(f"{scheme}://SCHEDULER_ADDRESS", name="WORKER_NAME", **_job_kwargs(spec, sec))
        return job.job_script().splitlines()

    def per_host(self, spec: ClusterSpec) -> dict[str, dict]:
        """The scheduler on this machine, and what the workers on each job's node get."""
        kw = spec.kwargs
        gpu = kw.get("worker_command") == GPU_WORKER
        jobs = spec.choices["jobs"].value
        node = f"each SLURM job's node ({jobs} job(s))"
        cls = f"python -m {GPU_WORKER}" if gpu else "python -m distributed.cli.dask_worker"
        workers = "one per GPU of the node" if gpu else kw["processes"]
        mem = spec.choices["memory_limit"].record()
        return {
            "(this machine)": {"scheduler": True, "worker_entries": 0},
            node: {
                "scheduler": False,
                "worker_entries": 1,
                **per_host_entry(
                    spec, cls, workers, spec.threads_per_worker, memory=f"{mem['value']} {mem['rule']}"
                ),
            },
        }
