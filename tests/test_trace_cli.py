"""The ``decobench trace`` subcommand, driven through a locally built argparse parser."""

from __future__ import annotations

import argparse
import pathlib

import pytest

from decobench.netem.cli import add_trace_parser
from decobench.netem.trace import TraceError, list_bundled_traces, load_trace


def run(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="decobench")
    sub = parser.add_subparsers(dest="command", required=True)
    add_trace_parser(sub)
    args = parser.parse_args(["trace", *argv])
    return args.func(args)


def test_validate_bundled_name_and_file(tmp_path: pathlib.Path, capsys) -> None:  # type: ignore[no-untyped-def]
    path = tmp_path / "mine.csv"
    path.write_text("time_s,bandwidth_mbps,latency_ms\n0,500,200\n30,120,180\n")
    assert run(["validate", "wan-200ms-lowbw-varying", str(path)]) == 0
    lines = capsys.readouterr().out.strip().splitlines()
    assert len(lines) == 2
    assert lines[0].startswith("wan-200ms-lowbw-varying: 120 rows, 600 s")
    # mean over one period (60 s): (500 * 30 + 120 * 30) / 60 = 310
    assert lines[1] == (
        "mine: 2 rows, 60 s, then holds the last row, mean bandwidth 310 Mbit/s "
        "(range 120-500), latency 180-200 ms"
    )
    assert run(["validate", "--loop", str(path)]) == 0
    assert "loops every 60 s" in capsys.readouterr().out


def test_validate_malformed_trace_raises_with_file_and_line(tmp_path: pathlib.Path) -> None:
    path = tmp_path / "bad.csv"
    path.write_text("time_s,bandwidth_mbps,latency_ms\n0,500,200\n\n10,0,200\n")
    with pytest.raises(TraceError, match=rf"^{path}:4: bandwidth must be > 0"):
        run(["validate", str(path)])


def test_generate_each_kind(tmp_path: pathlib.Path, capsys) -> None:  # type: ignore[no-untyped-def]
    out = tmp_path / "c.csv"
    assert (
        run(
            [
                "generate",
                "constant",
                "--bandwidth-mbps",
                "20",
                "--latency-ms",
                "100",
                "--out",
                str(out),
            ]
        )
        == 0
    )
    assert load_trace(out).bandwidth_bps == (20e6,)
    assert out.read_text().splitlines()[1:] == ["time_s,bandwidth_mbps,latency_ms", "0,20,100"]

    out = tmp_path / "s.csv"
    assert (
        run(["generate", "steps", "--step", "60:300:150", "--step", "60:30:150", "--out", str(out)])
        == 0
    )
    trace = load_trace(out)
    assert trace.times_s == (0.0, 60.0) and trace.bandwidth_bps == (300e6, 30e6)

    out = tmp_path / "w.csv"
    argv = [
        "generate",
        "random-walk",
        "--mean-mbps",
        "20",
        "--latency-ms",
        "200",
        "--duration-s",
        "100",
        "--step-s",
        "5",
        "--low-mbps",
        "5",
        "--high-mbps",
        "60",
        "--seed",
        "3",
        "--latency-jitter-ms",
        "10",
        "--out",
        str(out),
    ]
    assert run(argv) == 0
    first = out.read_bytes()
    assert len(load_trace(out).times_s) == 20
    assert run(argv) == 0 and out.read_bytes() == first  # deterministic

    out = tmp_path / "o.csv"
    assert (
        run(
            [
                "generate",
                "on-off",
                "--high-mbps",
                "100",
                "--low-mbps",
                "5",
                "--latency-ms",
                "50",
                "--duration-s",
                "120",
                "--on-s",
                "30",
                "--off-s",
                "30",
                "--out",
                str(out),
            ]
        )
        == 0
    )
    assert load_trace(out).bandwidth_bps == (100e6, 5e6, 100e6, 5e6)
    assert "wrote" in capsys.readouterr().out


def test_generate_rejects_a_malformed_step(capsys) -> None:  # type: ignore[no-untyped-def]
    with pytest.raises(SystemExit) as info:
        run(["generate", "steps", "--step", "60:300", "--out", "x.csv"])
    assert info.value.code == 2
    assert "DURATION_S:MBPS:MS" in capsys.readouterr().err


def test_generate_reports_bad_values_as_trace_errors(tmp_path: pathlib.Path) -> None:
    with pytest.raises(TraceError, match="bandwidth"):
        run(
            [
                "generate",
                "constant",
                "--bandwidth-mbps",
                "0",
                "--latency-ms",
                "1",
                "--out",
                str(tmp_path / "x.csv"),
            ]
        )
    assert not (tmp_path / "x.csv").exists()


