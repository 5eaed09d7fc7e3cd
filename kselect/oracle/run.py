"""Run vLLM's own chain over the oracle grid: batches, warm workers, resumable, one record.

The grid is cut into batches of one capability each (vLLM reads the capability once per
process). Each worker is a process of the release's python on kselect/oracle/worker.py, kept
alive from batch to batch (vLLM imported once); a worker takes the next batch of its own
capability, or starts afresh on the capability with the most batches left. Local processes by
default (`jobs`), or Ray actors (`ray_address`; the optional extra `kselect[ray]`), each actor
owning one such process (`local` starts Ray on this machine; on other nodes the release's venv and the
model folders must be at the driver's paths, e.g. a shared file system). Every finished batch is written at
once to `<out>.parts/`, so a stopped run resumes where it was; the record is then written in grid order with
a fixed serialization, byte-identical however the grid was run.
"""

from __future__ import annotations

import gzip
import hashlib
import json
import os
import subprocess
import sys
import tempfile
import threading
import time
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from kselect.oracle.cells import Cell

WORKER = Path(__file__).resolve().parent / "worker.py"


@dataclass(frozen=True)
class Batch:
    id: str
    cc: str
    cells: tuple[Cell, ...]


def make_batches(cells: Sequence[Cell], size: int) -> list[Batch]:
    """Cells in grid order, cut into batches of one capability, at most `size` cells each."""
    by_cc: dict[str, list[Cell]] = {}
    for c in cells:
        by_cc.setdefault(c.cc, []).append(c)
    out = []
    for cc, cs in by_cc.items():
        for i in range(0, len(cs), size):
            chunk = tuple(cs[i:i + size])
            digest = hashlib.sha1("\n".join(c.key for c in chunk).encode()).hexdigest()[:12]
            out.append(Batch(f"cc{cc}-{digest}", cc, chunk))
    return out


# ------------------------------------------------------------------------- the record


def dumps(record: dict) -> str:
    """One record line, the same bytes whatever produced it."""
    return json.dumps(record, sort_keys=True, ensure_ascii=False) + "\n"


def write_record(path: Path, records: dict[str, dict], cells: Sequence[Cell]) -> None:
    """The record in grid order; gzip without a timestamp or name when `path` ends in .gz."""
    from kselect.selector.base.files import atomic_write

    body = "".join(dumps(records[c.key]) for c in cells).encode()
    if path.suffix == ".gz":
        body = gzip.compress(body, compresslevel=9, mtime=0)
    atomic_write(path, body)


def read_lines(path: Path) -> dict[str, dict]:
    """Records by key from a JSONL (optionally .gz); an unterminated last line is ignored; none if no such file.
    RecordError (kselect/oracle/records.py) for a file that is no record."""
    from kselect.oracle.records import exists, records

    return {r["key"]: r for r in records(path, complete_only=True)} if exists(path) else {}


class Parts:
    """`<out>.parts/`: one file per finished batch (written atomically), read back on resume."""

    def __init__(self, out: Path):
        self.dir = out.with_name(out.name + ".parts")
        self._lock = threading.Lock()

    def done(self) -> dict[str, dict]:
        recs: dict[str, dict] = {}
        for p in sorted(self.dir.glob("batch-*.jsonl")):
            recs.update(read_lines(p))
        return recs

    def add(self, batch: Batch, records: list[dict], seconds: float) -> None:
        from kselect.selector.base.files import atomic_write

        with self._lock:
            self.dir.mkdir(parents=True, exist_ok=True)
            atomic_write(self.dir / f"batch-{batch.id}.jsonl", "".join(dumps(r) for r in records))
            with open(self.dir / "timings.jsonl", "a") as f:  # how long each batch took (not the record)
                f.write(json.dumps({"batch": batch.id, "cc": batch.cc, "cells": len(records),
                                    "seconds": seconds}) + "\n")

    def remove(self) -> None:
        import shutil

        shutil.rmtree(self.dir, ignore_errors=True)


# ------------------------------------------------------------------------- workers


class WorkerError(RuntimeError):
    """A worker process died or answered out of protocol (its log's tail in the message)."""


class RayUnavailable(RuntimeError):
    """--ray-address names no Ray cluster this process can join (or Ray could not start one here)."""


