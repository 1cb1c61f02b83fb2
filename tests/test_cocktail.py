"""CocktailSGD (docs/design.md §8.4): the compressor's quantisation, mask and bits, a
hand-checked step on the quadratic, the frozen first plan, and option validation."""

import math

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from pydantic import ValidationError

from decobench.baselines.cocktail import COCKTAIL_SGD_SPEC, CocktailOptions, probe_delta
from decobench.baselines.cocktail_compressor import (
    CocktailCompressor,
    quantise,
    sample_positions,
    split_ratio,
    wire_bits,
)
from decobench.methods import MethodContext, Observation, get_method_spec
from decobench.methods.optimizer import OptimizerConfig
from decobench.methods.options import DecoOptions, PlannerOptions

# ---- Quant_b ------------------------------------------------------------------------------


def test_quantise_known_vector():
    """b = 3 (L = 3), buckets of 4: [0.1, 0.06, −0.02, 0 | 0, 0, 0, 0 | −8, 1]."""
    v = torch.tensor([[0.1, 0.06, -0.02, 0.0, 0.0, 0.0, 0.0, 0.0, -8.0, 1.0]])
    values, scales = quantise(v, quant_bits=3, bucket_size=4)
    # fp16(0.1) = 0.0999755859375 < 0.1, so the scale steps up one fp16 ulp (2^-14).
    s = 0.10003662109375
    assert scales.dtype == torch.float16 and scales.tolist() == [[s, 0.0, 8.0]]
    # q = round(v / s · 3): 0.1 → 3, 0.06 → round(1.799) = 2, −0.02 → round(−0.600) = −1;
    # bucket 3: −8 → −3, 1 → round(0.375) = 0.
    expected = [s, 2 * s / 3, -s / 3, 0, 0, 0, 0, 0, -8.0, 0.0]
    assert torch.allclose(values, torch.tensor([expected]), rtol=1e-7, atol=0)


def test_quantise_rounds_half_to_even_and_clamps_beyond_fp16():
    # b = 2 (L = 1), scale 2: v / s = [1, 0.5, −0.5] → q = [1, 0, −0] (half to even).
    values, _ = quantise(torch.tensor([[2.0, 1.0, -1.0]]), quant_bits=2, bucket_size=128)
    assert values.tolist() == [[2.0, 0.0, 0.0]]
    # b = 4 (L = 7): scale clamped to 65504; 1e5 → q clamped to 7; 5e4 → round(5.343) = 5.
    values, scales = quantise(torch.tensor([[1e5, 5e4]]), quant_bits=4, bucket_size=128)
    assert scales.tolist() == [[65504.0]]
    assert torch.allclose(values, torch.tensor([[65504.0, 5 * 65504 / 7]]))


@st.composite
def _buckets(draw):
    bucket_size = draw(st.integers(1, 6))
    magnitude = draw(st.sampled_from([2.0**-23, 2.0**-13, 1.0, 1024.0, 65504.0]))
    element = st.floats(-magnitude, magnitude, allow_nan=False, width=32)
    zero_bucket = st.just([0.0] * bucket_size)
    bucket = st.lists(element, min_size=bucket_size, max_size=bucket_size)
    rows = draw(st.lists(st.one_of(zero_bucket, bucket), min_size=1, max_size=5))
    flat = [x for b in rows for x in b][: draw(st.integers(1, bucket_size * len(rows)))]
    return torch.tensor([flat], dtype=torch.float32), bucket_size


@settings(max_examples=200, deadline=None)
@given(_buckets(), st.integers(2, 8))
def test_dequantised_within_half_a_step(case, bits):
    v, bucket_size = case
    values, scales = quantise(v, quant_bits=bits, bucket_size=bucket_size)
    levels = 2 ** (bits - 1) - 1
    k = v.shape[1]
    scale = scales.float().repeat_interleave(bucket_size, dim=1)[:, :k].double()
    largest = torch.zeros(scales.shape[1], dtype=torch.float64)
    for j in range(scales.shape[1]):
        largest[j] = v[0, j * bucket_size:(j + 1) * bucket_size].abs().max()
    s = scales[0].double()
    assert torch.all(s >= largest)                       # rounded up: nothing clips
    below = torch.nextafter(scales[0], torch.zeros_like(scales[0])).double()
    assert torch.all((s == 0) | (below < largest))       # ... to the nearest fp16
    error = (v.double() - values.double()).abs()
    assert torch.all(error <= scale / (2 * levels) * (1 + 1e-9) + scale * 2.0**-23)
    assert torch.all(values[scale == 0] == 0)


