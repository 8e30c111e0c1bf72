"""The ``mqstore`` command line (click), with rich tables and progress output.

Subcommands live in their own modules; this module only wires them together. Exit codes: 0 fine,
1 problems found, 2 usage errors (click's own).
"""

from __future__ import annotations

import shutil
from typing import Any, List, Optional

import click
from rich.console import Console
from rich.table import Table

from mqstore.journal import MqStoreError
from .commands import a_store

console = Console()


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(package_name="mqstore", prog_name="mqstore",
                      message="%(prog)s %(version)s")
def main() -> None:
    """mqstore: a durable, journaled message store with Artemis and Qpid queue semantics."""


@main.command()
@click.option("--dir", "directory", default="demo-data", show_default=True,
              type=click.Path(file_okay=False), help="Store directory (emptied first).")
@click.option("--workers", default=4, show_default=True, help="Worker threads consuming.")
@click.option("--batch", default=500, show_default=True, help="Flights per durable send.")
@click.option("--kill-at", default=0.5, show_default=True,
              help="Fraction of flights sent when the producing child gets SIGKILL.")
@click.option("--limit", default=0, help="Use only the first N flights (0: all 336,776).")
def demo(directory: str, workers: int, batch: int, kill_at: float, limit: int) -> None:
    """The main job: NYC flights 2013 through the store, killed with SIGKILL midway."""
    from .commands import fail
    from .demo.command import print_report, run_demo

    try:
        result = run_demo(directory, workers, batch, kill_at, limit, console)
    except MqStoreError as exc:
        fail(exc)
    print_report(result, console)
    raise SystemExit(0 if all(result.checks.values()) else 1)


@main.group()
def bench() -> None:
    """Benchmarks that print ratios measured in one run (never timed assertions)."""


@bench.command("journal")
@click.option("--dir", "directory", type=click.Path(file_okay=False), default=None,
              help="Where to put the scratch files (default: the system temp directory).")
@click.option("--seconds", default=1.5, show_default=True, help="Duration of each timed figure.")
@click.option("--records", default=200_000, show_default=True,
              help="Records for the plain loop and the replay scan.")
def bench_journal(directory: Optional[str], seconds: float, records: int) -> None:
    """Durable append throughput and replay speed of the journal, as ratios to raw limits."""
    from .bench.journal import ratios, run

    with console.status("measuring...") as status:
        figures = run(directory, seconds, records, lambda name: status.update(f"done: {name}"))
    table = Table(title="journal, 1 KiB payloads (one run, same disk)")
    for col in ("figure", "rate", "unit", "p50 ms", "p99 ms"):
        table.add_column(col, justify="right" if col != "figure" else "left")
    for f in figures:
        table.add_row(f.name, f"{f.rate:,.0f}", f.unit,
                      "" if f.p50_ms is None else f"{f.p50_ms:.2f}",
                      "" if f.p99_ms is None else f"{f.p99_ms:.2f}")
    console.print(table)
    rt = Table(title="ratios")
    for col in ("ratio", "value", "target"):
        rt.add_column(col)
    for name, value, target in ratios(figures):
        mark = "" if target is None else (" ok" if value >= target else " BELOW")
        rt.add_row(name, f"{value:.2f}", ("" if target is None else f">= {target}") + mark)
    console.print(rt)


@bench.command("e2e")
@click.option("--dir", "directory", type=click.Path(file_okay=False), default=None,
              help="Where the stores and databases go (default: the system temp directory); "
                   "put it on the disk you mean to measure, not tmpfs.")
@click.option("--messages", default=50_000, show_default=True,
              help="Messages in the batch and asyncio workloads (a tenth one at a time).")