def test_import_mahimahi(tmp_path: pathlib.Path) -> None:
    src = tmp_path / "link.trace"
    src.write_text("".join(f"{ms}\n" for ms in [1, 1, 500, 1000, 2000]))
    out = tmp_path / "link.csv"
    assert (
        run(["import-mahimahi", str(src), "--out", str(out), "--bin-s", "1", "--latency-ms", "30"])
        == 0
    )
    trace = load_trace(out)
    assert trace.bandwidth_bps == (48_000.0, 12_000.0)
    assert trace.latency_s == (0.03, 0.03)


def test_list_shows_every_bundled_trace_with_a_description(capsys) -> None:  # type: ignore[no-untyped-def]
    assert run(["list"]) == 0
    lines = capsys.readouterr().out.strip().splitlines()
    assert [line.split()[0] for line in lines] == list_bundled_traces()
    assert all(len(line.split()) > 2 for line in lines)
    assert any("acceptance" in line for line in lines)


def test_plot(tmp_path: pathlib.Path) -> None:
    out = tmp_path / "t.png"
    assert run(["plot", "congested-onoff", "--out", str(out), "--duration", "1500", "--loop"]) == 0
    assert out.read_bytes().startswith(b"\x89PNG")


def test_every_option_help_states_a_unit() -> None:
    parser = argparse.ArgumentParser(prog="decobench")
    sub = parser.add_subparsers()
    add_trace_parser(sub)
    units = ("(s", "Mbit/s", "(ms", "path", "flag", "integer", "text", "ln units", "dimensionless")
    stack = [parser]
    seen = 0
    while stack:
        p = stack.pop()
        for action in p._actions:
            if isinstance(action, argparse._SubParsersAction):
                stack.extend(action.choices.values())
            elif action.option_strings and action.dest != "help":
                seen += 1
                assert action.help and any(u in action.help for u in units), action.option_strings
    assert seen > 20


def test_realise_writes_the_draw_a_suite_seed_meets(tmp_path: pathlib.Path, capsys) -> None:  # type: ignore[no-untyped-def]
    """`trace realise NAME K` writes the same draw as a per_seed_trace suite's seed K, with
    the header naming it; a name outside the pack or a negative K is a TraceError."""
    from decobench.netem.pack import realisation

    out = tmp_path / "r2.csv"
    assert run(["realise", "deco52-cnn-fmnist", "2", "--out", str(out)]) == 0
    assert "realisation: 2 of deco52-cnn-fmnist, seed 5201002" in capsys.readouterr().out
    expected, header = realisation("deco52-cnn-fmnist", 2)
    assert load_trace(out).bandwidth_bps == expected.bandwidth_bps
    assert out.read_text().splitlines()[len(header) - 1] == f"# {header[-1]}"
    with pytest.raises(TraceError, match="not a pack trace"):
        run(["realise", "wan-200ms-lowbw-varying", "1", "--out", str(out)])
    with pytest.raises(TraceError, match="give 0 or more"):
        run(["realise", "deco52-cnn-fmnist", "-1", "--out", str(out)])


def test_family_writes_the_realisation_a_suite_seed_meets(tmp_path: pathlib.Path, capsys) -> None:  # type: ignore[no-untyped-def]
    """`trace family step-drop ... --seed 3` writes family_trace's realisation 3 (what a suite's
    family condition gives seed 3): mean, then a 5x fall, then the mean; a duration too short
    for a drop is a TraceError."""
    from decobench.netem.families import family_trace

    out = tmp_path / "sd3.csv"
    argv = ["family", "step-drop", "--mean-mbps", "20", "--latency-ms", "100",
            "--duration-s", "60", "--seed", "3", "--out", str(out)]
    assert run(argv) == 0
    assert "family step-drop, mean 20 Mbit/s, 100 ms, seed 3" in capsys.readouterr().out
    written = load_trace(out)
    assert written.bandwidth_bps == family_trace("step-drop", 20, 100, 60, 3).bandwidth_bps
    assert max(written.bandwidth_bps) == 20e6 and min(written.bandwidth_bps) == 4e6
    with pytest.raises(TraceError, match="too short"):
        run(["family", "step-drop", "--mean-mbps", "20", "--latency-ms", "100",
             "--duration-s", "5", "--out", str(out)])
