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


@pytest.fixture
def unread(monkeypatch):
    """The settings as before their first read (restored afterwards), with listeners of the
    test's own."""
    monkeypatch.delitem(settings.__dict__, "current", raising=False)
    monkeypatch.setattr(settings, "_listeners", [])


def test_a_bad_variable_fails_the_first_use_not_the_import(unread, monkeypatch):
    """Listeners registered meanwhile (as modules do at import) are told once the settings
    are read."""
    monkeypatch.setenv("HPCCOLL_TIMEOUT", "abc")
    told = []
    settings.on_change(told.append)
    assert told == []
    with pytest.raises(ValueError, match="HPCCOLL_TIMEOUT='abc': expected seconds"):
        settings.current
    with pytest.raises(ValueError, match="HPCCOLL_TIMEOUT='abc'"):
        settings.configure(check=True)
    monkeypatch.setenv("HPCCOLL_TIMEOUT", "7")
    assert settings.current.timeout == 7.0
    assert told == [settings.Settings(timeout=7.0)]
    settings.on_change(told.append)           # read already: told at once
    assert told[-1] is settings.current and len(told) == 2


def test_import_with_bad_variables_succeeds():
    import os
    import subprocess
    import sys
    env = {**os.environ, "HPCCOLL_TIMEOUT": "abc", "HPCCOLL_CHECK": "maybe"}
    done = subprocess.run([sys.executable, "-c", "import hpccoll.api, hpccoll.requests, "
                           "hpccoll.runtime.executor; print('imported')"],
                          capture_output=True, text=True, env=env)
    assert (done.returncode, done.stdout) == (0, "imported\n"), done.stderr


@pytest.mark.parametrize("variable, value, message", [
    ("HPCCOLL_ALLGATHER_ALGORITHM", "rign", "HPCCOLL_ALLGATHER_ALGORITHM='rign': unknown "
                                            "algorithm 'rign' for allgather; known: auto, "),
    ("HPCCOLL_TUNING_FILE", "/nope.json", "HPCCOLL_TUNING_FILE='/nope.json': tuning file "
                                          "/nope.json does not exist"),
    ("HPCCOLL_GPU_AWARE", "perhaps", "HPCCOLL_GPU_AWARE='perhaps': expected one of"),
])
def test_check_environment_names_a_bad_variable(monkeypatch, variable, value, message):
    monkeypatch.setenv(variable, value)
    with pytest.raises(ValueError) as raised:
        settings.check_environment()
    assert str(raised.value).startswith(message)


def test_algorithm_variables_take_auto_native_and_registered_names(monkeypatch):
    for value, parsed in (("auto", None), ("native", "native"), (" ring ", "ring")):
        monkeypatch.setenv("HPCCOLL_ALLREDUCE_ALGORITHM", value)
        assert settings.read("HPCCOLL_ALLREDUCE_ALGORITHM") == parsed
    monkeypatch.setenv("HPCCOLL_TUNING_FILE", "None")
    assert settings.read("HPCCOLL_TUNING_FILE") == "none"
    settings.check_environment()
