"""Compressors and error feedback: hand-checked values and invariants."""

import math

import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from decobench.clock.wire import topk_wire_bits
from decobench.compression.compressors import DenseCompressor, TopKCompressor
from decobench.compression.error_feedback import ErrorFeedback


def test_topk_keeps_largest_magnitudes_per_worker():
    p = torch.tensor([[0.1, -3.0, 2.0, 0.5, -0.2, 0.0],
                      [4.0, 0.0, -0.1, 0.3, -5.0, 1.0]])
    c = TopKCompressor().compress(p, delta=2 / 6)
    dense = torch.zeros_like(p).scatter_(1, c.indices, c.values)
    assert torch.equal(dense, torch.tensor([[0.0, -3.0, 2.0, 0.0, 0.0, 0.0],
                                            [4.0, 0.0, 0.0, 0.0, -5.0, 0.0]]))
    # k = 2, d = 6: packed 2 * (32 + 3) = 70, mask 64 + 6 = 70, dense 192 -> 70 bits
    assert c.bits_per_worker == 70
    assert c.delta == 2 / 6


def test_topk_k_is_ceil_delta_d_and_at_least_one():
    p = torch.randn(3, 1000)
    assert TopKCompressor().compress(p, 0.0101).values.shape == (3, 11)
    assert TopKCompressor().compress(p, 1e-9).values.shape == (3, 1)


def test_topk_with_delta_one_is_dense():
    p = torch.randn(2, 10)
    c = TopKCompressor().compress(p, 1.0)
    assert c.dense and c.bits_per_worker == 320 and torch.equal(c.values, p)


def test_dense_bits_and_mean():
    p = torch.tensor([[1.0, 2.0], [3.0, 6.0]])
    c = DenseCompressor().compress(p)
    assert c.bits_per_worker == 64
    u = torch.zeros(2)
    c.mean().add_to(u)
    assert torch.equal(u, torch.tensor([2.0, 4.0]))


def test_sparse_mean_sums_duplicate_indices():
    p = torch.tensor([[5.0, 0.0, 1.0], [3.0, 0.0, -7.0]])
    c = TopKCompressor().compress(p, 1 / 3)   # worker 0 keeps index 0, worker 1 keeps index 2
    u = torch.zeros(3)
    c.mean().add_to(u)
    assert torch.equal(u, torch.tensor([2.5, 0.0, -3.5]))


def test_error_feedback_hand_checked_two_steps():
    ef = ErrorFeedback(workers=1, d=4)
    comp = TopKCompressor()
    c1 = ef.step(torch.tensor([[1.0, -4.0, 2.0, 0.5]]), comp, delta=0.25)
    assert c1.indices.tolist() == [[1]] and c1.values.tolist() == [[-4.0]]
    assert ef.memory.tolist() == [[1.0, 0.0, 2.0, 0.5]]
    # p = e + g = [1.5, 1, 2.5, 0.5] -> keep index 2 (2.5)
    c2 = ef.step(torch.tensor([[0.5, 1.0, 0.5, 0.0]]), comp, delta=0.25)
    assert c2.indices.tolist() == [[2]] and c2.values.tolist() == [[2.5]]
    assert ef.memory.tolist() == [[1.5, 1.0, 0.0, 0.5]]


@settings(max_examples=60, deadline=None)
@given(n=st.integers(1, 4), d=st.integers(2, 300), delta=st.floats(1e-3, 1.0),
       seed=st.integers(0, 10_000), steps=st.integers(1, 5))
def test_error_feedback_conserves_mass(n, d, delta, seed, steps):
    """Σ_t Δ_t + e_T = Σ_t g_t exactly up to float rounding: nothing is lost or invented."""
    gen = torch.Generator().manual_seed(seed)
    ef = ErrorFeedback(n, d, dtype=torch.float64)
    sent = torch.zeros(n, d, dtype=torch.float64)
    total = torch.zeros(n, d, dtype=torch.float64)
    for _ in range(steps):
        g = torch.randn(n, d, generator=gen, dtype=torch.float64)
        total += g
        c = ef.step(g, TopKCompressor(), delta)
        if c.dense:
            sent += c.values
        else:
            sent.scatter_add_(1, c.indices, c.values)
            k = c.indices.shape[1]
            assert k == max(1, math.ceil(delta * d - 1e-9))
            assert c.bits_per_worker == topk_wire_bits(k, d)
    assert torch.allclose(sent + ef.memory, total, atol=1e-9)