def bench_e2e(directory: Optional[str], messages: int) -> None:
    """The broker end to end (send, receive, ack; durable 1 KiB messages) beside sqlite3,
    persist-queue and RabbitMQ (a private server, when installed), in one run, as ratios."""
    from mqstore.compiled import build
    from .bench.e2e import run, targets

    with console.status("fdatasync probe...") as status:
        result = run(directory, messages, lambda m: status.update(m))
    t = Table(title="end to end, durable 1 KiB messages (one run, same disk)")
    for col in ("workload", "system", "messages", "msg/s", "CPU µs/msg", "/ probe"):
        t.add_column(col, justify="left" if col in ("workload", "system") else "right")
    for f in result.figures:
        t.add_row(f.workload, f.system, f"{f.messages:,}", f"{f.rate:,.0f}",
                  f"{f.cpu_us:,.1f}", f"{f.rate / result.probe_ops:.2f}"
                  if result.probe_ops else "")
    console.print(t)
    console.print(f"fdatasync probe just before: {result.probe_ops:,.0f} ops/s (1 KiB overwrite "
                  f"+ fdatasync); CPU: this process tree's user + system time; sqlite3: WAL, "
                  f"synchronous=FULL, insert then select and delete, n ops per transaction; "
                  f"RabbitMQ: a private server, persistent messages, durable queue, its CPU "
                  f"counted (the bench's child)")
    if result.missing:
        console.print(f"not installed, not measured: {'; '.join(result.missing)}",
                      markup=False)
    console.print("workloads: one = one thread, send/receive/ack one at a time; batch = "
                  "batches of 100; async = 256 asyncio producers + 256 consumers (acked/s); "
                  "send = 256 producers only; journal = the journal's own durable appends "
                  "from 256 asyncio tasks; floors: the batch workload through the journal "
                  "and the API with no broker, the async one through asyncio with no storage "
                  "(what any broker could reach here at most). mqstore: the default "
                  "settings (Artemis's: acks that do not wait for their fsync, deliveries "
                  "journaled only when they come back); acks wait: "
                  "block_on_acknowledge=True; counted deliveries: that and "
                  "persist_delivery_count_before_delivery=True; pure Python: the default "
                  "settings on this install's pure-Python build (MQSTORE_PURE=1, a child "
                  f"process; this install is {build()})")
    rt = Table(title="targets (issue 38; bounds for the default settings)")
    for col in ("ratio", "value", "target", ""):
        rt.add_column(col)
    for g in targets(result):
        rt.add_row(g.name, "" if g.value is None else f"{g.value:.2f}",
                   "" if g.bound is None else f"{'<=' if g.at_most else '>='} {g.bound:g}",
                   g.verdict)
    console.print(rt)


@bench.command("memory")
@click.option("--sizes", default="10000,100000,1000000", show_default=True,
              help="Backlog sizes (messages), comma-separated; 10000000 for the 10M figures.")
@click.option("--dir", "directory", type=click.Path(file_okay=False), default=None,
              help="Where to put the scratch stores (default: the system temp directory).")
def bench_memory(sizes: str, directory: Optional[str]) -> None:
    """RSS, reopen and rebuild time, and throughput with large backlogs, as ratios."""
    from .bench.memory import run

    wanted = _sizes(sizes)
    with console.status("measuring...") as status:
        rows = run(wanted, directory, lambda m: status.update(m))
    t = Table(title="1 KiB durable messages, default 64 MiB budget (one run, same disk)",
              caption="RSS, peak, drain: MB after filling, peak while filling, most while "
                      "draining; own: RSS after filling that is the process's own memory "
                      "(the rest is file pages mapped in); send x, recv x: rates on the "
                      "backlog / on an empty queue measured next to it, in the process that "
                      "filled it | after the reopen; rebuild s, x: seconds to open without "
                      "the index, and its records/s / a plain read+CRC+unpack loop's (at "
                      "small sizes most records are the rate runs' deliveries and acks, "
                      "which the Python fold takes)")
    for col in ("backlog", "q", "fill/s", "RSS", "own", "peak", "drain", "reopen s",
                "send x", "recv x", "rebuild s", "rebuild x"):
        t.add_column(col, justify="right", no_wrap=True)
    for r in rows:
        rb = "" if r.rebuild is None else \
            f"{r.rebuild['rebuild_rate'] / r.rebuild['plain_rate']:.2f}"
        rs = "" if r.rebuild is None else f"{r.rebuild['rebuild_s']:.2f}"
        own = r.fill.get("rss_split_mb", {}).get("anon")
        t.add_row(f"{r.size:,}", str(r.queues), f"{r.fill['fill_rate']:,.0f}",
                  f"{r.fill['rss_mb']:.0f}", "" if own is None else f"{own:.0f}",
                  f"{r.fill['peak_mb']:.0f}",
                  f"{r.fill['backlog_draining_rss_mb']:.0f}", f"{r.reopen['open_s']:.2f}",
                  _ratios(r, "send_rate"), _ratios(r, "receive_rate"), rs, rb)
    console.print(t)
    small, large = min(rows, key=lambda r: r.size), max(rows, key=lambda r: r.size)
    peak = max(max(r.fill["peak_mb"], r.reopen["peak_mb"]) for r in rows)
    growth = large.fill["rss_mb"] / small.fill["rss_mb"]
    rebuilt = max((r for r in rows if r.rebuild), key=lambda r: r.size, default=None)
    rebuild = "" if rebuilt is None else (
        f"; rebuild at {rebuilt.size:,}: "
        f"{rebuilt.rebuild['rebuild_rate'] / rebuilt.rebuild['plain_rate']:.2f} of the plain "
        f"loop (target >= 0.5, set for 10M)")
    reopened = [r.ratio("reopen", k) for r in rows for k in ("send_rate", "receive_rate")]
    console.print(f"peak RSS {peak:.0f} MB (target <= 300); RSS at {large.size:,} / at "
                  f"{small.size:,}: {growth:.2f} (target <= 1.5); slowest reopen "
                  f"{max(r.reopen['open_s'] for r in rows):.2f} s (target <= 3); lowest "
                  f"backlog rate after reopen {min(reopened):.2f} of empty (target >= 0.8)"
                  f"{rebuild}")


