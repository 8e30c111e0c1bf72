"""Serving a store to other processes and languages over AMQP 1.0, on qpid-proton.

``serve(broker, listen, anonymous=True)`` runs the server in a thread of the process that owns
the store (``mqstore serve DIR`` runs one for a store of its own); ``connect(url)`` gives a
program in another process the same session and consumer calls as ``Broker.open`` gives
an embedded one. Rooms: ``wire`` (proton's protocol engine on an asyncio socket, for both
sides), ``terminus`` (what a link's source or target names, as Artemis reads it), ``convert``
(AMQP messages to and from ``Message``), ``conditions`` (mqstore errors as AMQP error conditions
and back), ``links`` (a client's sender and receiver links over the engine's asyncio API),
``server``, ``client`` and its links ``clientlinks``. Imports the engine's and the journal's
public APIs only.
"""

from .client import ConnectionLostError, RemoteBroker, connect
from .server import LISTENER_FILE, Server, ServeError, serve

__all__ = ["ConnectionLostError", "LISTENER_FILE", "RemoteBroker", "ServeError", "Server",
           "connect", "serve"]
