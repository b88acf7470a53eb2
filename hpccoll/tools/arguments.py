"""What the subcommands share to read their arguments: a parser that raises its errors, and
converters that check a value when it is parsed (argparse reports their message as the
argument's error)."""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import tempfile
from typing import Callable


class UsageError(Exception):
    """Arguments a parser refused: ``prog`` is the (sub)command whose parser it was."""

    def __init__(self, prog: str, message: str):
        super().__init__(message)
        self.prog, self.message = prog, message


class Parser(argparse.ArgumentParser):
    """An argument parser that raises :class:`UsageError` instead of printing the usage and
    exiting, so that the command reports it like any other error (its subparsers too)."""

    def error(self, message: str):
        raise UsageError(self.prog, message)


def at_least(least: int) -> Callable[[str], int]:
    """A converter to a whole number no smaller than ``least``."""
    def whole_number(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"must be a whole number, got {text!r}") from None
        if value < least:
            raise argparse.ArgumentTypeError(f"must be at least {least}, got {value}")
        return value
    return whole_number


def seconds(text: str) -> float:
    """A duration in seconds, finite and not negative."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"must be a number of seconds, got {text!r}") from None
    if not 0 <= value < float("inf"):
        raise argparse.ArgumentTypeError(f"must be a finite number of seconds >= 0, got {text}")
    return value


def size(text: str) -> int:
    """A message size in bytes (K/M/G suffixes)."""
    from .results import parse_size
    try:
        return parse_size(text)
    except ValueError as error:
        raise argparse.ArgumentTypeError(str(error)) from None


def size_range(text: str) -> str:
    """A ``MIN:MAX`` size range (or one size), checked and kept as written."""
    from .results import size_range as check
    try:
        check(text)
    except ValueError as error:
        raise argparse.ArgumentTypeError(str(error)) from None
    return text


def check_whole_elements(sizes: str, dtype: str) -> None:
    """ValueError unless every size that ``sizes`` (one size, or a range :func:`size_range`
    takes) gives in bytes is a whole number of ``dtype`` elements: a size is never rounded
    to elements behind the user's back."""
    import numpy as np

    from .results import size_range as sizes_of
    itemsize = np.dtype(dtype).itemsize
    for size in sizes_of(sizes):
        if size % itemsize:
            raise ValueError(f"{sizes} gives {size} B, not a whole number of {dtype} elements "
                             f"({itemsize} B each)")


def check_sizes_of(args: argparse.Namespace) -> None:
    """:func:`check_whole_elements` on the sizes a command was given (``--bytes``, else
    ``-m/--sizes``) and its ``--dtype``, as a UsageError naming the option."""
    if getattr(args, "dtype", None) is None:
        return
    if getattr(args, "bytes", None) is not None:
        option, sizes = "--bytes", str(args.bytes)
    elif getattr(args, "sizes", None):
        option, sizes = "-m/--sizes", args.sizes
    else:
        return
    try:
        check_whole_elements(sizes, args.dtype)
    except ValueError as error:
        raise UsageError(args.prog, f"argument {option}: {error}") from None


def dtype(text: str) -> str:
    """An element type hpccoll supports, kept as written."""
    import numpy as np

    from ..collectives import SUPPORTED_DTYPES
    try:
        supported = np.dtype(text) in SUPPORTED_DTYPES
    except TypeError:
        supported = False
    if not supported:
        raise argparse.ArgumentTypeError(f"unsupported dtype {text!r}; hpccoll supports "
                                         f"{', '.join(str(d) for d in SUPPORTED_DTYPES)}")
    return text


def output_file(path: str) -> str:
    """A file this process can write, checked when the arguments are read (before a run whose
    results would otherwise be lost at the end): not a directory, in a directory that exists,
    and writable (tried: an existing file opened for appending, unchanged; a new one by a
    probe file created and removed beside it, so that ranks checking at once never clash)."""
    directory = os.path.dirname(os.path.abspath(path))
    if os.path.isdir(path):
        raise argparse.ArgumentTypeError(f"cannot write {path}: it is a directory")
    if not os.path.isdir(directory):
        raise argparse.ArgumentTypeError(f"cannot write {path}: no directory {directory}")
    try:
        if os.path.exists(path):
            with open(path, "a"):
                pass
        else:
            with tempfile.NamedTemporaryFile(dir=directory, prefix=".hpccoll-probe-"):
                pass
    except OSError as error:
        raise argparse.ArgumentTypeError(f"cannot write {path}: {error.strerror}") from None
    return path


MATPLOTLIB_MISSING = ("needs matplotlib: pip install matplotlib (or, from a checkout of "
                      "hpccoll, pip install '.[plot]')")


def have_matplotlib() -> bool:
    return importlib.util.find_spec("matplotlib") is not None


def plot_file(path: str) -> str:
    """A picture to write: :func:`output_file`, and matplotlib there to draw it."""
    if not have_matplotlib():
        raise argparse.ArgumentTypeError(MATPLOTLIB_MISSING)
    return output_file(path)


def bench_results(path: str) -> str:
    """A file ``hpccoll bench --json`` wrote."""
    try:
        with open(path) as f:
            data = json.load(f)
    except OSError as error:
        raise argparse.ArgumentTypeError(f"cannot read {path}: {error.strerror}") from None
    except ValueError as error:
        raise argparse.ArgumentTypeError(f"{path} is not JSON: {error}") from None
    if not (isinstance(data, dict) and isinstance(data.get("meta"), dict)
            and isinstance(data.get("results"), list)):
        raise argparse.ArgumentTypeError(f"{path} is not an 'hpccoll bench --json' file")
    return path


def planner_option(text: str) -> tuple[str, object]:
    """A planner option ``NAME=VALUE`` (``-o segment_bytes=1M``, ``-o radix=4``): the value
    a whole number (K/M/G suffixes: binary), else a number, else the text itself."""
    from .results import parse_size
    name, sep, value = text.partition("=")
    if not sep or not name.isidentifier() or not value:
        raise argparse.ArgumentTypeError(f"bad option {text!r}: NAME=VALUE, e.g. "
                                         "segment_bytes=1M or radix=4")
    try:
        return name, parse_size(value)
    except ValueError:
        pass
    try:
        return name, float(value)
    except ValueError:
        return name, value
