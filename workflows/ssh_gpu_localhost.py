"""The ssh deploy target end to end on one machine that has no sshd: an SSH server of our own
on 127.0.0.1 (asyncssh, keys made for this run), then `gpuscale cluster up --deploy ssh`
through it, runs against the cluster's scheduler file, and `cluster down`.

What it does, in order:

1. Makes a host key and a client key in a temporary folder (asyncssh), authorizes the client
   key for the current user only, and serves SSH on 127.0.0.1 (a free port) from a background
   thread. Each command a client asks for runs as ``/bin/sh -c COMMAND`` in its own process
   group (``asyncio.create_subprocess_shell``) with its stdin, stdout, stderr and exit status
   forwarded; a signal the client sends (SSHCluster's ``kill()`` on close) goes to that group,
   and a client that goes away takes its group with it. That is what distributed's SSHCluster
   needs: ``uname`` (to pick the env syntax), then ``env DASK_INTERNAL_INHERIT_CONFIG=...
   python -m distributed.cli.dask_spec ...`` whose stderr it reads for the scheduler's and
   workers' addresses.
2. Writes a profile with ``cluster.deploy: ssh`` and the ``cluster.ssh`` port, username, client
   key and known-hosts file, and runs ``gpuscale cluster up --profile P --ssh-hosts
   127.0.0.1,127.0.0.1[,...] --backend B --scheduler-file F --json``: the scheduler on the
   first entry; GPU: one ``dask_cuda.CUDAWorker`` entry, one worker per GPU; CPU: ``--workers``
   entries of ``distributed.Nanny``. TLS is on (the default for ``cluster up``), its
   credentials beside the scheduler file.
3. Waits for the N workers, runs ``gpuscale run svd`` (with ``--bandwidth-probe on``: the
   preflight times a block between two workers when there are two) and ``gpuscale run
   groupby`` with ``--scheduler-file F --json``, and checks each record: valid, the family
   asked for, N workers on 127.0.0.1, TLS, every worker seeing a GPU (GPU), the transport per
   worker pair named (``cluster.pairs``).
4. ``gpuscale cluster down --scheduler-file F``; ``cluster up`` exits 0 and removes its files.

Prints a short table and writes everything to ``--out`` (JSON). Exit 0 when every check held.

    python workflows/ssh_gpu_localhost.py --out ssh.json               # GPU: one worker per GPU
    python workflows/ssh_gpu_localhost.py --backend cpu --workers 2    # CPU workers over ssh
    python workflows/ssh_gpu_localhost.py --smoke --out ssh.json       # CPU, tiny sizes (CI)
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import getpass
import json
import os
import pathlib
import queue
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time

import gpuscale

HOST = "127.0.0.1"
GPUSCALE_ROOT = str(pathlib.Path(gpuscale.__file__).resolve().parent.parent)
SIZES = {
    "gpu": {
        "svd": ["--rows", "2000000", "--cols", "100"],
        "groupby": ["--rows", "20000000", "--keys", "10000"],
    },
    "cpu": {"svd": ["--rows", "400000", "--cols", "50"], "groupby": ["--rows", "2000000", "--keys", "1000"]},
    "smoke": {"svd": ["--rows", "20000", "--cols", "10"], "groupby": ["--rows", "100000", "--keys", "100"]},
}


def ucx_run(cl: dict) -> bool:
    """Whether the record's cluster spoke ucx (its workers' addresses say so)."""
    return any(
        str(a).startswith("ucx://")
        for pr in ((cl.get("pairs") or {}).get("pairs") or [])
        for a in pr.get("between") or []
    )


def child_env() -> dict[str, str]:
    """The environment of everything this script starts: this gpuscale first on the path (a
    source checkout's copy, as imported here), output unbuffered."""
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(
        [GPUSCALE_ROOT] + [p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p and p != GPUSCALE_ROOT]
    )
    env["PYTHONUNBUFFERED"] = "1"
    return env


def _killpg(pid: int, sig: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pid, sig)


# ---------------------------------------------------------------------------------------
# an SSH server on 127.0.0.1
# ---------------------------------------------------------------------------------------
class LocalSSH:
    """asyncssh's server on 127.0.0.1 in a background thread: public-key login for ``user``
    with the client key made here, commands run in their own process groups."""

    def __init__(self, folder: pathlib.Path, user: str, env: dict[str, str]):
        import asyncssh

        self.folder, self.user, self.env = folder, user, env
        self.host_key = asyncssh.generate_private_key("ssh-ed25519")
        client_key = asyncssh.generate_private_key("ssh-ed25519")
        self.client_key_file = folder / "client_key"
        client_key.write_private_key(str(self.client_key_file))
        os.chmod(self.client_key_file, 0o600)
        self.authorized = folder / "authorized_keys"
        client_key.write_public_key(str(self.authorized))
        self.known_hosts = folder / "known_hosts"
        self.port: int | None = None
        self.commands: list[str] = []
        self.groups: set[int] = set()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._server = None
        self._ready = threading.Event()
        self._error: BaseException | None = None
        self._thread = threading.Thread(target=self._serve, name="local-ssh", daemon=True)

    # -- the server's side ------------------------------------------------------------
    def _serve(self) -> None:
        import asyncssh

        me = self

        class Server(asyncssh.SSHServer):
            def connection_made(self, conn):
                self._conn = conn

            def begin_auth(self, username: str) -> bool:
                if username == me.user:  # only this user's key, only for this user
                    self._conn.set_authorized_keys(str(me.authorized))
                return True

            def password_auth_supported(self) -> bool:
                return False

        loop = asyncio.new_event_loop()
        asyncio.set_event_loop(loop)
        self._loop = loop
        try:
            self._server = loop.run_until_complete(
                asyncssh.create_server(
                    Server,
                    HOST,
                    0,
                    server_host_keys=[self.host_key],
                    process_factory=self._handle,
                    encoding=None,
                    allow_scp=False,
                    agent_forwarding=False,
                    x11_forwarding=False,
                )
            )
            self.port = self._server.sockets[0].getsockname()[1]
        except BaseException as e:  # noqa: BLE001 - reported by start()
            self._error = e
            self._ready.set()
            return
        self._ready.set()
        loop.run_forever()
        loop.run_until_complete(loop.shutdown_asyncgens())
        loop.close()

    async def _handle(self, process) -> None:
        """One session: run its command in a process group, forward the streams and the exit
        status; a signal from the client goes to the group, and so does SIGTERM (then SIGKILL)
        when the client leaves first."""
        import asyncssh

        command = process.command
        if not command:
            process.stderr.write(b"this server runs commands, not shells\n")
            process.exit(1)
            return
        self.commands.append(command)
        proc = await asyncio.create_subprocess_shell(
            command,
            stdin=asyncio.subprocess.PIPE,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
            env=self.env,
            start_new_session=True,
        )
        self.groups.add(proc.pid)

        async def pump(source, target) -> None:
            while True:
                data = await source.read(65536)
                if not data:
                    break
                with contextlib.suppress(Exception):  # the channel may be closing
                    target.write(data)

        async def feed() -> None:
            while True:
                try:
                    data = await process.stdin.read(65536)
                except asyncssh.SignalReceived as s:
                    _killpg(proc.pid, getattr(signal, f"SIG{s.signal}", signal.SIGTERM))
                    continue
                except (asyncssh.BreakReceived, asyncssh.TerminalSizeChanged):
                    continue
                except Exception:  # noqa: BLE001 - the connection went away
                    break
                if not data:
                    break
                try:
                    proc.stdin.write(data)
                    await proc.stdin.drain()
                except (BrokenPipeError, ConnectionResetError):
                    break
            with contextlib.suppress(Exception):
                proc.stdin.close()

        pumps = [
            asyncio.ensure_future(pump(proc.stdout, process.stdout)),
            asyncio.ensure_future(pump(proc.stderr, process.stderr)),
        ]
        feeding = asyncio.ensure_future(feed())
        exited = asyncio.ensure_future(proc.wait())
        closed = asyncio.ensure_future(process.wait_closed())
        await asyncio.wait({exited, closed}, return_when=asyncio.FIRST_COMPLETED)
        if not exited.done():  # the client left: end what it started
            _killpg(proc.pid, signal.SIGTERM)
            try:
                await asyncio.wait_for(asyncio.shield(exited), 10)
            except asyncio.TimeoutError:
                _killpg(proc.pid, signal.SIGKILL)
                await exited
        await asyncio.gather(*pumps, return_exceptions=True)
        feeding.cancel()
        self.groups.discard(proc.pid)
        rc = proc.returncode
        with contextlib.suppress(Exception):
            process.exit(rc if rc >= 0 else 128 - rc)
        closed.cancel()

    # -- this script's side -----------------------------------------------------------
    def start(self) -> int:
        self._thread.start()
        if not self._ready.wait(30) or self._error is not None or self.port is None:
            raise SystemExit(f"the local SSH server did not start: {self._error!r}")
        pub = self.host_key.export_public_key().decode().split()[:2]
        self.known_hosts.write_text(f"[{HOST}]:{self.port} {' '.join(pub)}\n{HOST} {' '.join(pub)}\n")
        return self.port

    def stop(self) -> None:
        """Stop serving and end every process group a session left running."""
        loop = self._loop
        if loop is not None and loop.is_running():

            async def close():
                if self._server is not None:
                    self._server.close()
                loop.stop()

            asyncio.run_coroutine_threadsafe(close(), loop)
            self._thread.join(15)
        for pid in list(self.groups):
            _killpg(pid, signal.SIGKILL)


# ---------------------------------------------------------------------------------------
# the cluster and the runs
# ---------------------------------------------------------------------------------------
def gpuscale_cmd(*args: str) -> list[str]:
    return [sys.executable, "-m", "gpuscale", *map(str, args)]


def read_first_line(p: subprocess.Popen, timeout_s: float) -> str | None:
    """The first line ``p`` prints on stdout, or None if it exits or ``timeout_s`` passes first."""
    q: queue.Queue = queue.Queue()
    threading.Thread(target=lambda: q.put(p.stdout.readline()), daemon=True).start()
    try:
        line = q.get(timeout=timeout_s)
    except queue.Empty:
        return None
    return line or None


def wait_for_workers(scheduler_file: pathlib.Path, n: int, timeout_s: float) -> int:
    from distributed import Client

    from gpuscale.cluster import security

    creds = security.beside(scheduler_file)
    sec = security.load(str(creds)) if creds.exists() else None
    with Client(scheduler_file=str(scheduler_file), security=sec, timeout=30) as c:
        c.wait_for_workers(n, timeout=timeout_s)
        from gpuscale.cluster import workers

        return len(workers(c))


def check_record(rec: dict, workload: str, family: str, n: int, gpu: bool, tls: bool) -> list[str]:
    """What is wrong with a run's record (empty: nothing)."""
    wrong = []
    cl = rec.get("cluster") or {}
    if rec.get("valid") is not True:
        wrong.append(f"{workload}: not valid ({rec.get('valid')})")
    if rec.get("family") != family:
        wrong.append(f"{workload}: family {rec.get('family')}, not {family}")
    if (cl.get("running") or {}).get("workers") != n:
        wrong.append(f"{workload}: {(cl.get('running') or {}).get('workers')} workers, not {n}")
    hosts = cl.get("hosts") or {}
    # one host; over tcp/tls the workers listen on 127.0.0.1, over ucx on this machine's own
    # interface address (UCX picks it), so the host is the one the record names
    host = next(iter(hosts), HOST)
    if len(hosts) != 1 or hosts[host]["workers"] != n or (not ucx_run(cl) and host != HOST):
        wrong.append(
            f"{workload}: hosts { ({h: v.get('workers') for h, v in hosts.items()}) }, not {n} on "
            f"{'one host' if ucx_run(cl) else HOST}"
        )
    if cl.get("tls") is not tls:
        wrong.append(f"{workload}: TLS was {'off' if tls else 'on'}, not {'on' if tls else 'off'}")
    pre = cl.get("preflight") or {}
    seen = (pre.get("hosts") or {}).get(host, {}).get("gpus") or []
    if gpu and (len(seen) != n or not all(g > 0 for g in seen)):
        wrong.append(f"{workload}: GPUs seen per worker {seen}")
    pairs = (cl.get("pairs") or {}).get("pairs")
    if pairs is None or len(pairs) != n * (n - 1) // 2:
        wrong.append(
            f"{workload}: cluster.pairs lists {None if pairs is None else len(pairs)} pair(s) of {n} workers"
        )
    return wrong


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--backend", choices=["gpu", "cpu"], default="gpu")
    ap.add_argument(
        "--workers",
        type=int,
        default=2,
        help="CPU: worker entries (processes); GPU: ignored (one CUDAWorker entry: one worker per GPU)",
    )
    ap.add_argument("--protocol", default="tcp", help="tcp (TLS, the default) or ucx (needs --security off)")
    ap.add_argument("--security", default=None, help="auto | tls | off (default: cluster up's, TLS)")
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--smoke", action="store_true", help="CPU workers over ssh to localhost, tiny sizes (CI)")
    ap.add_argument("--timeout", type=float, default=300, help="seconds for the cluster to come up")
    ap.add_argument("--out", "--json", dest="out", default=None, help="write everything here (JSON)")
    ap.add_argument("--keep", default=None, help="keep the keys, profile, logs and records in this folder")
    args = ap.parse_args()
    import importlib.util

    if importlib.util.find_spec("asyncssh") is None:
        raise SystemExit("this workflow needs asyncssh: pip install 'gpuscale[ssh]'")
    backend = "cpu" if args.smoke else args.backend
    gpu = backend == "gpu"
    sizes = SIZES["smoke" if args.smoke else backend]
    repeat = 1 if args.smoke else args.repeat
    from gpuscale import backends, machine

    family = backends.select(backend, check=False).family.name
    n = len(machine.gpus()) if gpu else args.workers
    if n < 1:
        raise SystemExit(
            "no GPU is visible here (gpuscale.machine.gpus()); use --backend cpu"
            if gpu
            else "--workers must be at least 1"
        )
    entries = 1 if gpu else n
    hosts = ",".join([HOST] * (1 + entries))

    folder = pathlib.Path(args.keep or tempfile.mkdtemp(prefix="gpuscale-sshlocal-")).resolve()
    folder.mkdir(parents=True, exist_ok=True)
    env = child_env()
    user = getpass.getuser()
    out: dict = {
        "ok": False,
        "backend": backend,
        "family": family,
        "protocol": args.protocol,
        "workers_expected": n,
        "gpus": len(machine.gpus()),
        "ssh": {"host": HOST, "user": user},
        "hosts": hosts,
        "runs": [],
        "problems": [],
    }
    t0 = time.perf_counter()
    ssh = LocalSSH(folder, user, env)
    up: subprocess.Popen | None = None
    sched = folder / "scheduler.json"
    try:
        port = ssh.start()
        out["ssh"]["port"] = port
        profile = folder / "ssh-localhost.yaml"
        profile.write_text(
            json.dumps(
                {
                    "version": 1,
                    "description": "this machine over its own SSH server",
                    "gpuscale": {
                        "cluster": {
                            "deploy": "ssh",
                            "ssh": {
                                "port": port,
                                "username": user,
                                "client-keys": [str(ssh.client_key_file)],
                                "known-hosts": str(ssh.known_hosts),
                            },
                        }
                    },
                }
            )
        )
        up_args = [
            "cluster",
            "up",
            "--profile",
            profile,
            "--ssh-hosts",
            hosts,
            "--backend",
            backend,
            "--protocol",
            args.protocol,
            "--scheduler-file",
            sched,
            "--json",
        ]
        if args.security:
            up_args += ["--security", args.security]
        if not gpu:
            up_args += ["--threads-per-worker", "1"]
        t_up = time.perf_counter()
        up = subprocess.Popen(
            gpuscale_cmd(*up_args),
            cwd=str(folder),
            env=env,
            start_new_session=True,
            stdout=subprocess.PIPE,
            stderr=open(folder / "up.err", "w"),
            text=True,
        )
        line = read_first_line(up, args.timeout)
        if not line or not line.startswith("{"):
            raise RuntimeError(
                f"cluster up gave no JSON line (rc {up.poll()}): {line!r}; "
                f"{(folder / 'up.err').read_text()[-2000:]}"
            )
        out["cluster_up"] = json.loads(line)
        out["workers_seen"] = wait_for_workers(sched, n, args.timeout)
        out["up_s"] = round(time.perf_counter() - t_up, 2)
        for workload in ("svd", "groupby"):
            extra = ["--bandwidth-probe", "on"] if workload == "svd" else []
            t1 = time.perf_counter()
            p = subprocess.run(
                gpuscale_cmd(
                    "run",
                    workload,
                    *sizes[workload],
                    "--backend",
                    backend,
                    "--scheduler-file",
                    sched,
                    "--repeat",
                    repeat,
                    "--warmup",
                    1,
                    "--results-dir",
                    folder / "records",
                    "--json",
                    *extra,
                ),
                cwd=str(folder),
                env=env,
                capture_output=True,
                text=True,
                timeout=900,
            )
            row: dict = {
                "workload": workload,
                "rc": p.returncode,
                "wall_s": round(time.perf_counter() - t1, 2),
            }
            if p.returncode != 0:
                row["stderr"] = p.stderr[-2000:]
                out["problems"].append(f"{workload}: exit {p.returncode}: {p.stderr.strip()[-500:]}")
            else:
                rec = json.loads(p.stdout)
                cl = rec["cluster"]
                probe = (cl.get("preflight") or {}).get("probe") or {}
                row.update(
                    valid=rec["valid"],
                    family=rec["family"],
                    median_s=rec["median_s"],
                    workers=(cl.get("running") or {}).get("workers"),
                    hosts={h: v["workers"] for h, v in (cl.get("hosts") or {}).items()},
                    gpus_per_worker=[
                        g
                        for h in ((cl.get("preflight") or {}).get("hosts") or {}).values()
                        for g in h.get("gpus") or []
                    ],
                    worker_gpus=(cl.get("preflight") or {}).get("worker_gpus"),
                    tls=cl.get("tls"),
                    pairs=cl.get("pairs"),
                    probe={
                        "value": probe.get("value"),
                        "rule": probe.get("rule"),
                        "pairs": probe.get("pairs"),
                    },
                    runner=(rec.get("info") or {}).get("runner"),
                    record=rec.get("path"),
                )
                out["problems"] += check_record(rec, workload, family, n, gpu, tls=args.security != "off")
            out["runs"].append(row)
        down = subprocess.run(
            gpuscale_cmd("cluster", "down", "--scheduler-file", sched),
            cwd=str(folder),
            env=env,
            capture_output=True,
            text=True,
            timeout=120,
        )
        out["down"] = {
            "rc": down.returncode,
            "stderr": down.stderr.strip()[-500:],
            "stdout": down.stdout.strip(),
        }
        if down.returncode != 0:
            out["problems"].append(f"cluster down: exit {down.returncode}: {down.stderr.strip()[-300:]}")
        try:
            out["up_rc"] = up.wait(timeout=120)
        except subprocess.TimeoutExpired:
            out["up_rc"] = None
        if out["up_rc"] != 0:
            out["problems"].append(
                f"cluster up exited {out['up_rc']}: {(folder / 'up.err').read_text()[-500:]}"
            )
        deadline = time.monotonic() + 30
        while sched.exists() and time.monotonic() < deadline:
            time.sleep(0.2)
        if sched.exists():
            out["problems"].append("the scheduler file was left behind")
    except Exception as e:  # noqa: BLE001 - reported in the output and the exit status
        out["problems"].append(f"{type(e).__name__}: {e}")
    finally:
        if up is not None and up.poll() is None:
            _killpg(up.pid, signal.SIGTERM)
            try:
                up.wait(timeout=60)
            except subprocess.TimeoutExpired:
                _killpg(up.pid, signal.SIGKILL)
        ssh.stop()
        out["ssh"]["commands"] = len(ssh.commands)
        out["wall_s"] = round(time.perf_counter() - t0, 2)
        out["ok"] = not out["problems"] and len(out["runs"]) == 2
        if not args.keep:
            shutil.rmtree(folder, ignore_errors=True)
    print(
        f"ssh on {HOST}:{out['ssh'].get('port')} as {user}: {hosts} -> cluster up {out.get('up_s', '-')} s, "
        f"{out.get('workers_seen', '-')} worker(s) of {n} ({backend}, {args.protocol})"
    )
    print(f"{'workload':9s} {'valid':6s} {'median_s':>9s} {'workers':>7s}  {'GPUs seen':10s} pairs / probe")
    for r in out["runs"]:
        probe = [
            f"{m['transport']}: {m.get('gib_s', m.get('not_measured'))} GiB/s"
            for m in ((r.get("probe") or {}).get("pairs") or [])
        ]
        labels = sorted({p["label"] for p in ((r.get("pairs") or {}).get("pairs") or [])})
        median = r.get("median_s")
        print(
            f"{r['workload']:9s} {str(r.get('valid', 'rc ' + str(r['rc']))):6s} "
            f"{(f'{median:.3f}' if median is not None else '-'):>9s} {str(r.get('workers', '-')):>7s}  "
            f"{str(r.get('gpus_per_worker') or '-'):10s} {', '.join(labels) or '-'}"
            f"{'; probe ' + ', '.join(probe) if probe else ''}"
        )
    print(
        f"cluster down rc {out.get('down', {}).get('rc')}, cluster up exit {out.get('up_rc')}; "
        f"{out['wall_s']} s in all; {'OK' if out['ok'] else 'FAILED: ' + '; '.join(out['problems'])}"
    )
    if args.out:
        with open(args.out, "w") as f:
            json.dump(out, f, indent=1, default=str)
    if not out["ok"]:
        raise SystemExit(1)


if __name__ == "__main__":
    main()
