"""mqstore's errors as AMQP 1.0 error conditions, and back.

A served store refuses what the embedded API refuses, with the same error: the server sends the
condition AMQP defines for it (``amqp:not-found``, ``amqp:resource-limit-exceeded``...) and puts
the mqstore error's class name in the condition's info under ``ERROR_KEY``, so that the client
of ``mqstore.connect`` raises the same class with the same text. Another AMQP client sees the
standard condition and the text.
"""

from __future__ import annotations

from typing import Any, Dict, Optional, Type

from proton import Condition, symbol

import mqstore.engine as engine_api
import mqstore.journal as journal_api
import mqstore.recovery as recovery_api
from mqstore.journal import MqStoreError, RecordTooLargeError

ERROR_KEY = symbol("mqstore-error")

# (error class, AMQP condition), most specific first
_CONDITIONS = (
    (engine_api.AddressNotFoundError, "amqp:not-found"),
    (engine_api.QueueNotFoundError, "amqp:not-found"),
    (engine_api.QueueInUseError, "amqp:resource-locked"),
    (engine_api.ExclusiveQueueError, "amqp:resource-locked"),
    (engine_api.ResourceLimitError, "amqp:resource-limit-exceeded"),  # full, max consumers
    (RecordTooLargeError, "amqp:link:message-size-exceeded"),
    (engine_api.InvalidArgumentError, "amqp:invalid-field"),
    (engine_api.InvalidNameError, "amqp:invalid-field"),
    (engine_api.RoutingTypeError, "amqp:invalid-field"),
    (engine_api.AlreadyExistsError, "amqp:resource-locked"),
    (engine_api.IllegalStateError, "amqp:illegal-state"),
)


def condition_of(exc: BaseException, name: Optional[str] = None) -> Condition:
    """The AMQP condition for ``exc`` (``amqp:internal-error`` for what is not an mqstore
    error the caller caused), or ``name`` when given, with the error's text and its mqstore
    class."""
    found = name
    if found is None:
        found = next((cond for cls, cond in _CONDITIONS if isinstance(exc, cls)),
                     "amqp:internal-error")
    info: Dict[Any, Any] = {}
    if isinstance(exc, MqStoreError):
        info[ERROR_KEY] = type(exc).__name__
    return Condition(found, str(exc), info or None)


def error_of(condition: Optional[Condition], default: str) -> MqStoreError:
    """The mqstore error a client raises for a refusal the server sent as ``condition``: the
    class named in its info when it is one of mqstore's public errors (built with the server's
    text only: its other attributes are not sent), else ``MqStoreError``; ``default`` is the
    text when there is no condition."""
    if condition is None:
        return MqStoreError(default)
    text = condition.description or condition.name
    cls: Type[MqStoreError] = MqStoreError
    info = condition.info or {}
    named = info.get(ERROR_KEY) if isinstance(info, dict) else None
    if isinstance(named, str):
        for layer in (engine_api, journal_api, recovery_api):
            found = getattr(layer, str(named), None)
            if isinstance(found, type) and issubclass(found, MqStoreError):
                cls = found
                break
    err: MqStoreError = Exception.__new__(cls)
    Exception.__init__(err, text)
    err.hint = None
    err.condition = condition.name  # type: ignore[attr-defined]
    return err