def _sizes(text: str) -> List[int]:
    """The ``--sizes`` option's numbers. Raises click.BadParameter (exit 2)."""
    try:
        return [int(x) for x in text.split(",") if x.strip()]
    except ValueError:
        raise click.BadParameter("sizes are whole numbers separated by commas") from None


def _ratios(r: Any, rate: str) -> str:
    """``backlog rate / empty rate`` in the filling process | after the reopen."""
    return f"{r.ratio('fill', rate):.2f} | {r.ratio('reopen', rate):.2f}"


@bench.command("scheduled")
@click.option("--sizes", default="10000,1000000", show_default=True,
              help="Numbers of scheduled messages, comma-separated.")
@click.option("--dir", "directory", type=click.Path(file_okay=False), default=None,
              help="Where to put the scratch stores (default: the system temp directory).")
def bench_scheduled(sizes: str, directory: Optional[str]) -> None:
    """RAM with many scheduled messages, reopen time, and their drain rate as a ratio to a
    plain backlog's."""
    from .bench.scheduled import run

    wanted = _sizes(sizes)
    with console.status("measuring...") as status:
        rows = run(wanted, directory, lambda m: status.update(m))
    t = Table(title="durable 100-byte messages scheduled over one day, one queue, default "
                    "64 MiB budget (one run, same disk)",
              caption="RSS/own: MB after sending them all, and the process's own part of it "
                      "(without the index pages LMDB maps in); refs: references held in RAM "
                      "then; reopen s: open after SIGKILL; drain x: receive+ack rate once all "
                      "are due / the same drain of a plain backlog of that size next to it; "
                      "drain RSS/own: the most seen while draining")
    for col in ("scheduled", "send/s", "RSS/own", "refs", "reopen s", "drain/s", "drain x",
                "drain RSS/own", "due order"):
        t.add_column(col, justify="right", no_wrap=True)
    for r in rows:
        f, d = r["fill"], r["drain"]
        t.add_row(f"{r['size']:,}", f"{f['fill_rate']:,.0f}",
                  f"{f['rss_mb']:.0f}/{f['anon_mb']:.0f}", f"{f['references']:,}",
                  f"{d['open_s']:.2f}", f"{d['scheduled_drain_rate']:,.0f}",
                  f"{d['scheduled_drain_rate'] / d['plain_drain_rate']:.2f}",
                  f"{d['scheduled_drain_rss_mb']:.0f}/{d['scheduled_drain_anon_mb']:.0f}",
                  "yes" if d["in_due_order"] else "NO")
    console.print(t)
    small, large = min(rows, key=lambda r: r["size"]), max(rows, key=lambda r: r["size"])

    def own(r: Any) -> float:
        return max(r["fill"]["anon_mb"], r["drain"]["scheduled_drain_anon_mb"])

    budget_mb = (64 << 20) / 1e6
    d = large["drain"]
    console.print(f"own memory at {large['size']:,} (sending or draining): {own(large):.0f} MB, "
                  f"{own(large) - own(small):+.0f} MB over {small['size']:,} (target: under the "
                  f"64 MiB = {budget_mb:.0f} MB budget); draining them / draining a plain "
                  f"backlog of as many: "
                  f"{d['scheduled_drain_anon_mb'] / d['plain_drain_anon_mb']:.2f} (target <= "
                  f"1.1); references in RAM while scheduled: "
                  f"{max(r['fill']['references'] for r in rows)} (target 0)")


