"""Run the README's commands in the order written, as a new user in a fresh clone would (issue 23).

The commands are read from the README itself, so the check stays true as the README changes: the
first command of "The two commands" (`make run`, whose set-up `make test` already did) and every
`.venv/bin/reviewloop` line of "Three ways to run it" (the docs' commands are run by
tests/docs/test_docs.py). Placeholders a reader fills in are filled
the obvious way: `path/to/repo` is this clone, `change.patch` the diff of its last commit. A command
"works" when it exits with one of the codes the README documents for it (0; 1 for a finding at
`--fail-on`; 3 for an incomplete review with `--fail-on-incomplete`) and prints no traceback.

Usage (after `make test` or `make setup`): `.venv/bin/python scripts/check_readme_commands.py`
"""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
DOCUMENTED_EXITS = {0, 1, 3}
TIMEOUT_S = 600


def section(text: str, heading: str) -> str:
    start = text.index(f"## {heading}")
    end = text.find("\n## ", start + 1)
    return text[start : end if end != -1 else len(text)]


def shell_lines(markdown: str) -> list[str]:
    blocks = re.findall(r"```sh\n(.*?)```", markdown, re.DOTALL)
    lines = [line.split("  #", 1)[0].strip() for block in blocks for line in block.splitlines()]
    return [line for line in lines if line and not line.startswith("#")]


def readme_commands(readme: str) -> list[str]:
    first = [line for line in shell_lines(section(readme, "The two commands")) if line.startswith("make run")]
    local = [line for line in shell_lines(section(readme, "Three ways to run it")) if ".venv/bin/reviewloop" in line]
    return first + local


def run(command: str, *, patch: Path, env: dict[str, str]) -> tuple[bool, str]:
    filled = command.replace("path/to/repo", ".").replace("change.patch", str(patch))
    done = subprocess.run(
        shlex.split(filled), cwd=REPO, capture_output=True, text=True, timeout=TIMEOUT_S, env=env, check=False
    )
    output = done.stdout + done.stderr
    ok = done.returncode in DOCUMENTED_EXITS and "Traceback" not in output
    return ok, f"exit {done.returncode}: {filled}" + ("" if ok else "\n" + output[-3000:])


def main() -> int:
    readme = (REPO / "README.md").read_text(encoding="utf-8")
    commands = readme_commands(readme)
    if len(commands) < 4:
        print(f"check_readme_commands: found only {commands}; did the README's sections move?", file=sys.stderr)
        return 1
    failed = 0
    with tempfile.TemporaryDirectory(prefix="reviewloop-readme-") as tmp:
        env = {**os.environ, "REVIEWLOOP_DATA_DIR": str(Path(tmp) / "data")}
        env.pop("REVIEWLOOP_DATABASE_URL", None)  # a new user has none: the embedded Postgres
        patch = Path(tmp) / "change.patch"
        diff = subprocess.run(["git", "diff", "HEAD~1", "HEAD"], cwd=REPO, capture_output=True, text=True, check=True)
        patch.write_text(diff.stdout, encoding="utf-8")
        try:
            for command in commands:
                ok, report = run(command, patch=patch, env=env)
                failed += not ok
                print(("ok   " if ok else "FAIL ") + report)
        finally:
            # the README's own way to stop the embedded Postgres these commands started
            subprocess.run([str(REPO / ".venv/bin/reviewloop"), "db", "stop"], env=env, check=False, timeout=60)
    for name in ("review.sarif",):
        (REPO / name).unlink(missing_ok=True)  # written by the README's SARIF example into the clone
    return 1 if failed else 0


if __name__ == "__main__":
    raise SystemExit(main())
