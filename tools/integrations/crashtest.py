"""A crash-test kit for applications built on mqstore (``mqstore crashtest FILE``).

Your workload runs on a store on a simulated file system (``journal.SimulatedFileSystem``:
files in memory, every write and sync logged). At sampled moments in the middle of its work
(before a write, a sync, a rename...) the kit takes what a power cut would leave: everything
synced, plus none, all or a random part of what was not, the last kept write torn at a sector
or turned to garbage; the index as the crash leaves it, or lost. Each such state is opened
again and checked: mqstore's own promises (it opens; every message of every queue reads back)
and yours (``check``). Then it crashes again in the middle of that recovery, and checks again.

What your checks may rely on is what the workload reported through its ``Ledger``::

    def workload(broker, ledger):
        with broker.session() as s:
            for n in range(20):
                with ledger.op("sent", n):      # done once send() returned: durable
                    s.send("orders", Message(b"%d" % n))

    def check(broker, ledger):                  # ledger: what was done before the crash
        with broker.session() as s:
            present = {int(m.message.body) for m in s.create_browser("orders")}
        assert set(ledger.done_keys("sent")) <= present

An operation in flight at the crash (``ledger.maybe``) may or may not have happened. The
workload runs twice (once to count its file operations, once under the crashes), so keep it
deterministic. ``kill9`` does the same with real processes: it runs a script, SIGKILLs it at
random moments after the script called ``ready()`` and checks the store it leaves.
"""

from __future__ import annotations

import contextlib
import os
import random
import signal
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from typing import Any, Callable, Dict, FrozenSet, Iterator, List, Optional, Set, Tuple

from mqstore.engine import Broker
from mqstore.journal import JournalOptions, SimulatedFileSystem
from mqstore.recovery import MemoryIndex

STORE = "/store"
# small segments (so a state costs little to copy, and segment rolls and compaction happen
# within a small workload) and frequent index commits: more kinds of moments to crash in
CRASH_OPTIONS = JournalOptions(segment_size=64 << 10)
Key = Tuple[str, Any]


@dataclass(frozen=True)
class LedgerView:
    """What a workload had reported when the crash came.

    Attributes:
        done: the operations completed, in order, as ``(kind, key)``.
        maybe: the operations in flight: either outcome is correct.
    """

    done: Tuple[Key, ...]
    maybe: FrozenSet[Key]

    def done_keys(self, kind: str) -> List[Any]:
        """Keys of the completed operations of ``kind``, in order."""
        return [k for kd, k in self.done if kd == kind]

    def maybe_keys(self, kind: str) -> Set[Any]:
        """Keys of the operations of ``kind`` in flight at the crash."""
        return {k for kd, k in self.maybe if kd == kind}


