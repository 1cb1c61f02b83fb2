"""Suite files: validation before anything runs (errors name the field), expansion into
cells, identities."""

from pathlib import Path

import pytest
import yaml

from decobench.errors import DecobenchError
from decobench.sweeps.suite import (
    expand_cells,
    identity,
    load_suite,
    parse_suite,
    realised_trace_path,
    shipped_suites,
    write_constant_traces,
    write_realised_traces,
)

BASE = {
    "name": "t",
    "conditions": {"wan": {"trace": "wan-200ms-lowbw-varying"},
                   "flat": {"constant": {"bandwidth_mbps": 50, "latency_ms": 20}}},
    "experiments": [{"name": "e", "tasks": ["cnn-fmnist"], "conditions": ["wan"],
                     "methods": ["d-sgd", "deco-sgd"], "seeds": [0, 1], "target": 0.7,
                     "max_iters": 100}],
}


def _with(**experiment) -> dict:
    return BASE | {"experiments": [BASE["experiments"][0] | experiment]}


def _error(data: dict, tmp_path: Path) -> str:
    with pytest.raises(DecobenchError) as info:
        expand_cells(parse_suite(data, "s.yaml"), tmp_path)
    return str(info.value)


def test_unknown_method_names_the_field(tmp_path):
    message = _error(_with(methods=["d-sgd", "sgd-magic"]), tmp_path)
    assert "experiments[0].methods[1]" in message and "sgd-magic" in message
    assert "deco-sgd" in message                      # lists what is available


def test_negative_budget_names_the_field(tmp_path):
    message = _error(_with(max_iters=-5), tmp_path)
    assert message == "suite s.yaml: experiments[0].max_iters: a budget must be > 0 (got -5)"
    assert "experiments[0].max_sim_time" in _error(_with(max_sim_time={"cnn-fmnist": 0}),
                                                   tmp_path)


def test_missing_trace_names_the_condition(tmp_path):
    data = BASE | {"conditions": {"wan": {"trace": "no-such-trace"}}}
    message = _error(data, tmp_path)
    assert "conditions.wan.trace" in message and "no-such-trace" in message


def test_other_bad_fields(tmp_path):
    assert "experiments[0].tasks[0]" in _error(_with(tasks=["mnist-typo"]), tmp_path)
    assert "experiments[0].conditions: unknown condition 'lan'" in _error(
        _with(conditions=["lan"]), tmp_path)
    assert "experiments[0].seeds" in _error(_with(seeds=[1, 1]), tmp_path)
    assert "experiments[0].budget" in _error(_with(budget=3), tmp_path)  # unknown key
    assert "conditions.wan" in _error(BASE | {"conditions": {"wan": {
        "trace": "x", "regime": "paper-wan"}}}, tmp_path)
    assert "no value for task 'cnn-fmnist'" in _error(_with(target={"gpt2-wikitext": 400}),
                                                      tmp_path)
    message = _error(_with(target=-1.0), tmp_path)    # a run option, checked by RunConfig
    assert "method d-sgd" in message


def test_expansion_order_labels_and_options(tmp_path):
    data = _with(methods=["d-sgd", {"method": "deco-sgd", "label": "deco-sgd-F25",
                                    "options": {"deco_interval": 25}},
                          {"method": "dd-ef-sgd", "grid": {"delta": [0.1, 1.0], "tau": [0, 2]}}],
                 conditions=["wan", "flat"], max_iters={"cnn-fmnist": 50})
    suite = parse_suite(data, "s.yaml")
    write_constant_traces(suite, tmp_path)
    cells = expand_cells(suite, tmp_path, data_roots={"cnn-fmnist": "/data/fm"})
    assert len(cells) == 2 * 6 * 2                    # conditions × variants × seeds
    labels = list(dict.fromkeys(c.config.label for c in cells))
    assert labels == ["d-sgd", "deco-sgd-F25", "dd-ef-sgd-delta0.1-tau0",
                      "dd-ef-sgd-delta0.1-tau2", "dd-ef-sgd-delta1-tau0", "dd-ef-sgd-delta1-tau2"]
    f25 = next(c for c in cells if c.config.label == "deco-sgd-F25")
    assert f25.config.method_options == {"deco_interval": 25}
    assert (f25.config.max_iters, f25.config.target, f25.config.suite) == (50, 0.7, "t")
    assert f25.config.data_root == "/data/fm"
    grid = next(c for c in cells if c.config.label == "dd-ef-sgd-delta1-tau2")
    assert grid.config.method_options == {"delta": 1.0, "tau": 2}
    flat = next(c for c in cells if c.config.condition == "flat")
    assert flat.config.trace == str(tmp_path / "flat.csv")
    assert len({c.identity for c in cells}) == len(cells)
    assert cells[0].name.startswith("cnn-fmnist__wan__d-sgd__n4__s0__")