# ---- RandSample_p, TopK_r and the bits ------------------------------------------------------


def test_split_of_delta():
    small = split_ratio(0.02, 6400, 0.1)
    assert small.sample_fraction == 0.1 and small.topk_ratio == pytest.approx(0.2)
    assert (small.sampled, small.kept) == (640, 128)
    large = split_ratio(0.5, 6, 0.1)
    assert (large.sample_fraction, large.topk_ratio, large.sampled, large.kept) == (0.5, 1, 3, 3)
    tiny = split_ratio(1e-4, 1000, 0.1)                  # k never drops below one coordinate
    assert (tiny.sampled, tiny.kept) == (100, 1)


def test_sample_positions_are_the_rotating_strided_mask():
    assert sample_positions(20, 4, offset=0, iteration=0).tolist() == [0, 5, 10, 15]
    assert sample_positions(20, 4, offset=0, iteration=3).tolist() == [3, 8, 13, 18]
    assert sample_positions(20, 4, offset=10, iteration=7).tolist() == [2, 7, 12, 17]
    assert sample_positions(10, 3, offset=0, iteration=0).tolist() == [0, 3, 6]  # ⌊j·10/3⌋


def test_mask_shared_rotating_and_seeded():
    d = 1000
    compressor = CocktailCompressor(d, seed=0)
    assert compressor.offset == CocktailCompressor(d, seed=0).offset        # reproducible
    assert len({CocktailCompressor(d, seed=s).offset for s in range(3)}) == 3
    p = torch.randn(3, d, generator=torch.Generator().manual_seed(0))
    for t in range(3):
        # δ = 0.1: p = 0.1, r = 1, every sampled coordinate is kept: the rows are the mask.
        message = compressor.compress(p, 0.1, iteration=t)
        mask = sample_positions(d, 100, compressor.offset, t)
        assert message.indices.shape == (3, 100)
        assert all(row.tolist() == mask.tolist() for row in message.indices)
        following = sample_positions(d, 100, compressor.offset, t + 1)
        assert following.tolist() == sorted(((mask + 1) % d).tolist())


def test_topk_inside_the_sample_in_position_order():
    d = 1000
    compressor = CocktailCompressor(d, seed=3, quant_bits=16)
    p = torch.randn(2, d, generator=torch.Generator().manual_seed(1))
    message = compressor.compress(p, 0.05, iteration=4)  # p = 0.1, r = 0.5: 50 of 100
    mask = sample_positions(d, 100, compressor.offset, 4)
    for i in range(2):
        sampled = p[i, mask]
        expected = mask[torch.topk(sampled.abs(), 50).indices].sort().values
        assert message.indices[i].tolist() == expected.tolist()
        assert torch.allclose(message.values[i], p[i, expected], rtol=1e-4)
    assert message.delta == 50 / d


def test_bits_match_the_closed_form_when_counts_are_whole():
    """d = 6400, δ = 0.02: m = 640 = p·d, k = 128 = r·m, one full bucket."""
    compressor = CocktailCompressor(6400, seed=0)
    message = compressor.compress(torch.randn(2, 6400), 0.02)
    closed_form = 0.1 * 6400 * (0.2 * 4 + 0.2 * 16 / 128 + 1)
    assert message.bits_per_worker == 640 + 128 * 4 + 16 == 1168 == closed_form
    assert message.values.shape == (2, 128) and message.delta == 0.02


