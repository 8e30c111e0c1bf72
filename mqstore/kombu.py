"""The ``mqstore://`` kombu transport, for Celery (``tools.integrations.kombu``; importing this
module registers it). Needs ``pip install mqstore[kombu]``."""

from mqstore.tools.integrations.kombu import Channel, Transport, close_stores

__all__ = ["Channel", "Transport", "close_stores"]
