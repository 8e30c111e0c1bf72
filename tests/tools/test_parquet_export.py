"""``mqstore export --parquet``: each sealed segment's entries as one Parquet file, the rows the
plain reader gives; a rerun after more segments seal writes only those and then equals a fresh
export; a partial file from an interrupted run is not taken as done; the store is not
touched."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Dict, List

import pytest
from click.testing import CliRunner

from mqstore.tools.cli import main
from mqstore.tools.offline import iter_entries
from tests.recovery.test_index import build
from tests.tools.test_cli import digest

pq = pytest.importorskip("pyarrow.parquet")

KEY = ["segment", "offset", "lsn", "record_kind", "transaction_id", "message_id", "address",
       "queue", "body_size", "crc_ok"]


def files(out: Path) -> Dict[str, List[tuple]]:
    """Each Parquet file's rows (the KEY columns), by file name."""
    return {p.name: [tuple(r[k] for k in KEY) for r in pq.read_table(p).to_pylist()]
            for p in sorted(out.glob("*.parquet"))}


def export(store: Path, out: Path, *more: str):  # type: ignore[no-untyped-def]
    result = CliRunner().invoke(main, ["export", "--parquet", str(store), str(out), *more],
                                catch_exceptions=False)
    assert result.exit_code == 0, result.output
    return result


def test_sealed_segments_as_parquet_then_only_the_new_ones(tmp_path: Path) -> None:
    store, out = tmp_path / "store", tmp_path / "out"
    build(str(store), rounds=2)
    before = digest(store)
    export(store, out)
    assert digest(store) == before  # read-only on the store
    first = files(out)
    sequences = sorted(int(p.name.split(".")[0]) for p in (store / "journal").glob("*.seg"))
    assert sorted(int(name.split("-")[0]) for name in first) == sequences[:-1]  # sealed only
    plain = [tuple(r[k] for k in KEY) for r in iter_entries(str(store))
             if r["segment"] != sequences[-1]]
    assert [row for name in sorted(first) for row in first[name]] == plain
    assert any(row[7] for rows in first.values() for row in rows)  # queue names resolved

    build(str(store), rounds=2, seed=2)  # more records: more segments seal
    again = export(store, out)
    assert f"{len(first)} already there" in again.output
    grown = files(out)
    assert {name: grown[name] for name in first} == first  # untouched
    assert len(grown) > len(first)
    fresh = tmp_path / "fresh"
    export(store, fresh)
    assert files(fresh) == grown


def test_a_partial_file_is_not_taken_as_done_and_bodies_come_on_request(tmp_path: Path) -> None:
    store, out = tmp_path / "store", tmp_path / "out"
    build(str(store), rounds=1)
    export(store, out, "--body")
    names = sorted(out.glob("*.parquet"))
    victim = names[0]
    os.rename(victim, str(victim) + ".partial")  # as an interrupted run leaves it
    export(store, out, "--body")
    assert sorted(out.glob("*.parquet")) == names
    table = pq.read_table(names[0]).to_pylist()
    messages = [r for r in table if r["record_kind"] == "MESSAGE"]
    assert messages and all(r["body"] is not None and len(r["body"]) == r["body_size"]
                            for r in messages)


def test_plain_export_refuses_a_directory(tmp_path: Path) -> None:
    store = tmp_path / "store"
    build(str(store), rounds=1)
    (tmp_path / "dir").mkdir()
    result = CliRunner().invoke(main, ["export", str(store), str(tmp_path / "dir")])
    assert result.exit_code == 2 and "--parquet" in result.output
    body = CliRunner().invoke(main, ["export", str(store), str(tmp_path / "f.jsonl"), "--body"])
    assert body.exit_code == 2 and not (tmp_path / "f.jsonl").exists()
