"""Where a case's per-input and per-partition work runs: in this process, or on a Dask cluster.

The default is this process, two tasks at a time (the parsers and Parquet writers release the GIL).
With a scheduler address — `--dask tcp://HOST:8786` on the command line, or `FORENSICS_DASK` in the
environment — the same tasks run on an existing Dask distributed cluster instead, each on whichever
worker is free. The tasks read the bundle and write the case by path, so the bundle and the case's
folder must be at the same path on every worker (a shared or network file system), or the case in
an object store every worker reaches (`s3://…`, with the store's settings in each worker's
environment); that is checked before any work is sent. A task whose worker dies is given to another worker by Dask; a task that
cannot be done stops the run with an error naming it, and the case being built is never swapped in.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor, as_completed
from pathlib import Path
from typing import Any, Protocol

from forensics.errors import CaseError
from forensics.case.places import is_remote, location, place_text

DASK_ENV = "FORENSICS_DASK"
LOCAL_TASKS = max(1, len(os.sched_getaffinity(0)))  # the cores this process may run on; more threads only add memory

#: Shows work as it finishes: given the finished items (with a length) and what they are.
Progress = Callable[[Iterable[Any], str], Iterable[Any]]


class _Counted:
    """An iterator with a length, for progress bars."""

    def __init__(self, items: Iterator[Any], length: int) -> None:
        self._items, self._length = items, length

    def __iter__(self) -> Iterator[Any]:
        return self._items

    def __len__(self) -> int:
        return self._length


class Runner(Protocol):
    """Runs one function over many argument tuples and gives the results in the calls' order."""

    where: str

    def map(self, function: Callable[..., Any], calls: Sequence[tuple[Any, ...]], what: str,
            progress: Progress | None = None) -> list[Any]: ...

    def check_paths(self, paths: Sequence[Any]) -> None: ...

    def close(self) -> None: ...


class Local:
    """Tasks in this process, `tasks` at a time (threads: for work that releases the GIL, such as
    polars' and the network's)."""

    where = "this process"

    def __init__(self, tasks: int = LOCAL_TASKS) -> None:
        self.tasks = tasks

    def map(self, function: Callable[..., Any], calls: Sequence[tuple[Any, ...]], what: str,
            progress: Progress | None = None) -> list[Any]:
        with ThreadPoolExecutor(max_workers=self.tasks, thread_name_prefix="forensics-task") as pool:
            futures = [pool.submit(function, *call) for call in calls]
            try:
                done = _Counted(as_completed(futures), len(futures))
                for future in progress(done, what) if progress else done:
                    future.result()  # the first failure stops the run
            except BaseException:
                for future in futures:
                    future.cancel()
                raise
            return [future.result() for future in futures]

    def check_paths(self, paths: Sequence[Any]) -> None:
        """Nothing to check: this process is the one that found them."""

    def close(self) -> None:
        """Nothing to release."""


def _visible(paths: Sequence[str]) -> list[str]:
    """Which of `paths` (folders or URLs) this worker cannot see (run on each worker)."""
    return [path for path in paths if not location(path).exists()]


class Dask:
    """Tasks on an existing Dask distributed cluster."""

    def __init__(self, address: str) -> None:
        try:
            from distributed import Client
        except ImportError:
            raise CaseError(f"--dask {address}: Dask's `distributed` is not installed here; install forensics "
                            "with its `dask` extra (pip install 'forensics[dask]')") from None
        self.where = f"the Dask cluster at {address}"
        try:
            self.client = Client(address, timeout="10s", set_as_default=False)
        except (OSError, TimeoutError) as error:
            raise CaseError(f"--dask {address}: no Dask scheduler answers there ({error}); start one with "
                            "`dask scheduler` and workers with `dask worker ADDRESS`") from None

    def check_paths(self, paths: Sequence[Any]) -> None:
        """CaseError naming each worker that cannot see one of `paths` (they must be shared)."""
        wanted = [place_text(p) if is_remote(p) else str(Path(p).resolve()) for p in paths]
        missing = {worker: gone for worker, gone in self.client.run(_visible, wanted).items() if gone}
        if not self.client.scheduler_info().get("workers"):
            raise CaseError(f"{self.where} has no workers: start some with `dask worker ADDRESS`")
        if missing:
            worker, gone = next(iter(missing.items()))
            raise CaseError(f"{len(missing)} Dask worker(s) cannot see {', '.join(gone)} (e.g. {worker}): the "
                            "bundle and the case folder must be at the same path on every worker (a shared file "
                            "system), and a case in an object store reachable with the same settings")

    def map(self, function: Callable[..., Any], calls: Sequence[tuple[Any, ...]], what: str,
            progress: Progress | None = None) -> list[Any]:
        from distributed import as_completed as finished
        from distributed.client import FutureCancelledError
        from distributed.scheduler import KilledWorker

        if not calls:
            return []
        futures = [self.client.submit(function, *call, pure=False, key=f"forensics-{what}-{i}-{os.urandom(4).hex()}")
                   for i, call in enumerate(calls)]
        try:
            done = _Counted(iter(finished(futures, loop=self.client.loop)), len(futures))
            for future in progress(done, what) if progress else done:
                future.result()  # the first failure stops the run
            return self.client.gather(futures)
        except BaseException as error:
            self.client.cancel(futures)  # nothing more is done for a run that stopped
            if isinstance(error, KilledWorker):
                raise CaseError(f"{what}: Dask workers died running the same task again and again ({error}); "
                                "nothing was written in place of the case") from None
            if isinstance(error, FutureCancelledError):
                raise CaseError(f"{what}: a task was cancelled on {self.where} ({error})") from None
            raise

    def close(self) -> None:
        self.client.close()


def runner(address: str | None = None) -> Local | Dask:
    """Where work runs: the Dask scheduler at `address` (or at FORENSICS_DASK), else this process."""
    address = address or os.environ.get(DASK_ENV) or None
    return Dask(address) if address else Local()
