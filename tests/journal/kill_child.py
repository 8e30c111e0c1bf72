"""Child process for the kill -9 test: appends numbered records forever, printing each number
once the fsync covering it has completed (the parent kills it at a random moment)."""

from __future__ import annotations

import random
import sys
import threading
import time

from mqstore.journal import Journal, JournalOptions


def main(directory: str, seed: int) -> None:
    rng = random.Random(seed)
    j = Journal.open(directory, JournalOptions(segment_size=256 * 1024))
    records = list(j.records())
    n = records[-1].payload["n"] + 1 if records else 0
    lock = threading.Lock()
    print(f"start {n}", flush=True)
    while True:
        batch = rng.randrange(1, 30)
        with lock:
            tickets = [j.append(1, {"n": n + i, "pad": "p" * rng.randrange(0, 600)})
                       for i in range(batch)]
        tickets[-1].wait()
        n += batch
        print(f"durable {n - 1}", flush=True)
        time.sleep(rng.random() * 0.002)


if __name__ == "__main__":
    main(sys.argv[1], int(sys.argv[2]))
