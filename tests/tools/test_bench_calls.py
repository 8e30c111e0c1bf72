"""``mqstore bench calls`` (issue 38's step count) at a small size: the count is cProfile's total
calls over the messages counted, the listing is the most-called functions first, and the command
prints both settings (the figures themselves are the command's to print, never asserted)."""

from __future__ import annotations

import cProfile
import pstats
import shutil
from pathlib import Path

import pytest

from click.testing import CliRunner

from mqstore.tools.bench.calls import instructions, measure
from mqstore.tools.cli import main


def test_the_count_is_total_calls_over_messages(tmp_path: Path,
                                                monkeypatch) -> None:  # type: ignore[no-untyped-def]
    seen = []
    real = pstats.Stats

    def recording(profile: cProfile.Profile) -> pstats.Stats:
        stats = real(profile)
        seen.append(stats.total_calls)  # type: ignore[attr-defined]
        return stats
    monkeypatch.setattr(pstats, "Stats", recording)
    f = measure(300, True, str(tmp_path), top=5)
    assert f.messages == 300 and f.persist
    assert f.calls_per_message == seen[0] / 300
    assert len(f.top) == 5
    assert [c for c, _name in f.top] == sorted((c for c, _name in f.top), reverse=True)
    assert list(tmp_path.iterdir()) == []  # the scratch store is gone


def test_the_command_prints_both_settings(tmp_path: Path) -> None:
    result = CliRunner().invoke(main, ["bench", "calls", "--messages", "200", "--top", "3",
                                       "--dir", str(tmp_path)], terminal_width=200)
    assert result.exit_code == 0, result.output
    assert "persist_delivery_count_before_delivery=True" in result.output
    assert "persist_delivery_count_before_delivery=False" in result.output
    assert result.output.count("calls per message") == 2
    bad = CliRunner().invoke(main, ["bench", "calls", "--messages", "50"])
    assert bad.exit_code == 2 and "--messages" in bad.output


def test_instructions_are_the_difference_of_two_counted_runs_over_the_messages(
        tmp_path: Path) -> None:
    """A stand-in for valgrind that counts what its child was asked to do: the figure is
    (count with N messages - count with none) / N, each child run for real."""
    fake = tmp_path / "valgrind"
    fake.write_text("#!/bin/sh\n"
                    "shift 2\n"  # --tool=callgrind --callgrind-out-file=/dev/null
                    '"$@" || exit 1\n'  # the child itself: it must succeed
                    'echo "==1== Collected : $((1000000 + 7 * $4))" >&2\n')
    fake.chmod(0o755)
    got = instructions(200, False, str(tmp_path), valgrind=str(fake))
    assert got == 7.0
    assert [p.name for p in tmp_path.iterdir()] == ["valgrind"]  # scratch stores removed


@pytest.mark.skipif(shutil.which("valgrind") is None, reason="valgrind is not installed")
def test_instructions_under_valgrind_count_the_messages() -> None:
    assert instructions(100, False) > 10_000  # some real work per message, never 0