@bench.command("calls")
@click.option("--messages", default=20_000, show_default=True,
              help="Messages counted per setting (batches of 100).")
@click.option("--top", default=12, show_default=True,
              help="How many of the most-called functions to list.")
@click.option("--dir", "directory", type=click.Path(file_okay=False), default=None,
              help="Where to put the scratch store (default: tmpfs when there is one).")
@click.option("--instructions", is_flag=True,
              help="Also count CPU instructions per message with valgrind's callgrind "
                   "(repeatable where CPU time is not; needs valgrind; minutes).")
def bench_calls(messages: int, top: int, directory: Optional[str],
                instructions: bool) -> None:
    """Python function calls per message on the batch path (send_many 100, receive_many,
    ack_many; 1 KiB durable), and CPU per message, for both settings of
    persist-delivery-count-before-delivery; target <= 80 calls by default (issue 38)."""
    from .bench.calls import show

    if messages < 100:
        raise click.BadParameter("--messages is a whole number >= 100")
    if instructions and shutil.which("valgrind") is None:
        raise click.UsageError("--instructions needs valgrind (Debian: apt-get install "
                               "valgrind)")
    show(console, messages, directory, top, instructions)


@bench.command("selectors")
@click.option("--sizes", default="10000,100000", show_default=True,
              help="Backlog sizes (messages), comma-separated.")
@click.option("--every", default=100, show_default=True,
              help="One message in this many matches the selector.")
@click.option("--dir", "directory", type=click.Path(file_okay=False), default=None,
              help="Where to put the scratch stores (default: the system temp directory).")
def bench_selectors(sizes: str, every: int, directory: Optional[str]) -> None:
    """What a consumer selector costs per delivery on a paging queue, against a plain
    consumer, and whether it grows with the backlog (ActiveMQ massive queues)."""
    from .bench.selectors import run

    wanted = _sizes(sizes)
    if every < 1:
        raise click.BadParameter("--every is a whole number >= 1")
    with console.status("measuring...") as status:
        rows = run(wanted, directory, every, lambda m: status.update(m))
    t = Table(title=f"durable 200-byte messages, one in {every} matching, 4 MiB budget (the "
                    f"queue pages); one run, CPU time",
              caption="sel µs / plain µs: CPU per delivery (receive and ack) for the "
                      "consumer with the selector, and for a plain one taking as many from "
                      "the head; rows/msg: index rows the selector read per message of the "
                      "backlog")
    for col in ("backlog", "deliveries", "sel µs", "plain µs", "sel / plain", "rows/msg"):
        t.add_column(col, justify="right", no_wrap=True)
    for r in rows:
        t.add_row(f"{r['size']:,}", f"{r['deliveries']:,}", f"{r['selector_us']:.0f}",
                  f"{r['plain_us']:.0f}", f"{r['selector_us'] / r['plain_us']:.2f}",
                  f"{r['rows_per_message']:.2f}")
    console.print(t)
    small, large = min(rows, key=lambda r: r["size"]), max(rows, key=lambda r: r["size"])
    if large is not small:
        growth = (large["selector_us"] / large["plain_us"]) / \
            (small["selector_us"] / small["plain_us"])
        console.print(f"selector / plain at {large['size']:,} over at {small['size']:,}: "
                      f"{growth:.2f} (a rescan of the backlog per delivery would grow with "
                      f"it, {large['size'] / small['size']:.0f}x; target <= 2); most index "
                      f"rows read per message: {max(r['rows_per_message'] for r in rows):.2f} "
                      f"(target <= 3)")