def test_bits_report_the_partial_bucket():
    """d = 1000, δ = 0.02: m = 100, k = 20 in one bucket whose scale costs a full 16 bits,
    where the closed form counts 20·16/128 = 2.5."""
    compressor = CocktailCompressor(1000, seed=0)
    message = compressor.compress(torch.randn(2, 1000), 0.02)
    closed_form = 0.1 * 1000 * (0.2 * 4 + 0.2 * 16 / 128 + 1)
    assert closed_form == pytest.approx(182.5)
    assert message.bits_per_worker == 100 + 20 * 4 + 16 == 196
    assert wire_bits(split_ratio(0.02, 1000, 0.1), 4, 128) == 196


# ---- The method -----------------------------------------------------------------------------


def _context(d, workers, lr=1.0, seed=0):
    return MethodContext(d=d, workers=workers, topology="paper",
                         optimizer=OptimizerConfig(lr=lr), seed=seed)


def _build(context, **options):
    return COCKTAIL_SGD_SPEC.build(context, COCKTAIL_SGD_SPEC.options(**options))


def test_hand_checked_step_on_the_quadratic():
    """2 workers, 6 parameters, f_i = ½‖x − c_i‖², g_i = x − c_i; δ = 0.5, τ = 0, b = 4.

    δ = 0.5 > 0.1: p = 0.5, r = 1, m = k = 3. Seed 0 draws offset 2, so iteration 0 samples
    (2j + 2) mod 6 = {0, 2, 4}. L = 7. At x = 0, p_i = g_i = −c_i:
    worker 0 sends [7, 2.25, −5.5]: scale 7, q = [7, 2, −6] (−5.5 → −6, half to even);
    worker 1 sends [3.5, 1.25, −0.75]: scale 3.5, q = round([7, 2.5, −1.5]) = [7, 2, −2],
    so Δ_1 = [3.5, 1, −1]. u = ([7, 2, −6] + [3.5, 1, −1]) / 2 = [5.25, 1.5, −3.5] at 0, 2, 4.
    """
    method = _build(_context(6, 2), cocktail_delta=0.5, cocktail_tau=0)
    assert method.compressor.offset == 2
    c = torch.tensor([[-7.0, -1, -2.25, 3, 5.5, -100], [-3.5, 8, -1.25, -0.5, 0.75, -2]])
    x = torch.zeros(6)
    result = method.step(0, x, x - c)
    assert x.tolist() == [-5.25, 0.0, -1.5, 0.0, 3.5, 0.0]
    # e = p − Δ: rounding residuals where sent, the whole p where not sampled.
    assert method.error_feedback.memory.tolist() == [[0.0, 1.0, 0.25, -3.0, 0.5, 100.0],
                                                     [0.0, -8.0, 0.25, 0.5, 0.25, 2.0]]
    # 3 mask bits + 3 values · 4 bits + one fp16 scale
    assert result.bits_per_worker == 31 and result.staleness == 0 and not result.dense
    assert result.delta == 0.5 and result.applied_messages == 1
    assert result.log == {"cocktail_sample_fraction": 0.5, "cocktail_topk_ratio": 1.0,
                          "cocktail_sampled": 3, "cocktail_kept": 3}


def _observation(k, bits=1e6, bandwidth=1e8, latency=0.05, compute=0.01):
    return Observation(iteration=k, compute_s=compute, link_bits=bits, tx_start_s=0.0,
                       tx_end_s=bits / bandwidth, arrive_s=bits / bandwidth + latency,
                       latency_factor=1.0)


