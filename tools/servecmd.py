"""``mqstore serve DIR``: open a store and serve it over AMQP 1.0 (``tools.serve``) until
interrupted (Ctrl-C or SIGTERM), then close it cleanly; and ``mqstore bench serve``, which
measures that beside RabbitMQ (``tools.bench.serve``)."""

from __future__ import annotations

import signal
import threading
from typing import Any, Optional

import click

from mqstore.journal import MqStoreError
from rich.table import Table

from .commands import NEW_STORE, console, fail


def register_serve(main: click.Group, bench: click.Group) -> None:
    """Add the ``serve`` command to the ``mqstore`` group and ``serve`` to its ``bench``
    group."""

    @main.command("serve")
    @NEW_STORE
    @click.option("--listen", default="127.0.0.1:5672", show_default=True,
                  help="host:port to accept AMQP 1.0 connections on (port 0: any free one).")
    @click.option("--anonymous", is_flag=True,
                  help="Let clients in with SASL ANONYMOUS: any process that reaches the "
                       "address can use the store (the only mechanism in this version, so "
                       "it must be asked for).")
    @click.option("--config", "config", type=click.Path(dir_okay=False, exists=True),
                  default=None, help="An Artemis broker.xml or a TOML file to deploy at open.")
    def serve_cmd(directory: str, listen: str, anonymous: bool, config: Optional[str]) -> None:
        """Open the store in DIRECTORY (creating it when missing) and serve it over AMQP 1.0
        until Ctrl-C or SIGTERM. Clients: mqstore.connect("amqp://HOST:PORT"), any AMQP 1.0
        client (Artemis's addressing), or kombu with mqstore://HOST:PORT."""
        from mqstore.engine import Broker
        from .serve import serve
        from .serve.server import parse_listen

        if not anonymous:  # before the store is opened (or created)
            raise click.UsageError("give --anonymous: SASL ANONYMOUS is the only way clients "
                                   "authenticate in this version, so any process that "
                                   "reaches the address can use the store")
        try:
            parse_listen(listen)
        except MqStoreError as exc:
            raise click.BadParameter(str(exc), param_hint="--listen") from None
        stop = threading.Event()

        def stopping(_signum: int, _frame: Any) -> None:
            stop.set()
        signal.signal(signal.SIGTERM, stopping)
        signal.signal(signal.SIGINT, stopping)
        try:
            broker = Broker.open(directory, config=config)
        except MqStoreError as exc:
            fail(exc)
        try:
            try:
                server = serve(broker, listen, anonymous=anonymous)
            except MqStoreError as exc:
                fail(exc)
            click.echo(f"serving {broker.directory} on {server.url} "
                       f"(SASL ANONYMOUS; Ctrl-C stops)", err=False)
            try:
                while not stop.wait(3600):
                    pass
            finally:
                server.stop()
        finally:
            broker.close()
        click.echo("stopped; the store is closed")

    @bench.command("serve")
    @click.option("--dir", "directory", type=click.Path(file_okay=False), default=None,
                  help="Where the store and RabbitMQ's data go (default: the system temp "
                       "directory); put it on the disk you mean to measure, not tmpfs.")
    @click.option("--messages", default=20_000, show_default=True,
                  help="Messages in the windowed shape (a tenth one at a time).")
    def bench_serve(directory: Optional[str], messages: int) -> None:
        """A served store (mqstore serve, AMQP 1.0) beside RabbitMQ (a private server, when
        installed), both over 127.0.0.1: one at a time, and 4 producer + 4 consumer processes
        with a window of 100, in one run, as ratios."""
        from .bench.serve import CONSUMERS, PRODUCERS, WINDOW, ratios, run

        with console.status("starting...") as status:
            result = run(directory, messages, lambda m: status.update(m))
        t = Table(title="served over AMQP, durable 1 KiB messages (one run, same disk)")
        for col in ("shape", "system", "messages", "msg/s", "CPU µs/msg"):
            t.add_column(col, justify="left" if col in ("shape", "system") else "right")
        for f in result.figures:
            t.add_row(f.workload, f.system, f"{f.messages:,}", f"{f.rate:,.0f}",
                      f"{f.cpu_us:,.1f}")
        console.print(t)
        console.print(f"one = one client: send (settled once durable / confirmed), receive, "
                      f"ack, one at a time; window = {PRODUCERS} producer and {CONSUMERS} "
                      f"consumer processes, {WINDOW} messages in flight or of credit each "
                      f"(acked/s, first send to last ack). CPU: the bench's process tree "
                      f"(servers and clients).")
        if result.missing:
            console.print(f"not installed, not measured: {'; '.join(result.missing)}",
                          markup=False)
        rt = Table(title="targets (issue 39)")
        for col in ("ratio", "value", "target", ""):
            rt.add_column(col)
        for name, value, bound in ratios(result):
            verdict = "not measured" if value is None else ("ok" if value >= bound else "BELOW")
            rt.add_row(name, "" if value is None else f"{value:.2f}", f">= {bound:g}", verdict)
        console.print(rt)
