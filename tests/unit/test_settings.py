"""Environment variables: declared once, parsed strictly, errors naming the variable, and the
README's table generated from the declarations."""

from __future__ import annotations

from pathlib import Path

import pytest

from hpccoll import settings

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize("text, value", [("1", True), ("true", True), ("YES", True), ("on", True),
                                         ("0", False), ("false", False), ("no", False),
                                         ("Off", False)])
def test_booleans(monkeypatch, text, value):
    monkeypatch.setenv("HPCCOLL_CHECK", text)
    assert settings.from_environment().check is value


@pytest.mark.parametrize("text", ["maybe", "2", "enabled"])
def test_a_bad_boolean_names_the_variable(monkeypatch, text):
    monkeypatch.setenv("HPCCOLL_CHECK", text)
    with pytest.raises(ValueError, match=f"HPCCOLL_CHECK='{text}': expected one of"):
        settings.from_environment()


@pytest.mark.parametrize("text, value", [("30", 30.0), ("0.5", 0.5), ("0", None), ("none", None),
                                         ("inf", None), ("", settings.DEFAULT_TIMEOUT)])
def test_timeouts(monkeypatch, text, value):
    monkeypatch.setenv("HPCCOLL_TIMEOUT", text)
    assert settings.from_environment().timeout == value


@pytest.mark.parametrize("text", ["nan", "-1", "ten", "1e3s"])
def test_a_bad_timeout_names_the_variable(monkeypatch, text):
    monkeypatch.setenv("HPCCOLL_TIMEOUT", text)
    with pytest.raises(ValueError, match="HPCCOLL_TIMEOUT="):
        settings.from_environment()


def test_every_collective_has_its_algorithm_variable():
    from hpccoll.collectives import NAMES
    for name in NAMES:
        assert f"HPCCOLL_{name.upper()}_ALGORITHM" in settings.VARIABLES


def test_variables_read_elsewhere_name_themselves(monkeypatch):
    from hpccoll import costmodel
    from hpccoll.collectives import uniform_call
    monkeypatch.setenv("HPCCOLL_MACHINE", "cray")
    with pytest.raises(ValueError, match="HPCCOLL_MACHINE='cray': unknown preset"):
        costmodel.machine_for(uniform_call("allreduce", 4, 0, 8))


def test_the_package_reads_no_variable_it_does_not_declare():
    import re
    read = set()
    for path in (ROOT / "hpccoll").rglob("*.py"):
        read |= set(re.findall(r"HPCCOLL_[A-Z_]+", path.read_text()))
    declared = set(settings.VARIABLES) | {"HPCCOLL_"}
    templated = {name for name in read if name.endswith("_ALGORITHM")}
    assert read - declared - templated == set()


def test_readme_table_is_generated():
    assert settings.table() in (ROOT / "README.md").read_text(), \
        "paste hpccoll.settings.table() into README.md's environment section"
