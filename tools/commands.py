"""The data commands of ``mqstore``: print, queues, addresses, export, import, check, recover,
compact. Commands that only read open the store read-only and change no byte. Exit codes: 0
fine, 1 problems found (or an error), 2 usage (a bad option, a missing file, a directory that
is not a store)."""

from __future__ import annotations

import json
import os
import sys
import time
from typing import TYPE_CHECKING, Any, Dict, List, NoReturn, Optional, Sequence

import click
from rich.console import Console
from rich.progress import BarColumn, Progress, SpinnerColumn, TextColumn, TimeElapsedColumn
from rich.table import Table

from mqstore.journal import MqStoreError
from .listing import chosen, emit, listing_options

if TYPE_CHECKING:
    from mqstore.engine import Broker

console = Console(soft_wrap=True)  # status lines whole (paths in them), never cut at 80 columns
err = Console(stderr=True, soft_wrap=True)  # messages whole, never cut at 80 columns


def a_store(ctx: click.Context, param: click.Parameter, directory: str) -> str:
    """A DIRECTORY argument must name an existing store: a usage error (exit 2) otherwise,
    reported before anything is printed or opened."""
    from .offline import segment_files
    try:
        segment_files(directory)
    except MqStoreError as exc:
        raise click.BadParameter(str(exc)) from None
    return directory


STORE = click.argument("directory", type=click.Path(file_okay=False), callback=a_store)
NEW_STORE = click.argument("directory", type=click.Path(file_okay=False))
JSON = click.option("--json", "as_json", is_flag=True, help="JSON output (one object per line "
                                                           "for print, a list otherwise).")


def fail(exc: MqStoreError) -> NoReturn:
    """Print an mqstore error and exit 1."""
    err.print(f"[red]error:[/red] {exc}")
    raise SystemExit(1)


def open_with_progress(directory: str, what: str, **options: Any) -> Broker:
    """``Broker.open(directory, expiry_scan_ms=0, **options)`` with a progress bar of the
    records replayed (to stderr); a refused open exits through ``fail`` (its message, exit 1)."""
    from mqstore.engine import Broker
    try:
        with progress_bar() as bar:
            task = bar.add_task(what, total=None)

            def replayed(n: int, total: int) -> None:
                bar.update(task, description="replaying records", completed=n, total=total)

            return Broker.open(directory, expiry_scan_ms=0, progress=replayed, **options)
    except MqStoreError as exc:
        fail(exc)


def _export_parquet(directory: str, out: str, body: bool) -> None:
    """``export --parquet``: the sealed segments ``out`` lacks, with a bar per segment."""
    from .parquet_export import export_parquet
    from .segments import segment_files
    try:
        with progress_bar() as bar:
            task = bar.add_task("exporting sealed segments",
                                total=max(0, len(segment_files(directory)) - 1))
            report = export_parquet(directory, out, body, lambda f: bar.advance(task))
    except MqStoreError as exc:
        fail(exc)
    console.print(f"wrote {len(report.written)} segment(s), {report.rows:,} entries, to {out}; "
                  f"{len(report.kept)} already there")


def progress_bar(transient: bool = True) -> Progress:
    """The progress display used by long commands (to stderr)."""
    return Progress(SpinnerColumn(), TextColumn("{task.description}"), BarColumn(),
                    TextColumn("{task.completed:,}"), TimeElapsedColumn(),
                    console=err, transient=transient)


SALVAGE = click.option("--salvage", is_flag=True, help="Read a damaged store: skip damaged "
                                                     "records (read-only; nothing is changed).")


def _listing(directory: str, rows_of: Any, salvage: bool = False) -> List[Dict[str, Any]]:
    """Rows read from the store opened read-only (exit 1 on an mqstore error); ``salvage``
    skips damaged records and says on stderr what was skipped."""
    from .offline import OfflineStore
    try:
        with err.status("reading the store..."), OfflineStore(directory, salvage) as store:
            for s in store.report.journal.skipped:
                err.print(f"[yellow]skipped[/] {s.path}:{s.start}-{s.end} ({s.reason})")
            return rows_of(store)
    except MqStoreError as exc:
        fail(exc)


