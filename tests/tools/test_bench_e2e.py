"""``mqstore bench e2e``: every workload moves the messages it says (a small real run), a peer
that is not installed is named and its ratio shown as not measured, and the command prints
figures and targets (the speeds themselves are the benchmark's, never asserted here)."""

from __future__ import annotations

import importlib.util

from click.testing import CliRunner

from mqstore.compiled import build
from mqstore.tools.bench import e2e as bench_e2e
from mqstore.tools.bench.e2e import E2EFigure, E2EResult, targets
from mqstore.tools.bench.floors import FLOOR_ASYNC, FLOOR_BATCH
from mqstore.tools.bench.rabbitmq import ConfirmWindow, missing_reason
from mqstore.tools.cli import main


def test_a_small_run_moves_every_message_of_every_workload(tmp_path) -> None:
    result = bench_e2e.run(str(tmp_path), 512, lambda m: None)
    got = {(f.workload, f.system): f for f in result.figures}
    counted = "mqstore, acks wait + counted deliveries"
    for workload, system, n in (("one", "mqstore", 100), ("one", "mqstore, acks wait", 100),
                                ("one", counted, 100), ("batch", counted, 600),
                                ("async", counted, 512),
                                ("one", "sqlite3 1/txn", 100),
                                ("batch", "mqstore", 600), ("batch", "sqlite3 100/txn", 600),
                                ("async", "mqstore", 512), ("async", "mqstore, acks wait", 512),
                                ("send", "mqstore", 512),
                                ("batch", FLOOR_BATCH, 600), ("async", FLOOR_ASYNC, 512)):
        f = got[(workload, system)]
        assert f.messages == n and f.seconds > 0 and f.rate > 0, (workload, system)
    assert got[("journal", "journal")].rate > 0
    assert result.probe_ops > 0
    # the pure build's rows, beside a compiled install's (a pure install has only its own)
    pure = {w: got.get((w, "mqstore, pure Python")) for w in ("one", "batch", "async")}
    if build() == "compiled":
        assert [(f.messages if f else None) for f in pure.values()] == [100, 600, 512]
    else:
        assert list(pure.values()) == [None, None, None]
    has_pq = importlib.util.find_spec("persistqueue") is not None
    assert (("one", "persist-queue") in got) == has_pq
    has_rabbit = missing_reason() is None
    for workload, n in (("one", 100), ("async", 512), ("send", 512)):
        system = "RabbitMQ confirm each" if workload == "one" else "RabbitMQ window 100"
        assert ((workload, system) in got) == has_rabbit
        if has_rabbit:
            assert got[(workload, system)].messages == n
    named = [m.split(" (")[0] for m in result.missing]
    assert named == ([] if has_pq else ["persist-queue"]) + ([] if has_rabbit else ["RabbitMQ"])
    assert list(tmp_path.iterdir()) == []  # the stores (and RabbitMQ's data) are removed


def test_rabbitmq_missing_is_named_with_what_to_install(monkeypatch, tmp_path) -> None:
    monkeypatch.setenv("MQSTORE_RABBITMQ_SERVER", str(tmp_path / "no-such-server"))
    missing: list = []
    assert bench_e2e.rabbitmq(str(tmp_path), 10, 10, missing) == []
    assert len(missing) == 1 and missing[0].startswith("RabbitMQ (")
    assert "apt-get install rabbitmq-server" in missing[0]


def test_a_confirm_window_settles_single_and_multiple_confirms() -> None:
    w = ConfirmWindow(3)
    for _ in range(3):
        w.published()
    assert w.room() == 0 and w.settled == 0
    w.confirmed(2, multiple=False)  # out of order: 1 and 3 still in flight
    assert w.room() == 1 and w.settled == 1
    w.published()  # tag 4
    w.confirmed(3, multiple=True)  # settles 1 and 3, not 4
    assert w.pending == {4} and w.settled == 3 and w.room() == 2