@bench.command("spark")
@click.option("--records", default=2_000_000, show_default=True, help="Journal records.")
@click.option("--master", default="local[2]", show_default=True)
@click.option("--dir", "directory", type=click.Path(file_okay=False), default=None)
def bench_spark(records: int, master: str, directory: Optional[str]) -> None:
    """Spark scan rows/s against the plain single-process reader, in one run."""
    from .bench.spark import run

    with console.status("building the journal...") as status:
        f = run(records, master, directory, lambda m: status.update(m))
    t = Table(title=f"journal scan: {f.records:,} records, {f.rows:,} rows, "
                    f"{f.bytes / 1e6:,.0f} MB")
    for col in ("reader", "seconds", "CPU s", "rows/s"):
        t.add_column(col, justify="left" if col == "reader" else "right")
    t.add_row("plain, one process", f"{f.plain_s:.1f}", f"{f.plain_cpu:.1f}",
              f"{f.plain_rate:,.0f}")
    t.add_row(f"Spark {master}, every column", f"{f.spark_s:.1f}", f"{f.spark_cpu:.1f}",
              f"{f.spark_rate:,.0f}")
    t.add_row(f"Spark {master}, record_kind only (payloads not decoded)",
              f"{f.spark_kinds_s:.1f}", f"{f.kinds_cpu:.1f}", f"{f.rows / f.spark_kinds_s:,.0f}")
    t.add_row(f"Spark {master}, an LSN range of 1% ({f.range_rows:,} rows)",
              f"{f.spark_range_s:.1f}", f"{f.range_cpu:.1f}",
              f"{f.range_rows / f.spark_range_s:,.0f}")
    console.print(t)
    console.print("CPU s: user + system seconds of this process, the JVM and the Python "
                  "workers during the query (off Linux: this process only)")
    if f.parquet_bytes:
        console.print(f"Parquet copy of the sealed segments: written in "
                      f"{f.parquet_export_s:.1f} s (one process), {f.parquet_bytes / 1e6:,.0f} "
                      f"MB against the journal's {f.bytes / 1e6:,.0f} MB; the same groupBy on it "
                      f"{f.parquet_s:.1f} s against {f.spark_s:.1f} s on the journal; the LSN "
                      f"range on it {f.parquet_range_s:.1f} s against {f.spark_range_s:.1f} s")
    else:
        console.print("Parquet copy: none (a journal of one segment has no sealed segment)")
    cpu_ratio = f.range_cpu / f.spark_cpu if f.spark_cpu else float("nan")
    console.print(f"LSN range of 1% / full scan, CPU: {cpu_ratio:.3f} (target <= 0.05: "
                  f"{'ok' if cpu_ratio <= 0.05 else 'ABOVE'}); wall time: "
                  f"{f.spark_range_s / f.spark_s:.3f} "
                  f"(segments outside the range are not planned; the queue names of sealed "
                  f"segments come from the catalogue, after the full scan put them there)")
    console.print(f"Spark (every column) / plain: {f.spark_rate / f.plain_rate:.2f}; target 400k "
                  f"rows/s on local[2], full rows: "
                  f"{'ok' if f.spark_rate >= 400_000 else 'BELOW'}")


@bench.command("report")
@click.option("--sizes", default="200000,2000000", show_default=True,
              help="Journal sizes in records, comma-separated.")
@click.option("--master", default="local[2]", show_default=True)
@click.option("--dir", "directory", type=click.Path(file_okay=False), default=None)
def bench_report(sizes: str, master: str, directory: Optional[str]) -> None:
    """spark-report's wall time and peak memory (driver Python, JVM, Python workers) at each
    journal size, in one run; the driver's memory must not grow with the journal."""
    from .bench.report import run

    wanted = [int(s) for s in sizes.split(",") if s.strip()]
    with console.status("building the journals...") as status:
        rows = run(wanted, master, directory, lambda m: status.update(m))
    t = Table(title=f"mqstore spark-report on {master} (one run, same disk)",
              caption="ratio: report / a plain one-process scan of the journal; on export: the "
                      "report on the export's sealed segments (all but the newest)")
    for col in ("records", "journal MB", "report s", "ratio", "export --parquet s",
                "on export s"):
        t.add_column(col, justify="right")
    for f in rows:
        t.add_row(f"{f.records:,}", f"{f.journal_bytes / 1e6:,.0f}", f"{f.report_s:.1f}",
                  f"{f.report_s / f.plain_s:.1f}", f"{f.export_s:.1f}",
                  f"{f.parquet_report_s:.1f}" if f.parquet_report_s else "-")
    console.print(t)
    m = Table(title="peak resident memory of the report (MB)")
    for col in ("records", "driver Python", "JVM (driver, executors)", "Python workers"):
        m.add_column(col, justify="right")
    for f in rows:
        m.add_row(f"{f.records:,}", f"{f.driver_peak / 2**20:,.0f}", f"{f.jvm_peak / 2**20:,.0f}",
                  f"{f.workers_peak / 2**20:,.0f}")
    console.print(m)
    if len(rows) > 1:
        console.print(f"driver Python peak, largest / smallest journal: "
                      f"{rows[-1].driver_peak / rows[0].driver_peak:.2f} (journal "
                      f"{rows[-1].records / rows[0].records:.0f}x larger)")


