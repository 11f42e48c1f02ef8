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

"$PY" -m venv "$work/venv"
"$work/venv/bin/pip" install -qq "$work/src"  # -qq: errors only (the machine's pip config warns per package)
installed=$SECONDS

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
CHECK
)
echo "check_plain_install: a plain install reviews a diff" \
    "(install $((installed - started)) s, review $((SECONDS - installed)) s)"
