"""The embedded server's tiny model: deterministic, causal, peaked, perturbable like a quantization."""

from __future__ import annotations

import numpy as np

from kldtui.embedded.model import TinyModel, log_softmax


def _kl(p_logits: np.ndarray, q_logits: np.ndarray) -> float:
    lp = log_softmax(p_logits.astype(np.float64))
    lq = log_softmax(q_logits.astype(np.float64))
    return float((np.exp(lp) * (lp - lq)).sum(axis=1).mean())


def test_deterministic_and_seeded() -> None:
    ids = np.random.default_rng(0).integers(0, 512, 300)
    a, b, c = TinyModel(512, seed=4), TinyModel(512, seed=4), TinyModel(512, seed=5)
    la = a.logits(a.hidden(ids))
    np.testing.assert_array_equal(la, b.logits(b.hidden(ids)))
    assert not np.allclose(la, c.logits(c.hidden(ids)))
    assert la.dtype == np.float32 and la.shape == (300, 512)


def test_causal_rows_depend_only_on_the_past() -> None:
    rng = np.random.default_rng(1)
    ids = rng.integers(0, 256, 200)
    changed = ids.copy()
    changed[150:] = rng.integers(0, 256, 50)
    m = TinyModel(256, seed=0)
    h1, h2 = m.hidden(ids), m.hidden(changed)
    np.testing.assert_array_equal(h1[:150], h2[:150])
    assert not np.allclose(h1[150:], h2[150:])


def test_distributions_are_peaked_and_perturbation_moves_them_a_little() -> None:
    for vocab, positions, steps in ((4096, 512, (0.0, 0.05, 0.1, 0.2)), (32000, 128, (0.0, 0.1))):
        ids = np.random.default_rng(2).integers(0, vocab, positions)
        ref = TinyModel(vocab, seed=1)
        lr = ref.logits(ref.hidden(ids))
        lp = log_softmax(lr.astype(np.float64))
        entropy = float(-(np.exp(lp) * lp).sum(axis=1).mean())
        assert 1.0 <= entropy <= 2.2, (vocab, entropy)
        kls = []
        for eps in steps:
            cand = TinyModel(vocab, seed=1, perturb=eps)
            kls.append(_kl(lr, cand.logits(cand.hidden(ids))))
        assert kls[0] == 0.0
        assert all(a < b for a, b in zip(kls, kls[1:], strict=False)), kls
        assert 0.01 < kls[steps.index(0.1)] < 0.1, kls  # the documented "about 0.03"
        assert kls[-1] < 0.25, kls


def test_sampled_text_is_likely_under_the_model() -> None:
    m = TinyModel(1024, seed=3)
    ids = m.sample(400, seed=1)
    assert len(ids) == 400 and ids == m.sample(400, seed=1)
    assert all(0 <= t < 1024 for t in ids)
    lp = log_softmax(m.logits(m.hidden(ids)[:-1]).astype(np.float64))
    nll = -lp[np.arange(399), ids[1:]].mean()
    random_ids = np.random.default_rng(1).integers(0, 1024, 400)
    lr = log_softmax(m.logits(m.hidden(random_ids)[:-1]).astype(np.float64))
    assert nll < 3.0 < -lr[np.arange(399), random_ids[1:]].mean()
