"""The ``mqstore`` command line (click), with rich tables and progress output.

Subcommands live in their own modules; this module only wires them together. Exit codes: 0 fine,
1 problems found, 2 usage errors (click's own).
"""

from __future__ import annotations

from typing import Optional

import click
from rich.console import Console
from rich.table import Table

console = Console()


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
def main() -> None:
    """mqstore: a durable, journaled message store with Artemis and Qpid queue semantics."""


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
    from tools.bench_journal import ratios, run

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


if __name__ == "__main__":  # pragma: no cover
    main()
