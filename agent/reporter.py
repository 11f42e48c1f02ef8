"""Local reports of a review: a terminal table, JSON, Markdown, SARIF 2.1.0 and GitLab Code Quality.

GitLab discussions are posted by `agent.gitlab.publisher`; this module renders the same verified findings
for a terminal or a CI job. Text a reviewer or model wrote is neutralised before it is rendered in
formats a browser or GitLab shows (Markdown, Code Quality).
"""

from __future__ import annotations

import hashlib
import io
import json
from collections.abc import Sequence
from typing import Any, Literal
from urllib.parse import quote

from rich.console import Console
from rich.table import Table

from agent.diff import quote_path
from agent.sanitize import code_block, inline_code, neutralise
from agent.suggestions import suggestion_block
from agent.verdicts.track_record import folded, folded_line
from agent.verifier import VerifiedFinding
from reviewers.analyzers.ruff import STYLE_RULES
from reviewers.kernel.contracts import SEVERITY_RANK, Category, Finding, NotReviewed, Severity

ReportFormat = Literal["table", "json", "markdown", "sarif", "codequality"]
REPORT_FORMATS: tuple[ReportFormat, ...] = ("table", "json", "markdown", "sarif", "codequality")
SHOWN_VERDICTS = frozenset({"REAL", "NEEDS_HUMAN_REVIEW"})
TOOL_VERSION = "0.1.0"
# The documentation site (mkdocs.yml's site_url, pyproject's [project.urls] Documentation: a test keeps
# the three equal). SARIF viewers link the tool's name to it.
DOCS_URL = "https://reviewloop.gitlab.io/reviewloop/"
SARIF_SCHEMA_URI = "https://docs.oasis-open.org/sarif/sarif/v2.1.0/errata01/os/schemas/sarif-schema-2.1.0.json"

SARIF_LEVEL: dict[Severity, str] = {
    "info": "note",
    "low": "note",
    "medium": "warning",
    "high": "error",
    "critical": "error",
}
# GitHub code scanning ranks a security result by its rule's `security-severity`, a CVSS-like score as
# a string: over 9.0 is critical, 7.0-8.9 high, 4.0-6.9 medium, 0.1-3.9 low. Each of ours is the middle
# of its band, so a reader of the SARIF sees the same severity the thread says.
SECURITY_SEVERITY: dict[Severity, str] = {
    "info": "0.0",
    "low": "2.0",
    "medium": "5.5",
    "high": "8.0",
    "critical": "9.5",
}
# GitHub's `problem.severity` for results that are not security ones.
PROBLEM_SEVERITY: dict[Severity, str] = {
    "info": "recommendation",
    "low": "recommendation",
    "medium": "warning",
    "high": "error",
    "critical": "error",
}
CODEQUALITY_SEVERITY: dict[Severity, str] = {
    "info": "info",
    "low": "minor",
    "medium": "major",
    "high": "critical",
    "critical": "blocker",
}


# Code Climate's categories (the only ones GitLab's Code Quality report documents), by our category; a
# code-quality finding's analyzer rule can say more (a ruff style rule is Style, not Bug Risk).
CodeClimateCategory = Literal[
    "Bug Risk", "Clarity", "Compatibility", "Complexity", "Duplication", "Performance", "Security", "Style"
]
CODECLIMATE_CATEGORY: dict[Category, CodeClimateCategory] = {
    "security": "Security",
    "architecture": "Complexity",
    "code_quality": "Bug Risk",
    "test_impact": "Bug Risk",
}
# (rule prefix, category): the first that matches a finding's `rule` wins. Ruff's codes, by its families:
# (pycodestyle's E rules are left to Bug Risk: the ones selected are syntax errors and bare excepts)
# pycodestyle/isort/pyupgrade/naming say how code reads, mccabe how tangled it is, perflint how fast.
CODECLIMATE_CATEGORY_BY_RULE: tuple[tuple[str, CodeClimateCategory], ...] = (
    ("ruff:W", "Style"),
    ("ruff:I", "Style"),
    ("ruff:N", "Style"),
    ("ruff:UP", "Compatibility"),
    ("ruff:C90", "Complexity"),
    ("ruff:PERF", "Performance"),
    ("ruff:SIM", "Clarity"),
)


def codeclimate_category(finding: Finding) -> CodeClimateCategory:
    if finding.category == "security":
        return "Security"
    if finding.rule.removeprefix("ruff:") in STYLE_RULES:  # what the analyzer itself keeps as style
        return "Style"
    for prefix, category in CODECLIMATE_CATEGORY_BY_RULE:
        if finding.rule.startswith(prefix) and finding.rule[len(prefix) : len(prefix) + 1].isdigit():
            return category
    return CODECLIMATE_CATEGORY[finding.category]