def test_identity_ignores_paths_but_not_content(tmp_path):
    suite = parse_suite(BASE, "s.yaml")
    a = expand_cells(suite, tmp_path, {"cnn-fmnist": "/a"})[0].config
    b = expand_cells(suite, tmp_path, {"cnn-fmnist": "/b"})[0].config
    assert identity(a) == identity(b)
    assert identity(a) != identity(a.model_copy(update={"seed": 5}))
    assert identity(a) != identity(a.model_copy(update={"max_iters": 101}))
    copy = tmp_path / "copy.csv"                       # same trace content, other path
    copy.write_bytes(Path(__import__("decobench.netem.trace", fromlist=["x"]).resolve_trace_path(
        "wan-200ms-lowbw-varying")).read_bytes())
    assert identity(a) == identity(a.model_copy(update={"trace": str(copy)}))


PER_SEED = {
    "name": "t",
    "conditions": {"deco52": {"trace": "deco52-cnn-fmnist", "per_seed_trace": True},
                   "gpt2": {"regime": "paper:deco52-gpt2-wikitext", "per_seed_trace": True},
                   "shaped": {"transmission_ratio": 2, "latency_ratio": 1,
                              "ratio_shape": "aws-oregon-tokyo-varying",
                              "per_seed_trace": True},
                   "fixed": {"trace": "deco52-cnn-fmnist"}},
    "experiments": [{"name": "e", "tasks": ["cnn-fmnist"],
                     "conditions": ["deco52", "gpt2", "shaped", "fixed"],
                     "methods": ["d-sgd"], "seeds": [0, 1, 2], "target": 0.7,
                     "max_iters": 100}],
}


def test_per_seed_trace_gives_each_seed_its_own_realisation(tmp_path):
    """Seed 0 reads the bundled file (its identity is that of a plain condition); seed s > 0
    a realisation file written into the results folder's traces, whose identity counts its
    content (not where the folder is), for a trace, a regime and a ratio shape alike."""
    suite = parse_suite(PER_SEED, "s.yaml")
    identities = {}
    for where in ("a", "b"):
        traces = tmp_path / where
        write_realised_traces(suite, traces)
        assert sorted(p.name for p in traces.iterdir()) == [
            f"{name}-r{s}.csv" for name in ("aws-oregon-tokyo-varying", "deco52-cnn-fmnist",
                                            "deco52-gpt2-wikitext") for s in (1, 2)]
        cells = expand_cells(suite, traces)
        identities[where] = [c.identity for c in cells]
        by = {(c.config.condition, c.config.seed): c.config for c in cells}
        assert by[("deco52", 0)].trace == "deco52-cnn-fmnist"
        assert by[("deco52", 2)].trace == str(realised_trace_path(traces, "deco52-cnn-fmnist", 2))
        assert by[("gpt2", 1)].regime == f"paper:{traces / 'deco52-gpt2-wikitext-r1.csv'}"
        assert by[("shaped", 1)].ratio_shape == str(traces / "aws-oregon-tokyo-varying-r1.csv")
        assert by[("fixed", 2)].trace == "deco52-cnn-fmnist"
        # the per-seed condition's seed 0 is the plain condition's run
        assert identity(by[("deco52", 0)].model_copy(update={"condition": "fixed"})) == \
            identity(by[("fixed", 0)])
        header = (traces / "deco52-cnn-fmnist-r1.csv").read_text().splitlines()
        assert "# realisation: 1 of deco52-cnn-fmnist, seed 5201001" in " ".join(header[:12])
    assert identities["a"] == identities["b"]
    assert len(set(identities["a"])) == len(identities["a"])
    before = (tmp_path / "a" / "deco52-cnn-fmnist-r1.csv").stat().st_mtime_ns
    write_realised_traces(suite, tmp_path / "a")                      # resumed: left alone
    assert (tmp_path / "a" / "deco52-cnn-fmnist-r1.csv").stat().st_mtime_ns == before