def fake() -> E2EResult:
    f = [E2EFigure("one", "mqstore", 2000, 1.6, 1.0), E2EFigure("one", "sqlite3 1/txn", 2000,
                                                                 0.9, 0.4),
         E2EFigure("batch", "mqstore", 50_000, 2.5, 2.4),
         E2EFigure("batch", "sqlite3 100/txn", 50_000, 0.8, 0.4),
         E2EFigure("async", "mqstore", 50_000, 9.0, 9.0),
         E2EFigure("journal", "journal", 600_000, 3.0, 3.0),
         E2EFigure("one", "RabbitMQ confirm each", 2000, 2.0, 1.0),
         E2EFigure("async", "RabbitMQ window 100", 50_000, 4.0, 4.0),
         E2EFigure("batch", FLOOR_BATCH, 50_000, 1.0, 0.6),
         E2EFigure("async", FLOOR_ASYNC, 50_000, 1.25, 0.6),
         E2EFigure("batch", "mqstore, pure Python", 50_000, 3.0, 3.0)]
    return E2EResult(f, 7000.0, ["persist-queue (pip install 'mqstore[bench]')"])


def test_targets_compare_figures_of_the_same_run() -> None:
    by_name = {t.name: t for t in targets(fake())}
    assert by_name["one, mqstore / persist-queue"].verdict == "not measured"
    batch = by_name["batch, mqstore / sqlite3 100/txn"]  # 20,000 / 62,500 msg/s, >= 0.5
    assert abs(batch.value - (20_000 / 62_500)) < 1e-9 and batch.verdict == "BELOW"
    cpu = by_name["batch, mqstore: CPU µs/msg / the batch floor's"]  # 48 / 12 µs, <= 2
    assert abs(cpu.value - 4.0) < 1e-9 and cpu.verdict == "ABOVE"
    cpu = by_name["async, mqstore: CPU µs/msg / the async floor's"]  # 180 / 12 µs, <= 4
    assert abs(cpu.value - 15.0) < 1e-9 and cpu.verdict == "ABOVE"
    assert by_name["async, mqstore / journal"].verdict == ""  # shown, no bound
    # the other settings: the target ratios without a bound
    other = by_name["async, mqstore, acks wait / RabbitMQ window 100"]
    assert other.verdict == "not measured" and other.bound is None
    assert "async, mqstore, acks wait / journal" not in by_name
    pure = by_name["batch, mqstore, pure Python: CPU µs/msg / the batch floor's"]  # 60 / 12
    assert abs(pure.value - 5.0) < 1e-9 and pure.bound is None and pure.verdict == ""
    one_rabbit = by_name["one, mqstore / RabbitMQ confirm each"]  # 1,250 / 1,000 msg/s
    assert abs(one_rabbit.value - 1.25) < 1e-9 and one_rabbit.verdict == ""
    async_rabbit = by_name["async, mqstore / RabbitMQ window 100"]  # 5,556 / 12,500, >= 1
    assert abs(async_rabbit.value - 50_000 / 9.0 / 12_500) < 1e-9
    assert async_rabbit.verdict == "BELOW"
    assert by_name["send, mqstore / RabbitMQ window 100"].verdict == "not measured"
    floor = by_name["batch, floor / sqlite3 100/txn (the most any broker could reach here)"]
    assert abs(floor.value - 50_000 / 62_500) < 1e-9 and floor.verdict == ""
    assert abs(by_name["batch, floor: CPU µs/msg (the least)"].value - 12.0) < 1e-9
    floor = by_name["async, floor / RabbitMQ window 100 (the most any broker could reach here)"]
    assert abs(floor.value - 40_000 / 12_500) < 1e-9
    assert abs(by_name["async, floor / journal"].value - 40_000 / 200_000) < 1e-9


def test_the_command_prints_figures_targets_and_what_is_missing(monkeypatch) -> None:
    monkeypatch.setattr(bench_e2e, "run", lambda d, n, progress: fake())
    out = CliRunner().invoke(main, ["bench", "e2e"], env={"COLUMNS": "120"}).output
    for text in ("1,250", "62,500", "48.0", "7,000 ops/s", "persist-queue", "mqstore[bench]",
                 "BELOW", "not measured"):
        assert text in out, text
