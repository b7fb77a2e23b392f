"""One rank of a process group built with vLLM's own parallel-state code (tests/vllm/test_tp_ranks.py).

``python -m tests.fixtures_vllm_ranks RANK WORLD TP PP PORT`` joins a gloo group of WORLD processes
on 127.0.0.1:PORT, lets vLLM's ``initialize_model_parallel`` split it into TP x PP groups exactly
as a vLLM worker does, and prints one JSON line: this rank's TP and PP positions and whether the
capture hook's rule (:func:`kldtui.hook.vllm_plugin._compute_writer_rank`) makes it the writer.
Run with the vLLM venv's python.
"""

from __future__ import annotations

import json
import sys


def main(argv: list[str]) -> int:
    rank, world, tp, pp, port = (int(a) for a in argv)
    from vllm.config import VllmConfig, set_current_vllm_config
    from vllm.distributed import parallel_state as ps

    from kldtui.hook import vllm_plugin

    with set_current_vllm_config(VllmConfig()):
        ps.init_distributed_environment(world_size=world, rank=rank, local_rank=rank, backend="gloo",
                                        distributed_init_method=f"tcp://127.0.0.1:{port}")
        ps.initialize_model_parallel(tensor_model_parallel_size=tp, pipeline_model_parallel_size=pp,
                                     backend="gloo")
        print(json.dumps({"rank": rank, "tp_rank": ps.get_tp_group().rank_in_group,
                          "pp_rank": ps.get_pp_group().rank_in_group,
                          "last_pp": bool(ps.get_pp_group().is_last_rank),
                          "writer": vllm_plugin._compute_writer_rank()}))
        ps.destroy_model_parallel()
        ps.destroy_distributed_environment()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
