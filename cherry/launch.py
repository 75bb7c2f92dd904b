"""Ranks of a data-parallel run: who am I (`world_from_env`), joining the group (`process_group`), and
starting N ranks on this machine (`launch`).

One rank is one process (one device). Three ways to get them, one code:
- ``cherry train --nproc N`` (or the Python API `launch`) starts N processes here (spawn), each with
  the environment torchrun would give it (``RANK``, ``WORLD_SIZE``, ``LOCAL_RANK``, ``MASTER_ADDR``,
  ``MASTER_PORT`` on a free local port);
- ``torchrun --nproc-per-node N -m cherry train ...`` sets that environment itself;
- ``srun -n N cherry train ...`` sets ``SLURM_PROCID``, ``SLURM_STEP_NUM_TASKS``, ``SLURM_LOCALID`` and the
  step's node list; the first node of the list is the rendezvous host (``MASTER_ADDR`` overrides it) and
  the port derives from the job id (``MASTER_PORT`` overrides it).

No hang: the process group has a timeout on every collective (``CHERRY_DIST_TIMEOUT_S``, default
600 s); `launch` watches its ranks, and at the first failure gives the others a short grace to report,
terminates them, and raises one `RankFailed` naming the earliest failing rank and its error (a peer's
"connection closed" is a consequence, not the cause).
"""
from __future__ import annotations

import os
import queue as queue_module
import re
import socket
import time
import traceback
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import timedelta
from typing import Any, Callable, Iterator, Mapping, Optional, Sequence

DEFAULT_COLLECTIVE_TIMEOUT_S = 600.0
_DEFAULT_SLURM_PORT_BASE = 29500


class RankFailed(RuntimeError):
    """A rank of a launched job failed; the message is one line: which rank, and its error."""


@dataclass(frozen=True)
class World:
    """This process's place in a data-parallel job."""

    rank: int
    world_size: int
    local_rank: int
    master_addr: str
    master_port: int

    def __post_init__(self) -> None:
        if not 0 <= self.rank < self.world_size:
            raise ValueError(f"rank {self.rank} is outside world size {self.world_size}")


def _int_env(env: Mapping[str, str], key: str) -> int:
    try:
        return int(env[key])
    except ValueError:
        raise ValueError(f"environment variable {key}={env[key]!r}: expected an integer") from None


def first_host(nodelist: str) -> str:
    """The first host of a SLURM node list: ``"gpu[03-05,9],cpu1"`` -> ``"gpu03"``."""
    match = re.match(r"^([^,\[]+)(?:\[([^\]]+)\])?", nodelist.strip())
    if not match:
        raise ValueError(f"SLURM node list {nodelist!r}: expected hosts like node1 or node[1-4]")
    prefix, ranges = match.group(1), match.group(2)
    if ranges is None:
        return prefix
    return prefix + re.split(r"[-,]", ranges)[0]


def world_from_env(env: Optional[Mapping[str, str]] = None) -> Optional[World]:
    """The world a launcher put this process in (torchrun's variables first, then srun's), or None
    when there is none or it has one rank (a plain single-process run)."""
    env = os.environ if env is None else env
    if "RANK" in env and "WORLD_SIZE" in env:
        rank, size = _int_env(env, "RANK"), _int_env(env, "WORLD_SIZE")
        local = _int_env(env, "LOCAL_RANK") if "LOCAL_RANK" in env else rank
        addr = env.get("MASTER_ADDR", "127.0.0.1")
        port = _int_env(env, "MASTER_PORT") if "MASTER_PORT" in env else 29500
    elif "SLURM_PROCID" in env and "SLURM_STEP_NUM_TASKS" in env:
        # SLURM_STEP_NUM_TASKS, not SLURM_NTASKS: a batch script's own shell has SLURM_NTASKS and
        # SLURM_PROCID=0 but is no rank of an srun step.
        rank, size = _int_env(env, "SLURM_PROCID"), _int_env(env, "SLURM_STEP_NUM_TASKS")
        local = _int_env(env, "SLURM_LOCALID") if "SLURM_LOCALID" in env else 0
        nodes = env.get("SLURM_STEP_NODELIST") or env.get("SLURM_JOB_NODELIST") or "127.0.0.1"
        addr = env.get("MASTER_ADDR") or first_host(nodes)
        if "MASTER_PORT" in env:
            port = _int_env(env, "MASTER_PORT")
        else:  # one port per job, so two jobs sharing a node do not meet
            job = _int_env(env, "SLURM_JOB_ID") if "SLURM_JOB_ID" in env else 0
            port = _DEFAULT_SLURM_PORT_BASE + job % 20000
    else:
        return None
    if size < 1:
        raise ValueError(f"world size {size} from the environment: expected an integer >= 1")
    return None if size == 1 else World(rank, size, local, addr, port)


def collective_timeout_s(env: Optional[Mapping[str, str]] = None) -> float:
    env = os.environ if env is None else env
    text = env.get("CHERRY_DIST_TIMEOUT_S")
    if text is None:
        return DEFAULT_COLLECTIVE_TIMEOUT_S
    try:
        value = float(text)
    except ValueError:
        value = -1.0
    if not value > 0:
        raise ValueError(f"CHERRY_DIST_TIMEOUT_S={text!r}: expected a positive number of seconds")
    return value


