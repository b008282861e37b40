"""Quiet conditions for timing: nothing else of this process competes with the timed calls for the CPU.

Batch-1 layers are launch-bound (5-20 us of host work a call), so their times measure the CPU as much as the GPU.
A fresh torch.compile leaves work running after its first call returns: Inductor's compile-worker pool starting or
waking up (its sidecar process and `compile_threads` forked workers), autotuning subprocesses, helper threads. Timed
while that runs, a launch-bound column reads up to several times slower than the same column timed a second later,
and the "auto" op policy, which times its two paths once on the first call of a problem, can keep the wrong one.
`settle` waits until this process's other threads and all its descendant processes are idle; `gc_paused` keeps
Python's cyclic garbage collector from running inside a timed loop.
"""
from __future__ import annotations

import contextlib
import gc
import os
import sys
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass

WINDOW_S = 0.04          # one look at the background's CPU use
IDLE_CPU_FRACTION = 0.3  # of one core, over a window: at most one scheduler tick in 40 ms (ticks are 10 ms)
TIMEOUT_S = 20.0         # a compile pool that starts from scratch takes a few seconds; give up after this
SHORT_TIMEOUT_S = WINDOW_S  # after two timeouts in a row: a background that never rests must not eat the budget

_TICK_S = 1.0 / os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 0.01


@dataclass
class Settled:
    waited_s: float
    background_cores: float | None   # CPU use of the background in the last window, in cores (None: not measurable)
    quiet: bool


def _cpu_s(stat_path: str) -> float:
    """utime + stime of a process or thread, from /proc/.../stat (the fields after the parenthesised name)."""
    with open(stat_path) as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) * _TICK_S


def _descendants(pid: int) -> list[int]:
    found, todo = [], [pid]
    while todo:
        parent = todo.pop()
        try:
            tids = os.listdir(f"/proc/{parent}/task")
        except OSError:
            continue
        for tid in tids:
            try:
                with open(f"/proc/{parent}/task/{tid}/children") as f:
                    kids = [int(k) for k in f.read().split()]
            except OSError:
                continue
            found += kids
            todo += kids
    return found


def background_cpu_s() -> float | None:
    """CPU seconds used so far by this process's threads other than the calling one and by its descendant
    processes (compile workers and their children), or None where /proc cannot tell (not Linux)."""
    me = os.getpid()
    try:
        tids = os.listdir(f"/proc/{me}/task")
    except OSError:
        return None
    caller = str(threading.get_native_id())
    total = 0.0
    for tid in tids:
        if tid != caller:
            with contextlib.suppress(OSError, IndexError, ValueError):
                total += _cpu_s(f"/proc/{me}/task/{tid}/stat")
    for pid in _descendants(me):
        with contextlib.suppress(OSError, IndexError, ValueError):  # a process may exit while it is read
            total += _cpu_s(f"/proc/{pid}/stat")
    return total


def _wait_compile_pool(timeout_s: float) -> None:
    """If Inductor started its compile-worker pool, wait until the pool answers (AsyncCompile.wait_pool_ready):
    its start-up is the longest burst of background work. Never creates a pool."""
    async_compile = sys.modules.get("torch._inductor.async_compile")
    compile_class = getattr(async_compile, "AsyncCompile", None)
    if compile_class is None or getattr(compile_class, "_ready_future", None) is None:
        return
    with contextlib.suppress(Exception):  # a pool that failed to start is Inductor's problem, not the timing's
        compile_class.wait_pool_ready(timeout=timeout_s)


_timeouts_in_a_row = 0


def settle(timeout_s: float | None = None, window_s: float = WINDOW_S, sample=background_cpu_s,
           sleep=time.sleep, clock=time.monotonic) -> Settled:
    """Waits until the background (see background_cpu_s) used at most IDLE_CPU_FRACTION of a core over one
    window, or the timeout passed (default TIMEOUT_S, SHORT_TIMEOUT_S after two timeouts in a row). Costs one
    window when everything is already quiet."""
    global _timeouts_in_a_row
    if timeout_s is None:
        timeout_s = TIMEOUT_S if _timeouts_in_a_row < 2 else SHORT_TIMEOUT_S
    start = clock()
    _wait_compile_pool(timeout_s)
    before = sample()
    if before is None:
        return Settled(clock() - start, None, True)
    while True:
        sleep(window_s)
        after = sample()
        cores = max(0.0, (after - before) / window_s)
        waited = clock() - start
        if cores <= IDLE_CPU_FRACTION or waited >= timeout_s:
            quiet = cores <= IDLE_CPU_FRACTION
            _timeouts_in_a_row = 0 if quiet else _timeouts_in_a_row + 1
            return Settled(waited, cores, quiet)
        before = after


@contextlib.contextmanager
def gc_paused() -> Iterator[None]:
    """No cyclic garbage collection inside the block (a full collection after a compile takes tens of ms)."""
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_enabled:
            gc.enable()