def connect_ray(address: str):
    """Join the Ray cluster at `address` (`auto`, host:port, ray://...) or, for `local`, start one on this machine.
    Returns (the ray module, whether this call started Ray here); Ray is imported here only (kselect[ray])."""
    import ray

    started = address == "local" and not ray.is_initialized()
    # a new local instance takes options a connection to a running cluster refuses
    options = {"include_dashboard": False} if address == "local" else {}
    try:
        ray.init(address=address, ignore_reinit_error=True, log_to_driver=False, **options)
    except (ConnectionError, ValueError, RuntimeError, TimeoutError) as e:
        raise RayUnavailable(f"--ray-address {address}: Ray did not connect ({type(e).__name__}: "
                             f"{' '.join(str(e).split())[:300]}); allowed: `local` (start Ray on this machine), "
                             "`auto` (a cluster started here with `ray start --head`) or a cluster's host:port.") from None
    return ray, started


class LocalWorker:
    """One release-python process on worker.py for one capability."""

    def __init__(self, cmd: list[str], cc: str, log_dir: Path, env: dict | None = None):
        self.cc = cc
        log_dir.mkdir(parents=True, exist_ok=True)
        self.log = log_dir / f"worker-cc{cc}-{os.getpid()}-{threading.get_ident()}.log"
        r, w = os.pipe()
        with open(self.log, "ab") as log:
            self.proc = subprocess.Popen([*cmd, "--cc", cc, "--result-fd", str(w)], stdin=subprocess.PIPE,
                                         stdout=log, stderr=log, pass_fds=(w,), env=env, text=True)
        os.close(w)
        self.answers = os.fdopen(r, "r")

    def run(self, payload: dict) -> dict:
        try:
            self.proc.stdin.write(json.dumps(payload) + "\n")
            self.proc.stdin.flush()
        except BrokenPipeError:
            pass
        line = self.answers.readline()
        if not line:
            self.proc.wait()
            raise WorkerError(f"the vLLM worker for cc {self.cc} exited ({self.proc.returncode}) during batch "
                              f"{payload['id']}; its log {self.log} ends:\n{_tail(self.log)}")
        ans = json.loads(line)
        if ans.get("id") != payload["id"]:
            raise WorkerError(f"the vLLM worker answered batch {ans.get('id')!r} to {payload['id']!r}")
        return ans

    def kill(self) -> None:
        self.proc.kill()

    def close(self) -> None:
        try:
            self.proc.stdin.close()
        except OSError:
            pass
        try:
            self.proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        self.answers.close()


def _tail(path: Path, n: int = 20) -> str:
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-n:])
    except OSError:
        return ""


class RayWorker:
    """A Ray actor that owns one LocalWorker (the release's python on the actor's node)."""

    _actor_cls = None

    def __init__(self, cmd: list[str], cc: str, log_dir: Path, env: dict | None = None):
        import ray

        if RayWorker._actor_cls is None:
            RayWorker._actor_cls = ray.remote(num_cpus=1)(_ActorBody)
        self._ray = ray
        self.actor = RayWorker._actor_cls.remote(cmd, cc, str(log_dir), env)

    def run(self, payload: dict) -> dict:
        return self._ray.get(self.actor.run.remote(payload))

    def kill(self) -> None:
        self._ray.kill(self.actor)

    def close(self) -> None:
        try:
            self._ray.get(self.actor.close.remote())
        finally:
            self._ray.kill(self.actor)


class _ActorBody:
    def __init__(self, cmd, cc, log_dir, env):
        self.w = LocalWorker(cmd, cc, Path(log_dir), env)

    def run(self, payload):
        return self.w.run(payload)

    def close(self):
        self.w.close()


# ------------------------------------------------------------------------- scheduling


@dataclass
class Progress:
    total: int
    done: int = 0
    t0: float = field(default_factory=time.perf_counter)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def add(self, n: int, quiet: bool) -> None:
        with self.lock:
            self.done += n
            if not quiet:
                print(f"oracle: {self.done}/{self.total} cells, {time.perf_counter() - self.t0:.0f} s",
                      file=sys.stderr, flush=True)


