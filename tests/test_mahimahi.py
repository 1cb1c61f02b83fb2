"""Mahimahi packet-delivery traces converted to trace rows, hand-computed."""

from __future__ import annotations

import pathlib

import pytest

from decobench.netem.mahimahi import PACKET_BITS, from_mahimahi
from decobench.netem.trace import TraceError


def write(tmp_path: pathlib.Path, stamps: list[object], name: str = "mm.trace") -> pathlib.Path:
    path = tmp_path / name
    path.write_text("".join(f"{s}\n" for s in stamps))
    return path


def test_packet_size() -> None:
    assert PACKET_BITS == 12_000


def test_bins_with_an_empty_bin_and_a_short_last_bin(tmp_path: pathlib.Path) -> None:
    # D = 3500 ms, 1 s bins (0,1000], (1000,2000], (2000,3000], (3000,3500]:
    #   bin 0: 0, 10, 10, 999, 1000 -> 5 packets / 1 s   = 60 kbit/s
    #   bin 1: 1500, 2000           -> 2 packets / 1 s   = 24 kbit/s
    #   bin 2: none                 -> floor 0.001 Mbit/s = 1 kbit/s
    #   bin 3: 3500                 -> 1 packet / 0.5 s  = 24 kbit/s
    path = write(tmp_path, [0, 10, 10, 999, 1000, 1500, 2000, 3500])
    trace = from_mahimahi(path, bin_s=1.0, latency_ms=40.0)
    assert trace.times_s == (0.0, 1.0, 2.0, 3.0)
    assert trace.bandwidth_bps == pytest.approx((60_000.0, 24_000.0, 1_000.0, 24_000.0))
    assert trace.latency_s == (0.04,) * 4
    assert trace.name == "mm" and trace.period_s == 4.0


def test_equal_bins_are_merged_and_period_kept(tmp_path: pathlib.Path) -> None:
    # bins: (0,1000] 1 packet, (1000,2000] 1 packet, (2000,3000] 3 packets
    path = write(tmp_path, [500, 1500, 2500, 2600, 3000])
    trace = from_mahimahi(path, bin_s=1.0)
    # merged: 2 s at 12 kbit/s, then 1 s at 36 kbit/s written as two 0.5 s rows (period 3 s)
    assert trace.times_s == (0.0, 2.0, 2.5)
    assert trace.bandwidth_bps == pytest.approx((12_000.0, 36_000.0, 36_000.0))
    assert trace.period_s == 3.0
    assert trace.latency_s == (0.0, 0.0, 0.0)


def test_sub_second_bins(tmp_path: pathlib.Path) -> None:
    # 0.1 s bins over D = 200 ms: (0,100] has 4 packets -> 4*12000/0.1 = 480 kbit/s,
    # (100,200] has 1 -> 120 kbit/s
    path = write(tmp_path, [1, 1, 50, 100, 200])
    trace = from_mahimahi(path, bin_s=0.1, name="fast")
    assert trace.times_s == (0.0, 0.1)
    assert trace.bandwidth_bps == pytest.approx((480_000.0, 120_000.0))
    assert trace.name == "fast"


def test_one_bin_gives_a_constant_trace(tmp_path: pathlib.Path) -> None:
    trace = from_mahimahi(write(tmp_path, [1] * 3 + [1000]), bin_s=1.0)
    assert trace.times_s == (0.0,) and trace.bandwidth_bps == (48_000.0,)


def test_custom_floor(tmp_path: pathlib.Path) -> None:
    trace = from_mahimahi(write(tmp_path, [3000]), bin_s=1.0, floor_mbps=0.005)
    # bins 0 and 1 are empty (floor 5 kbit/s, merged), bin 2 has one packet (12 kbit/s)
    assert trace.times_s == (0.0, 2.0, 2.5)
    assert trace.bandwidth_bps == pytest.approx((5_000.0, 12_000.0, 12_000.0))


def test_floor_applies_to_every_bin(tmp_path: pathlib.Path) -> None:
    trace = from_mahimahi(write(tmp_path, [1000]), bin_s=1.0, floor_mbps=0.5)
    assert trace.bandwidth_bps == (500_000.0,)  # max(12 kbit/s, 0.5 Mbit/s)


def test_blank_lines_are_ignored(tmp_path: pathlib.Path) -> None:
    path = tmp_path / "b.trace"
    path.write_text("\n5\n\n  1000 \n")
    assert from_mahimahi(path).bandwidth_bps == (24_000.0,)


@pytest.mark.parametrize(
    ("lines", "line", "fragment"),
    [
        (["1", "2", "abc"], 3, "integer"),
        (["1", "2.5"], 2, "integer"),
        (["1", "-4"], 2, ">= 0"),
        (["5", "", "3"], 3, "non-decreasing"),
    ],
)
def test_malformed_lines_name_file_and_line(
    tmp_path: pathlib.Path, lines: list[str], line: int, fragment: str
) -> None:
    path = write(tmp_path, lines)
    with pytest.raises(TraceError) as info:
        from_mahimahi(path)
    assert str(info.value).startswith(f"{path}:{line}: ")
    assert fragment in str(info.value)


@pytest.mark.parametrize(("lines", "fragment"), [([], "empty"), (["0", "0"], "0 ms")])
def test_degenerate_files(tmp_path: pathlib.Path, lines: list[str], fragment: str) -> None:
    path = write(tmp_path, lines)
    with pytest.raises(TraceError, match=fragment):
        from_mahimahi(path)


def test_bad_arguments_and_missing_file(tmp_path: pathlib.Path) -> None:
    path = write(tmp_path, [1000])
    with pytest.raises(TraceError, match="bin width"):
        from_mahimahi(path, bin_s=0.0)
    with pytest.raises(TraceError, match="latency"):
        from_mahimahi(path, latency_ms=-1.0)
    with pytest.raises(TraceError, match="cannot read"):
        from_mahimahi(tmp_path / "missing.trace")
