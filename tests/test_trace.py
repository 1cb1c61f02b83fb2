"""Trace files and semantics: parsing, validation, a(t)/b(t), transmission_end, bundled traces."""

from __future__ import annotations

import math
import pathlib

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from decobench.errors import DecobenchError
from decobench.netem.make_bundled import BUNDLED, write_bundled
from decobench.netem.plot import plot_trace
from decobench.netem.trace import (
    Trace,
    TraceError,
    as_trace,
    bundled_trace_dir,
    list_bundled_traces,
    load_trace,
    parse_trace_csv,
    write_trace,
)

HEADER = "time_s,bandwidth_mbps,latency_ms\n"


def two_rows(loop: bool = False) -> Trace:
    """0 s: 10 Mbit/s, 100 ms; 1 s: 20 Mbit/s, 50 ms (period 2 s, 30 Mbit per period)."""
    return as_trace([0, 1], [10, 20], [100, 50], loop=loop, name="two")


# ----------------------------------------------------------------------------------- parsing
def test_parse_valid_file_with_comments_blank_lines_and_whitespace() -> None:
    text = (
        "# a comment\n\n  time_s , bandwidth_mbps,latency_ms  \r\n"
        "0,500,200\n  # another\n30, 120 ,200\n\n45.5,800,180\n"
    )
    trace = parse_trace_csv(text, source="x.csv", name="x")
    assert trace.times_s == (0.0, 30.0, 45.5)
    assert trace.bandwidth_bps == (500e6, 120e6, 800e6)
    assert trace.latency_s == pytest.approx((0.2, 0.2, 0.18))
    assert trace.name == "x" and trace.loop is False


@pytest.mark.parametrize(
    ("text", "line", "fragment"),
    [
        ("0,500,200\n", 1, "header"),
        ("# c\ntime_s,bandwidth_mbps\n0,1\n", 2, "header"),
        ("time_s,latency_ms,bandwidth_mbps\n0,1,1\n", 1, "header"),
        (HEADER + "0,500\n", 2, "3 columns"),
        (HEADER + "0,500,200,1\n", 2, "3 columns"),
        (HEADER + "0,500,200\n\n10,abc,200\n", 4, "non-numeric"),
        (HEADER + "0,500,200\n10,,200\n", 3, "non-numeric"),
        (HEADER + "0,nan,200\n", 2, "finite"),
        (HEADER + "0,500,inf\n", 2, "finite"),
        (HEADER + "1,500,200\n", 2, "time 0"),
        (HEADER + "0,500,200\n# c\n10,5,1\n10,5,1\n", 5, "strictly increasing"),
        (HEADER + "0,500,200\n10,5,1\n5,5,1\n", 4, "strictly increasing"),
        (HEADER + "0,0,200\n", 2, "bandwidth must be > 0"),
        (HEADER + "0,500,200\n3,-1,200\n", 3, "bandwidth must be > 0"),
        (HEADER + "0,500,-0.5\n", 2, "latency must be >= 0"),
    ],
)
def test_parse_errors_name_file_and_line(text: str, line: int, fragment: str) -> None:
    with pytest.raises(TraceError) as info:
        parse_trace_csv(text, source="bad.csv")
    message = str(info.value)
    assert message.startswith(f"bad.csv:{line}: "), message
    assert fragment in message


@pytest.mark.parametrize(
    ("text", "fragment"),
    [("", "empty file"), ("# only\n\n", "empty file"), (HEADER, "empty trace")],
)
def test_parse_errors_without_a_line(text: str, fragment: str) -> None:
    with pytest.raises(TraceError) as info:
        parse_trace_csv(text, source="bad.csv")
    assert str(info.value).startswith("bad.csv: ")
    assert fragment in str(info.value)


def test_trace_error_is_a_user_error() -> None:
    assert issubclass(TraceError, DecobenchError)


def test_load_trace_from_path_names_the_file_in_errors(tmp_path: pathlib.Path) -> None:
    good = tmp_path / "good.csv"
    good.write_text(HEADER + "0,500,200\n30,120,200\n")
    trace = load_trace(good, loop=True)
    assert trace.name == "good" and trace.loop and trace.times_s == (0.0, 30.0)
    bad = tmp_path / "bad.csv"
    bad.write_text(HEADER + "0,500,200\n30,120,-1\n")
    with pytest.raises(TraceError, match=rf"^{bad}:3: latency"):
        load_trace(str(bad))


def test_load_trace_unknown_name_lists_bundled_names() -> None:
    with pytest.raises(TraceError) as info:
        load_trace("no-such-trace")
    assert "wan-200ms-lowbw-varying" in str(info.value)
    assert str(info.value).startswith("no-such-trace: ")


