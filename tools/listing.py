"""How the listing commands (``mqstore queues``, ``addresses``) print rows, as operators' tools
do (``rabbitmqctl list_queues <items>``, ``qpid-config queues``, ``artemis queue stat``):
``--format table|tsv|json`` and ``--columns`` to choose what is shown.

- ``table``: a rich table that never cuts a value (long names fold onto more lines), so it
  stays readable at 80 columns; the default on a terminal.
- ``tsv``: a header line and one tab-separated line per row, values as they are, ``-`` for
  none; the default in a pipe (``| cut``, ``| sort``, ``| awk``).
- ``json``: a list of objects with real lists, numbers, booleans and nulls, every column
  (``--columns`` chooses here too).
"""

from __future__ import annotations

import csv
import json
import sys
from typing import Any, Callable, Dict, List, Optional, Sequence

import click
from rich.console import Console
from rich.table import Table

FORMATS = ("table", "tsv", "json")


def listing_options(fn: Callable[..., Any]) -> Callable[..., Any]:
    """Add ``--format``, ``--json`` (the same as ``--format json``) and ``--columns``."""
    fn = click.option("--columns", default=None, metavar="A,B,...",
                      help="Columns to show, comma-separated (default: the main ones; "
                           "'all' for every one).")(fn)
    fn = click.option("--json", "as_json", is_flag=True,
                      help="The same as --format json.")(fn)
    return click.option("--format", "fmt", type=click.Choice(FORMATS), default=None,
                        help="table (default on a terminal), tsv (default in a pipe) or "
                             "json.")(fn)


def chosen(columns: Optional[str], every: Sequence[str], default: Sequence[str]) -> List[str]:
    """The columns ``--columns`` asks for, in its order.

    Raises:
        click.BadParameter: a name that is not a column (the message lists the columns).
    """
    if columns is None:
        return list(default)
    names = [c.strip() for c in columns.split(",") if c.strip()]
    if names == ["all"]:
        return list(every)
    unknown = [c for c in names if c not in every]
    if unknown or not names:
        raise click.BadParameter(f"unknown column {', '.join(unknown) or '(none)'}; the columns "
                                 f"are: {', '.join(every)}", param_hint="--columns")
    return names


def emit(rows: Sequence[Dict[str, Any]], columns: List[str], fmt: Optional[str],
         as_json: bool, title: str, headers: Optional[Dict[str, str]] = None,
         caption: Optional[str] = None, console: Optional[Console] = None) -> None:
    """Print ``rows`` (dicts of real values) in the chosen format, ``columns`` only."""
    fmt = "json" if as_json else fmt or ("table" if sys.stdout.isatty() else "tsv")
    if fmt == "json":
        click.echo(json.dumps([{c: r.get(c) for c in columns} for r in rows], indent=1))
        return
    if fmt == "tsv":
        out = csv.writer(sys.stdout, delimiter="\t", lineterminator="\n")
        out.writerow(columns)
        for r in rows:
            out.writerow([_text(r.get(c)) for c in columns])
        return
    t = Table(title=title, caption=caption)
    for c in columns:
        numeric = any(isinstance(r.get(c), int) and not isinstance(r.get(c), bool)
                      for r in rows)
        t.add_column((headers or {}).get(c, c.replace("_", " ")), overflow="fold",
                     justify="right" if numeric else "left")
    for r in rows:
        t.add_row(*(_text(r.get(c), ", ") for c in columns))  # lists wrap between names
    (console or Console()).print(t, soft_wrap=False)  # a table fits the width, captions too


def _text(value: Any, sep: str = ",") -> str:
    if value is None:
        return "-"
    if isinstance(value, bool):
        return "Y" if value else "N"
    if isinstance(value, (list, tuple)):
        return sep.join(str(v) for v in value)
    if isinstance(value, dict):
        return json.dumps(value, sort_keys=True, default=str)
    return str(value)


__all__ = ["FORMATS", "chosen", "emit", "listing_options"]