def not_reviewed_in(meta: dict[str, Any]) -> list[NotReviewed]:
    """The report's `not_reviewed` entries (dicts, as stored, or models)."""
    return [NotReviewed.model_validate(n) for n in meta.get("not_reviewed", [])]


def model_gaps_in(meta: dict[str, Any]) -> list[str]:
    """The model steps that did not complete (`agent.pipeline.model_meta`), if a model was asked."""
    model = meta.get("model")
    return [str(gap) for gap in model.get("not_completed", [])] if isinstance(model, dict) else []


def artifact_uri(path: str) -> str:
    """A repository path as a SARIF `artifactLocation.uri`: a relative URI reference, every byte a
    URI may not hold percent-encoded (a path may hold spaces, newlines, `#` or `?`)."""
    return quote(path, safe="/")


def _not_reviewed_fingerprint(item: NotReviewed) -> str:
    return hashlib.sha256(f"reviewloop:not-reviewed\0{item.path}\0{item.reason}".encode()).hexdigest()[:32]


def finding_record(v: VerifiedFinding) -> dict[str, Any]:
    f = v.finding
    return {
        "path": f.path,
        "line": f.line,
        "end_line": f.end_line,
        "category": f.category,
        "severity": f.severity,
        "title": f.title,
        "body": f.body,
        "evidence": f.evidence,
        "reviewer": f.reviewer,
        "rule": f.rule,
        "cwe": f.cwe,
        "suggestion": f.suggestion.model_dump() if f.suggestion is not None else None,
        "verdict": v.verdict,
        "verdict_reason": v.reason,
        "fingerprint": f.fingerprint,
    }


def shown(verified: Sequence[VerifiedFinding], *, include_all: bool = False) -> list[VerifiedFinding]:
    """What a reader sees: REAL and NEEDS_HUMAN_REVIEW, less the findings of rules that are usually
    wrong here (counted in one line, `folded_summary`); everything with `include_all`."""
    kept = [v for v in verified if include_all or (v.verdict in SHOWN_VERDICTS and not folded(v.reason))]
    return sorted(kept, key=lambda v: (-SEVERITY_RANK[v.finding.severity], v.finding.path, v.finding.line))


def folded_summary(verified: Sequence[VerifiedFinding]) -> str | None:
    """The one counted line for the listed findings of rules usually wrong here, or None."""
    return folded_line([v.finding.rule for v in verified if v.verdict == "NEEDS_HUMAN_REVIEW" and folded(v.reason)])


def render_json(verified: Sequence[VerifiedFinding], meta: dict[str, Any]) -> str:
    not_reviewed = [n.model_dump() for n in not_reviewed_in(meta)]
    doc = {**meta, "complete": not not_reviewed, "not_reviewed": not_reviewed}
    return json.dumps({**doc, "findings": [finding_record(v) for v in verified]}, indent=2, ensure_ascii=False)


def render_table(verified: Sequence[VerifiedFinding], meta: dict[str, Any]) -> str:
    buf = io.StringIO()
    console = Console(file=buf, width=140, force_terminal=False, color_system=None)
    table = Table(title=f"reviewloop: {meta.get('title', '')}".strip(), show_lines=False)
    for col in ("severity", "category", "location", "title", "verdict"):
        table.add_column(col)
    for v in verified:
        f = v.finding
        table.add_row(f.severity, f.category, f"{f.path}:{f.line}", f.title, v.verdict)
    console.print(table)
    if not verified:
        console.print("No findings worth reporting.")
    if meta.get("folded"):
        console.print(str(meta["folded"]))
    for skipped in not_reviewed_in(meta):
        console.print(f"not analyzed in full: {quote_path(skipped.path)} ({skipped.describe()})")
    for gap in model_gaps_in(meta):
        console.print(f"model step not completed: {gap}", markup=False, highlight=False)
    return buf.getvalue()


def render_markdown(verified: Sequence[VerifiedFinding], meta: dict[str, Any]) -> str:
    lines = [f"## reviewloop review: {neutralise(str(meta.get('title', '')))}", ""]
    if meta.get("strategy_text"):
        lines += [
            "<details><summary>Strategy</summary>",
            "",
            # the model writes this text: a fence longer than any backtick run in it keeps it inert
            code_block(str(meta["strategy_text"])),
            "</details>",
            "",
        ]
    if not verified:
        lines.append("No findings worth reporting.")
    if meta.get("folded"):
        lines += [neutralise(str(meta["folded"])), ""]
    for v in verified:
        f = v.finding
        lines.append(f"### {f.severity.upper()} · {f.category} · {inline_code(f'{quote_path(f.path)}:{f.line}')}")
        lines.append(f"**{neutralise(f.title)}** ({v.verdict})")
        lines.append("")
        lines.append(neutralise(f.body))
        if f.evidence:
            lines += ["", code_block(f.evidence)]
        fix = f.suggestion
        if fix is not None and fix.start_line <= f.line <= fix.end_line:  # the block the thread carries
            lines += ["", "Suggested fix:", "", suggestion_block(fix, anchor_line=f.line)]
        lines.append("")
    for skipped in not_reviewed_in(meta):
        where = inline_code(quote_path(skipped.path, ascii_only=False))
        lines.append(f"- not analyzed in full: {where} ({neutralise(skipped.describe(), max_chars=300)})")
    for gap in model_gaps_in(meta):
        lines.append(f"- model step not completed: {neutralise(gap, max_chars=300)}")
    return "\n".join(lines) + "\n"