def _store_or_export(ctx: click.Context, param: click.Parameter, directory: str) -> str:
    """The report's source: a store, or a directory ``export --parquet`` wrote; a usage error
    (exit 2) otherwise, before Spark starts."""
    from .spark.report import is_parquet_export
    if is_parquet_export(directory):
        return directory
    return a_store(ctx, param, directory)


@main.command("spark-report")
@click.argument("directory", type=click.Path(file_okay=False), callback=_store_or_export)
@click.option("--out", required=True, type=click.Path(file_okay=False),
              help="Where the Parquet tables, PNG plots and report.html go (on a cluster, a "
                   "path the driver writes; the tables are written by the executors, so a "
                   "shared file system path).")
@click.option("--master", default="local[*]", show_default=True, help="Spark master URL.")
def spark_report(directory: str, out: str, master: str) -> None:
    """The inspection job on Spark, over a store's journal or a Parquet export of it (read
    once, at any size): entries and record bytes by kind, address and queue; live, dead and
    damaged bytes per segment (what compaction would reclaim, from the records' own acks);
    unacknowledged messages per queue with the oldest ones' ids; acks by reason,
    redeliveries and dead letters; sends, deliveries, acks and backlogs along the journal."""
    from .spark.report import report

    with console.status("running the Spark job..."):
        r = report(directory, out, master)
    t = Table(title=f"journal report of {directory} ({r.seconds:.1f} s)")
    t.add_column("figure")
    t.add_column("value", justify="right")
    t.add_row("entries", f"{r.rows:,}")
    for kind, n in sorted(r.kinds.items()):
        t.add_row(f"  {kind}", f"{n:,}")
    t.add_row("damaged entries", f"{r.damaged:,}")
    for queue, n in sorted(r.unacked.items()):
        t.add_row(f"unacked on {queue}", f"{n:,}")
    t.add_row("live record bytes", f"{r.live_bytes:,}")
    t.add_row("dead bytes (reclaimable)", f"{r.reclaimable_bytes:,}")
    console.print(t)
    console.print(f"report: {r.html}")


@main.command()
@click.argument("path", type=click.Path(dir_okay=False, exists=True))
@click.option("--samples", default=100, show_default=True, help="Crash states to take.")
@click.option("--seed", default=0, show_default=True, help="Seed of the crash choices.")
def crashtest(path: str, samples: int, seed: int) -> None:
    """Crash-test the workload in PATH: a Python file defining workload(broker, ledger),
    check(broker, ledger) and optionally setup(broker) (tools.integrations.crashtest). Exit 1 when a
    crash state breaks a promise."""
    from .integrations.crashtest import crash_test, load_module

    module = load_module(path)
    for name in ("workload", "check"):
        if not callable(getattr(module, name, None)):
            raise click.UsageError(f"{path} defines no {name}() function")
    with console.status(f"crash-testing {path}..."):
        report = crash_test(module.workload, module.check, getattr(module, "setup", None),
                            samples, seed)
    table = Table(title=f"{path}: {report.states} crash states checked, "
                        f"{report.operations:,} file operations")
    for col in ("state", "after", "made", "what broke"):
        table.add_column(col, overflow="fold")
    for f in report.failures[:20]:
        table.add_row(str(f.state), f.phase, f.made, f.error)
    if report.failures:
        console.print(table)
        console.print(f"[red]{len(report.failures)} crash state(s) broke a promise[/red] "
                      f"(rerun with --seed {seed} to reproduce)")
        raise SystemExit(1)
    if not report.operations:
        console.print(f"[yellow]{path}: the workload wrote nothing durable: only the crash "
                      f"after it was checked[/yellow]")
    click.echo(f"{path}: ok, {report.states} crash states checked "
               f"({report.operations:,} file operations)")


from .admin import register_admin  # noqa: E402  (qpid-config-style administration)
from .commands import register  # noqa: E402  (the data commands)
from .configcmd import register_config  # noqa: E402  (broker.xml and TOML files)
from .servecmd import register_serve  # noqa: E402  (serving a store over AMQP 1.0)

register(main)
register_admin(main)
register_config(main)
register_serve(main, bench)

if __name__ == "__main__":  # pragma: no cover
    main()
