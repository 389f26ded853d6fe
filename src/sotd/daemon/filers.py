"""The daemon's filing threads: ``comm.file``'s blocking steps off the event loop, answers back in batches.

Spec: behaviour 2.3 and 6.4 (a filing reads the registry and appends under the inbox lock: blocking work
that must never stall the daemon's other connections); issue 27 item 8 (one hub, 1,000 linked guests,
2,000 routed ``comm.file`` a second). The append always comes here; the reads before it too, unless the
comm folder was found on a local disk (``daemon.loopreads``: then the loop does them itself).
Guarantee: every job handed to ``Filers.run`` runs exactly once, in a thread (never on the event loop), and
its caller gets its result or its exception; up to ``MAX_THREADS`` jobs run at once, so one slow lock
holds one thread and the others go on. ``close`` lets the jobs already running finish (a filing is never
cut between its append and its sync by the daemon's own exit).
What would break it: a result handed to a future from the worker thread (asyncio futures are the loop's
alone), or a wake-up lost between a worker's append to ``done`` and the loop's drain of it.

Why not ``asyncio.to_thread``: each call there is an executor future, a wrapped asyncio future, a copy of
the context and one wake-up of the loop (a write to its self-pipe and a read) per job; at 1,000 linked
guests that hop was a third of the hub's CPU per routed send (0.24 of 0.67 ms, bench/hubscale.py). Here a
job is one queue put; the answers of the jobs that finished while the loop was busy come back with one
wake-up.
"""

from __future__ import annotations

import asyncio
import collections
import queue
import threading
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from collections.abc import Callable

MAX_THREADS = 32  # filings at once (each may wait up to the inbox-lock bound), started as needed
CLOSE_WAIT_S = 30.0  # ``close``: how long the running filings may take to finish


class Filers:
    """Threads that run blocking jobs for one event loop (start them from inside it)."""

    def __init__(self, max_threads: int = MAX_THREADS) -> None:
        self.max_threads = max_threads
        self.jobs: queue.SimpleQueue[tuple[asyncio.Future[Any], Callable[..., Any], tuple[Any, ...]] | None]
        self.jobs = queue.SimpleQueue()
        self.done: collections.deque[tuple[asyncio.Future[Any], bool, Any]] = collections.deque()
        self.lock = threading.Lock()
        self.threads: list[threading.Thread] = []
        self.busy = 0  # jobs handed out and not finished (the loop's count)
        self.loop: asyncio.AbstractEventLoop | None = None
        self.closed = False

    async def run(self, fn: Callable[..., Any], *args: Any) -> Any:
        """``fn(*args)`` in a filing thread; its result (or its exception raised here)."""
        if self.closed:
            raise RuntimeError("the filing threads are closed")
        loop = self.loop = self.loop or asyncio.get_running_loop()
        fut: asyncio.Future[Any] = loop.create_future()
        self.busy += 1
        if self.busy > len(self.threads) and len(self.threads) < self.max_threads:
            t = threading.Thread(target=self._work, name=f"sotd-filer-{len(self.threads) + 1}", daemon=True)
            self.threads.append(t)
            t.start()
        self.jobs.put((fut, fn, args))
        try:
            return await fut
        finally:
            self.busy -= 1

    def _work(self) -> None:
        while True:
            job = self.jobs.get()
            if job is None:
                return
            fut, fn, args = job
            try:
                out: tuple[asyncio.Future[Any], bool, Any] = (fut, True, fn(*args))
            except BaseException as e:  # the caller's to see, as asyncio.to_thread would raise it
                out = (fut, False, e)
            with self.lock:
                wake = not self.done
                self.done.append(out)
            if wake:
                assert self.loop is not None
                try:
                    self.loop.call_soon_threadsafe(self._deliver)
                except RuntimeError:
                    return  # the loop is closed: nobody waits for this answer any more

    def _deliver(self) -> None:
        """On the loop: hand every finished job's result to its future."""
        with self.lock:
            items = list(self.done)
            self.done.clear()
        for fut, ok, value in items:
            if fut.done():
                continue  # its caller was cancelled; the job ran all the same
            if ok:
                fut.set_result(value)
            else:
                fut.set_exception(value)

    async def close(self) -> None:
        """Stop the threads once the jobs already queued have run (bounded by ``CLOSE_WAIT_S``)."""
        self.closed = True
        for _ in self.threads:
            self.jobs.put(None)
        threads, self.threads = self.threads, []

        def join() -> None:
            for t in threads:
                t.join(CLOSE_WAIT_S)

        await asyncio.to_thread(join)
