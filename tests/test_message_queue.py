"""The delay queue: every message keeps its own staleness; nothing dropped or applied twice."""

import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from decobench.compression.compressors import Update
from decobench.methods.message_queue import DelayQueue


def _unit(i: int, d: int = 64) -> Update:
    v = torch.zeros(d, dtype=torch.float64)
    v[i % d] = float(i + 1)
    return Update(values=v, indices=None, d=d)


def test_tau_shrinking_makes_several_messages_due_at_once():
    q = DelayQueue()
    q.push(0, 3, _unit(0))      # due 3
    q.push(1, 3, _unit(1))      # due 4
    q.push(2, 0, _unit(2))      # tau shrank: due 2
    assert [m.sent_at for m in q.pop_due(2)] == [2]
    assert q.pop_due(2) == []
    assert [m.sent_at for m in q.pop_due(3)] == [0]
    q.push(4, 0, _unit(4))
    assert [m.sent_at for m in q.pop_due(4)] == [1, 4]   # two due at 4, applied in send order
    assert len(q) == 0


def test_tau_growing_leaves_iterations_with_nothing_due():
    q = DelayQueue()
    q.push(0, 0, _unit(0))
    assert len(q.pop_due(0)) == 1
    q.push(1, 5, _unit(1))
    for t in range(1, 6):
        assert q.pop_due(t) == [] if t < 6 else True
    assert [m.sent_at for m in q.pop_due(6)] == [1]


@settings(max_examples=100, deadline=None)
@given(taus=st.lists(st.integers(0, 8), min_size=1, max_size=40))
def test_changing_tau_applies_each_message_exactly_once(taus):
    """Change τ up and down mid-run: the applied sum equals the sum of every message whose
    due iteration falls inside the run; messages still in flight are not applied."""
    q = DelayQueue()
    applied = torch.zeros(64, dtype=torch.float64)
    seen = []
    horizon = len(taus)
    for t, tau in enumerate(taus):
        q.push(t, tau, _unit(t))
        for m in q.pop_due(t):
            assert m.sent_at + m.staleness == t      # applied exactly when due
            seen.append(m.sent_at)
            m.update.add_to(applied)
    expected = torch.zeros(64, dtype=torch.float64)
    for s, tau in enumerate(taus):
        if s + tau < horizon:
            _unit(s).add_to(expected)
    assert sorted(seen) == sorted(set(seen))           # never twice
    assert torch.equal(applied, expected)
    assert len(q) == sum(1 for s, tau in enumerate(taus) if s + tau >= horizon)
