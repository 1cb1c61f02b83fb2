"""`decobench run`'s flags come from the run config: one flag per RunConfig field (and per
emulation setting, by its flat name), whose help is the field's description, so each
description lives once; the few flags of the command itself are hand-written."""

import re
import typing

import pytest
import yaml

from decobench.cli.flags import COMMAND_FLAGS, NOT_FLAGS, run_flag_fields, run_values
from decobench.cli.main import build_parser, main
from decobench.emulated.entry import build_parser as emulated_parser
from decobench.methods import method_specs
from decobench.runs.config import (
    FLAT_EMULATION_FIELDS,
    EmulationConfig,
    RunConfig,
    build_run_config,
)


def _run_group(parser):
    return next(g for g in parser._action_groups if g.title == "run")._group_actions


def _expected_flags():
    """Each run-config key's flag, derived from the config: --KEY with dashes, a boolean
    that defaults to true as --no-KEY, the repeatable milestones one at a time."""
    flags = {}
    for key, field in run_flag_fields().items():
        flag = "--" + key.replace("_", "-")
        if field.annotation is bool and field.default is True:
            flag = "--no-" + flag[2:]
        flags[key] = {"milestones": "--milestone"}.get(key, flag)
    return flags


def test_every_field_has_a_flag_unless_it_says_why_not():
    assert set(NOT_FLAGS) == {"suite", "emulation", "method_options"}
    assert set(EmulationConfig.model_fields) == set(FLAT_EMULATION_FIELDS.values())
    keys = set(run_flag_fields())
    assert keys == (set(RunConfig.model_fields) - set(NOT_FLAGS)) | set(FLAT_EMULATION_FIELDS)
    run = build_parser(["run"])._subparsers._group_actions[0].choices["run"]
    by_dest = {a.dest: a for a in _run_group(run) if a.option_strings[0] not in COMMAND_FLAGS}
    assert set(by_dest) == keys
    for key, flag in _expected_flags().items():
        assert by_dest[key].option_strings == [flag]


@pytest.mark.parametrize("make", [lambda: build_parser(["run"])._subparsers._group_actions[0]
                                  .choices["run"], lambda: emulated_parser()],
                         ids=["decobench run", "python -m decobench.emulated"])
def test_each_flag_help_is_its_fields_description(make):
    fields = run_flag_fields()
    seen = set()
    for action in _run_group(make()):
        if action.option_strings[0] in COMMAND_FLAGS:
            assert action.help and action.help == COMMAND_FLAGS[action.option_strings[0]]["help"]
            continue
        description = fields[action.dest].description
        assert description, f"{action.dest}: the field has no description"
        assert action.help.replace("%%", "%") == description, action.dest
        seen.add(action.dest)
    assert seen == set(fields)


def test_types_and_choices_follow_the_fields():
    run = build_parser(["run"])._subparsers._group_actions[0].choices["run"]
    actions = {a.dest: a for a in _run_group(run)}
    for key, field in run_flag_fields().items():
        kind = field.annotation
        args = [a for a in typing.get_args(kind) if a is not type(None)]
        if typing.get_origin(kind) is typing.Literal or (
                len(args) == 1 and typing.get_origin(args[0]) is typing.Literal):
            literal = kind if typing.get_origin(kind) is typing.Literal else args[0]
            assert actions[key].choices == list(typing.get_args(literal)), key
        elif kind in (int, float) or args in ([int], [float]):
            assert actions[key].type is (kind if kind in (int, float) else args[0]), key
    assert actions["milestones"].type is float and actions["milestones"].metavar == "TARGET"


def test_help_shows_exactly_the_configs_flags_and_the_commands_own(capsys):
    method_flags = {"--" + f.replace("_", "-") for spec in method_specs().values()
                    for f in spec.options.model_fields}
    expected = set(_expected_flags().values()) | set(COMMAND_FLAGS) | {"-h"}
    assert main(["run", "--help"]) == 0
    usage = capsys.readouterr().out.split("\n\n")[0]
    shown = set(re.findall(r"\[(--?[a-z0-9-]+)", usage))
    assert shown - method_flags == expected
    usage = emulated_parser().format_usage()
    rank = {"--timeout-s", "--attach", "--start-file", "--addresses", "--shaper-ready",
            "--shaper-ready-timeout", "--probe"}
    assert set(re.findall(r"\[(--?[a-z0-9-]+)", usage)) - method_flags - rank == expected


def test_flags_and_a_yaml_file_give_the_config(tmp_path):
    config = tmp_path / "run.yaml"
    config.write_text(yaml.safe_dump({"task": "cnn-fmnist", "method": "dd-ef-sgd",
                                      "trace-loop": True, "seed": 4, "delta": 0.1,
                                      "emulation": {"timeout_s": 5}, "milestones": [0.5]}))
    argv = ["run", "--config", str(config), "--seed", "7", "--trace", "x.csv",
            "--no-stop-at-target", "--milestone", "0.6", "--milestone", "0.7", "--skip-probe",
            "--latency-mechanism", "comm-layer", "--packet-loss", "0.01", "--tau", "2",
            "--overwrite", "--no-wandb"]
    values = run_values(build_parser(argv).parse_args(argv))
    assert values == {"task": "cnn-fmnist", "method": "dd-ef-sgd", "trace_loop": True,
                      "seed": 7, "emulation": {"timeout_s": 5}, "milestones": [0.6, 0.7],
                      "trace": "x.csv", "stop_at_target": False, "skip_probe": True,
                      "latency_mechanism": "comm-layer", "packet_loss": 0.01,
                      "method_options": {"delta": 0.1, "tau": 2}}
    run = build_run_config(values)
    assert run.emulation == EmulationConfig(timeout_s=5, skip_probe=True, packet_loss=0.01,
                                            latency_mechanism="comm-layer")
    assert (run.seed, run.stop_at_target, run.milestones) == (7, False, [0.6, 0.7])
    assert run_values(build_parser(["run"]).parse_args(["run"])) == {"method_options": {}}
