"""The demo's producing child: runs the job on the store and prints durable events on stdout
(``S seq``, ``a seq,seq,...``, ``A seq,seq,...``) for the parent, which kills it midway."""

from __future__ import annotations

import sys
import threading

from mqstore.engine import Broker
from . import job as demo_job
from .flights import load_flights, load_weather

_out = threading.Lock()


def _event(kind: str, value: object) -> None:
    tag = {"sent": "S", "acking": "a", "acked": "A"}[kind]
    text = ",".join(map(str, value)) if isinstance(value, list) else str(value)
    with _out:
        sys.stdout.write(f"{tag} {text}\n")
        sys.stdout.flush()


def main(directory: str, start: int, workers: int, batch: int, limit: int) -> None:
    flights = load_flights(limit)
    broker = Broker.open(directory, memory_budget=demo_job.MEMORY_BUDGET)
    demo_job.ensure_topology(broker)
    print("ready", flush=True)
    demo_job.run(broker, flights, start, workers, batch, _event, load_weather())
    broker.close()
    print("done", flush=True)


if __name__ == "__main__":
    main(sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4]), int(sys.argv[5]))