def test_a_missing_realisation_file_says_who_writes_it(tmp_path):
    message = _error(PER_SEED, tmp_path)
    assert "deco52-cnn-fmnist-r1.csv" in message and "write_realised_traces" in message


def test_per_seed_trace_needs_a_generated_pack_trace(tmp_path):
    for condition in ({"trace": "aws-oregon-tokyo"}, {"trace": "wan-200ms-lowbw-varying"},
                      {"transmission_ratio": 2, "latency_ratio": 1}):
        data = BASE | {"conditions": {"wan": condition | {"per_seed_trace": True}}}
        message = _error(data, tmp_path)
        assert "per_seed_trace draws realisations of a generated pack trace" in message
        assert "deco52-cnn-fmnist" in message


FAMILY = {
    "name": "t",
    "conditions": {
        "drop": {"family": {"family": "step-drop", "mean_mbps": 15, "latency_ms": 200,
                            "duration_s": 400}},
        "swing": {"family": {"family": "diurnal", "mean_mbps": 800, "latency_ms": 200,
                             "duration_s": 400, "regime_profile": "paper"}}},
    "experiments": [{"name": "e", "tasks": ["cnn-fmnist"], "conditions": ["drop", "swing"],
                     "methods": ["deco-sgd-robust"], "seeds": [0, 1], "target": 0.7,
                     "max_iters": 100}],
}


def test_a_family_condition_runs_each_seed_on_its_own_realisation(tmp_path):
    """Every seed (0 included) reads the family's realisation of that seed, written into the
    results folder (decobench.netem.families); with a regime profile, as that profile's model
    sees it; identities count the file's content, so two folders agree."""
    from decobench.netem.families import family_trace
    from decobench.netem.trace import load_trace
    from decobench.sweeps.suite import family_trace_path

    suite = parse_suite(FAMILY, "s.yaml")
    identities = {}
    for where in ("a", "b"):
        traces = tmp_path / where
        write_realised_traces(suite, traces)
        assert sorted(p.name for p in traces.iterdir()) == [
            "drop-s0.csv", "drop-s1.csv", "swing-s0.csv", "swing-s1.csv"]
        cells = expand_cells(suite, traces)
        identities[where] = [c.identity for c in cells]
        by = {(c.config.condition, c.config.seed): c.config for c in cells}
        assert by[("drop", 1)].trace == str(family_trace_path(traces, "drop", 1))
        assert by[("swing", 0)].regime == f"paper:{traces / 'swing-s0.csv'}"
        read = load_trace(traces / "drop-s1.csv")
        made = family_trace("step-drop", 15, 200, 400, 1)
        assert [read.bandwidth_at(t) for t in range(0, 400, 5)] == \
            [made.bandwidth_at(t) for t in range(0, 400, 5)]
    assert identities["a"] == identities["b"] and len(set(identities["a"])) == 4
    # the manifest names each cell's family (the report's held-out split reads it: the
    # condition's name need not be the family's)
    assert {(c.config.condition, c.manifest_entry()["family"]) for c in cells} == {
        ("drop", "step-drop"), ("swing", "diurnal")}