def _cwe_number(cwe: str) -> str:
    return cwe.split("-", 1)[1]


def sarif_fix(finding: Finding) -> dict[str, Any] | None:
    """The finding's suggestion as a SARIF `fix`: its lines, as a region without columns (whole lines,
    newlines excluded, SARIF 3.30.7), replaced by the suggested text. A suggestion that deletes lines
    leaves them empty: a region cannot say "and the newline" without the length of the file."""
    fix = finding.suggestion
    if fix is None or not fix.start_line <= finding.line <= fix.end_line:  # the block the thread carries
        return None
    return {
        "description": {"text": f"Suggested fix: {finding.title}"},
        "artifactChanges": [
            {
                "artifactLocation": {"uri": artifact_uri(finding.path)},
                "replacements": [
                    {
                        "deletedRegion": {"startLine": fix.start_line, "endLine": fix.end_line},
                        "insertedContent": {"text": fix.replacement},
                    }
                ],
            }
        ],
    }


def _sarif_rule(finding: Finding) -> dict[str, Any]:
    rule: dict[str, Any] = {
        "id": finding.rule or f"{finding.category}/generic",
        "shortDescription": {"text": finding.title},
        "defaultConfiguration": {"level": SARIF_LEVEL[finding.severity]},
        "properties": {"category": finding.category, "problem.severity": PROBLEM_SEVERITY[finding.severity]},
    }
    if finding.category == "security":
        tags = ["security"] + ([f"external/cwe/{finding.cwe.lower()}"] if finding.cwe else [])
        rule["properties"].update({"tags": tags, "security-severity": SECURITY_SEVERITY[finding.severity]})
    return rule


def _raise_rule_severity(rule: dict[str, Any], finding: Finding) -> None:
    """A rule's severity is that of its most severe result (GitHub ranks alerts by the rule's)."""
    properties = rule["properties"]
    if "security-severity" in properties and float(SECURITY_SEVERITY[finding.severity]) > float(
        properties["security-severity"]
    ):
        properties["security-severity"] = SECURITY_SEVERITY[finding.severity]
        rule["defaultConfiguration"]["level"] = SARIF_LEVEL[finding.severity]
        properties["problem.severity"] = PROBLEM_SEVERITY[finding.severity]


