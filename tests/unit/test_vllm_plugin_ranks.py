"""Which rank writes: vLLM's output rank (first TP and first PCP rank of the last PP stage)."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from kldtui.hook import vllm_plugin as vp
from tests.fixtures_vllm_plugin import group_of, rank_layout


def _fake_parallel_state(layout, rank, with_pcp=True):
    def group(name):
        ranks = group_of(layout[name], rank)
        return SimpleNamespace(ranks=ranks, rank=rank, rank_in_group=ranks.index(rank),
                               world_size=len(ranks), is_last_rank=rank == ranks[-1])

    ps = SimpleNamespace(model_parallel_is_initialized=lambda: True,
                         get_tp_group=lambda: group("tp"), get_pp_group=lambda: group("pp"))
    if with_pcp:
        ps.get_pcp_group = lambda: group("pcp")
    return ps


def _writers(monkeypatch, dp, pp, pcp, tp, with_pcp=True):
    import sys

    layout = rank_layout(dp, pp, pcp, tp)
    found = []
    for rank in range(dp * pp * pcp * tp):
        ps = _fake_parallel_state(layout, rank, with_pcp)
        monkeypatch.setitem(sys.modules, "vllm.distributed.parallel_state", ps)
        monkeypatch.setitem(sys.modules, "vllm.distributed", SimpleNamespace(parallel_state=ps))
        if vp._compute_writer_rank():
            found.append(rank)
    return found


@pytest.mark.parametrize("dp,pp,pcp,tp", [(1, 1, 1, 16), (1, 2, 1, 8), (1, 1, 2, 4), (1, 2, 2, 4),
                                          (2, 2, 2, 2), (1, 4, 1, 1)])
def test_exactly_one_writer_per_data_parallel_rank(monkeypatch, dp, pp, pcp, tp):
    writers = _writers(monkeypatch, dp, pp, pcp, tp)
    per_dp = pp * pcp * tp
    # MultiprocExecutor._get_output_rank: world_size - tp * pcp, per data-parallel engine
    assert writers == [d * per_dp + per_dp - tp * pcp for d in range(dp)]


def test_vllm_without_a_pcp_group_keeps_the_tp_pp_rule(monkeypatch):
    assert _writers(monkeypatch, 1, 2, 1, 4, with_pcp=False) == [4]
