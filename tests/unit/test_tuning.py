"""``algorithm="auto"`` picks the same algorithm on every rank of a call, also where ranks
pass different counts (allgatherv's own block, alltoallv's own counts) or only the root is in
place (reduce): otherwise ranks would run different schedules and never match."""

from __future__ import annotations

import random

import pytest

from hpccoll import tuning
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
