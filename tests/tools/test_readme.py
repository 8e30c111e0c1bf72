"""README's Python code blocks run, in order, as a new user would paste them (in an empty
directory; the Spark block reads the store the first block made, in place of its placeholder
path ``/data/store``)."""

from __future__ import annotations

import os
import re
import textwrap
from pathlib import Path
from typing import Any, Dict, List

import pytest

README = Path(__file__).resolve().parents[2] / "README.md"


def python_blocks() -> List[str]:
    """The ```python blocks of README.md, dedented (some sit in list items)."""
    text = README.read_text(encoding="utf-8")
    return [textwrap.dedent(m.group(2)) for m in
            re.finditer(r"^( *)```python\n(.*?)^\1```", text, re.S | re.M)]


def test_readme_has_the_blocks_this_test_runs() -> None:
    blocks = python_blocks()
    assert len(blocks) == 5
    assert "Broker.open" in blocks[0] and "redelivery_delay" in blocks[1] and \
        "AsyncSession" in blocks[2] and "mqstore.connect" in blocks[3] and "spark" in blocks[4]


def test_readme_code_blocks_run(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                spark: Any, capsys: pytest.CaptureFixture) -> None:
    monkeypatch.chdir(tmp_path)
    blocks = python_blocks()
    for block in blocks[:3]:
        exec(compile(block, str(README), "exec"), {"__name__": "readme"})
    out = capsys.readouterr().out
    assert "message_count=0" in out  # the first block's queue_info
    assert "\n1\n2\n" in out  # the retry recipe's prints
    # "Serving a store": its client block, against a store served on a free port
    import mqstore
    with mqstore.Broker.open(str(tmp_path / "served")) as served:
        served.create_address("orders", routing_types={mqstore.RoutingType.ANYCAST})
        served.create_queue(mqstore.QueueConfig("orders", "orders"))
        with mqstore.serve(served, "127.0.0.1:0", anonymous=True) as server:
            exec(compile(blocks[3].replace("amqp://127.0.0.1:5672", server.url), str(README),
                         "exec"), {"__name__": "readme"})
        info = served.queue_info("orders")
        assert (info.message_count, info.messages_added) == (0, 1)  # sent, received, acked
    store = os.path.join(str(tmp_path), "data")
    ns: Dict[str, Any] = {"spark": spark, "__name__": "readme"}
    exec(compile(blocks[4].replace("/data/store", store), str(README), "exec"), ns)
    rows = ns["df"].collect()
    assert len(rows) == 3 and {r["address"] for r in rows} == {"orders"}  # the three sends
