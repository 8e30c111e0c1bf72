"""``mqstore demo``: the main job on real data, with a kill -9 in the middle.

It replays the 336,776 New York flights of 2013 as durable messages, in scheduled-departure
order, to the multicast address ``flights``, whose work queue ``flights.ops`` is consumed and
acked by worker threads. The broker runs with a 16 MiB RAM budget, so the work queue's backlog
pages: it stays in the index and is read back in order as the workers drain it. The producing child is killed with SIGKILL midway; the store is
reopened (recovery), checked (nothing the child reported durable is lost, nothing duplicated),
and the job resumes from where the durable record says and finishes. Then one day of flights
is replayed on an injected clock through scheduled messages (``tools.demo.departures``). A report
follows.
"""

from __future__ import annotations

import os
import resource
import shutil
import signal
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Dict, List, Set, Tuple

from rich.console import Console
from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from mqstore.engine import Broker
from mqstore.journal import MqStoreError
from . import job as demo_job
from ..bench.journal import fdatasync_probe
from .departures import Departures, run_departures
from .flights import load_flights, load_weather

ROOT = str(Path(__file__).resolve().parents[2])  # the repository


@dataclass
class Tally:
    """What the job reported durable: highest flight sent, flights being acked, acked."""

    sent_max: int = -1
    acking: Set[int] = field(default_factory=set)
    acked: Set[int] = field(default_factory=set)
    ack_events: int = 0
    started: float = 0.0

    def apply(self, kind: str, value: object) -> None:
        if kind == "sent":
            self.sent_max = max(self.sent_max, int(value))  # type: ignore[arg-type]
        elif kind == "acking":
            self.acking.update(value)  # type: ignore[arg-type]
        elif kind == "acked":
            seqs = list(value)  # type: ignore[call-overload]
            self.ack_events += len(seqs)
            self.acked.update(seqs)


@dataclass
class DemoResult:
    """Figures and checks of one demo run."""

    flights: int
    phase1_sent: int
    phase1_s: float
    recovery: object
    recovery_s: float
    resumed_at: int
    phase2_s: float
    lost: List[int]
    duplicates: List[int]
    missing: List[int]
    checks: Dict[str, bool]
    segments: List[tuple]
    directory: str
    counts: Dict[str, tuple] = field(default_factory=dict)
    board: List[Dict[str, str]] = field(default_factory=list)
    memory: object = None
    peak_rss_mb: float = 0.0
    departures: Departures | None = None
    probe_ops: Tuple[float, float] = (0.0, 0.0)  # fdatasync probe, ops/s, before each phase


def _parse(line: str, tally: Tally) -> None:
    tag, _sep, rest = line.strip().partition(" ")
    if tag == "S":
        tally.apply("sent", int(rest))
    elif tag in ("a", "A"):
        tally.apply("acking" if tag == "a" else "acked", [int(x) for x in rest.split(",") if x])


def _phase1(directory: str, total: int, workers: int, batch: int, limit: int, kill_at: float,
            progress: Progress) -> Tally:
    tally = Tally()
    task = progress.add_task("phase 1: child producing", total=total)
    child = subprocess.Popen([sys.executable, "-m", "mqstore.tools.demo.child", directory, "0",
                              str(workers), str(batch), str(limit)], stdout=subprocess.PIPE,
                             text=True, cwd=ROOT, env=dict(os.environ, PYTHONPATH=ROOT))
    assert child.stdout is not None
    killed = False
    for line in child.stdout:
        if line.startswith("ready"):
            tally.started = time.monotonic()
            continue
        _parse(line, tally)
        progress.update(task, completed=tally.sent_max + 1)
        if not killed and tally.sent_max + 1 >= kill_at * total:
            child.send_signal(signal.SIGKILL)
            killed = True
    child.wait()
    progress.update(task, description="phase 1: child killed (SIGKILL)")
    progress.stop_task(task)  # its bar stays where the kill left it, its clock stops
    return tally


