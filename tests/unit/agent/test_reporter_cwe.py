"""Every security finding carries its CWE in the JSON, SARIF 2.1.0 and Code Quality reports (issue 22)."""

from __future__ import annotations

import json

from agent.reporter import render_report
from agent.verifier import VerifiedFinding
from reviewers.analyzers.python_security import python_security_issues
from reviewers.reviewer import findings_from_issues
from tests.unit.reviewers.test_reviewer_analyzers import added_file

VIEW = (
    "import sqlite3\nfrom flask import Flask, request, redirect\napp = Flask(__name__)\n\n\n"
    "@app.route('/a')\ndef a():\n    name = request.args['n']\n"
    "    sqlite3.connect('x').execute(f\"SELECT * FROM t WHERE n = '{name}'\")\n"
    "    return redirect(request.args['next'])\n"
)


def _verified() -> list[VerifiedFinding]:
    file = added_file("web/views.py", VIEW)
    findings = findings_from_issues("security", file, python_security_issues(file) or [])
    return [VerifiedFinding(f, "REAL", "test") for f in findings]


def test_findings_from_the_analyzer_carry_their_cwe() -> None:
    assert sorted((f.finding.rule, f.finding.cwe) for f in _verified()) == [
        ("python:open-redirect", "CWE-601"),
        ("python:sql-interpolation", "CWE-89"),
    ]


def test_json_has_the_cwe_of_each_finding() -> None:
    doc = json.loads(render_report(_verified(), fmt="json", meta={}))
    assert sorted(f["cwe"] for f in doc["findings"]) == ["CWE-601", "CWE-89"]


def test_sarif_relates_rules_and_results_to_the_cwe_taxonomy() -> None:
    doc = json.loads(render_report(_verified(), fmt="sarif", meta={}))
    run = doc["runs"][0]
    [taxonomy] = run["taxonomies"]
    assert taxonomy["name"] == "CWE"
    assert sorted(t["id"] for t in taxonomy["taxa"]) == ["601", "89"]
    assert run["tool"]["driver"]["supportedTaxonomies"] == [{"name": "CWE"}]
    for rule in run["tool"]["driver"]["rules"]:
        [relationship] = rule["relationships"]
        assert relationship["target"]["toolComponent"] == {"name": "CWE"}
    by_rule = {r["ruleId"]: r["taxa"][0]["id"] for r in run["results"]}
    assert by_rule == {"python:sql-interpolation": "89", "python:open-redirect": "601"}


def test_code_quality_names_the_cwe_in_the_description() -> None:
    items = json.loads(render_report(_verified(), fmt="codequality", meta={}))
    assert sorted(i["description"].split("]")[0] for i in items) == ["[CWE-601", "[CWE-89"]
