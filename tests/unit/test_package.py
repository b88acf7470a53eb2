"""What the package says about itself: its version (one, in hpccoll/__init__.py, which
setup.cfg reads), its licence file, and a namespace of public names only."""

from __future__ import annotations

import configparser
from importlib import metadata
from pathlib import Path

import hpccoll

ROOT = Path(__file__).resolve().parents[2]


def test_one_version():
    setup = configparser.ConfigParser()
    setup.read(ROOT / "setup.cfg")
    assert setup["metadata"]["version"] == "attr: hpccoll.__version__"
    assert metadata.version("hpccoll") == hpccoll.__version__


def test_the_declared_licence_is_shipped():
    setup = configparser.ConfigParser()
    setup.read(ROOT / "setup.cfg")
    assert setup["metadata"]["license"] == "BSD-3-Clause"
    assert setup["metadata"]["license_files"] == "LICENSE"
    text = (ROOT / "LICENSE").read_text()
    assert text.startswith("BSD 3-Clause License\n\nCopyright (c) 2026, the hpccoll developers")
    assert "3. Neither the name of the copyright holder" in text


def test_dir_shows_public_names_only():
    names = dir(hpccoll)
    assert not {"Any", "annotations", "importlib"} & set(names)
    assert [name for name in names if name.startswith("_")] == ["__version__"]
    assert set(hpccoll.__all__) <= set(names)
