"""``mqstore serve DIR``: open a store and serve it over AMQP 1.0 (``tools.serve``) until
interrupted (Ctrl-C or SIGTERM), then close it cleanly."""

from __future__ import annotations

import signal
import threading
from typing import Any, Optional

import click

from mqstore.journal import MqStoreError
from .commands import NEW_STORE, fail


def register_serve(main: click.Group) -> None:
    """Add the ``serve`` command to the ``mqstore`` group."""

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
