#!/bin/sh
# The review-only install: a virtualenv with the project and no extras (no torch, no model libraries),
# then semgrep's engine without its dependencies (its wrapper's pins conflict with ours; only the
# engine binary is used: reviewers/analyzers/semgrep_taint.py). deploy/Dockerfile's image runs this,
# and CI runs it in a fresh directory (scripts/check_plain_install.sh), so the image's install is
# checked where no Docker engine is.
#
# Usage: scripts/install_review.sh VENV SOURCE SEMGREP_REQUIREMENT     (PY=python3.12 for another Python)
set -eu
venv=$1
source=$2
semgrep=$3
"${PY:-python3}" -m venv "$venv"
"$venv/bin/pip" install ${PIP_INSTALL_FLAGS:-} --upgrade pip
"$venv/bin/pip" install ${PIP_INSTALL_FLAGS:-} "$source"
"$venv/bin/pip" install ${PIP_INSTALL_FLAGS:-} --no-deps "$semgrep"