def test_first_plan_is_frozen_while_deco_replans():
    """d = 10^6, 4 workers: the probe, then the planner's hand-checked case (δ, τ) =
    (0.28125, 3) from â = 100 Mbit/s, b̂ = 200 ms, T̂ = 100 ms (tests/test_methods.py). A later
    very fast link makes DeCo-SGD re-plan to (1, 1); CocktailSGD keeps its first plan. The
    compact probe (``cocktail_probe="own"``); the default is checked below."""
    context = _context(1_000_000, 4, lr=0.01)
    cocktail = _build(context, estimator_alpha=1.0, cocktail_probe="own")
    deco_spec = get_method_spec("deco-sgd")
    deco = deco_spec.build(context, deco_spec.options(estimator_alpha=1.0, deco_interval=10))
    g = torch.randn(4, 1_000_000, generator=torch.Generator().manual_seed(0))
    xc, xd = torch.zeros(1_000_000), torch.zeros(1_000_000)

    probe = cocktail.step(0, xc, g)
    # δ = 0.01: p = 0.1, r = 0.1, m = 100000, k = 10000 in 79 buckets
    assert (probe.delta, probe.staleness) == (0.01, 0)
    assert probe.bits_per_worker == 100_000 + 10_000 * 4 + 16 * 79
    assert (probe.log["cocktail_sampled"], probe.log["cocktail_kept"]) == (100_000, 10_000)
    deco.step(0, xd, g)
    slow = _observation(0, bandwidth=1e8, latency=0.2, compute=0.1)
    cocktail.observe(slow)
    deco.observe(slow)
    planned = cocktail.step(1, xc, g)
    assert (planned.delta, planned.staleness) == (0.28125, 3)
    assert planned.log["plan_bandwidth_mbps"] == 100.0
    # δ = 0.28125 > 0.1: p = δ, r = 1, m = k = 281250, ⌈281250/128⌉ = 2198 scales
    assert planned.log["cocktail_sample_fraction"] == 0.28125
    assert planned.bits_per_worker == 281_250 * 5 + 16 * 2198
    assert (deco.step(1, xd, g).delta, deco.step(2, xd, g).staleness) == (0.28125, 3)

    fast = _observation(1, bandwidth=1e12, latency=0.01, compute=0.1)
    cocktail.observe(fast)
    deco.observe(fast)
    for k in (11, 12, 500):
        later = cocktail.step(k, xc, g)
        assert (later.delta, later.staleness) == (0.28125, 3)
        assert "plan_bandwidth_mbps" not in later.log
    replanned = deco.step(11, xd, g)
    assert (replanned.delta, replanned.staleness) == (1.0, 1)


def test_probe_sends_deco_sgds_bits():
    """d = 10^6: DeCo-SGD's probe is Top-k at δ = 0.01, k = 10000 coordinates of
    32 + ⌈log2 10^6⌉ = 52 bits, 520,000 bits. CocktailSGD's default probe is the smallest
    message with at least as many: δ > 0.1 samples p = δ with r = 1, so m = k and
    W = 5m + 16⌈m/128⌉; m = 101,463 gives 507,315 + 16·793 = 520,003 bits, m = 101,462
    gives 519,998. The plan made from it is the one the compact probe gives."""
    context = _context(1_000_000, 4, lr=0.01)
    g = torch.randn(4, 1_000_000, generator=torch.Generator().manual_seed(0))
    method = _build(context, estimator_alpha=1.0)
    probe = method.step(0, torch.zeros(1_000_000), g)
    assert (probe.delta, probe.staleness, probe.bits_per_worker) == (0.101463, 0, 520_003)
    assert probe.log["cocktail_kept"] == 101_463
    compressor = CocktailCompressor(1_000_000, seed=0)
    assert probe_delta(compressor, 0.01, 1_000_000) == pytest.approx(0.101463, abs=1e-6)
    assert compressor.size(0.101462, 1_000_000).bits_per_worker == 519_998
    # δ = 10^-4: the 100,000-bit sample mask alone outweighs Top-k's 100 · 52 = 5,200 bits,
    # so δ stays; δ = 0.9: Top-k is dense (32 d), which no CocktailSGD message reaches
    # (δ = 1 is 5d + 16·7813 bits), so the probe is δ = 1
    assert probe_delta(compressor, 0.0001, 1_000_000) == 0.0001
    assert probe_delta(compressor, 0.9, 1_000_000) == 1.0
    method.observe(_observation(0, bandwidth=1e8, latency=0.2, compute=0.1))
    planned = method.step(1, torch.zeros(1_000_000), g)
    assert (planned.delta, planned.staleness) == (0.28125, 3)


