"""The ``mqstore://`` kombu transport, for Celery (``tools.kombu_transport``; importing this
module registers it). Needs ``pip install mqstore[kombu]``."""

from mqstore.tools.kombu_transport import Channel, Transport, close_stores

__all__ = ["Channel", "Transport", "close_stores"]