def run_batches(batches: Sequence[Batch], start: Callable[[str], object], jobs: int,
                payload: Callable[[Batch], dict], on_done: Callable[[Batch, dict], None]) -> None:
    """`jobs` threads, each driving one worker (start(cc) -> .run/.close); the first error stops all."""
    pending: dict[str, deque] = {}
    for b in batches:
        pending.setdefault(b.cc, deque()).append(b)
    lock = threading.Lock()
    errors: list[BaseException] = []
    live: set = set()  # workers running now: closed by the caller's thread if it is interrupted

    def take(cc: str | None) -> Batch | None:
        with lock:
            if errors:
                return None
            if cc is not None and pending.get(cc):
                return pending[cc].popleft()
            left = [k for k, q in pending.items() if q]
            if not left:
                return None
            return pending[max(left, key=lambda k: len(pending[k]))].popleft()

    def loop() -> None:
        worker, cc = None, None
        try:
            while (b := take(cc)) is not None:
                if b.cc != cc:
                    if worker is not None:
                        live.discard(worker)
                        worker.close()
                    worker, cc = start(b.cc), b.cc
                    live.add(worker)
                on_done(b, worker.run(payload(b)))
        except BaseException as e:  # noqa: BLE001 - re-raised by the caller
            with lock:
                errors.append(e)
        finally:
            if worker is not None:
                live.discard(worker)
                try:
                    worker.close()
                except Exception:  # noqa: BLE001 - the first error is the one to report
                    pass

    threads = [threading.Thread(target=loop, daemon=True) for _ in range(max(1, min(jobs, len(batches))))]
    for t in threads:
        t.start()
    try:
        for t in threads:
            t.join()
    except BaseException:  # Ctrl-C: no worker outlives the run (finished batches are already kept)
        with lock:
            errors.append(KeyboardInterrupt())
        for w in list(live):
            w.kill()
        raise
    if errors:
        raise errors[0]


@dataclass
class RunResult:
    out: Path
    cells: int
    ran: int
    seconds: float


def run_grid(cells: Sequence[Cell], out: Path, worker_cmd: list[str], *, jobs: int = 2, batch_size: int = 48,
             ray_address: str | None = None, env: dict | None = None, quiet: bool = False,
             model_dirs: Callable[[Path], dict[str, tuple[str, str | None]]] | None = None) -> RunResult:
    """Run the cells not yet in `out` (or its parts), then write `out` with every cell."""
    out = Path(out)
    have = read_lines(out)
    as_written = list(have)
    parts = Parts(out)
    have.update(parts.done())
    todo = [c for c in cells if c.key not in have]
    t0 = time.perf_counter()
    if todo:
        models_root = Path(tempfile.mkdtemp(prefix="kselect_oracle_models_"))
        dirs = (model_dirs or _model_dirs)(models_root, sorted({c.model for c in todo}))
        cmd = [*worker_cmd, "--models-root", str(models_root)]
        batches = make_batches(todo, batch_size)
        prog = Progress(len(todo))
        if not quiet:
            print(f"oracle: {len(cells)} cells, {len(cells) - len(todo)} already recorded, {len(todo)} to run "
                  f"in {len(batches)} batches on {jobs} {'Ray actors' if ray_address else 'processes'}",
                  file=sys.stderr, flush=True)

        def payload(b: Batch) -> dict:
            return {"id": b.id, "cells": [{"key": c.key, "cell": c.to_dict(), "target": dirs[c.model][0],
                                           "drafter": dirs[c.model][1]} for c in b.cells]}

        def on_done(b: Batch, ans: dict) -> None:
            recs = ans["records"]
            if [r["key"] for r in recs] != [c.key for c in b.cells]:
                raise WorkerError(f"batch {b.id}: the worker's records are not the batch's cells")
            parts.add(b, recs, ans.get("seconds", 0.0))
            prog.add(len(recs), quiet)

        log_dir = parts.dir / "logs"
        ray, started = None, False
        if ray_address:
            ray, started = connect_ray(ray_address)

            def start(cc: str):
                return RayWorker(cmd, cc, log_dir, env)
        else:
            def start(cc: str):
                return LocalWorker(cmd, cc, log_dir, env)
        try:
            run_batches(batches, start, jobs, payload, on_done)
        finally:
            import shutil

            shutil.rmtree(models_root, ignore_errors=True)
            if started:  # the instance this run started
                ray.shutdown()
        have.update(parts.done())
    missing = [c.key for c in cells if c.key not in have]
    if missing:
        raise WorkerError(f"{len(missing)} cells have no record after the run, e.g. {missing[0]}")
    if as_written != [c.key for c in cells] or len(have) != len(as_written):  # else: the record as it is
        write_record(out, have, cells)
    parts.remove()
    return RunResult(out, len(cells), len(todo), time.perf_counter() - t0)


def _model_dirs(root: Path, models: Sequence[str]) -> dict[str, tuple[str, str | None]]:
    from kselect.oracle.models import preset, write_model_dirs

    out = {}
    for m in models:
        t, d = write_model_dirs(preset(m), root)
        out[m] = (str(t), str(d) if d else None)
    return out
