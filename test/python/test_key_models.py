"""The key models of bench/key_models.py (numpy, no GPU): each one's statistics are what its
documentation says (offset, outlier channels, rank, position dependence, logit spread)."""

import os
import sys

import numpy as np
import pytest

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "bench"))
import key_models


@pytest.mark.parametrize("model", key_models.MODELS)
def test_shapes_seeds_and_logit_spread(model):
    k, v, q = key_models.draw(model, heads=2, tokens=4096, dim=64, q_heads=8, n_queries=3, seed=1)
    assert k.shape == (2, 4096, 64) and v.shape == (2, 4096, 64) and q.shape == (8, 3, 64)
    assert k.dtype == np.float32 and np.isfinite(k).all() and np.isfinite(q).all()
    k2, _, q2 = key_models.draw(model, heads=2, tokens=4096, dim=64, q_heads=8, n_queries=3, seed=1)
    assert np.array_equal(k, k2) and np.array_equal(q, q2), "seeded"
    k3, _, _ = key_models.draw(model, heads=2, tokens=4096, dim=64, q_heads=8, n_queries=3, seed=2)
    assert not np.array_equal(k, k3)
    if model != "mix8":
        spread = key_models.logit_std(k, q)
        assert np.all(np.abs(spread - key_models.LOGIT_STD) < 0.25), spread


def test_gaussian_is_isotropic():
    k, _, _ = key_models.draw("gaussian", heads=1, tokens=20000, dim=32)
    assert abs(float(k.mean())) < 0.02 and abs(float(k.std()) - 1.0) < 0.02
    cov = np.cov(k[0].T)
    assert np.abs(cov - np.eye(32)).max() < 0.06


def test_mix8_has_an_offset_and_eight_directions():
    k, _, _ = key_models.draw("mix8", heads=1, tokens=8000, dim=64)
    assert 1.5 < float(k.mean()) < 2.5
    centred = k[0] - k[0].mean(axis=0)
    s = np.linalg.svd(centred, compute_uv=False) ** 2
    assert s[:7].sum() / s.sum() > 0.85, "seven directions carry most of the spread"


def test_llm_offset_outliers_rank_and_drift():
    k, _, _ = key_models.draw("llm", heads=1, tokens=16384, dim=128, roped=False, seed=3)
    x = k[0]
    mean = x.mean(axis=0)
    energy = (x ** 2).mean(axis=0)
    outliers = np.argsort(energy)[-4:]
    assert np.all(energy[outliers] > 20.0) and np.median(energy) < 3.0, "four outlier channels"
    rest = np.setdiff1d(np.arange(128), outliers)
    assert 0.2 < float(np.abs(mean[rest]).mean()) < 1.0, "a per-head offset"
    centred = x[:, rest] - mean[rest]
    s = np.linalg.svd(centred, compute_uv=False) ** 2
    assert s[:32].sum() / s.sum() > 0.8, "low-rank content: 32 of 124 directions"
    assert s[:4].sum() / s.sum() < 0.8, "with a decaying, not a single, direction"

    def similarity(lag):
        a, b = centred[:-lag], centred[lag:]
        return float(np.mean(np.sum(a * b, 1) / (np.linalg.norm(a, axis=1) *
                                                 np.linalg.norm(b, axis=1))))

    assert similarity(1) > 0.6 and similarity(8192) < similarity(1) - 0.3, "drifts"


def test_llm_rope_makes_scores_depend_on_position():
    k, _, q = key_models.draw("llm", heads=1, tokens=8192, dim=64, q_heads=1, seed=4)
    plain, _, _ = key_models.draw("llm", heads=1, tokens=8192, dim=64, q_heads=1, seed=4,
                                  roped=False)
    assert not np.allclose(k, plain)
    assert np.allclose(np.linalg.norm(k, axis=-1), np.linalg.norm(plain, axis=-1), rtol=1e-4), (
        "a rotation keeps each key's norm")
    # Queries look at recent content: the last tokens score above the sequence's average.
    logits = (k[0] @ q[0, 0]) / 8.0
    assert logits[-256:].mean() > logits.mean() + 1.0


def test_bad_arguments():
    with pytest.raises(ValueError, match=r"model must be one of"):
        key_models.draw("real", 1, 8, 8)
    with pytest.raises(ValueError, match=r"q_heads \(3\) must be a multiple of heads \(2\)"):
        key_models.draw("llm", 2, 8, 8, q_heads=3)
