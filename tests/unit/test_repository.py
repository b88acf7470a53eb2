"""The repository's promises: CI runs exactly the README's test command (and the Open MPI
pass the rank counts it names); the top-level ``jobs/`` holds the SLURM templates (and their
README) that the package ships."""

import os
import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_ci_runs_the_readme_test_command():
    ci_command = [l for l in (ROOT / ".ci" / "run").read_text().splitlines()
                  if l and not l.startswith("#") and not l.startswith(("set ", "cd "))]
    assert len(ci_command) == 1
    readme = (ROOT / "README.md").read_text()
    blocks = readme.split("```bash\n")
    assert ci_command[0] == blocks[2].split("\n")[0], "README's second command differs from CI's"
    assert "hpccoll bench" in blocks[1].split("\n")[0]


def test_rank_filter_of_the_open_mpi_pass_keeps_only_the_named_counts():
    """tests/conftest.py's HPCCOLL_TEST_RANKS deselects the launches at other rank counts
    (and keeps tests that are not MPI launches); a test with no launch at those counts keeps
    its launch at the fewest ranks above 1."""
    def collected(ranks):
        env = dict(os.environ, HPCCOLL_TEST_RANKS=ranks) if ranks else os.environ
        out = subprocess.run([sys.executable, "-m", "pytest", "--collect-only", "-p",
                              "no:cacheprovider", "tests/mpi/test_mpi_collectives.py",
                              "tests/unit/test_settings.py"],
                             cwd=ROOT, env=env, capture_output=True, text=True).stdout
        return re.findall(r"<Function (\S+)>", out)
    every, some = collected(None), collected("2,3")
    launches = [name for name in every if re.search(r"\[\d+\]$", name)]
    assert {name[name.rindex("["):] for name in launches} >= {"[1]", "[2]", "[3]", "[4]", "[8]"}
    # the topology test (4, 6 and 8 ranks) runs at 4; no other launch at 4
    topology = "test_topology_aware_algorithms_on_given_topologies"
    assert [name for name in some if name.startswith(topology)] == [f"{topology}[4]"]
    assert some == [name for name in every if not re.search(r"\[\d+\]$", name) or
                    name.endswith(("[2]", "[3]")) or name == f"{topology}[4]"]
    assert len(some) < len(every)


def test_top_level_jobs_has_the_templates_the_package_renders():
    from hpccoll.tools.jobs.rendering import TEMPLATE_DIR
    files = {p.name: p.read_text() for p in (ROOT / "jobs").iterdir()}
    assert {"README.md", "_common.bash", "bench.sbatch", "scaling.sbatch", "tune.sbatch",
            "verify.sbatch"} <= set(files)
    assert files == {p.name: p.read_text() for p in TEMPLATE_DIR.iterdir()}


def test_shipped_decision_table_names_algorithms_that_apply():
    """The table behind algorithm="auto" is well formed, and every rule names native or a
    registered algorithm whose constraints hold at every rank count of its range."""
    import json
    from hpccoll import registry, tuning
    from hpccoll.collectives import uniform_call
    from hpccoll.tools.bench_command import BENCH_COLLECTIVES
    table = json.loads(tuning.SHIPPED.read_text())
    tuning.check_table(table, str(tuning.SHIPPED))
    assert set(table["collectives"]) == set(BENCH_COLLECTIVES)     # what hpccoll tune times
    for collective, entries in table["collectives"].items():
        for entry in entries:
            low, high = entry["ranks"]
            for rule in entry["rules"]:
                if rule["algorithm"] == registry.NATIVE:
                    continue
                algorithm = registry.get(collective, rule["algorithm"])
                for p in range(low, high + 1):
                    assert algorithm.violated(uniform_call(collective, p, 0, 1)) is None