def test_reference_defaults():
    """τ = 1, p = 0.1, r = 0.2, b = 4 on d = 6400: m = 640, k = 128, 1168 bits, no planning."""
    method = _build(_context(6400, 2), cocktail_reference_defaults=True)
    g = torch.randn(2, 6400, generator=torch.Generator().manual_seed(2))
    x = torch.zeros(6400)
    first = method.step(0, x, g)
    assert (first.delta, first.staleness, first.bits_per_worker) == (0.02, 1, 1168)
    assert first.applied_messages == 0 and torch.all(x == 0)
    assert first.log["cocktail_sample_fraction"] == 0.1
    assert first.log["cocktail_topk_ratio"] == pytest.approx(0.2)
    assert (first.log["cocktail_sampled"], first.log["cocktail_kept"]) == (640, 128)
    method.observe(_observation(0, bandwidth=1e12, latency=0.0, compute=0.1))
    second = method.step(1, x, g)
    assert (second.delta, second.staleness, second.applied_messages) == (0.02, 1, 1)
    # the update applied at iteration 1 is iteration 0's: inside that iteration's mask
    mask = set(sample_positions(6400, 640, method.compressor.offset, 0).tolist())
    moved = set(x.nonzero().flatten().tolist())
    assert moved <= mask and 128 <= len(moved) <= 256


def test_planner_fields_default_like_deco_sgd():
    for name in PlannerOptions.model_fields:
        assert CocktailOptions.model_fields[name].default == DecoOptions.model_fields[name].default
    defaults = CocktailOptions()
    assert (defaults.cocktail_quant_bits, defaults.cocktail_bucket_size) == (4, 128)
    assert defaults.cocktail_max_sample_fraction == 0.1
    assert defaults.cocktail_delta is None and defaults.cocktail_tau is None
    assert math.isclose(defaults.initial_delta, 0.01)


@pytest.mark.parametrize("options", [
    {"cocktail_delta": 0.1},
    {"cocktail_tau": 2},
    {"cocktail_reference_defaults": True, "cocktail_delta": 0.1, "cocktail_tau": 1},
    {"cocktail_reference_defaults": True, "cocktail_quant_bits": 8},
    {"cocktail_reference_defaults": True, "cocktail_max_sample_fraction": 0.2},
    {"cocktail_quant_bits": 1},
    {"cocktail_quant_bits": 17},
    {"cocktail_bucket_size": 0},
    {"cocktail_max_sample_fraction": 0.0},
    {"cocktail_max_sample_fraction": 1.5},
    {"cocktail_delta": 0.0, "cocktail_tau": 0},
    {"cocktail_delta": 0.1, "cocktail_tau": -1},
    {"delta": 0.1},
])
def test_invalid_options(options):
    with pytest.raises(ValidationError):
        CocktailOptions(**options)


@settings(max_examples=40, deadline=None)
@given(st.integers(50, 3000), st.sampled_from([0.001, 0.02, 0.1, 0.5, 1.0]),
       st.sampled_from([2, 4, 8]), st.integers(0, 20), st.integers(0, 2**31 - 1))
def test_wire_format_is_exactly_w_bits_and_decodes_bit_for_bit(d, delta, bits, iteration,
                                                                seed):
    """CocktailSGD on a real wire (the emulated backend): each row's payload is exactly
    ⌈W/8⌉ bytes and any rank's decoder rebuilds the sender's values and indices exactly."""
    from decobench.compression.codec import HEADER_FIELDS

    compressor = CocktailCompressor(d, seed=seed % 1000, quant_bits=bits, bucket_size=16)
    p = torch.randn(2, d, generator=torch.Generator().manual_seed(seed)) * 3
    message = compressor.compress(p, delta, iteration)
    assert message.wire is not None
    for row in range(2):
        payload, fields = message.wire.encode(row)
        assert payload.dtype == torch.uint8
        assert payload.numel() == math.ceil(message.bits_per_worker / 8)
        header = dict.fromkeys(HEADER_FIELDS, float("nan")) | fields | {
            "iteration": float(iteration)}
        other_rank = CocktailCompressor(d, seed=seed % 1000, quant_bits=bits, bucket_size=16)
        values, indices = other_rank.decoder.decode(payload, header, d)
        assert torch.equal(values, message.values[row])
        assert torch.equal(indices, message.indices[row])