def test_load_trace_by_bundled_name_and_file_name() -> None:
    by_name = load_trace("constant-20mbps-100ms")
    assert by_name == load_trace("constant-20mbps-100ms.csv")
    assert by_name.bandwidth_bps == (20e6,) and by_name.latency_s == (0.1,)


def test_trace_constructor_validates() -> None:
    with pytest.raises(TraceError, match="empty"):
        Trace((), (), ())
    with pytest.raises(TraceError, match="same length"):
        Trace((0.0, 1.0), (1.0,), (0.0, 0.0))
    with pytest.raises(TraceError, match="row 2: times must be strictly increasing"):
        Trace((0.0, 0.0), (1.0, 1.0), (0.0, 0.0), name="t")
    with pytest.raises(TraceError, match="^t: row 1: the first row must start at time 0"):
        Trace((1.0,), (1.0,), (0.0,), name="t")
    with pytest.raises(TraceError, match="bandwidth"):
        Trace((0.0,), (0.0,), (0.0,))
    with pytest.raises(TraceError, match="latency"):
        Trace((0.0,), (1.0,), (-1.0,))
    with pytest.raises(TraceError, match="finite"):
        Trace((0.0,), (math.inf,), (0.0,))


def test_trace_coerces_sequences_to_float_tuples() -> None:
    trace = Trace([0, 2], [1, 2], [0, 0])  # type: ignore[arg-type]
    assert trace.times_s == (0.0, 2.0) and isinstance(trace.times_s[1], float)


# ------------------------------------------------------------------------- a(t), b(t), period
def test_period_rule() -> None:
    assert two_rows().period_s == 2.0
    assert as_trace([0, 30, 45.5], [1, 2, 3], [0, 0, 0]).period_s == 61.0
    assert as_trace([0], [1], [0]).period_s == math.inf


def test_hold_last_semantics() -> None:
    trace = two_rows()
    assert [trace.segment_at(t) for t in (0, 0.999, 1, 1.5, 2, 1e6)] == [0, 0, 1, 1, 1, 1]
    assert trace.bandwidth_at(0.5) == 10e6 and trace.bandwidth_at(5.0) == 20e6
    assert trace.latency_at(0.5) == 0.1 and trace.latency_at(5.0) == 0.05


def test_loop_semantics() -> None:
    trace = two_rows(loop=True)
    assert [trace.segment_at(t) for t in (0, 1, 1.99, 2, 2.5, 3, 4, 1001.5)] == [
        0,
        1,
        1,
        0,
        0,
        1,
        0,
        1,
    ]
    assert trace.bandwidth_at(2.5) == 10e6 and trace.latency_at(3.25) == 0.05


def test_single_row_loop_is_constant() -> None:
    trace = as_trace([0], [5], [20], loop=True)
    assert trace.bandwidth_at(1e9) == 5e6 and trace.latency_at(3.0) == 0.02
    assert trace.transmission_end(7.0, 10e6) == 9.0


def test_negative_time_is_rejected() -> None:
    with pytest.raises(ValueError):
        two_rows().bandwidth_at(-1.0)


def test_mean_bandwidth() -> None:
    assert two_rows().mean_bandwidth_bps() == 15e6  # (10*1 + 20*1) / 2
    assert two_rows().mean_bandwidth_bps(5.0) == pytest.approx((10 + 20 * 4) / 5 * 1e6)
    assert two_rows(loop=True).mean_bandwidth_bps(5.0) == pytest.approx(
        (10 + 20 + 10 + 20 + 10) / 5 * 1e6
    )
    assert as_trace([0], [7], [0]).mean_bandwidth_bps() == 7e6


def test_capacity_bits() -> None:
    trace = two_rows(loop=True)
    assert trace.capacity_bits(0.5, 1.5) == pytest.approx(5e6 + 10e6)
    assert trace.capacity_bits(1.0, 201.0) == pytest.approx(100 * 30e6)


# -------------------------------------------------------------------------- transmission_end
def test_transmission_spanning_a_bandwidth_change() -> None:
    # 5 Mbit in [0.5, 1) at 10 Mbit/s, then 10 Mbit at 20 Mbit/s: 0.5 + 0.5 + 0.5 = 1.5 s
    assert two_rows().transmission_end(0.5, 15e6) == pytest.approx(1.5)
    assert two_rows(loop=True).transmission_end(0.5, 15e6) == pytest.approx(1.5)


def test_transmission_starting_mid_segment_within_it() -> None:
    assert two_rows().transmission_end(0.25, 5e6) == pytest.approx(0.75)
    assert two_rows().transmission_end(1.25, 10e6) == pytest.approx(1.75)


def test_transmission_hold_last_after_the_last_row() -> None:
    # 5 Mbit at 10 Mbit/s to t=1, then 200 Mbit at 20 Mbit/s (held for ever): 1 + 10 = 11 s
    assert two_rows().transmission_end(0.5, 205e6) == pytest.approx(11.0)
    assert two_rows().transmission_end(100.0, 20e6) == pytest.approx(101.0)