@contextmanager
def process_group(world: World, device: str = "cpu", timeout_s: Optional[float] = None) -> Iterator[World]:
    """Join ``world`` (gloo on a CPU, NCCL on GPUs, device ``cuda:local_rank``) for the block."""
    import torch
    import torch.distributed as dist

    if device not in ("cpu", "cuda"):
        raise ValueError(f"device must be cpu or cuda, got {device!r}")
    if device == "cuda":
        torch.cuda.set_device(world.local_rank % max(torch.cuda.device_count(), 1))
    timeout = timedelta(seconds=timeout_s if timeout_s is not None else collective_timeout_s())
    dist.init_process_group("nccl" if device == "cuda" else "gloo",
                            init_method=f"tcp://{world.master_addr}:{world.master_port}",
                            rank=world.rank, world_size=world.world_size, timeout=timeout)
    try:
        yield world
    finally:
        dist.destroy_process_group()


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _one_line(exc: BaseException) -> str:
    text = " ".join(str(exc).split())
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


def _rank_main(rank: int, nproc: int, port: int, threads: int, fn: Callable, args: tuple, results) -> None:
    os.environ.update({"RANK": str(rank), "WORLD_SIZE": str(nproc), "LOCAL_RANK": str(rank),
                       "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(port)})
    try:
        import torch

        if threads > 0:
            torch.set_num_threads(threads)
        value = fn(*args)
    except BaseException as exc:  # noqa: BLE001 - reported to the launcher, then this rank exits 1
        results.put((rank, "error", time.time(), _one_line(exc), traceback.format_exc()))
        raise SystemExit(1)
    results.put((rank, "ok", time.time(), value, None))


def launch(fn: Callable[..., Any], args: Sequence[Any] = (), nproc: int = 2, timeout_s: Optional[float] = None,
           grace_s: float = 5.0) -> list[Any]:
    """Run ``fn(*args)`` in ``nproc`` spawned ranks of one world on this machine; return their values
    in rank order. ``fn`` and ``args`` must pickle (a module-level function, plain values).

    CPU threads: the ranks share the job's cores (``OMP_NUM_THREADS``, else the machine's): each gets
    ``cores // nproc`` threads (at least one) instead of oversubscribing them. A rank that raises or dies ends the job:
    `RankFailed` (one line) after at most ``grace_s``; ``timeout_s`` bounds the whole job.
    """
    import multiprocessing

    if isinstance(nproc, bool) or not isinstance(nproc, int) or nproc < 1:
        raise ValueError(f"nproc must be an int >= 1, got {nproc!r}")
    if not callable(fn):
        raise TypeError(f"fn must be callable, got {type(fn).__name__}")
    ctx = multiprocessing.get_context("spawn")
    results = ctx.Queue()
    port = _free_port()
    omp = os.environ.get("OMP_NUM_THREADS", "")
    cores = int(omp) if omp.isdigit() and int(omp) > 0 else (os.cpu_count() or 1)
    threads = max(1, cores // nproc)
    procs = [ctx.Process(target=_rank_main, args=(r, nproc, port, threads, fn, tuple(args), results),
                         name=f"cherry-rank-{r}", daemon=False) for r in range(nproc)]
    for p in procs:
        p.start()
    values: dict[int, Any] = {}
    failures: dict[int, tuple[float, str, Optional[str]]] = {}
    deadline = None if timeout_s is None else time.monotonic() + timeout_s
    first_failure_at = None
    try:
        while len(values) < nproc:
            try:
                rank, kind, when, payload, tb = results.get(timeout=0.1)
                if kind == "ok":
                    values[rank] = payload
                else:
                    failures[rank] = (when, payload, tb)
            except queue_module.Empty:
                pass
            for r, p in enumerate(procs):  # died without a report: a signal, os._exit, out of host memory
                if r not in values and r not in failures and p.exitcode not in (None, 0) and results.empty():
                    failures[r] = (time.time(), f"exited with code {p.exitcode} without reporting", None)
            now = time.monotonic()
            if failures and first_failure_at is None:
                first_failure_at = now
            if first_failure_at is not None and (now - first_failure_at > grace_s
                                                 or len(failures) + len(values) == nproc):
                break
            if deadline is not None and now > deadline:
                raise RankFailed(f"job of {nproc} ranks exceeded timeout_s={timeout_s:g} s "
                                 f"({len(values)} ranks had finished)")
    finally:
        for p in procs:
            if p.is_alive():
                p.terminate()
        for p in procs:
            p.join(timeout=10)
            if p.is_alive():
                p.kill()
                p.join()
        results.close()
    if failures:
        rank = min(failures, key=lambda r: failures[r][0])
        raise RankFailed(f"rank {rank} of {nproc} failed: {failures[rank][1]}")
    return [values[r] for r in range(nproc)]


__all__ = ["DEFAULT_COLLECTIVE_TIMEOUT_S", "RankFailed", "World", "collective_timeout_s", "first_host", "launch",
           "process_group", "world_from_env"]
