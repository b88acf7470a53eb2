"""``algorithm="auto"`` picks the same algorithm on every rank of a call, also where ranks
pass different counts (allgatherv's own block, alltoallv's own counts) or only the root is in
place (reduce): otherwise ranks would run different schedules and never match."""

from __future__ import annotations

import json
import random

import pytest

from hpccoll import costmodel, tuning
from hpccoll.collectives import SPECS


@pytest.mark.parametrize("table", ["shipped", "none"])
@pytest.mark.parametrize("collective", list(SPECS))
def test_auto_decides_alike_on_every_rank(collective, table, monkeypatch):
    if table == "none":
        monkeypatch.setenv("HPCCOLL_TUNING_FILE", "none")      # the cost model decides
    spec = SPECS[collective]
    rng = random.Random(7)
    for p in (2, 3, 4, 5, 8):
        for counts in ((0, 3), (1, 300), (200, 5000)):
            calls = spec.random_calls(p, rng, counts, uniform=False, in_place=spec.in_place,
                                      itemsize=4)
            chosen = set()
            for call in calls:
                decided = spec.decision_call(call)
                chosen.add(tuning.choose(decided, spec.message_count(decided) * 4))
            assert len(chosen) == 1, (p, counts, chosen, [c.counts for c in calls])


@pytest.mark.parametrize("collectives, message", [
    ([], "\"collectives\" must map each collective's name to a list of entries, not be a "
         "list"),
    ({"allreduce": {}}, "allreduce: expected a list of entries, got a dict"),
    ({"allreduce": [[2, 2]]}, "allreduce: an entry needs \"ranks\": [low, high]"),
    ({"allreduce": [{"ranks": ["a", "b"], "rules": []}]},
     "allreduce: an entry needs \"ranks\": [low, high]"),
    ({"allreduce": [{"ranks": [2, 2], "rules": [{"max_bytes": "8", "algorithm": "ring"},
                                                {"max_bytes": None, "algorithm": "ring"}]}]},
     "allreduce: an entry needs"),
])
def test_a_malformed_table_is_a_value_error_saying_what(collectives, message):
    table = {"format": tuning.FORMAT, "collectives": collectives}
    with pytest.raises(ValueError) as raised:
        tuning.check_table(table, "tuning file t.json")
    assert str(raised.value).startswith(f"tuning file t.json: {message}")


@pytest.mark.parametrize("text, message", [
    ('{"format": "hpccoll-tuning/1", "collectives": []}',
     "\"collectives\" must map each collective's name to a list of entries, not be a list"),
    ('[{"format": "hpccoll-tuning/1"}]',
     "is not a decision table (format 'hpccoll-tuning/1' expected)"),
    ('{"format": "hpccoll-tuning/1", "collectives": {"alltoall": [{"ranks": [2, 2], '
     '"rules": "ring"}]}}', "alltoall: an entry needs \"ranks\": [low, high]"),
])
def test_a_tuning_file_of_the_wrong_shape_is_a_value_error_naming_it(tmp_path, text, message):
    path = tmp_path / "table.json"
    path.write_text(text)
    with pytest.raises(ValueError) as raised:
        tuning.load(str(path))
    assert str(raised.value).startswith(f"tuning file {path}")
    assert message in str(raised.value)


def test_an_algorithm_replaces_native_only_when_it_wins_in_every_sweep():
    """Against native, an algorithm takes a size only if its median is 5% faster and it is
    no slower than native in any sweep (each sweep against native's time in it); its rule
    says by how much (the least over the sizes it covers).  Without native (simulated times),
    the fastest takes it."""
    timings = {
        8: {"native": [10.0, 10.5, 11.0], "ring": [7.0, 7.5, 12.0], "direct": [9.8, 9.9, 10.0]},
        64: {"native": [10.0, 10.0, 10.0], "ring": [5.0, 5.0, 8.0], "direct": [9.0, 9.0, 9.0]},
        512: {"native": [20.0, 20.0, 20.0], "ring": [10.0, 12.5, 16.0]},
        4096: {"native": [20.0, 21.0, 22.0], "ring": [20.5, 20.5, 20.5]},
    }
    # 8 B: ring's median is 29% faster, but its third sweep was slower than native's;
    # direct's is 6% faster (9.9 * 1.05 <= 10.5) and faster in each sweep (10 / 9.8 least).
    # 64 B: ring wins, but direct, the previous choice, still may and is not within 5%.
    # 4096 B: ring's median is faster, but not by 5%.
    assert tuning.rules_from_timings(timings) == [
        {"max_bytes": 8, "algorithm": "direct", "faster": 1.06, "worst": 1.02},
        {"max_bytes": 512, "algorithm": "ring", "faster": 1.6, "worst": 1.25},
        {"max_bytes": None, "algorithm": "native"}]
    # a sweep that the machine slowed for every algorithm counts against none: bine's first
    # sweep is slower than native's median, not than native in that sweep
    slowed = {128: {"native": [20.0, 10.0, 10.0], "bine": [15.0, 8.0, 8.0]}}
    assert tuning.rules_from_timings(slowed) == [
        {"max_bytes": None, "algorithm": "bine", "faster": 1.25, "worst": 1.25}]
    simulated = {8: {"ring": [3.0], "direct": [2.0]}, 64: {"ring": [2.0], "direct": [3.0]}}
    assert tuning.rules_from_timings(simulated) == [{"max_bytes": 8, "algorithm": "direct"},
                                                    {"max_bytes": None, "algorithm": "ring"}]