def run_demo(directory: str, workers: int = 4, batch: int = 500, kill_at: float = 0.5,
             limit: int = 0, console: Console | None = None) -> DemoResult:
    """Run the demo in ``directory`` (emptied first); see the module docstring.

    Raises:
        MqStoreError: ``directory`` holds something that is not an mqstore store (it is left
            untouched: the demo only ever replaces a store, an earlier demo's).
    """
    console = console or Console()
    directory = os.path.abspath(directory)  # the child process runs from the repository
    if os.path.exists(directory) and os.listdir(directory) and not os.path.isdir(
            os.path.join(directory, "journal")):
        raise MqStoreError(f"{directory} is not empty and holds no mqstore store",
                           hint="give a new directory, an empty one, or an earlier demo's")
    flights = load_flights(limit)
    total = len(flights)
    shutil.rmtree(directory, ignore_errors=True)
    cols = (TextColumn("{task.description}"), BarColumn(), TextColumn("{task.completed:,}/"
            "{task.total:,}"), TimeElapsedColumn())
    probes = [fdatasync_probe(os.path.dirname(directory))]
    with Progress(*cols, console=console, transient=False) as progress:
        tally = _phase1(directory, total, workers, batch, limit, kill_at, progress)
        phase1_s = time.monotonic() - tally.started
        t1 = time.monotonic()
        broker = Broker.open(directory, memory_budget=demo_job.MEMORY_BUDGET)
        recovery_s = time.monotonic() - t1
        with broker.session() as s:
            present_list = [int(m.message.properties["seq"])
                            for m in s.create_browser(demo_job.WORK_QUEUE)]
        present = set(present_list)
        lost = [q for q in range(tally.sent_max + 1)
                if q not in present and q not in tally.acking and q not in tally.acked]
        resume = max([tally.sent_max] + present_list + list(tally.acking)) + 1
        phase2 = Tally()
        lock = threading.Lock()
        task = progress.add_task("phase 2: resumed in this process", total=total,
                                 completed=resume)

        def event(kind: str, value: object) -> None:
            with lock:
                phase2.apply(kind, value)
                if kind == "sent":
                    progress.update(task, completed=int(value) + 1)  # type: ignore[arg-type]

        probes.append(fdatasync_probe(os.path.dirname(directory)))
        t2 = time.monotonic()
        weather = load_weather()
        demo_job.run(broker, flights, resume, workers, batch, event, weather)
        phase2_s = time.monotonic() - t2
        info = broker.queue_info(demo_job.WORK_QUEUE)
        counts = expected_counts(broker, flights, weather)
        with broker.session() as s:
            board = [dict(m.message.properties) for m in s.create_browser(demo_job.BOARD_QUEUE)]
        segments = [(s.sequence, s.count, s.live_count, s.end)
                    for s in broker.storage.persistence.journal.segments()]
        memory = broker.statistics().memory
        broker.close()
    acked_for_sure = tally.acked | phase2.acked | ((tally.acking - tally.acked) - present)
    missing = [q for q in range(total) if q not in acked_for_sure]
    duplicates = sorted(tally.acked & phase2.acked)
    checks = {"nothing reported durable was lost": not lost,
              "no flight sent twice": len(present_list) == len(present) and resume <= total,
              "no acked flight delivered again": not duplicates,
              "every flight acked": not missing and info.message_count == 0,
              "queue drained": info.message_count == 0,
              "departure board holds the last 50 flights":
                  [int(b["seq"]) for b in board] == list(range(max(0, total - 50), total)),
              "the work queue's backlog paged (out to the index and read back)":
                  memory.paged_out > 0 and memory.paged_in > 0}
    for name, (got, want) in counts.items():
        checks[f"{name}: {got:,} messages = {want:,} computed from the data"] = got == want
    departures = run_departures(directory, flights, demo_job.MEMORY_BUDGET)
    checks.update(departures.checks())
    return DemoResult(total, tally.sent_max + 1, phase1_s, broker.recovery_report, recovery_s,
                      resume, phase2_s, lost, duplicates, missing, checks, segments,
                      os.path.abspath(directory), counts, board, memory,
                      resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1e3, departures,
                      (probes[0], probes[1]))


