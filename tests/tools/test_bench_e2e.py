"""``mqstore bench e2e``: every workload moves the messages it says (a small real run), a peer
that is not installed is named and its ratio shown as not measured, and the command prints
figures and targets (the speeds themselves are the benchmark's, never asserted here)."""

from __future__ import annotations

import importlib.util

from click.testing import CliRunner

from mqstore.tools import bench_e2e
from mqstore.tools.bench_e2e import E2EFigure, E2EResult, targets
from mqstore.tools.cli import main


def test_a_small_run_moves_every_message_of_every_workload(tmp_path) -> None:
    result = bench_e2e.run(str(tmp_path), 512, lambda m: None)
    got = {(f.workload, f.system): f for f in result.figures}
    for workload, system, n in (("one", "mqstore", 100), ("one", "mqstore, ack no wait", 100),
                                ("one", "sqlite3 1/txn", 100),
                                ("batch", "mqstore", 600), ("batch", "sqlite3 100/txn", 600),
                                ("async", "mqstore", 512), ("async", "mqstore, ack no wait", 512),
                                ("send", "mqstore", 512)):
        f = got[(workload, system)]
        assert f.messages == n and f.seconds > 0 and f.rate > 0, (workload, system)
    assert got[("journal", "journal")].rate > 0
    assert result.probe_ops > 0
    has_pq = importlib.util.find_spec("persistqueue") is not None
    assert (("one", "persist-queue") in got) == has_pq
    assert result.missing == ([] if has_pq else ["persist-queue"])
    assert list(tmp_path.iterdir()) == []  # the stores are removed


def fake() -> E2EResult:
    f = [E2EFigure("one", "mqstore", 2000, 1.6, 1.0), E2EFigure("one", "sqlite3 1/txn", 2000,
                                                                 0.9, 0.4),
         E2EFigure("batch", "mqstore", 50_000, 2.5, 2.4),
         E2EFigure("batch", "sqlite3 100/txn", 50_000, 0.8, 0.4),
         E2EFigure("async", "mqstore", 50_000, 9.0, 9.0),
         E2EFigure("journal", "journal", 600_000, 3.0, 3.0)]
    return E2EResult(f, 7000.0, ["persist-queue"])


def test_targets_compare_figures_of_the_same_run() -> None:
    by_name = {t.name: t for t in targets(fake())}
    assert by_name["one, mqstore / persist-queue"].verdict == "not measured"
    batch = by_name["batch, mqstore / sqlite3 100/txn"]
    assert abs(batch.value - (20_000 / 62_500)) < 1e-9 and batch.verdict == "BELOW"
    cpu = by_name["batch, mqstore: CPU µs/msg"]
    assert abs(cpu.value - 48.0) < 1e-9 and cpu.verdict == "ABOVE"
    assert by_name["async, mqstore / journal"].verdict == "BELOW"
    assert by_name["async, mqstore, ack no wait / journal"].verdict == "not measured"


def test_the_command_prints_figures_targets_and_what_is_missing(monkeypatch) -> None:
    monkeypatch.setattr(bench_e2e, "run", lambda d, n, progress: fake())
    out = CliRunner().invoke(main, ["bench", "e2e"], env={"COLUMNS": "120"}).output
    for text in ("1,250", "62,500", "48.0", "7,000 ops/s", "persist-queue", "mqstore[bench]",
                 "BELOW", "not measured"):
        assert text in out, text