class Ledger:
    """The workload's account of what it did (thread-safe: crash states are taken from the
    journal's writer thread)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._done: List[Key] = []
        self._maybe: Set[Key] = set()

    @contextlib.contextmanager
    def op(self, kind: str, key: Any) -> Iterator[None]:
        """Bracket one operation: in flight inside the block, done when it exits normally
        (an exception leaves it in flight: it may or may not have happened)."""
        with self._lock:
            self._maybe.add((kind, key))
        yield
        with self._lock:
            self._maybe.discard((kind, key))
            self._done.append((kind, key))

    def view(self) -> LedgerView:
        """A frozen copy."""
        with self._lock:
            return LedgerView(tuple(self._done), frozenset(self._maybe))


@dataclass(frozen=True)
class Failure:
    """One crash state that broke a promise: which state, after which crash (``"crash"`` or
    ``"crash during recovery"``), how it was made, and what went wrong."""

    state: int
    phase: str
    made: str
    error: str


@dataclass
class CrashReport:
    """What a crash test did: file operations the workload made, crash states checked
    (second crashes included), and the failures (empty: every promise held)."""

    operations: int = 0
    states: int = 0
    failures: List[Failure] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.failures


Workload = Callable[[Broker, Ledger], None]
Check = Callable[[Broker, LedgerView], None]


def crash_test(workload: Workload, check: Check, setup: Optional[Callable[[Broker], None]]
               = None, samples: int = 100, seed: int = 0,
               open_options: Optional[Dict[str, Any]] = None) -> CrashReport:
    """Run ``workload`` under sampled power cuts and check every state (module docstring).

    Args:
        workload: ``workload(broker, ledger)``, reporting its operations to ``ledger``.
        check: ``check(broker, ledger_view)``: raise (``AssertionError``...) when the store
            breaks one of your promises.
        setup: ``setup(broker)`` run first (addresses, queues), not under crashes.
        samples: crash states to take (every file operation when it made fewer).
        seed: for the choice of moments, of what survives and of tears.
        open_options: more ``Broker.open`` arguments (``address_settings``...; by default
            64 KiB segments and an index commit every 25 records).

    Returns:
        The report; ``report.failures`` lists each broken promise with how to reproduce it.
    """
    options = {"journal_options": CRASH_OPTIONS, "checkpoint_records": 25,
               **(open_options or {})}
    counted = [0]

    def count(_op: str) -> None:
        counted[0] += 1

    _run(workload, setup, options, count, None)
    report = CrashReport(operations=counted[0])
    rate = min(1.0, samples / max(1, counted[0]))
    rng = random.Random(seed)
    states: List[Tuple[SimulatedFileSystem, MemoryIndex, LedgerView, str]] = []

    def take(fs: SimulatedFileSystem, index: MemoryIndex, ledger: Ledger) -> Callable[[str],
                                                                                  None]:
        def hook(op: str) -> None:
            if rng.random() < rate:
                if op in ("fdatasync", "fsync"):  # let a caller told "durable" too early
                    time.sleep(0.002)             # report it before the state is taken
                n = fs.unsynced_count()
                keep = rng.choice([0, n, rng.randrange(0, n + 1)])
                tear = rng.choice([None, "sector", "garbage"])
                states.append((fs.crash(keep, tear, rng), index.crash(rng), ledger.view(),
                               f"before {op}: kept {keep} of {n} unsynced operations, last "
                               f"write {tear or 'whole'}"))
        return hook

    _run(workload, setup, options, None, take, states)
    for i, (fs, index, view, made) in enumerate(states):
        second = _verify(fs, index, view, check, options, rng, report, i, made)
        for fs2, index2, made2 in second:
            _verify(fs2, index2, view, check, options, None, report, i,
                    f"{made}; then during recovery {made2}")
    return report


def _run(workload: Workload, setup: Optional[Callable[[Broker], None]],
         options: Dict[str, Any], hook: Optional[Callable[[str], None]],
         take: Optional[Callable[..., Callable[[str], None]]],
         states: Optional[List[Any]] = None) -> None:
    fs, index = SimulatedFileSystem(), MemoryIndex()
    broker = Broker.open(STORE, fs=fs, index=index, **options)
    ledger = Ledger()
    try:
        if setup is not None:
            setup(broker)
        fs.hook = hook if take is None else take(fs, index, ledger)
        workload(broker, ledger)
        fs.hook = None
        if states is not None:  # and the plainest crash: the process dies once it is done
            states.append((fs.crash(0), index.crash(random.Random(len(states))),
                           ledger.view(), "after the workload: every unsynced operation lost"))
    finally:
        fs.hook = None
        broker.close()


def _verify(fs: SimulatedFileSystem, index: MemoryIndex, view: LedgerView, check: Check,
            options: Dict[str, Any], rng: Optional[random.Random], report: CrashReport,
            state: int, made: str) -> List[Tuple[SimulatedFileSystem, MemoryIndex, str]]:
    """Open one crash state and check it; with ``rng``, also take one crash state in the
    middle of that open (returned, to be checked the same way)."""
    report.states += 1
    phase = "crash" if rng is not None else "crash during recovery"
    second: List[Tuple[SimulatedFileSystem, MemoryIndex, str]] = []
    if rng is not None:
        at = rng.randrange(1, 40)
        seen = [0]

        def hook(op: str) -> None:
            seen[0] += 1
            if seen[0] == at:
                n = fs.unsynced_count()
                keep = rng.randrange(0, n + 1)
                second.append((fs.crash(keep, None, rng), index.crash(rng),
                               f"before {op} ({keep} of {n} unsynced kept)"))
        fs.hook = hook
    try:
        broker = Broker.open(STORE, fs=fs, index=index, **options)
    except Exception as exc:  # noqa: BLE001 (a promise broken: reported, not raised)
        report.failures.append(Failure(state, phase, made, f"the store does not open: "
                                                           f"{type(exc).__name__}: {exc}"))
        return second
    finally:
        fs.hook = None
    try:
        with broker.session() as s:
            for queue in broker.queue_names():
                for _m in s.create_browser(queue):
                    pass  # every message reads back
        check(broker, view)
    except Exception as exc:  # noqa: BLE001
        report.failures.append(Failure(state, phase, made, f"{type(exc).__name__}: {exc}"))
    finally:
        broker.close()
    return second


READY_ENV = "MQSTORE_CRASHTEST_READY"
"""The environment variable through which ``kill9`` tells its script where ``ready()`` signals."""


def ready() -> None:
    """Tell a ``kill9`` run that this process has done its setup (opened the store, created
    its addresses and queues): its kill comes after this call, never before, however slowly
    a loaded machine imports and opens. Call it once; it does nothing when the process was not
    started by ``kill9``."""
    path = os.environ.get(READY_ENV)
    if path:
        with open(path, "w", encoding="utf-8") as f:
            f.write(str(os.getpid()))


def kill9(script: List[str], directory: str, check: Callable[[Broker], None],
          kills: int = 5, seconds: Tuple[float, float] = (0.2, 1.5), seed: int = 0,
          open_options: Optional[Dict[str, Any]] = None,
          ready_timeout: float = 600.0) -> List[str]:
    """Run ``script`` (an argv list; it works on the store in ``directory``) ``kills`` times;
    each run is SIGKILLed a random time in ``seconds`` after it called ``ready()`` (this
    module's: the kill never lands in its setup, whatever the machine's load), then the store
    is opened and ``check(broker)`` runs. A run that ends before its kill is fine (its exit
    code must be 0), whether or not it called ``ready()``.

    Args:
        ready_timeout: seconds a run may take to call ``ready()`` before kill9 gives up on it
            and reports it (a script that never calls it and never ends); generous, as it is
            no measure of speed.

    Returns:
        The failures, one line each (empty: every promise held).
    """
    import tempfile
    rng = random.Random(seed)
    failures: List[str] = []
    for i in range(kills):
        with tempfile.TemporaryDirectory(prefix="mqstore-kill9-") as tmp:
            signal_file = os.path.join(tmp, "ready")
            proc = subprocess.Popen(script, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                                    env={**os.environ, READY_ENV: signal_file})
            problem = _wait_ready(proc, signal_file, ready_timeout)
            if problem is None and proc.poll() is None:
                time.sleep(rng.uniform(*seconds))  # a random moment of its work
            if proc.poll() is None:
                os.kill(proc.pid, signal.SIGKILL)
            _out, err = proc.communicate()
        if problem is not None:
            failures.append(f"run {i}: {problem}")
            continue
        if proc.returncode not in (0, -signal.SIGKILL):
            failures.append(f"run {i}: the script failed ({proc.returncode}): "
                            f"{err.decode(errors='replace')[-500:]}")
            continue
        try:
            with Broker.open(directory, **(open_options or {})) as broker:
                check(broker)
        except Exception as exc:  # noqa: BLE001
            failures.append(f"run {i}: {type(exc).__name__}: {exc}")
    return failures


def _wait_ready(proc: "subprocess.Popen[bytes]", signal_file: str, limit: float
                ) -> Optional[str]:
    """Wait until ``proc`` called ``ready()`` or ended; why not, after ``limit`` seconds."""
    deadline = time.monotonic() + limit
    while not os.path.exists(signal_file) and proc.poll() is None:
        if time.monotonic() > deadline:
            return (f"the script neither called mqstore.crashtest.ready() nor ended within "
                    f"{limit:.0f} s")
        time.sleep(0.01)
    return None


def load_module(path: str) -> Any:
    """Import the Python file ``path`` (for ``mqstore crashtest``)."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("crashtest_target", path)
    if spec is None or spec.loader is None:
        raise ImportError(f"{path} is not a Python file")
    module = importlib.util.module_from_spec(spec)
    sys.modules.setdefault("crashtest_target", module)
    spec.loader.exec_module(module)
    return module
