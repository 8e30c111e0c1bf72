"""The CLI never destroys or invents data (issue 11, defects 10 and 12): commands that read
or build a store never touch a directory that is not one; import is all or nothing; a damaged
store can still be listed and salvaged."""

from __future__ import annotations

import base64
import json
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from mqstore.engine import Broker
from mqstore.journal import MqStoreError
from tests.engine.test_bad_input import ANY
from tests.recovery.test_index import build
from tests.tools.test_cli import digest, run
from mqstore.tools.transfer import FORMAT, ImportFormatError, parse_line
from mqstore.tools.cli import main
from click.testing import CliRunner


@pytest.fixture
def store(tmp_path: Path) -> Path:
    d = tmp_path / "store"
    build(str(d), rounds=2)
    return d


def test_compact_recover_and_export_never_create_a_store(tmp_path: Path) -> None:
    typo = tmp_path / "typo"
    for args in (["compact", str(typo)], ["recover", str(typo)],
                 ["export", str(typo), str(tmp_path / "out.jsonl")]):
        assert run(*args).exit_code == 2  # a usage error: DIRECTORY is not a store
        assert not typo.exists()
    assert not (tmp_path / "out.jsonl").exists()


def test_demo_refuses_a_directory_that_is_not_a_store(tmp_path: Path) -> None:
    mine = tmp_path / "mine"
    mine.mkdir()
    (mine / "thesis.tex").write_text("do not delete")
    result = run("demo", "--dir", str(mine), "--limit", "100")
    assert result.exit_code == 1 and "holds no mqstore store" in result.output
    assert (mine / "thesis.tex").read_text() == "do not delete"


def export_of(store: Path, tmp_path: Path) -> list:
    out = tmp_path / "export.jsonl"
    assert run("export", str(store), str(out)).exit_code == 0
    return [json.loads(line) for line in out.read_text().splitlines()]


def hostile(lines: list) -> list:
    """Ways to break an export, each a function of its parsed lines."""
    msg = next(i for i, line in enumerate(lines) if line["type"] == "message")
    queue = next(line for line in lines if line["type"] == "queue")
    other = next(line for line in lines if line["type"] == "queue"
                 and line["address"] != queue["address"])

    def edit(**changes):
        out = [dict(line) for line in lines]
        out[msg].update(changes)
        return out
    return [
        edit(timestamp="now"), edit(expiration=None), edit(priority=99),
        edit(body="not base64!"), edit(type="bogus"), edit(properties={"k": {"a": 1}}),
        edit(queues={other["name"]: 0}), edit(queues={queue["name"]: -1}),
        edit(address=None), edit(body=base64.b64encode(b"x").decode() + "=="),
        lines[:msg] + ["not an object"] + lines[msg:],
    ]


def test_import_of_a_hostile_file_leaves_nothing_and_a_retry_works(store: Path,
                                                                    tmp_path: Path) -> None:
    lines = export_of(store, tmp_path)
    target = tmp_path / "target"
    for n, bad in enumerate(hostile(lines)):
        f = tmp_path / f"bad{n}.jsonl"
        f.write_text("\n".join(json.dumps(line) for line in bad) + "\n")
        result = run("import", str(f), str(target))
        assert result.exit_code == 1, f"case {n} imported: {result.output}"
        assert "Traceback" not in result.output
        assert not target.exists(), f"case {n} left a partial store"
        assert not list(tmp_path.glob("target.import-*"))
    f = tmp_path / "good.jsonl"
    f.write_text("\n".join(json.dumps(line) for line in lines) + "\n")
    assert run("import", str(f), str(target)).exit_code == 0
    assert run("check", str(target)).exit_code == 0


def test_a_damaged_sealed_segment_can_be_listed_and_salvaged(store: Path) -> None:
    seg = sorted((store / "journal").glob("*.seg"))[1]  # sealed, trusted by the index
    raw = bytearray(seg.read_bytes())
    raw[200] ^= 0xFF
    seg.write_bytes(bytes(raw))
    before = digest(store)
    assert run("check", str(store)).exit_code == 1
    listed = run("queues", str(store), "--salvage", "--json")
    assert listed.exit_code == 0, listed.output
    assert digest(store) == before
    assert run("recover", str(store), "--salvage").exit_code == 0
    with Broker.open(str(store), expiry_scan_ms=0) as b:  # every body reads: no fail-stop
        assert b.recovery_report.index == "used"
        with b.session() as s:
            for q in b.queue_names():
                for m in s.create_browser(q):
                    assert m.message.body


FIELDS = ["type", "name", "routing_types", "auto_created", "address", "routing_type", "config",
          "match", "settings", "queues", "body", "properties", "priority", "expiration",
          "timestamp"]


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(line=st.dictionaries(st.sampled_from(FIELDS), st.one_of(
    ANY, st.sampled_from(["message", "queue", "address", "settings", "header", "YQ==", "orders"]),
    st.dictionaries(st.text(max_size=3), ANY, max_size=3)), max_size=8),
    number=st.sampled_from([1, 2, 7]))
def test_any_import_line_is_an_operation_or_a_typed_error(line: dict, number: int) -> None:
    if line.get("type") == "header":
        line["format"] = FORMAT
    try:
        parse_line(number, json.dumps(line, default=lambda o: o.hex()))
    except ImportFormatError as exc:
        assert exc.line == number
    except MqStoreError:
        pass  # a value the broker refuses, typed