def expected_counts(broker: Broker, flights: List, weather: List) -> Dict[str, tuple]:
    """(queue's message count, the same computed independently from the data) per queue."""
    planes = {f.properties["tailnum"] for f in flights if "tailnum" in f.properties}
    no_plane = sum(1 for f in flights if "tailnum" not in f.properties)
    airports = {w.properties["origin"] for w in weather}
    return {demo_job.PLANES_QUEUE: (broker.queue_info(demo_job.PLANES_QUEUE).message_count,
                                    len(planes) + no_plane),
            demo_job.WEATHER_QUEUE: (broker.queue_info(demo_job.WEATHER_QUEUE).message_count,
                                     len(airports))}


def _ratio(rate: float, probe: float) -> str:
    """A throughput as a ratio to the same run's fdatasync probe (the disk's rate swings)."""
    if probe <= 0:
        return "no fdatasync probe"
    return f"{rate / probe:.3g}x the fdatasync probe's {probe:,.0f} ops/s just before"


def print_report(result: DemoResult, console: Console) -> None:
    """The short report of a demo run."""
    r = result
    rec = r.recovery
    t = Table(title="mqstore demo: NYC flights 2013", show_header=False)
    t.add_column(justify="left")
    t.add_column(justify="right")
    t.add_row("flights (durable messages)", f"{r.flights:,}")
    rate1 = r.phase1_sent / max(r.phase1_s, 1e-9)
    t.add_row("phase 1: sent before SIGKILL", f"{r.phase1_sent:,} in {r.phase1_s:.1f} s "
              f"({rate1:,.0f} msg/s; {_ratio(rate1, r.probe_ops[0])})")
    left = r.flights - r.resumed_at
    rate2 = left / max(r.phase2_s, 1e-9)
    t.add_row("phase 2: resumed at flight", f"{r.resumed_at:,}; {left:,} more in {r.phase2_s:.1f}"
              f" s ({rate2:,.0f} msg/s, consuming the backlog too; "
              f"{_ratio(rate2, r.probe_ops[1])})")
    t.add_row("recovery: torn bytes dropped", f"{rec.journal.torn_bytes:,}")  # type: ignore[attr-defined]
    t.add_row("recovery: index", f"{rec.index}")  # type: ignore[attr-defined]
    t.add_row("recovery: records replayed", f"{rec.replayed_records:,}")  # type: ignore[attr-defined]
    t.add_row("recovery: time", f"{r.recovery_s * 1000:.0f} ms")
    t.add_row("recovery: messages found on flights.ops",
              f"{rec.counts['references']:,}")  # type: ignore[attr-defined]
    sizes = ", ".join(f"#{seq}: {count:,} records, {end / 1e6:.1f} MB"
                      for seq, count, _live, end in r.segments)
    t.add_row("journal segments", f"{len(r.segments)} ({sizes})")
    mem = r.memory
    t.add_row("RAM budget (phase 2)", f"{mem.budget / 2**20:.0f} MiB; peak charged "  # type: ignore[attr-defined]
              f"{mem.peak / 2**20:.1f} MiB; {mem.paged_out:,} references paged out to the "  # type: ignore[attr-defined]
              f"index, {mem.paged_in:,} read back")  # type: ignore[attr-defined]
    t.add_row("peak RSS of this process", f"{r.peak_rss_mb:,.0f} MB (the flights data itself "
              f"included)")
    d = r.departures
    if d is not None:
        day = time.strftime("%Y-%m-%d", time.gmtime(d.first_ms / 1000))
        t.add_row("departures (scheduled messages)", f"{d.flights:,} flights of {day} "
                  f"scheduled at their departure, the day replayed in {d.seconds:.1f} s")
    t.add_row("store", r.directory)
    console.print(t)
    board = Table(title=f"departure board ({demo_job.BOARD_QUEUE}, ring-size "
                        f"{demo_job.BOARD_SIZE}): the last departures", show_lines=False)
    for col in ("#", "flight", "from", "to", "plane"):
        board.add_column(col)
    for b in r.board[-8:]:
        board.add_row(b["seq"], b["carrier"] + b["flight"], b["origin"], b["dest"],
                      b.get("tailnum", "-"))
    console.print(board, f"  ({len(r.board)} on the board; the last 8 shown)")
    for name, ok in r.checks.items():
        console.print(f"  [{'green' if ok else 'red'}]{'ok ' if ok else 'FAIL'}[/] {name}")