QUEUE_COLUMNS = ["queue", "address", "routing_type", "durable", "auto_delete", "exclusive",
                 "ring_size", "last_value_key", "non_destructive", "bindings", "max_count",
                 "max_size",
                 "policy_type", "qpid_lvq", "alternate_address", "filter", "messages", "paged",
                 "delivering", "scheduled", "consumers_at_last_close", "bytes", "oldest",
                 "oldest_age", "oldest_age_s", "added_last_run", "acked_last_run",
                 "killed_last_run", "expired_last_run", "replaced_last_run"]
QUEUE_DEFAULT = ["queue", "address", "routing_type", "messages", "paged", "delivering",
                 "scheduled", "bytes"]
QUEUE_HEADERS = {"routing_type": "type", "durable": "dur", "auto_delete": "autodel",
                 "exclusive": "excl", "ring_size": "ring", "last_value_key": "lvq key",
                 "non_destructive": "nondes", "messages": "msgs", "delivering": "dlvd",
                 "scheduled": "sched", "consumers_at_last_close": "cons",
                 "max_count": "max msgs", "max_size": "max bytes", "policy_type": "policy",
                 "qpid_lvq": "qpid lvq", "alternate_address": "alternate",
                 "oldest_age": "oldest age", "oldest_age_s": "age s",
                 "added_last_run": "added*", "acked_last_run": "acked*",
                 "killed_last_run": "killed*", "expired_last_run": "expired*",
                 "replaced_last_run": "replaced*"}
QPID_COLUMNS = ["durable", "auto_delete", "exclusive", "bindings", "bytes", "queue"]
DELETED_COLUMNS = ["queue", "address", "routing_type", "deleted", "deleted_ms"]
DELETED_DEFAULT = ["queue", "address", "routing_type", "deleted"]
SCHEDULED_COLUMNS = ["message_id", "due", "due_ms", "delivery_count", "bytes", "properties"]
SCHEDULED_DEFAULT = ["message_id", "due", "delivery_count", "bytes", "properties"]
BROWSE_COLUMNS = ["message_id", "priority", "delivery_count", "in_delivery", "sent", "sent_ms",
                  "age", "age_s", "expires", "bytes", "properties"]
BROWSE_DEFAULT = ["message_id", "priority", "delivery_count", "sent", "age", "bytes",
                  "properties"]
SETTINGS_COLUMNS = ["setting", "value", "from"]
ADDRESS_COLUMNS = ["address", "routing_types", "queues", "auto_created", "messages", "held",
                   "bytes", "paging", "paged", "paged_bytes"]
ADDRESS_DEFAULT = ["address", "routing_types", "queues", "messages", "held", "bytes", "paging",
                   "paged"]


