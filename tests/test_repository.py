"""The repository's promises: CI runs exactly the README's test command."""

from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def test_ci_runs_the_readme_test_command():
    ci_command = [l for l in (ROOT / ".ci" / "run").read_text().splitlines()
                  if l and not l.startswith("#") and not l.startswith(("set ", "cd "))]
    assert len(ci_command) == 1
    readme = (ROOT / "README.md").read_text()
    blocks = readme.split("```bash\n")
    assert ci_command[0] == blocks[2].split("\n")[0], "README's second command differs from CI's"
    assert "hpccoll bench" in blocks[1].split("\n")[0]
