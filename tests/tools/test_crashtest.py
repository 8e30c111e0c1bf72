"""The crash-test kit for users (issue 17): it runs an application's workload under sampled
power cuts and crashes during recovery, checks mqstore's promises and the application's, and
has teeth: it catches the project's seeded journal bugs and an application that claims more
than it asked for."""

from __future__ import annotations

import sys
import textwrap
from pathlib import Path

import pytest
from click.testing import CliRunner

from mqstore.engine import Broker
from mqstore.journal import seeded_bugs
from mqstore.tools.cli import main
from mqstore.tools.crashtest import crash_test, kill9, load_module

APP = Path(__file__).parent / "crashapps" / "orders.py"


def test_a_correct_application_passes_every_state() -> None:
    app = load_module(str(APP))
    report = crash_test(app.workload, app.check, app.setup, samples=60, seed=1)
    assert report.ok, report.failures[:3]
    assert report.operations > 60 and report.states > 60  # second crashes counted too


@pytest.mark.parametrize("bug", sorted(seeded_bugs.KNOWN))
def test_the_kit_catches_each_seeded_journal_bug(bug: str) -> None:
    app = load_module(str(APP))
    found = 0
    with seeded_bugs.enabled(bug):
        for seed in range(4):
            found += len(crash_test(app.workload, app.check, app.setup, samples=80,
                                    seed=seed).failures)
            if found:
                break
    assert found, f"{bug} went unnoticed"


def test_an_application_claiming_too_much_is_caught(monkeypatch: pytest.MonkeyPatch) -> None:
    app = load_module(str(APP))
    monkeypatch.setattr(app, "DURABLE", False)
    report = crash_test(app.workload, app.check, app.setup, samples=20)
    assert any("lost" in f.error and "after the workload" in f.made for f in report.failures)


def test_the_command(tmp_path: Path) -> None:
    ok = CliRunner().invoke(main, ["crashtest", str(APP), "--samples", "20"])
    assert ok.exit_code == 0 and "ok" in ok.output, ok.output
    bad = tmp_path / "bad.py"
    bad.write_text(APP.read_text().replace("DURABLE = True", "DURABLE = False"))
    got = CliRunner().invoke(main, ["crashtest", str(bad), "--samples", "20"])
    assert got.exit_code == 1 and "broke a promise" in got.output
    empty = tmp_path / "empty.py"
    empty.write_text("x = 1\n")
    assert CliRunner().invoke(main, ["crashtest", str(empty)]).exit_code == 2


def test_kill9_runs_a_real_process_and_checks_what_it_leaves(tmp_path: Path) -> None:
    d = str(tmp_path / "s")
    script = textwrap.dedent(f"""
        from mqstore.engine import Broker, Message, QueueConfig
        with Broker.open({d!r}) as b:
            if "q" not in b.queue_names():
                b.create_address("q")
                b.create_queue(QueueConfig("q", "q"))
            with b.session() as s:
                n = b.queue_info("q").message_count
                for i in range(n, n + 100000):
                    s.send("q", Message(b"%d" % i))
    """)

    def check(broker: Broker) -> None:
        with broker.session() as s:
            got = [int(m.message.body) for m in s.create_browser("q")]
        assert got == list(range(len(got))), "a gap or a duplicate"

    failures = kill9([sys.executable, "-c", script], d, check, kills=3, seconds=(0.5, 1.0))
    assert failures == []
    with Broker.open(d) as b:
        assert b.queue_info("q").message_count > 0