def register(main: click.Group) -> None:
    """Add the data commands to the ``mqstore`` group."""

    @main.command("print")
    @STORE
    @click.option("--kind", "kinds", multiple=True, help="Only entries of this kind (MESSAGE, "
                                                        "ACK, DELIVERY, ...); repeatable.")
    @click.option("--address", help="Only entries of this address.")
    @click.option("--queue", help="Only entries of this queue.")
    @click.option("--lsn-from", type=int, help="Only LSNs >= this.")
    @click.option("--lsn-to", type=int, help="Only LSNs <= this.")
    @click.option("--segment", "segments", type=int, multiple=True,
                  help="Only the segment of this sequence number (the SEGMENT of the output, "
                       "or of `mqstore segments`); repeatable.")
    @click.option("--message-id", type=int, help="Only this message id.")
    @click.option("--body", is_flag=True, help="Show bodies (text if UTF-8, else a hex prefix).")
    @JSON
    def print_cmd(directory: str, kinds: Sequence[str], address: Optional[str],
                  queue: Optional[str], lsn_from: Optional[int], lsn_to: Optional[int],
                  segments: Sequence[int], message_id: Optional[int], body: bool,
                  as_json: bool) -> None:
        """Every journal record, human-readable (as kafka-dump-log): LSN, segment and offset,
        kind, transaction, message id, address/queue, body size, the message's time (ISO-8601
        UTC) and properties; damaged bytes are shown flagged (exit 1). --lsn-from, --lsn-to and
        --segment seek by the segments' headers: segments outside them are not scanned. A
        summary line goes to stderr (not with --json)."""
        from .offline import body_text, iso_ms, iter_entries, matches
        from .segments import missing_segments
        damaged = shown = 0
        read: List[int] = []
        try:
            out = sys.stdout
            if not as_json:
                out.write(f"{'LSN':>9} {'SEGMENT:OFFSET':>24} {'KIND':<13} {'TX':>6} "
                          f"{'MESSAGE':>8} {'ADDRESS/QUEUE':<28} {'SIZE':>7} {'TIME':<29} "
                          f"PROPERTIES\n")
            upper = [k.upper() for k in kinds]
            for row in iter_entries(directory, body, None, lsn_from, lsn_to, upper,
                                    set(segments) if segments else None, read):
                if not row["crc_ok"]:
                    damaged += 1
                if not matches(row, upper, address, queue, lsn_from, lsn_to, message_id):
                    continue
                shown += 1
                if as_json:
                    r = dict(row)
                    r["body"] = body_text(r["body"]) if body else None
                    out.write(json.dumps(r, sort_keys=True, default=str) + "\n")
                    continue
                where = row.get("address") or ""
                if row.get("queue"):
                    where = f"{where}/{row['queue']}" if where else row["queue"]
                kind = row["record_kind"] if row["crc_ok"] else f"!! {row['record_kind']}"
                props = row["error"] if not row["crc_ok"] else \
                    json.dumps(row.get("properties") or {}, sort_keys=True)
                if row.get("scheduled_time"):
                    props += f" scheduled_time={iso_ms(row['scheduled_time'])}"
                size = row["body_size"] if row["body_size"] is not None else ""
                when = iso_ms(row["timestamp"]) if row.get("timestamp") else ""
                out.write(f"{row['lsn'] if row['lsn'] is not None else '-':>9} "
                          f"{str(row['segment']) + ':' + str(row['offset']):>24} {kind:<13} "
                          f"{row['transaction_id'] or '':>6} {row['message_id'] or '':>8} "
                          f"{where[:28]:<28} {size:>7} {when:<29} {props}\n")
                if body and row["body"] is not None:
                    out.write(f"{'':>9} body: {body_text(row['body'])}\n")
            out.flush()
            missing = missing_segments(directory)
            if not as_json:
                click.echo(f"{shown:,} entries shown ({damaged:,} damaged) from "
                           f"{len(read):,} segment(s) scanned", err=True)
            for path in missing:  # a gap: the records it held are not shown
                err.print(f"[red]error:[/red] {path} is missing (the journal's manifest lists "
                          f"it): its records are not shown, and the store will not open")
        except MqStoreError as exc:
            fail(exc)
        except BrokenPipeError:
            return
        raise SystemExit(1 if damaged or missing else 0)

    @main.command()
    @STORE
    @click.option("--deleted", is_flag=True,
                  help="List the deleted durable queues still kept (the newest 100), with "
                       "when each was deleted.")
    @click.option("--qpid", is_flag=True,
                  help="The columns qpid-config queues shows: Durable, AutoDel, Excl, "
                       "Bindings, store size (bytes), Queue Name.")
    @listing_options
    @SALVAGE
    def queues(directory: str, deleted: bool, qpid: bool, fmt: Optional[str], as_json: bool,
               columns: Optional[str], salvage: bool) -> None:
        """The queues of a store (qpid-config style, or Artemis's queue stat with --columns
        all), read-only: oldest message and its age; the counters of the broker's last run
        (added*, acked*, ...: recorded at its clean close, "-" after a crash)."""
        wide = as_json or fmt == "json"
        if qpid and columns is None:
            columns = ",".join(QPID_COLUMNS)
        if deleted:
            cols = chosen(columns, DELETED_COLUMNS, DELETED_COLUMNS if wide else DELETED_DEFAULT)
            rows = _listing(directory, lambda store: store.deleted_rows(), salvage)
            emit(rows, cols, fmt, as_json, f"deleted queues of {directory}", QUEUE_HEADERS,
                 "deleted: when it was deleted (UTC)", console)
            return
        cols = chosen(columns, QUEUE_COLUMNS, QUEUE_COLUMNS if wide else QUEUE_DEFAULT)
        rows = _listing(directory, lambda store: store.queue_rows(), salvage)
        emit(rows, cols, fmt, as_json, f"queues of {directory}", QUEUE_HEADERS,
             "dlvd: delivered and not acked when the store was closed; cons: consumers at the "
             "last clean close; *: counted during the last run, recorded at its clean close",
             console)

    @main.command()
    @STORE
    @click.argument("queue")
    @click.option("--limit", type=click.IntRange(min=0), default=1000, show_default=True,
                  help="List at most this many.")
    @listing_options
    @SALVAGE
    def scheduled(directory: str, queue: str, limit: int, fmt: Optional[str], as_json: bool,
                  columns: Optional[str], salvage: bool) -> None:
        """The messages waiting in QUEUE's scheduled buffer, in due order (Artemis
        listScheduledMessages), read-only."""
        wide = as_json or fmt == "json"
        cols = chosen(columns, SCHEDULED_COLUMNS,
                      SCHEDULED_COLUMNS if wide else SCHEDULED_DEFAULT)
        rows = _listing(directory, lambda store: store.scheduled_rows(queue, limit), salvage)
        emit(rows, cols, fmt, as_json, f"scheduled messages of {queue} in {directory}",
             {"message_id": "message", "delivery_count": "dlvd"},
             "due: when it joins the head of the queue (UTC)", console)

    @main.command()
    @STORE
    @click.argument("queue")
    @click.option("--limit", type=click.IntRange(min=0), default=100, show_default=True,
                  help="List at most this many, from the head.")
    @click.option("--body", is_flag=True, help="Show bodies (text if UTF-8, else a hex prefix).")
    @listing_options
    @SALVAGE
    def browse(directory: str, queue: str, limit: int, body: bool, fmt: Optional[str],
               as_json: bool, columns: Optional[str], salvage: bool) -> None:
        """The messages on QUEUE in the order consumers get them, without taking any
        (Artemis browse, Qpid browsing), read-only."""
        wide = as_json or fmt == "json"
        every = BROWSE_COLUMNS + (["body"] if body else [])
        cols = chosen(columns, every, every if wide else
                      BROWSE_DEFAULT + (["body"] if body else []))
        rows = _listing(directory, lambda store: store.browse_rows(queue, limit, body),
                        salvage)
        emit(rows, cols, fmt, as_json, f"messages of {queue} in {directory}, head first",
             {"message_id": "message", "delivery_count": "dlvd", "priority": "prio",
              "in_delivery": "in dlv"},
             "sent: UTC; dlvd: times delivered; in dlv: delivered and not acked at close",
             console)

    @main.command()
    @STORE
    @click.argument("address")
    @listing_options
    @SALVAGE
    def settings(directory: str, address: str, fmt: Optional[str], as_json: bool,
                 columns: Optional[str], salvage: bool) -> None:
        """The effective address settings of ADDRESS: every setting, its value and the match
        it comes from (Artemis address-settings, merged most specific last), read-only."""
        cols = chosen(columns, SETTINGS_COLUMNS, SETTINGS_COLUMNS)
        rows = _listing(directory, lambda store: store.settings_rows(address), salvage)
        emit(rows, cols, fmt, as_json, f"address settings of {address} in {directory}", {},
             "from: the address-settings match that sets it; - : the default", console)

    @main.command()
    @STORE
    @listing_options
    @SALVAGE
    def addresses(directory: str, fmt: Optional[str], as_json: bool, columns: Optional[str],
                  salvage: bool) -> None:
        """The addresses of a store, read-only."""
        wide = as_json or fmt == "json"
        cols = chosen(columns, ADDRESS_COLUMNS, ADDRESS_COLUMNS if wide else ADDRESS_DEFAULT)
        rows = _listing(directory, lambda store: store.address_rows(), salvage)
        emit(rows, cols, fmt, as_json, f"addresses of {directory}", {"routing_types": "types"},
             "messages: references on its queues; held: messages it holds (each once) against "
             "its max_size limits, with their body bytes; paged: held as paged (PAGE policy)",
             console)

    @main.command("export")
    @STORE
    @click.argument("file", type=click.Path())
    @click.option("--parquet", is_flag=True,
                  help="Write the journal's entries instead: each sealed segment as a Parquet "
                       "file in the directory FILE, adding only the segments it lacks.")
    @click.option("--body", is_flag=True, help="With --parquet: include message bodies.")
    def export_cmd(directory: str, file: str, parquet: bool, body: bool) -> None:
        """The live state as JSON Lines (read-only); with --parquet, the journal's entries of
        sealed segments as Parquet, incrementally (read-only on the store)."""
        from .offline import segment_files
        from .transfer import export_store
        if parquet:
            _export_parquet(directory, file, body)
            return
        if body:
            raise click.BadParameter("--body goes with --parquet (JSON Lines hold every body)",
                                     param_hint="--body")
        if os.path.isdir(file):
            raise click.BadParameter(f"{file} is a directory (JSON Lines go to a file; "
                                     f"--parquet writes a directory)", param_hint="FILE")
        # a regular file is written beside it and renamed when complete: a store that cannot
        # be read leaves no file (not an empty or cut-short one); a pipe is written as it is
        whole = not os.path.exists(file) or os.path.isfile(file)
        part = f"{file}.part-{os.getpid()}" if whole else file
        try:
            segment_files(directory)  # no output file for a directory that holds no store
            try:
                with progress_bar() as bar, open(part, "w", encoding="utf-8") as out:
                    task = bar.add_task("exporting messages", total=None)
                    n = export_store(directory, out, lambda k: bar.update(task, completed=k))
                if whole:
                    os.replace(part, file)
            finally:
                if whole and os.path.exists(part):
                    os.unlink(part)
        except MqStoreError as exc:
            fail(exc)
        except OSError as exc:
            fail(MqStoreError(f"cannot write {file}: {exc.strerror or exc}"))
        console.print(f"exported {n:,} messages to {file}")

    @main.command("import")
    @click.argument("file", type=click.Path(dir_okay=False, exists=True))
    @NEW_STORE
    def import_cmd(file: str, directory: str) -> None:
        """Create a store in an empty DIRECTORY from an export."""
        from .transfer import import_store
        try:
            with progress_bar() as bar, open(file, encoding="utf-8") as lines:
                task = bar.add_task("importing messages", total=None)
                n = import_store(lines, directory, lambda k: bar.update(task, completed=k))
        except MqStoreError as exc:
            fail(exc)
        console.print(f"imported {n:,} messages into {directory}")

    @main.command()
    @STORE
    @JSON
    def check(directory: str, as_json: bool) -> None:
        """The fsck: segment headers, frames, CRCs, LSN order, the index against the journal.
        Exits 1 when it finds a problem."""
        from .check import check_store, problems
        from .offline import segment_files
        try:
            files = segment_files(directory)
            with progress_bar() as bar:
                task = bar.add_task("checking segments", total=len(files))
                findings = check_store(directory, lambda f: bar.advance(task))
        except MqStoreError as exc:
            fail(exc)
        if as_json:
            click.echo(json.dumps([f.as_dict() for f in findings], indent=1))
        else:
            style = {"error": "red", "warning": "yellow", "ok": "green"}
            t = Table(title=f"check of {directory}")
            for c in ("level", "file", "offset", "finding"):
                t.add_column(c)
            for f in findings:
                t.add_row(f"[{style[f.level]}]{f.level}[/]", os.path.relpath(f.path, directory),
                          "-" if f.offset is None else str(f.offset), f.message)
            console.print(t, soft_wrap=False)
        raise SystemExit(1 if problems(findings) else 0)

    @main.command()
    @STORE
    @click.option("--rebuild-index", is_flag=True, help="Delete the index first: rebuild it "
                                                      "from the journal alone.")
    @click.option("--salvage", is_flag=True, help="Skip damaged records instead of refusing "
                                                  "to open (reports every skipped range).")
    def recover(directory: str, rebuild_index: bool, salvage: bool) -> None:
        """Open the store, recover it, and report what recovery did."""
        from mqstore.journal import JournalOptions
        from .salvage import rewrite, skipped_rows
        start = time.monotonic()  # DIRECTORY is a store (STORE): no store is created here
        done = None
        if salvage:  # damage to skip: the kept state is rewritten as a clean store first
            try:
                with console.status("salvaging: reading around the damage..."):
                    done = rewrite(directory)
            except MqStoreError as exc:
                fail(exc)
        broker = open_with_progress(directory, "opening (checking every segment)",
                                    journal_options=JournalOptions(
                                        salvage=salvage and done is None),
                                    verify_journal=True, rebuild_index=rebuild_index)
        rep = broker.recovery_report
        j = rep.journal
        # what salvage skipped and lost: the rewrite's report, else this open's
        skipped = done.skipped if done else skipped_rows(j.skipped)
        lost = done.lost if done else rep.lost
        rows = [("segments", j.segments), ("records", j.records), ("last LSN", j.last_lsn),
                ("torn tail truncated (bytes)", j.torn_bytes),
                ("unproven records dropped with it", j.unproven_records),
                ("interrupted compaction", j.compaction or "none"),
                ("skipped by salvage", "; ".join(
                    f"{s['file']}:{s['start']}-{s['end']} ({s['reason']})" for s in skipped)
                    or "none"),
                ("lost since the last checkpoint",
                 "; ".join(f"{k}: {v}" for k, v in lost.items()) or "nothing known"),
                ("index", rep.index), ("records replayed", rep.replayed_records),
                ("addresses / queues / messages",
                 f"{rep.counts['addresses']} / {rep.counts['queues']} / "
                 f"{rep.counts['messages']}"),
                ("time", f"{(time.monotonic() - start) * 1000:.0f} ms")]
        broker.close()
        t = Table(title=f"recovery of {directory}", show_header=False)
        t.add_column()
        t.add_column()
        for k, v in rows:
            t.add_row(k, str(v))
        console.print(t, soft_wrap=False)
        if done is not None:
            console.print(f"rewrote the store from what was kept ({done.kept['messages']:,} "
                          f"messages); the damaged journal is in "
                          f"{os.path.join(directory, done.damaged_journal)}; what was dropped "
                          f"is listed in {done.report}")

    @main.command()
    @STORE
    @click.option("--force", is_flag=True, help="Compact even below the thresholds "
                                                "(more than 10 segments, less than 30% live).")
    def compact(directory: str, force: bool) -> None:
        """Compact the journal and report segments and live bytes before and after."""
        # DIRECTORY is a store (STORE): no store is created here
        broker = open_with_progress(directory, "opening")
        try:
            before = broker.statistics().journal
            with console.status("compacting..."):
                report = broker.compact(force=force)
            after = broker.statistics().journal
        finally:
            broker.close()
        t = Table(title=f"compaction of {directory}: {report.reason}")
        for c in ("", "segments", "records", "bytes", "live bytes"):
            t.add_column(c)
        t.add_row("before", str(before.segments), f"{before.records:,}",
                  f"{before.total_bytes:,}", f"{before.live_bytes:,}")
        t.add_row("after", str(after.segments), f"{after.records:,}", f"{after.total_bytes:,}",
                  f"{after.live_bytes:,}")
        console.print(t, soft_wrap=False)
        console.print(f"rewrote {report.records_copied:,} live records from segments "
                      f"{list(report.inputs)} into {list(report.outputs)}")