def test_transmission_spanning_many_loop_periods() -> None:
    trace = two_rows(loop=True)  # 30 Mbit per 2 s period
    # from 0.5: 25 Mbit to the end of period 0; 999 whole periods; 10 Mbit at 10 Mbit/s
    assert trace.transmission_end(0.5, 1000 * 30e6 + 5e6) == pytest.approx(2001.0)
    # exactly whole periods end on a period boundary
    assert trace.transmission_end(0.0, 30e6) == pytest.approx(2.0)
    assert trace.transmission_end(0.0, 60e6) == pytest.approx(4.0)
    assert trace.transmission_end(2.0, 1e6 * 30 * 10**6) == pytest.approx(2.0 + 2e6)
    # starting in a later period
    assert trace.transmission_end(10_001.25, 10e6) == pytest.approx(10_001.75)


def test_transmission_zero_bits() -> None:
    assert two_rows().transmission_end(0.7, 0.0) == 0.7
    assert two_rows(loop=True).transmission_end(123.4, 0) == 123.4


def test_transmission_rejects_bad_bits() -> None:
    with pytest.raises(ValueError):
        two_rows().transmission_end(0.0, -1.0)
    with pytest.raises(ValueError):
        two_rows().transmission_end(0.0, math.inf)


def test_transmission_on_a_long_trace() -> None:
    n = 20_000
    trace = as_trace(range(n), [1 + (i % 7) for i in range(n)], [0] * n, loop=True)
    start = 12_345.5
    end = trace.transmission_end(start, 3e6)
    assert end > start
    assert integrate(trace, start, end) == pytest.approx(3e6)


def integrate(trace: Trace, t0: float, t1: float) -> float:
    """Independent reference: sum a_i * |[s_i, e_i) ∩ [t0, t1]| over the rows one by one."""
    total = 0.0
    rows = list(zip(trace.times_s, trace.bandwidth_bps, strict=True))
    n = len(rows)
    repeats = trace.loop and n > 1
    period = trace.period_s
    k = math.floor(t0 / period) if repeats else 0
    while True:
        base = k * period if repeats else 0.0
        for i, (start, rate) in enumerate(rows):
            s = base + start
            if i + 1 < n:
                e = base + rows[i + 1][0]
            else:
                e = base + period if repeats else math.inf
            if s >= t1:
                return total
            total += rate * max(0.0, min(e, t1) - max(s, t0))
        if not repeats:
            return total
        k += 1


@st.composite
def traces(draw: st.DrawFn) -> Trace:
    n = draw(st.integers(1, 6))
    durations = draw(st.lists(st.floats(0.01, 10.0), min_size=n, max_size=n))
    times = [0.0]
    for d in durations[:-1]:
        times.append(times[-1] + d)
    mbps = draw(st.lists(st.floats(0.1, 1000.0), min_size=n, max_size=n))
    ms = draw(st.lists(st.floats(0.0, 500.0), min_size=n, max_size=n))
    return as_trace(times, mbps, ms, loop=draw(st.booleans()))


def _capacity_scale(trace: Trace) -> float:
    """Bits in one period (or in 10 s for a constant trace)."""
    if len(trace.times_s) == 1:
        return trace.bandwidth_bps[0] * 10.0
    return trace.bits_until(trace.period_s)


@settings(max_examples=300, deadline=None)
@given(trace=traces(), start=st.floats(0.0, 100.0), periods=st.floats(0.0, 40.0))
def test_transmission_end_integral_equals_bits(trace: Trace, start: float, periods: float) -> None:
    bits = periods * _capacity_scale(trace)
    end = trace.transmission_end(start, bits)
    assert end >= start
    sent = integrate(trace, start, end)
    assert math.isclose(sent, bits, rel_tol=1e-9, abs_tol=1e-9 * _capacity_scale(trace))


@settings(max_examples=300, deadline=None)
@given(
    trace=traces(),
    start=st.floats(0.0, 100.0),
    p1=st.floats(0.0, 20.0),
    p2=st.floats(0.0, 20.0),
)
def test_transmission_end_is_monotone_in_bits(
    trace: Trace, start: float, p1: float, p2: float
) -> None:
    scale = _capacity_scale(trace)
    lo, hi = sorted((p1 * scale, p2 * scale))
    end_lo, end_hi = trace.transmission_end(start, lo), trace.transmission_end(start, hi)
    assert end_lo <= end_hi + 1e-12 * max(1.0, end_hi)


@settings(max_examples=200, deadline=None)
@given(trace=traces(), t=st.floats(0.0, 200.0))
def test_bits_until_matches_reference_integral(trace: Trace, t: float) -> None:
    assert math.isclose(trace.bits_until(t), integrate(trace, 0.0, t), rel_tol=1e-9, abs_tol=1e-6)