def render_sarif(verified: Sequence[VerifiedFinding], meta: dict[str, Any]) -> str:
    """SARIF 2.1.0; a finding's CWE is a taxon of the CWE taxonomy (`runs[].taxonomies`), referenced
    from its rule (`relationships`) and its result (`taxa`), as SARIF's own CWE examples do. Security
    rules and results carry GitHub's `security-severity`; a finding with a suggestion carries it as a
    `fix`. Kept as dicts and validated against the OASIS schema in the tests (tests/unit/agent/
    test_report_schemas.py): sarif-om's classes (last released 2019) validate nothing themselves and
    would need jschema-to-python at run time to serialise."""
    not_reviewed = not_reviewed_in(meta)
    rules: dict[str, dict[str, Any]] = {}
    taxa: dict[str, dict[str, Any]] = {}
    results = []
    for v in verified:
        f = v.finding
        rule_id = f.rule or f"{f.category}/generic"
        if rule_id in rules:
            _raise_rule_severity(rules[rule_id], f)
        rule = rules.setdefault(rule_id, _sarif_rule(f))
        result_taxa: list[dict[str, Any]] = []
        if f.cwe:
            number = _cwe_number(f.cwe)
            taxa.setdefault(
                number,
                {"id": number, "name": f.cwe, "helpUri": f"https://cwe.mitre.org/data/definitions/{number}.html"},
            )
            reference = {"id": number, "toolComponent": {"name": "CWE"}}
            relationships = rule.setdefault("relationships", [])
            if not any(r["target"]["id"] == number for r in relationships):
                relationships.append({"target": reference, "kinds": ["superset"]})
            result_taxa.append(reference)
        properties: dict[str, Any] = {"category": f.category, "verdict": v.verdict, "verdictReason": v.reason}
        if f.category == "security":
            properties["security-severity"] = SECURITY_SEVERITY[f.severity]
        fix = sarif_fix(f)
        results.append(
            {
                "ruleId": rule_id,
                "level": SARIF_LEVEL[f.severity],
                "message": {"text": f"{f.title}\n\n{f.body}"},
                "locations": [
                    {
                        "physicalLocation": {
                            "artifactLocation": {"uri": artifact_uri(f.path)},
                            "region": {"startLine": f.line, "endLine": max(f.line, f.end_line)},
                        }
                    }
                ],
                "partialFingerprints": {"reviewloop/v1": f.fingerprint},
                "properties": properties,
                **({"taxa": result_taxa} if result_taxa else {}),
                **({"fixes": [fix]} if fix is not None else {}),
            }
        )
    doc = {
        "$schema": SARIF_SCHEMA_URI,
        "version": "2.1.0",
        "runs": [
            {
                "tool": {
                    "driver": {
                        "name": "reviewloop",
                        "version": TOOL_VERSION,
                        "informationUri": DOCS_URL,
                        "rules": list(rules.values()),
                        **({"supportedTaxonomies": [{"name": "CWE"}]} if taxa else {}),
                    }
                },
                **(
                    {
                        "taxonomies": [
                            {
                                "name": "CWE",
                                "organization": "MITRE",
                                "informationUri": "https://cwe.mitre.org/",
                                "isComprehensive": False,
                                "taxa": list(taxa.values()),
                            }
                        ]
                    }
                    if taxa
                    else {}
                ),  # fmt: skip
                "results": results,
                # What was not analyzed in full is part of the result: a viewer shows these as tool
                # notifications, and `complete` lets a CI job tell a partial review from a clean one.
                "invocations": [
                    {
                        "executionSuccessful": True,
                        "toolExecutionNotifications": [
                            {
                                "descriptor": {"id": f"reviewloop/not-reviewed/{n.reason}"},
                                "level": "warning",
                                "message": {"text": f"not analyzed in full: {n.describe()}"},
                                "locations": [
                                    {"physicalLocation": {"artifactLocation": {"uri": artifact_uri(n.path)}}}
                                ],
                                "properties": {"path": n.path, "reason": n.reason, "detail": n.detail},
                            }
                            for n in not_reviewed
                        ],
                    }
                ],
                "properties": {"complete": not not_reviewed, "notReviewed": [n.model_dump() for n in not_reviewed]},
            }
        ],
    }
    return json.dumps(doc, indent=2, ensure_ascii=False)


def render_codequality(verified: Sequence[VerifiedFinding], meta: dict[str, Any]) -> str:
    """GitLab's Code Quality report: a list of Code Climate issues (the fields GitLab documents, and
    Code Climate's categories), validated against tests/schemas/gitlab-code-quality.schema.json."""
    items = [
        {
            # the CWE is ours (a validated "CWE-n"), so it goes outside the neutralised model text
            "description": (
                (f"[{v.finding.cwe}] " if v.finding.cwe else "") + neutralise(f"{v.finding.title}: {v.finding.body}")
            )[:1000],
            "check_name": v.finding.rule or v.finding.category,
            "fingerprint": v.finding.fingerprint,
            "severity": CODEQUALITY_SEVERITY[v.finding.severity],
            "categories": [codeclimate_category(v.finding)],
            "location": {
                "path": v.finding.path,
                "lines": {"begin": v.finding.line, "end": v.finding.end_line},
            },
        }
        for v in verified
    ]
    # GitLab's Code Quality report is a list of issues and nothing else: a file not analyzed in full
    # is an "info" issue on it, so the merge request widget says so where the findings are.
    items += [
        {
            "description": neutralise(f"reviewloop did not analyze this file in full: {n.describe()}")[:1000],
            "check_name": f"reviewloop:not-reviewed:{n.reason}",
            "fingerprint": _not_reviewed_fingerprint(n),
            "severity": "info",
            "categories": ["Bug Risk"],
            "location": {"path": n.path, "lines": {"begin": 1}},
        }
        for n in not_reviewed_in(meta)
    ]
    return json.dumps(items, indent=2, ensure_ascii=False)


def render_report(
    verified: Sequence[VerifiedFinding], *, fmt: ReportFormat, meta: dict[str, Any], include_all: bool = False
) -> str:
    """Render the findings a reader should see (REAL and NEEDS_HUMAN_REVIEW unless `include_all`)."""
    chosen = shown(verified, include_all=include_all)
    line = None if include_all else folded_summary(verified)
    if line is not None:
        meta = {**meta, "folded": line}
    renderers = {
        "table": render_table,
        "json": render_json,
        "markdown": render_markdown,
        "sarif": render_sarif,
        "codequality": render_codequality,
    }
    return renderers[fmt](chosen, meta)