# -- issue 36 item 9: the CLI on directories that are not quite stores -----------------------------

def test_an_empty_journal_directory_is_not_a_store_and_no_command_makes_it_one(
        tmp_path: Path) -> None:
    d = tmp_path / "d"
    (d / "journal").mkdir(parents=True)
    for args in (["compact", str(d)], ["recover", str(d)], ["add", "queue", str(d), "q"],
                 ["print", str(d)], ["queues", str(d)], ["check", str(d)],
                 ["export", str(d), str(tmp_path / "out.jsonl")]):
        got = run(*args)
        assert got.exit_code == 2, (args, got.output)
        assert "holds no segment" in got.output
    assert list((d / "journal").iterdir()) == [] and sorted(p.name for p in d.iterdir()) == \
        ["journal"]
    assert not (tmp_path / "out.jsonl").exists()


def test_export_of_a_store_that_cannot_be_read_leaves_no_file(store: Path,
                                                              tmp_path: Path) -> None:
    import shutil
    seg = sorted((store / "journal").glob("*.seg"))[1]  # a sealed segment, damaged
    raw = bytearray(seg.read_bytes())
    raw[200] ^= 0xFF
    seg.write_bytes(bytes(raw))
    shutil.rmtree(store / "index")  # (so that reading the store reads that segment)
    out = tmp_path / "out.jsonl"
    got = run("export", str(store), str(out))
    assert got.exit_code == 1 and "corrupt" in got.output
    assert list(tmp_path.glob("out.jsonl*")) == []  # not an empty or cut-short file


def test_print_names_a_missing_segment_and_exits_1(store: Path) -> None:
    segs = sorted((store / "journal").glob("*.seg"))
    assert len(segs) > 2
    segs[1].unlink()
    for args in (["print", str(store)], ["print", str(store), "--json"]):
        got = run(*args)
        assert got.exit_code == 1
        assert f"{segs[1]} is missing" in got.output.replace("\n", "")


def test_symlink_loops_are_refused_without_a_traceback(store: Path, tmp_path: Path) -> None:
    loop = tmp_path / "loop"
    loop.symlink_to(loop)
    seg_loop = store / "journal" / "0000000099999999.seg"
    seg_loop.symlink_to(seg_loop)
    for args in (["print", str(loop)], ["check", str(loop)], ["print", str(store)],
                 ["queues", str(store)], ["check", str(store)], ["recover", str(store)]):
        got = CliRunner().invoke(main, args)  # (a traceback would be an exception here)
        assert got.exit_code == 2 and got.exception is None or \
            isinstance(got.exception, SystemExit), (args, got.output)
        assert "Traceback" not in got.output


@pytest.mark.parametrize("content", [bytes(range(256)) * 40,
                                     ("[" * 100_000 + "]" * 100_000 + "\n").encode()],
                         ids=["binary", "deep-json"])
def test_hostile_import_files_are_a_format_error(tmp_path: Path, content: bytes) -> None:
    src = tmp_path / "export.jsonl"
    src.write_bytes(content)
    got = CliRunner().invoke(main, ["import", str(src), str(tmp_path / "new")])
    assert got.exit_code == 1 and "line 1 of the export" in got.output, got.output
    assert got.exception is None or isinstance(got.exception, SystemExit)
    assert not (tmp_path / "new").exists()


def test_salvage_rewrites_what_it_keeps_so_that_a_plain_open_accepts_the_store(
        store: Path) -> None:
    """Issue 36 item 11: after ``recover --salvage`` skipped damage, a plain open still
    refused the store (the damaged bytes stayed; a segment with a bad header was left). Now
    what was kept is rewritten as a clean store; the damaged journal and index stay beside
    it, byte for byte, with a report of what was dropped."""
    import shutil

    from mqstore.journal import CorruptJournalError
    segs = sorted((store / "journal").glob("*.seg"))
    for seg, at in ((segs[1], 3), (segs[-1], 300)):  # a bad header; a record of the last one
        raw = bytearray(seg.read_bytes())
        raw[at] ^= 0xFF
        seg.write_bytes(bytes(raw))
    shutil.rmtree(store / "index")
    damaged = digest(store / "journal")
    with pytest.raises(CorruptJournalError):
        Broker.open(str(store), expiry_scan_ms=0)
    got = run("recover", str(store), "--salvage")
    assert got.exit_code == 0, got.output
    assert "rewrote the store" in got.output
    with Broker.open(str(store), expiry_scan_ms=0) as b:  # a plain open
        with b.session() as s:
            kept = sum(1 for q in b.queue_names() for m in s.create_browser(q)
                       if m.message.body)
        assert kept > 0 and b.queue_names() == ["audit", "billing", "orders"]
    aside = [p for p in store.iterdir() if p.name.startswith("journal.damaged-")]
    assert len(aside) == 1 and digest(aside[0]) == damaged  # never written to
    reports = list(store.glob("salvage-*.json"))
    assert len(reports) == 1
    said = json.loads(reports[0].read_text())
    assert {s["file"] for s in said["skipped"]} == {segs[1].name, segs[-1].name}
    assert 0 < said["kept"]["messages"] <= kept and said["kept"]["queues"] == 3  # (copies)
    assert run("check", str(store)).exit_code == 0