def test_a_family_condition_is_checked(tmp_path):
    bad = FAMILY | {"conditions": {"drop": {"family": {
        "family": "weekly", "mean_mbps": 15, "latency_ms": 200, "duration_s": 400}}}}
    assert "unknown trace family 'weekly'" in _error(bad, tmp_path)
    twice = FAMILY | {"conditions": {"drop": {
        "family": FAMILY["conditions"]["drop"]["family"], "per_seed_trace": True}}}
    assert "leave out per_seed_trace" in _error(twice, tmp_path)
    missing = tmp_path / "none"
    assert "drop-s0.csv is missing" in _error(FAMILY | {"conditions": {
        "drop": FAMILY["conditions"]["drop"], "swing": FAMILY["conditions"]["swing"]}}, missing)


def test_duplicate_cells_are_rejected(tmp_path):
    data = BASE | {"experiments": BASE["experiments"] * 2}
    assert "repeats the run" in _error(data, tmp_path)


@pytest.mark.parametrize("name", shipped_suites())
def test_shipped_suites_are_valid(name, tmp_path):
    suite, path = load_suite(name)
    assert suite.name == name == path.stem and suite.cost and suite.description
    write_constant_traces(suite, tmp_path)
    write_realised_traces(suite, tmp_path)
    cells = expand_cells(suite, tmp_path)
    assert cells and all(c.config.suite == name for c in cells)
    assert yaml.safe_load(path.read_text())["name"] == name


def test_shipped_suite_axes():
    paper, _ = load_suite("paper")
    assert {t for e in paper.experiments for t in e.tasks} == {
        "cnn-fmnist", "cnn-cifar10", "vit-imagenet", "gpt2-wikitext"}
    assert all(e.seeds == [0, 1, 2] for e in paper.experiments)
    scaling, _ = load_suite("scaling")
    assert scaling.experiments[0].workers == [4, 8, 16]
    theory, _ = load_suite("theory")
    assert any(m.grid for m in theory.experiments[0].method_entries())


def test_cpu_tier_has_what_its_verdicts_need():
    """Issue 39: every condition draws per-seed realisations; the main comparisons run 5 seeds
    with both static rivals; Table 1 runs the paper's five methods on varying links; the grid
    has τ = 0..4; scaling uses the ring topology at 4, 8 and 16 workers with the static
    strategy beside D-SGD."""
    suite, _ = load_suite("cpu-paper")
    assert all(c.per_seed_trace for c in suite.conditions.values())
    by = {e.name: e for e in suite.experiments}
    for name in ("main-cnn-fmnist", "main-cnn-cifar10", "main-gpt2", "main-vit"):
        labels = {label for m in by[name].method_entries() for label, _ in m.variants()}
        assert {"d-sgd", "cocktail-sgd-topk", "static-mean-plan", "deco-sgd"} <= labels, name
        assert by[name].seeds == [0, 1, 2, 3, 4], name
    table1 = by["table1-gpt2"]
    assert table1.methods == ["d-sgd", "accordion", "dga", "cocktail-sgd-topk", "deco-sgd"]
    assert all(suite.conditions[c].regime.endswith("-varying") for c in table1.conditions)
    grid = by["theory"].method_entries()[0].grid
    assert grid["tau"] == [0, 1, 2, 3, 4]
    scaling = by["scaling"]
    assert scaling.options["topology"] == "ring" and scaling.workers == [4, 8, 16]
    assert {"d-sgd", "cocktail-sgd-topk", "deco-sgd"} <= set(scaling.methods)


def test_emulation_only_settings_do_not_change_a_simulated_runs_identity():
    from decobench.runs.config import RunConfig
    from decobench.runs.identity import identity

    base = dict(task="cnn-fmnist", method="d-sgd", trace="constant-20mbps-100ms")
    plain = identity(RunConfig(**base))
    assert identity(RunConfig(**base, latency_mechanism="comm-layer", skip_probe=True,
                              emulation_timeout_s=30)) == plain
    # the identity a simulated run had before the emulated backend existed (commit 0e54d59):
    # a new RunConfig field must not re-run finished sweeps unless it changes the result
    assert plain == "a343fd3193abb82856f92658387ef3635fa8fde9a708fb32411b6619ce9a3464"
    assert identity(RunConfig(**base, backend="emulated")) != plain
