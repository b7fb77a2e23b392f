"""Data parallelism 2 on the real vLLM CPU build (issue 21): each data-parallel rank has its own
output rank, so each writes the requests it serves, and records itself.

Two concurrent ``kldtui doctor --smoke`` windows go to a ``--data-parallel-size 2`` server (one core
per rank); both must land whole and match the prompt logprobs the server returned, and the capture
folder must hold one writer record per data-parallel rank that served one.
"""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

import pytest

from tests.fixtures_vllm_chain import leftover_servers
from tests.fixtures_vllm_server import SERVED_NAME, TP2_ENV, running_server
from tests.fixtures_vllm_tp import process_title, writer_records

pytestmark = [pytest.mark.vllm, pytest.mark.slow]  # a real vLLM server with two engines


def test_dp2_each_rank_writes_the_requests_it_serves(tiny_model: Path, tmp_path: Path) -> None:
    from kldtui.workflow.smoke import run_smoke

    capture = tmp_path / "chunks"
    capture.mkdir()
    results: list[Any] = [None, None]
    with running_server(tiny_model, tmp_path / "vllm.log", capture, max_num_seqs=1, cwd=tmp_path,
                        extra_args=("--data-parallel-size", "2"), extra_env=TP2_ENV) as server:

        def one(i: int) -> None:
            try:
                results[i] = run_smoke(server.url, SERVED_NAME, capture, tokens=1500)
            except Exception as exc:  # noqa: BLE001 - reported below
                results[i] = exc

        threads = [threading.Thread(target=one, args=(i,)) for i in (0, 1)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(600)
        records = writer_records(capture)
        titles = [process_title(r["pid"]) for r in records]
    for r in results:
        assert getattr(r, "ok", False), r if isinstance(r, Exception) else r.lines
    # the two concurrent windows went to the two engines: one writer each (vLLM's load balancer)
    assert len(records) == 2 and len({r["pid"] for r in records}) == 2, records
    assert all(t.startswith("VLLM::Worker") for t in titles), titles
    assert [p.name for p in capture.iterdir()] == [".kldtui-writers"]  # both windows cleaned up
    assert leftover_servers(tmp_path) == []
