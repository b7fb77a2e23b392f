"""Which rank writes, under vLLM's own parallel-state code (issue 21).

Pipeline parallelism does not serve in vLLM 0.32's CPU build (docs/VLLM_CPU.md), so the rank rule is
proven here without serving: four real processes form a gloo group and vLLM's
``initialize_model_parallel`` splits it into tensor-parallel 2 x pipeline-parallel 2, as its workers
do; the capture hook's rule must pick exactly one writer, the rank vLLM's executor takes the model's
output from (``MultiprocExecutor._get_output_rank``, called here as vLLM defines it).
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import tempfile
from types import SimpleNamespace

import pytest

from tests.paths import REPO

pytestmark = [pytest.mark.vllm, pytest.mark.slow]  # four processes importing vLLM


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.mark.parametrize(("tp", "pp"), [(2, 2)])
def test_the_hook_writes_on_vllms_output_rank_only(vllm_version: str, tp: int, pp: int) -> None:
    from vllm.v1.executor.multiproc_executor import MultiprocExecutor

    world, port = tp * pp, _free_port()
    ranks = []
    # each rank's ZMQ socket in a folder removed after (in the temp folder they stayed behind)
    with tempfile.TemporaryDirectory(prefix="kldtui-test-rpc-") as rpc:
        env = {**os.environ, "VLLM_HOST_IP": "127.0.0.1", "PYTHONPATH": str(REPO), "VLLM_RPC_BASE_PATH": rpc}
        procs = [subprocess.Popen([sys.executable, "-m", "tests.fixtures_vllm_ranks", str(r), str(world),
                                   str(tp), str(pp), str(port)], cwd=REPO, env=env, stdout=subprocess.PIPE,
                                  stderr=subprocess.PIPE, text=True) for r in range(world)]
        for proc in procs:
            out, err = proc.communicate(timeout=400)
            assert proc.returncode == 0, err[-3000:]
            ranks.append(json.loads(out.strip().splitlines()[-1]))
    output_rank = MultiprocExecutor._get_output_rank(SimpleNamespace(  # vLLM's own rule
        world_size=world, parallel_config=SimpleNamespace(tensor_parallel_size=tp,
                                                          prefill_context_parallel_size=1)))
    writers = [r["rank"] for r in ranks if r["writer"]]
    assert writers == [output_rank], ranks
    (writer,) = [r for r in ranks if r["writer"]]
    assert writer["tp_rank"] == 0 and writer["last_pp"] and writer["pp_rank"] == pp - 1
    grid = [(t, p) for t in range(tp) for p in range(pp)]
    assert sorted((r["tp_rank"], r["pp_rank"]) for r in ranks) == grid