def test_entries_measured_under_a_library_serve_that_library(tmp_path, monkeypatch):
    rules = {lib: [{"max_bytes": 64, "algorithm": algorithm, "faster": 1.5, "worst": 1.2},
                   {"max_bytes": None, "algorithm": "native"}]
             for lib, algorithm in (("MPICH", "ring"), ("Open MPI", "recursive_doubling"),
                                    (None, "direct"))}
    table = None
    for lib, made in rules.items():
        table = tuning.merge(table, "allgather", 4, made, lib)
    table = tuning.merge(table, "allgather", 4, rules["MPICH"], "MPICH")   # replaced, not added
    entries = table["collectives"]["allgather"]
    assert [e.get("library") for e in entries] == [None, "MPICH", "Open MPI"]
    for lib, algorithm in (("MPICH", "ring"), ("Open MPI", "recursive_doubling"),
                           ("another MPI", "direct"), (None, "direct")):
        entry, rule = tuning.lookup(table, "allgather", 4, 64, lib)
        assert rule["algorithm"] == algorithm, lib
    assert tuning.lookup(table, "allgather", 4, 65, "MPICH")[1]["algorithm"] == "native"
    assert tuning.lookup(table, "allgather", 5, 64, "MPICH") is None
    # what explain says the decision rests on
    path = tmp_path / "table.json"
    path.write_text(json.dumps(table))
    monkeypatch.setenv("HPCCOLL_TUNING_FILE", str(path))
    monkeypatch.setattr(tuning, "library", lambda: "Open MPI")
    call = costmodel.stand_in("allgather", 4, 64, 4, None)
    decision = tuning.decide(call, 64)
    assert (decision.algorithm, decision.source) == ("recursive_doubling", "tuning file")
    assert decision.reason == (f"{path}: allgather, ranks 4-4, <= 64 B, measured under Open "
                               "MPI (1.50x as fast as native where its lead was least, 1.20x "
                               "in its least favourable sweep)")


def test_entries_measured_on_a_form_serve_that_form(tmp_path, monkeypatch):
    """Persistent and non-blocking calls take the rules measured on their form (of the
    running library first), else the entry naming no form (blocking calls'); blocking calls
    never take another form's rules; merge replaces an entry of the same ranks, library and
    form only; explain's reason names the form."""
    def rules(algorithm):
        return [{"max_bytes": 64, "algorithm": algorithm},
                {"max_bytes": None, "algorithm": "ring"}]
    table = tuning.merge(None, "allreduce", 2, rules("recursive_doubling"), "Open MPI")
    table = tuning.merge(table, "allreduce", 2, rules("native"), "Open MPI", "persistent")
    table = tuning.merge(table, "allreduce", 2, rules("direct"), None, "nonblocking")
    table = tuning.merge(table, "allreduce", 2, rules("native"), "Open MPI", "persistent")
    table = tuning.merge(table, "allreduce", 2, rules("swing_latency"), "MPICH")
    entries = table["collectives"]["allreduce"]
    assert [(e.get("library"), e.get("form")) for e in entries] == [
        (None, "nonblocking"), ("MPICH", None), ("Open MPI", None), ("Open MPI", "persistent")]
    for library, form, algorithm in (
            ("Open MPI", "blocking", "recursive_doubling"),
            ("Open MPI", "persistent", "native"),
            ("Open MPI", "nonblocking", "recursive_doubling"),   # the library's entry first
            ("MPICH", "persistent", "swing_latency"),
            ("MPICH", "blocking", "swing_latency"),
            ("another MPI", "nonblocking", "direct"),
            ("another MPI", "blocking", None)):
        found = tuning.lookup(table, "allreduce", 2, 8, library, form)
        assert (found and found[1]["algorithm"]) == algorithm, (library, form, found)
    path = tmp_path / "table.json"
    path.write_text(json.dumps(table))
    monkeypatch.setenv("HPCCOLL_TUNING_FILE", str(path))
    monkeypatch.setattr(tuning, "library", lambda: "Open MPI")
    call = costmodel.stand_in("allreduce", 2, 8, 4, None)
    assert tuning.choose(call, 8) == "recursive_doubling"
    decision = tuning.decide(call, 8, "persistent")
    assert decision.algorithm == "native"
    assert decision.reason == (f"{path}: allreduce, ranks 2-2, <= 64 B, measured under Open "
                               "MPI on persistent calls")
    with pytest.raises(ValueError, match="\"form\": \"nonblocking\" or \"persistent\""):
        tuning.check_table({"format": tuning.FORMAT, "collectives": {"allreduce": [
            {"ranks": [2, 2], "form": "blocking", "rules": rules("ring")}]}})


@pytest.mark.parametrize("entry", [
    {"ranks": [2, 2], "library": 3, "rules": [{"max_bytes": None, "algorithm": "ring"}]},
    {"ranks": [2, 2], "rules": [{"max_bytes": None, "algorithm": "ring", "faster": 1.2}]},
    {"ranks": [2, 2], "rules": [{"max_bytes": None, "algorithm": "ring", "faster": "1.2",
                                 "worst": 1.1}]},
])
def test_a_library_or_evidence_of_the_wrong_shape_is_a_value_error(entry):
    table = {"format": tuning.FORMAT, "collectives": {"allreduce": [entry]}}
    with pytest.raises(ValueError, match="optional: \"library\": a name"):
        tuning.check_table(table, "tuning file t.json")
