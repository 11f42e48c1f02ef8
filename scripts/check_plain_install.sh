#!/usr/bin/env bash
# A plain `pip install` of the project, without extras, can review a diff.
#
# Issue 21: agent/agreement.py imported numpy, which pyproject.toml did not declare, so a fresh
# install failed at `reviewloop review` with ModuleNotFoundError while every test passed in the
# development environment (which has the extras, and numpy through them). Here: a fresh virtualenv,
# the checkout's tracked files installed into it (not editable, no extras), and `reviewloop review
# --diff` on a small patch whose eval() it must report. torch must not have come along: the review
# path needs no model.
#
# Issue 42: the distribution is `reviewloop-gitlab` (the PyPI name `reviewloop` is an unrelated
# project); the installed distribution must be ours under that name and give the `reviewloop` command.
# This is the install the review-only image (deploy/Dockerfile's `review` target) performs: the same
# `pip install <checkout>`, then semgrep's engine without its dependencies (see the Makefile).
#
# Usage: scripts/check_plain_install.sh        (PY=python3.12 to try another interpreter)
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PY:-python3}
started=$SECONDS
work=$(mktemp -d "${TMPDIR:-/tmp}/reviewloop-plain-install.XXXXXX")
trap 'rm -rf "$work"' EXIT

# the tracked files as they are in the work tree: building from a copy leaves no build/ or
# egg-info behind, and files that git does not track cannot make the install pass
mkdir "$work/src"
git ls-files -z | tar --null -T - -cf - | tar -xf - -C "$work/src"

# the image's review-only install (deploy/Dockerfile runs the same script), semgrep pinned as the Makefile pins it
semgrep=$(sed -n 's/^SEMGREP_PACKAGE := //p' Makefile)
# -qq: errors only (the machine's pip config warns per package)
PY="$PY" PIP_INSTALL_FLAGS=-qq sh scripts/install_review.sh "$work/venv" "$work/src" "$semgrep"
installed=$SECONDS

dist=$(grep -m1 '^name = ' "$work/src/pyproject.toml" | cut -d'"' -f2)
if [ "$dist" != "reviewloop-gitlab" ]; then
    echo "check_plain_install: pyproject names the distribution $dist, not reviewloop-gitlab" >&2
    exit 1
fi
"$work/venv/bin/python" - "$dist" <<'CHECK'
import sys
from importlib.metadata import PackageNotFoundError, distribution, entry_points

ours = distribution(sys.argv[1])
assert ours.metadata["Name"] == "reviewloop-gitlab", ours.metadata["Name"]
try:
    distribution("reviewloop")
except PackageNotFoundError:
    pass
else:
    raise SystemExit("check_plain_install: a distribution named `reviewloop` is installed: not ours")
[script] = [e for e in entry_points(group="console_scripts") if e.name == "reviewloop"]
assert script.dist is not None and script.dist.name == "reviewloop-gitlab", script
CHECK

if "$work/venv/bin/python" -c "import torch" 2>/dev/null; then
    echo "check_plain_install: torch came with a plain install; the review path must not need it" >&2
    exit 1
fi

cat >"$work/change.patch" <<'PATCH'
diff --git a/app/calculator.py b/app/calculator.py
new file mode 100644
--- /dev/null
+++ b/app/calculator.py
@@ -0,0 +1,3 @@
+def calculate():
+    expression = input("expression: ")
+    return eval(expression)
diff --git a/web/run.js b/web/run.js
new file mode 100644
--- /dev/null
+++ b/web/run.js
@@ -0,0 +1,4 @@
+const { exec } = require("child_process");
+app.get("/x", (req, res) => {
+  exec("rm -rf " + req.query.dir);
+});
PATCH

# the installed console script, from outside the checkout (nothing imports the source tree), with
# no model and no database configured: analyzers only, nothing stored
(
    cd "$work"
    env -u REVIEWLOOP_LLM_BASE_URL -u REVIEWLOOP_LLM_MODEL -u REVIEWLOOP_LLM_MODEL_PATH \
        -u REVIEWLOOP_DATABASE_URL -u PYTHONPATH \
        PATH="$work/venv/bin:$PATH" REVIEWLOOP_DATA_DIR="$work/data" \
        reviewloop review --diff change.patch --no-store --format json --output report.json
    "$work/venv/bin/python" - <<'CHECK'
import json

report = json.load(open("report.json"))
rules = {(f["path"], f["rule"]) for f in report["findings"]}
assert ("app/calculator.py", "python:code-eval") in rules, f"the eval() was not reported: {report}"
# semgrep's engine came with the install (--no-deps): the JavaScript command injection is found
assert any(path == "web/run.js" for path, _ in rules), f"semgrep's engine did not run: {report}"
assert not report["not_reviewed"], report["not_reviewed"]
CHECK
)
# the virtualenv is what the review-only image adds to its base: its size is the image's estimate
echo "check_plain_install: a plain install reviews a diff" \
    "(install $((installed - started)) s, review $((SECONDS - installed)) s," \
    "virtualenv $(du -sm "$work/venv" | cut -f1) MB)"