# ------------------------------------------------------------------------------ CSV output
def test_to_csv_is_compact_and_round_trips(tmp_path: pathlib.Path) -> None:
    trace = as_trace([0, 30, 45.5], [500, 120, 0.001], [200, 200, 180.25], name="r")
    text = trace.to_csv()
    assert text == HEADER + "0,500,200\n30,120,200\n45.5,0.001,180.25\n"
    assert parse_trace_csv(text, name="r") == trace
    path = tmp_path / "r.csv"
    write_trace(trace, path, comment="made by a test")
    assert path.read_text().startswith("# made by a test\ntime_s,")
    assert load_trace(path) == trace
    assert sorted(p.name for p in tmp_path.iterdir()) == ["r.csv"]  # no temporary files left


def test_with_loop() -> None:
    trace = two_rows()
    looped = trace.with_loop(True)
    assert looped.loop and not trace.loop
    assert looped.times_s == trace.times_s and looped.name == trace.name


def test_rows_until() -> None:
    assert two_rows(loop=True).rows_until(5.0) == [
        (0.0, 10e6, 0.1),
        (1.0, 20e6, 0.05),
        (2.0, 10e6, 0.1),
        (3.0, 20e6, 0.05),
        (4.0, 10e6, 0.1),
    ]
    assert two_rows().rows_until(5.0) == [(0.0, 10e6, 0.1), (1.0, 20e6, 0.05)]


def test_plot_writes_a_png(tmp_path: pathlib.Path) -> None:
    out = tmp_path / "trace.png"
    plot_trace(two_rows(loop=True), out, duration_s=7.0, title="test")
    data = out.read_bytes()
    assert data.startswith(b"\x89PNG") and len(data) > 1000
    plot_trace(as_trace([0], [5], [20]), tmp_path / "const.png")
    assert (tmp_path / "const.png").stat().st_size > 1000


# ---------------------------------------------------------------------------- bundled traces
REQUIRED = {
    "wan-200ms-lowbw-varying",
    "constant-20mbps-100ms",
    "constant-1gbps-10ms",
    "wan-100mbps-steps",
    "congested-onoff",
}


def test_bundled_traces_all_load() -> None:
    names = list_bundled_traces()
    assert REQUIRED <= set(names)
    assert set(names) == set(BUNDLED)
    for name in names:
        trace = load_trace(name)
        assert trace.name == name


def test_acceptance_trace_is_high_latency_low_varying_bandwidth() -> None:
    trace = load_trace("wan-200ms-lowbw-varying")
    mbps = [a / 1e6 for a in trace.bandwidth_bps]
    assert trace.period_s == 600.0 and len(mbps) == 120
    assert 15.0 <= trace.mean_bandwidth_bps() / 1e6 <= 25.0
    assert min(mbps) < 8.0 and max(mbps) > 40.0 and 5.0 <= min(mbps) and max(mbps) <= 60.0
    latency_ms = [b * 1e3 for b in trace.latency_s]
    assert 190.0 <= min(latency_ms) and max(latency_ms) <= 210.0
    assert sum(latency_ms) / len(latency_ms) == pytest.approx(200.0, abs=3.0)


def test_make_bundled_reproduces_files_byte_for_byte(tmp_path: pathlib.Path) -> None:
    write_bundled(tmp_path)
    for name in BUNDLED:
        committed = (bundled_trace_dir() / f"{name}.csv").read_bytes()
        assert (tmp_path / f"{name}.csv").read_bytes() == committed, name


ORIGINAL_SHA256 = {
    "wan-200ms-lowbw-varying": "500f15ea253a7ad24ef6f95a9e085c3635b5b3f1ac96c8bef7dc462de2f78b3a",
    "constant-20mbps-100ms": "56788d3cb77754dcb1e1237f97072526225d7ce3555ee3d2dda0ec432655115d",
    "constant-1gbps-10ms": "853099b2e9b8b58affd754d95f705491657548609125b350b00bcb41f1ea134a",
    "wan-100mbps-steps": "02b5d7bada88c495f82379ed4b5c5f57d851aad3ffd2a29c00bae439502e8c87",
    "congested-onoff": "625efbbb91dbd2d06532a318057c978241a01be7020e415ee20c725767f6423a",
}
"""The original bundled traces' bytes: finished sweeps depend on them, so they never change
(the trace pack adds files; it does not touch these)."""


def test_original_bundled_traces_keep_their_bytes() -> None:
    import hashlib

    assert set(ORIGINAL_SHA256) == REQUIRED
    for name, digest in ORIGINAL_SHA256.items():
        data = (bundled_trace_dir() / f"{name}.csv").read_bytes()
        assert hashlib.sha256(data).hexdigest() == digest, name
