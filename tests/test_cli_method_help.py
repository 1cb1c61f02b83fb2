"""`decobench run --method M --help` shows M's options with M's defaults, and only those."""

import pytest

from decobench.cli.main import build_parser, main
from decobench.methods import method_specs


def _help(capsys, method):
    assert main(["run", "--method", method, "--help"]) == 0
    return " ".join(capsys.readouterr().out.split())   # argparse wraps lines


@pytest.mark.parametrize("method", sorted(method_specs()))
def test_method_help_shows_exactly_its_options(capsys, method):
    text = _help(capsys, method)
    own = set(method_specs()[method].options.model_fields)
    others = {f for s in method_specs().values() for f in s.options.model_fields} - own
    for field in own:
        assert "--" + field.replace("_", "-") in text
    for field in others:
        assert "--" + field.replace("_", "-") + " " not in text
    assert f"docs/methods/{method}.md" in text


def test_shared_flag_shows_the_chosen_methods_default(capsys):
    own_help = _help(capsys, "dd-ef-sgd").split("--delta DELTA ")[-1].split("--tau TAU")[0]
    assert own_help.endswith("[default 0.01] ")
    accordion = _help(capsys, "accordion")
    assert "0.99 on CIFAR-10) [default 0.1]" in accordion
    assert "[default unset]" in accordion   # --accordion-window-iters: one epoch


def test_bool_and_optional_flags_parse():
    parser = build_parser(["run", "--method", "cocktail-sgd"])
    args = parser.parse_args(["run", "--cocktail-reference-defaults"])
    assert args.method_option__cocktail_reference_defaults is True
    args = parser.parse_args(["run", "--cocktail-reference-defaults", "false",
                              "--dga-delay", "3", "--cocktail-delta", "0.05"])
    assert args.method_option__cocktail_reference_defaults is False
    assert args.method_option__dga_delay == 3 and args.method_option__cocktail_delta == 0.05
    with pytest.raises(SystemExit):
        parser.parse_args(["run", "--cocktail-reference-defaults", "maybe"])
