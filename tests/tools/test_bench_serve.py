"""``mqstore bench serve``: both shapes move every message they say through a served store (a
small real run: processes, sockets), RabbitMQ is measured when installed and named as missing
otherwise, and the command prints figures and targets (speeds are never asserted here)."""

from __future__ import annotations

from click.testing import CliRunner

from mqstore.tools.bench import serve as bench_serve
from mqstore.tools.bench.rabbitmq import missing_reason
from mqstore.tools.cli import main


def test_a_small_run_moves_every_message_of_both_shapes(tmp_path) -> None:
    result = bench_serve.run(str(tmp_path), 400, lambda m: None)
    got = {(f.workload, f.system): f for f in result.figures}
    assert got[("one", bench_serve.MQSTORE)].messages == 50
    assert got[("window", bench_serve.MQSTORE)].messages == 400
    has_rabbit = missing_reason() is None
    assert (("window", bench_serve.RABBIT) in got) == has_rabbit
    assert [m.split(" (")[0] for m in result.missing] == ([] if has_rabbit else ["RabbitMQ"])
    assert all(f.seconds > 0 and f.rate > 0 for f in result.figures)
    names = [name for name, _value, _bound in bench_serve.ratios(result)]
    assert len(names) == 2 and all("mqstore serve / RabbitMQ" in n for n in names)
    assert list(tmp_path.iterdir()) == []  # the stores (and RabbitMQ's data) are removed


def test_the_command_prints_figures_and_targets(tmp_path, monkeypatch) -> None:
    monkeypatch.setenv("MQSTORE_RABBITMQ_SERVER", str(tmp_path / "no-such-server"))
    out = CliRunner().invoke(main, ["bench", "serve", "--messages", "200", "--dir",
                                    str(tmp_path)])
    assert out.exit_code == 0, out.output
    assert "mqstore serve" in out.output and "targets (issue 39)" in out.output
    assert "not measured" in out.output and "RabbitMQ (" in out.output
