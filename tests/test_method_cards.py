"""Every registered method has a method card whose knobs match its options model."""

from pathlib import Path

import pytest
import yaml

from decobench.methods import method_specs

ROOT = Path(__file__).resolve().parents[1]
CARDS = ROOT / "docs" / "methods"
REQUIRED = {"method", "title", "paper", "sends", "staleness", "bits_per_iteration", "variants",
            "knobs", "decisions"}


def _front_matter(path: Path) -> dict:
    text = path.read_text(encoding="utf-8")
    assert text.startswith("---\n"), f"{path} has no front matter"
    header, _, body = text[4:].partition("\n---\n")
    assert body.strip(), f"{path} has no body"
    return yaml.safe_load(header)


@pytest.mark.parametrize("name", sorted(method_specs()))
def test_card_exists_and_matches_options(name):
    card = _front_matter(CARDS / f"{name}.md")
    assert REQUIRED <= set(card), f"missing keys: {REQUIRED - set(card)}"
    assert card["method"] == name
    assert {"authors", "venue", "year", "url"} <= set(card["paper"])
    assert card["decisions"], "a card states this project's decisions"
    # which variant the DeCo paper ran, which is the original's, and which decobench runs
    assert {"deco_paper", "original", "decobench"} <= set(card["variants"])
    assert all(isinstance(v, str) and v.strip() for v in card["variants"].values())
    fields = method_specs()[name].options.model_fields
    flags = [knob["flag"] for knob in card["knobs"]]
    assert flags == ["--" + f.replace("_", "-") for f in fields]
    for knob, (field, info) in zip(card["knobs"], fields.items(), strict=True):
        assert knob["default"] == info.default, f"{name} --{field}: card default differs"
        assert {"paper", "meaning"} <= set(knob)


@pytest.mark.parametrize("name", sorted(method_specs()))
def test_readme_links_every_card(name):
    assert f"docs/methods/{name}.md" in (ROOT / "README.md").read_text(encoding="utf-8")
