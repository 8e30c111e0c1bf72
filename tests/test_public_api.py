"""The public namespace (issue 17): ``from mqstore import ...`` gives the curated API; every
error it exports is an ``MqStoreError``; the integrations are its submodules."""

from __future__ import annotations

import importlib
import subprocess
import sys

import mqstore


def test_every_exported_name_is_there_and_public() -> None:
    for name in mqstore.__all__:
        assert hasattr(mqstore, name), name
        assert not name.startswith("_") or name == "__version__"
    namespace: dict = {}
    exec("from mqstore import *", namespace)
    assert "Broker" in namespace and "MqStoreError" in namespace


def test_every_exported_error_is_an_mqstore_error() -> None:
    errors = [getattr(mqstore, n) for n in mqstore.__all__
              if isinstance(getattr(mqstore, n), type)
              and issubclass(getattr(mqstore, n), BaseException)]
    assert len(errors) > 20
    assert all(issubclass(e, mqstore.MqStoreError) for e in errors)


def test_the_integrations_are_submodules() -> None:
    assert callable(importlib.import_module("mqstore.crashtest").crash_test)
    assert importlib.import_module("mqstore.kombu").Transport.driver_type == "mqstore"
    assert callable(importlib.import_module("mqstore.metrics").serve_metrics)
    assert callable(importlib.import_module("mqstore.spark").read_journal)


def test_each_name_is_its_layers_object() -> None:
    """The facade re-exports; it defines nothing of its own (``mqstore.Broker`` is the
    engine's ``Broker``; ``mqstore.serve`` and ``mqstore.connect`` are tools' AMQP server
    and client)."""
    for name in mqstore.__all__:
        if name == "__version__":
            continue
        value = getattr(mqstore, name)
        layer = value.__module__.split(".")
        assert layer[0] == "mqstore" and layer[1] in ("journal", "recovery", "engine", "tools"), \
            name


def test_importing_one_layer_loads_no_layer_above_it() -> None:
    """A Spark executor or a crash-test child that imports ``mqstore.journal`` does not pay for
    the engine (the facade loads its names on first use)."""
    code = ("import sys, mqstore.journal; "
            "print(sorted(m for m in sys.modules if m.startswith('mqstore.')"
            " and m.split('.')[1] in ('recovery', 'engine', 'tools')))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True).stdout
    assert out.strip() == "[]"


def test_the_broker_shows_no_storage_internals() -> None:
    """Writing records, waiting on tickets and taking ids are the storage's
    (``broker.storage``, the engine's StorageManager), not the Broker's public methods."""
    for name in ("write", "wait", "next_id", "persistence", "check_open"):
        assert not hasattr(mqstore.Broker, name), name
    assert isinstance(mqstore.Broker.failed, property)
