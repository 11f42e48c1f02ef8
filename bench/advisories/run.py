"""Run bench.advisories: reviewloop (no model), bandit and semgrep on every stored case.

    python -m bench.advisories --part dev                  # the development part
    python -m bench.advisories --part heldout              # the held-out part: measure it once, at the end
    python -m bench.advisories --part dev --limit 10       # a first look
    python -m bench.advisories --render results.json       # the report again, from a run's JSON

Each case (`bench.advisories.cases`) becomes a small git repository of three commits: the vulnerable
files (with their unchanged neighbours), the fix, and the revert. reviewloop reviews the revert
(base = the fix, head = the vulnerable code put back) and, as a false-alarm measure, the fix itself
(base = its parent, head = the fix), as `reviewloop review REPO --base B --head H` does, no model, no
database. bandit and semgrep's engine with the community Python rules of semgrep-rules (read from a
local git mirror, `--semgrep-rules`; the registry is not reachable from here) run on the revert's
head in the same run; their issues count only on the lines the revert changed.

A case is found by a tool when one of its findings is at the vulnerable location (within ±2 lines of
a line the fix touched, or on the same statement). reviewloop's recall is counted three ways: posted
(the verifier's REAL), listed for a person or posted, and any verdict.

Bounded and parallel-safe: every tool runs in its own process with a wall-clock limit, and a case
whose tool crashed or timed out is recorded as such. Each case's result is written atomically under
`--work`/COMMIT/PART as it finishes, so an interrupted run on the same code resumes where it stopped
(`--fresh` starts over), and a run on other code starts afresh. The
held-out part is logged in `heldout_runs.log` each time it is measured, so a second measurement shows.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections import Counter, defaultdict
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from bench.advisories.cases import (
    CASES_FILE,
    Case,
    Hunk,
    at_location,
    changed_head_lines,
    is_test_path,
    iter_parts,
    on_changed,
    parse_hunks,
    read_cases,
    statement_spans,
)

HERE = Path(__file__).parent
HELDOUT_LOG = HERE / "heldout_runs.log"
DEFAULT_WORK = HERE / ".runs"
DEFAULT_RULES = Path("/work/.mirror/semgrep+semgrep-rules/repo")
REVIEW_TIMEOUT_S = 300.0  # both reviews of one case
TOOL_TIMEOUT_S = 180.0
REVIEW_DEADLINE_S = 120.0  # as bench.history
BIN = Path(sys.executable).parent
SEMGREP_CORE_TIMEOUT_PER_RULE = 5


# --- one case as a git repository --------------------------------------------------------------------


def _git(repo: Path, *args: str) -> str:
    env = {**os.environ, "GIT_AUTHOR_NAME": "bench", "GIT_AUTHOR_EMAIL": "bench@example.invalid",
           "GIT_COMMITTER_NAME": "bench", "GIT_COMMITTER_EMAIL": "bench@example.invalid",
           "GIT_AUTHOR_DATE": "2000-01-01T00:00:00Z", "GIT_COMMITTER_DATE": "2000-01-01T00:00:00Z"}  # fmt: skip
    done = subprocess.run(["git", "-C", str(repo), *args], capture_output=True, check=True, env=env, timeout=60)
    return done.stdout.decode("utf-8", errors="replace")


def _write_side(root: Path, case: Case, side: str) -> None:
    for f in case.files:
        text = f.vulnerable if side == "vulnerable" else f.fixed
        target = root / f.path
        if text is None:
            if target.exists():
                target.unlink()
            continue
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(text, encoding="utf-8")


def materialize(case: Case, root: Path) -> dict[str, str]:
    """A repository at `root` with commits vulnerable → fix → revert; their shas by name."""
    _git(root, "init", "-q", "-b", "main")
    for path, text in case.context:
        target = root / path
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(text, encoding="utf-8")
    shas: dict[str, str] = {}
    for name, side, message in (
        ("vulnerable", "vulnerable", "the code before the fix"),
        ("fix", "fixed", f"fix {case.id}"),
        ("revert", "vulnerable", f'Revert "fix {case.id}"'),
    ):
        _write_side(root, case, side)
        _git(root, "add", "-A")
        _git(root, "commit", "-q", "--allow-empty", "-m", message)
        shas[name] = _git(root, "rev-parse", "HEAD").strip()
    return shas


def fix_hunks(root: Path, shas: dict[str, str], paths: Sequence[str]) -> dict[str, list[Hunk]]:
    """The fix's zero-context hunks per file (old side = the revert's head)."""
    return {p: parse_hunks(_git(root, "diff", "-U0", "--no-renames", shas["vulnerable"], shas["fix"], "--", p))
            for p in paths}  # fmt: skip


# --- the tools ---------------------------------------------------------------------------------------


@dataclass
class Hit:
    tool: str
    rule: str
    path: str
    line: int
    end_line: int
    verdict: str = ""  # reviewloop's verifier verdict
    category: str = ""
    severity: str = ""
    cwe: str = ""
    held: str = ""  # reviewloop: what held a listed finding back ("tier", "record", "")


@dataclass
class ToolRun:
    hits: list[Hit] = field(default_factory=list)
    error: str = ""  # "timeout", "crashed: ...", "not installed", ""
    seconds: float = 0.0


def run_bandit(root: Path, paths: Sequence[str], timeout_s: float = TOOL_TIMEOUT_S) -> ToolRun:
    exe = shutil.which("bandit", path=str(BIN)) or shutil.which("bandit")
    if exe is None:
        return ToolRun(error="not installed")
    started = time.perf_counter()
    try:
        done = subprocess.run(
            [exe, "-f", "json", "-q", *paths], cwd=root, capture_output=True, timeout=timeout_s, check=False
        )
    except subprocess.TimeoutExpired:
        return ToolRun(error="timeout", seconds=time.perf_counter() - started)
    try:
        report = json.loads(done.stdout.decode("utf-8", errors="replace") or "{}")
    except json.JSONDecodeError:
        tail = done.stderr.decode("utf-8", errors="replace").strip().splitlines()[-1:]
        return ToolRun(error=f"crashed: {tail[0] if tail else done.returncode}", seconds=time.perf_counter() - started)
    hits = []
    for r in report.get("results", []):
        lines = r.get("line_range") or [r["line_number"]]
        hits.append(Hit("bandit", str(r.get("test_id")), str(r["filename"]).removeprefix("./"), min(lines), max(lines),
                        severity=str(r.get("issue_severity", "")).lower(),
                        cwe=f"CWE-{(r.get('issue_cwe') or {}).get('id', '')}"))  # fmt: skip
    errors = [e for e in report.get("errors", [])]
    return ToolRun(hits, f"errors on {len(errors)} files" if errors else "", time.perf_counter() - started)


def semgrep_rules(rules_repo: Path, cache: Path) -> tuple[Path, str] | str:
    """The community Python rules of semgrep-rules (every rule under python/ for Python), as one JSON
    file for the engine, cached under `cache`; (the file, the rules' commit), or why there are none."""
    if not (rules_repo / "HEAD").is_file():
        return f"no semgrep-rules mirror at {rules_repo}"
    import yaml

    def git(*args: str) -> str:
        return subprocess.run(["git", "--git-dir", str(rules_repo), *args], capture_output=True, check=True,
                              timeout=120).stdout.decode("utf-8", errors="replace")  # fmt: skip

    commit = git("rev-parse", "HEAD").strip()
    target = cache / f"semgrep-python-rules-{commit[:12]}.json"
    if target.is_file():
        return target, commit
    rules: list[dict[str, Any]] = []
    for path in git("ls-tree", "-r", "--name-only", "HEAD", "python").splitlines():
        if not path.endswith((".yaml", ".yml")) or ".test." in path:
            continue
        try:
            document = yaml.safe_load(git("show", f"HEAD:{path}"))
        except yaml.YAMLError:
            continue
        for rule in (document or {}).get("rules", []) if isinstance(document, dict) else []:
            if isinstance(rule, dict) and "python" in [str(x).lower() for x in rule.get("languages", [])]:
                rules.append(rule)
    cache.mkdir(parents=True, exist_ok=True)
    kept = _engine_accepts(rules, cache)
    target.write_text(json.dumps({"rules": kept}), encoding="utf-8")
    return target, commit


def _semgrep_core() -> str | None:
    from reviewers.analyzers.semgrep_taint import engine_binary

    return engine_binary()


def _engine_run(rules_file: Path, files: Sequence[tuple[str, Path]], cwd: Path, timeout_s: float) -> dict[str, Any]:
    binary = _semgrep_core()
    if binary is None:
        raise FileNotFoundError("semgrep-core")
    targets = [["CodeTarget", {"path": {"fpath": str(p), "ppath": f"/{name}"}, "analyzer": "python",
                               "products": ["sast"]}] for name, p in files]  # fmt: skip
    with tempfile.TemporaryDirectory(prefix="bench-semgrep-") as tmp:
        (Path(tmp) / "targets.json").write_text(json.dumps(["Targets", targets]), encoding="utf-8")
        done = subprocess.run(
            [binary, "-json", "-rules", str(rules_file), "-targets", str(Path(tmp) / "targets.json"), "-j", "1",
             "-timeout", str(SEMGREP_CORE_TIMEOUT_PER_RULE), "-timeout_threshold", "3", "-max_memory", "2000"],
            cwd=cwd, capture_output=True, timeout=timeout_s, check=False,
        )  # fmt: skip
    out = done.stdout.decode("utf-8", errors="replace")
    out = out[out.find("{") :] if "{" in out else ""  # the engine prints progress dots before its report
    if not out.strip():
        tail = done.stderr.decode("utf-8", errors="replace").strip().splitlines()[-1:]
        raise RuntimeError(tail[0] if tail else f"exit {done.returncode}")
    result: dict[str, Any] = json.loads(out)
    return result


def _engine_accepts(rules: list[dict[str, Any]], cache: Path) -> list[dict[str, Any]]:
    """The rules the engine takes: one trial run over an empty file, and each rule it names as
    refused is left out (repeated until none is)."""
    probe = cache / "probe.py"
    probe.write_text("x = 1\n", encoding="utf-8")
    kept = list(rules)
    for _ in range(20):
        trial = cache / "trial-rules.json"
        trial.write_text(json.dumps({"rules": kept}), encoding="utf-8")
        try:
            report = _engine_run(trial, [("probe.py", probe)], cache, 300)
        except (RuntimeError, json.JSONDecodeError, subprocess.TimeoutExpired) as exc:
            print(f"[advisories] semgrep rules: the engine refused the set ({exc}); bisecting", file=sys.stderr)
            kept = _bisect(kept, cache, probe)
            break
        refused = {e.get("rule_id") for e in report.get("errors", []) if e.get("rule_id")}
        if not refused:
            break
        kept = [r for r in kept if r.get("id") not in refused]
    return kept


def _bisect(rules: list[dict[str, Any]], cache: Path, probe: Path) -> list[dict[str, Any]]:
    def works(subset: list[dict[str, Any]]) -> bool:
        trial = cache / "trial-rules.json"
        trial.write_text(json.dumps({"rules": subset}), encoding="utf-8")
        try:
            report = _engine_run(trial, [("probe.py", probe)], cache, 300)
        except (RuntimeError, json.JSONDecodeError, subprocess.TimeoutExpired):
            return False
        return not any(e.get("rule_id") for e in report.get("errors", []))

    if works(rules):
        return rules
    if len(rules) == 1:
        return []
    half = len(rules) // 2
    return _bisect(rules[:half], cache, probe) + _bisect(rules[half:], cache, probe)


def run_semgrep(
    root: Path, paths: Sequence[str], rules_file: Path | None, timeout_s: float = TOOL_TIMEOUT_S
) -> ToolRun:
    if rules_file is None:
        return ToolRun(error="no rules")
    started = time.perf_counter()
    try:
        report = _engine_run(rules_file, [(p, root / p) for p in paths], root, timeout_s)
    except subprocess.TimeoutExpired:
        return ToolRun(error="timeout", seconds=time.perf_counter() - started)
    except FileNotFoundError:
        return ToolRun(error="not installed")
    except (RuntimeError, json.JSONDecodeError) as exc:
        return ToolRun(error=f"crashed: {exc}"[:200], seconds=time.perf_counter() - started)
    hits = []
    for r in report.get("results", []):
        path = str(r.get("path", ""))
        for p in paths:
            if path == str(root / p) or path.endswith("/" + p) or path == p:
                path = p
                break
        hits.append(Hit("semgrep", str(r.get("check_id", "")).rsplit(".", 1)[-1], path,
                        int(r["start"]["line"]), int(r["end"]["line"])))  # fmt: skip
    unread = [e for e in report.get("errors", []) if not e.get("rule_id")]
    return ToolRun(hits, f"errors on {len(unread)} files" if unread else "", time.perf_counter() - started)


class ReviewServer:
    """One long-lived child process (`--review-server`) that reviews case after case: the review
    runtime is imported once, not once per case. A case it does not answer within its limit, or
    that kills it, is recorded as such and the child is started afresh for the next case."""

    def __init__(self, log: Path | None = None) -> None:
        self.log = log
        self.proc: subprocess.Popen[bytes] | None = None

    def _start(self) -> subprocess.Popen[bytes]:
        if self.proc is None or self.proc.poll() is not None:
            stderr = self.log.open("ab") if self.log else subprocess.DEVNULL
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "bench.advisories.run", "--review-server"],
                stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=stderr, cwd=HERE.parents[1],
            )  # fmt: skip
        return self.proc

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()
        self.proc = None

    def ask(self, request: dict[str, str], timeout_s: float) -> dict[str, Any] | str:
        """The child's answer, or why there is none ("timeout", "crashed: ...")."""
        import select

        proc = self._start()
        assert proc.stdin is not None and proc.stdout is not None
        try:
            proc.stdin.write((json.dumps(request) + "\n").encode())
            proc.stdin.flush()
        except OSError as exc:
            self.stop()
            return f"crashed: {exc}"
        deadline = time.monotonic() + timeout_s
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                self.stop()
                return "timeout"
            ready, _, _ = select.select([proc.stdout], [], [], min(left, 5.0))
            if ready:
                line = proc.stdout.readline()
                if not line:
                    code = proc.wait()
                    self.stop()
                    return f"crashed: exit {code}"
                try:
                    answer = json.loads(line)
                except json.JSONDecodeError:
                    continue  # something else the child printed
                if isinstance(answer, dict) and "revert" in answer:
                    return answer


def run_reviewloop(
    root: Path, shas: dict[str, str], timeout_s: float = REVIEW_TIMEOUT_S, server: ReviewServer | None = None
) -> dict[str, ToolRun]:
    """Both reviews of one case in a child process, bounded by `timeout_s`."""
    started = time.perf_counter()
    own = server is None
    server = server or ReviewServer()
    try:
        request = {"root": str(root), "fix": shas["fix"], "revert": shas["revert"], "vulnerable": shas["vulnerable"]}
        answer = server.ask(request, timeout_s)
    finally:
        if own:
            server.stop()
    if isinstance(answer, str):
        failed = ToolRun(error=answer[:300], seconds=time.perf_counter() - started)
        return {"revert": failed, "fix": failed}
    return {
        direction: ToolRun(
            [Hit(**h) for h in answer[direction]["hits"]], answer[direction]["error"], answer[direction]["seconds"]
        )  # fmt: skip
        for direction in ("revert", "fix")
    }


def review_server() -> None:
    """In the child: one JSON request a line on stdin, one JSON answer a line on stdout."""
    out = sys.stdout
    sys.stdout = sys.stderr  # whatever the review prints stays out of the answers
    for line in sys.stdin:
        request = json.loads(line)
        try:
            answer = review_worker(request["root"], request["fix"], request["revert"], request["vulnerable"])
        except Exception as exc:  # noqa: BLE001 - the parent records it as this case's crash
            failed = {"hits": [], "error": f"crashed: {type(exc).__name__}: {exc}"[:300], "seconds": 0.0}
            answer = {"revert": failed, "fix": failed}
        out.write(json.dumps(answer) + "\n")
        out.flush()


def review_worker(root: str, fix: str, revert: str, vulnerable: str) -> dict[str, Any]:
    """In the child: the revert (fix → revert) and the fix (vulnerable → fix) reviewed as
    `reviewloop review ROOT --base B --head H` does, no model, no database."""
    from agent.context import ReviewRequest
    from agent.pipeline import run_review
    from agent.runtime import Runtime
    from bench.history import held_back_by
    from reviewers.kernel.errors import ReviewloopError

    answer: dict[str, Any] = {}
    for direction, base, head in (("revert", fix, revert), ("fix", vulnerable, fix)):
        started = time.perf_counter()
        hits: list[dict[str, Any]] = []
        error = ""
        try:
            runtime = Runtime(pool=None, llm=None, review_deadline_s=REVIEW_DEADLINE_S)
            request = ReviewRequest(source="local", title="", repo_path=root, base=base, head=head)
            outcome = run_review(runtime, request, dsn=None, review_id=0)
        except ReviewloopError as exc:
            error = f"review failed: {exc}"[:300]
        else:
            for v in outcome.verified:
                f = v.finding
                held = held_back_by(v.reason) or "" if v.verdict == "NEEDS_HUMAN_REVIEW" else ""
                hits.append(Hit("reviewloop", f.rule, f.path, f.line, f.end_line, v.verdict, f.category,
                                f.severity, f.cwe or "", held).__dict__)  # fmt: skip
        answer[direction] = {"hits": hits, "error": error, "seconds": time.perf_counter() - started}
    return answer


# --- one case ----------------------------------------------------------------------------------------


@dataclass
class CaseResult:
    id: str
    project: str
    part: str
    family: str
    shape: str
    found: dict[str, bool] = field(default_factory=dict)  # "reviewloop-posted", "bandit", ...
    errors: dict[str, str] = field(default_factory=dict)  # tool → what went wrong
    on_changed: dict[str, int] = field(default_factory=dict)  # tool → its findings on changed lines
    fix_security_posted: int = 0  # reviewloop's security threads posted on the fix direction
    fix_posted: int = 0
    matched: list[dict[str, Any]] = field(default_factory=list)  # the findings at the location
    seconds: float = 0.0
    tool_seconds: dict[str, float] = field(default_factory=dict)


def score(case: Case, hunks: dict[str, list[Hunk]], runs: dict[str, ToolRun], fix_run: ToolRun) -> CaseResult:
    result = CaseResult(case.id, case.project, case.part, case.family, case.shape)
    heads = {f.path: f.vulnerable for f in case.files if f.vulnerable is not None}
    spans = {p: statement_spans(t) for p, t in heads.items()}
    changed = {p: changed_head_lines(h) for p, h in hunks.items()}

    def located(hit: Hit) -> bool:
        lines = case.vulnerable.get(hit.path)
        return bool(lines) and at_location(hit.line, hit.end_line, lines or [], spans.get(hit.path, []))

    for tool, run in runs.items():
        result.tool_seconds[tool] = round(run.seconds, 2)
        if run.error:
            result.errors[tool] = run.error
        near_change = [h for h in run.hits if on_changed(h.line - 2, h.end_line + 2, changed.get(h.path, set()))]
        result.on_changed[tool] = len(near_change)
        at = [h for h in near_change if located(h)]
        if tool == "reviewloop":
            result.found["reviewloop-any"] = bool(at)
            result.found["reviewloop-listed"] = any(h.verdict in ("REAL", "NEEDS_HUMAN_REVIEW") for h in at)
            result.found["reviewloop-posted"] = any(h.verdict == "REAL" for h in at)
        else:
            result.found[tool] = bool(at)
        result.matched.extend(h.__dict__ for h in at)
    if fix_run.error:
        result.errors["reviewloop-fix"] = fix_run.error
    result.fix_posted = sum(h.verdict == "REAL" for h in fix_run.hits)
    result.fix_security_posted = sum(h.verdict == "REAL" and h.category == "security" for h in fix_run.hits)
    return result


def run_case(
    case: Case,
    rules_file: Path | None,
    review_timeout_s: float,
    server: ReviewServer | None = None,
    *,
    baselines: bool = True,
) -> CaseResult:
    started = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="bench-advisory-") as tmp:
        root = Path(tmp)
        shas = materialize(case, root)
        paths = [f.path for f in case.files if f.vulnerable is not None and f.fixed != f.vulnerable]
        hunks = fix_hunks(root, shas, paths)
        scanned = [p for p in paths if not is_test_path(p)] or paths
        _git(root, "checkout", "-q", shas["revert"])
        runs = (
            {"bandit": run_bandit(root, scanned), "semgrep": run_semgrep(root, scanned, rules_file)}
            if baselines
            else {}
        )
        reviews = run_reviewloop(root, shas, review_timeout_s, server)
        runs["reviewloop"] = reviews["revert"]
        result = score(case, hunks, runs, reviews["fix"])
    result.seconds = time.perf_counter() - started
    return result


# --- the run -----------------------------------------------------------------------------------------


def _save(path: Path, result: CaseResult) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(f".{os.getpid()}.tmp")
    tmp.write_text(json.dumps(result.__dict__, sort_keys=True), encoding="utf-8")
    tmp.replace(path)  # atomic: two runs on one folder never leave half a file


def run(
    cases: Sequence[Case], work: Path, rules_file: Path | None, *, jobs: int = 1, fresh: bool = False,
    review_timeout_s: float = REVIEW_TIMEOUT_S, baselines: bool = True,
) -> list[CaseResult]:  # fmt: skip
    results: dict[str, CaseResult] = {}
    todo: list[Case] = []
    for case in cases:
        saved = work / f"{case.id}.json"
        if saved.is_file() and not fresh:
            results[case.id] = CaseResult(**json.loads(saved.read_text(encoding="utf-8")))
        else:
            todo.append(case)

    import threading

    local = threading.local()
    servers: list[ReviewServer] = []

    def one(case: Case) -> CaseResult:
        if not hasattr(local, "server"):
            local.server = ReviewServer(work / "review-server.log")
            servers.append(local.server)
        try:
            done = run_case(case, rules_file, review_timeout_s, local.server, baselines=baselines)
        except Exception as exc:  # noqa: BLE001 - a case that breaks the harness is recorded, not lost
            done = CaseResult(case.id, case.project, case.part, case.family, case.shape,
                              errors={"harness": f"{type(exc).__name__}: {exc}"[:300]})  # fmt: skip
        _save(work / f"{case.id}.json", done)
        flags = " ".join(k for k, v in done.found.items() if v) or "-"
        print(f"[advisories] {case.id:20} {case.project:28} {done.seconds:6.1f} s  {flags}"
              f"{'  ' + str(done.errors) if done.errors else ''}", file=sys.stderr, flush=True)  # fmt: skip
        return done

    work.mkdir(parents=True, exist_ok=True)
    try:
        with ThreadPoolExecutor(max_workers=max(jobs, 1)) as pool:
            for done in pool.map(one, todo):
                results[done.id] = done
    finally:
        for server in servers:
            server.stop()
    return [results[c.id] for c in cases if c.id in results]


# --- the report (pure) -------------------------------------------------------------------------------

TOOLS = ("reviewloop-posted", "reviewloop-listed", "reviewloop-any", "bandit", "semgrep")
HEADINGS = {"reviewloop-posted": "reviewloop posted", "reviewloop-listed": "listed or posted",
            "reviewloop-any": "any verdict", "bandit": "bandit", "semgrep": "semgrep"}  # fmt: skip


def rescored(result: CaseResult, *, security_only: bool) -> CaseResult:
    """The case's reviewloop flags from its findings at the location, counting only security findings
    when `security_only` (bench.advisories: a finding of another kind at a vulnerable line, an unused
    import or a weakened test, did not find the vulnerability)."""
    mine = [
        m for m in result.matched
        if m.get("tool") == "reviewloop" and (not security_only or m.get("category") == "security")
    ]  # fmt: skip
    found = dict(result.found)
    if "reviewloop-any" in found:
        found["reviewloop-any"] = bool(mine)
        found["reviewloop-listed"] = any(m.get("verdict") in ("REAL", "NEEDS_HUMAN_REVIEW") for m in mine)
        found["reviewloop-posted"] = any(m.get("verdict") == "REAL" for m in mine)
    return CaseResult(**{**result.__dict__, "found": found})


def summarize(results: Sequence[CaseResult], *, security_only: bool = True) -> dict[str, Any]:
    results = [rescored(r, security_only=security_only) for r in results]
    n = len(results)
    tools = [t for t in TOOLS if any(t in r.found for r in results)] or list(TOOLS[:3])

    def rate(rows: Sequence[CaseResult], key: str) -> dict[str, Any]:
        hit = sum(r.found.get(key, False) for r in rows)
        return {"found": hit, "of": len(rows), "share": round(hit / len(rows), 3) if rows else None}

    def table(attr: str) -> dict[str, Any]:
        groups: dict[str, list[CaseResult]] = defaultdict(list)
        for r in results:
            groups[getattr(r, attr)].append(r)
        return {g: {t: rate(rows, t) for t in tools} for g, rows in sorted(groups.items(), key=lambda x: -len(x[1]))}

    errors: Counter[str] = Counter()
    for r in results:
        for tool, why in r.errors.items():
            errors[f"{tool}: {why.split(':')[0]}"] += 1
    return {
        "cases": n,
        "projects": len({r.project for r in results}),
        "tools": tools,
        "recall": {t: rate(results, t) for t in tools},
        "by_family": table("family"),
        "by_shape": table("shape"),
        "fix_direction": {
            "cases_with_security_thread": sum(r.fix_security_posted > 0 for r in results),
            "cases_with_thread": sum(r.fix_posted > 0 for r in results),
            "security_threads": sum(r.fix_security_posted for r in results),
            "threads": sum(r.fix_posted for r in results),
            "share_of_cases": round(sum(r.fix_security_posted > 0 for r in results) / n, 3) if n else None,
        },
        "on_changed_lines": {
            t: sum(r.on_changed.get(t, 0) for r in results)
            for t in ("reviewloop", "bandit", "semgrep")
            if any(t in r.on_changed for r in results)
        },
        "errors": dict(errors),
        "seconds": round(sum(r.seconds for r in results), 1),
    }


def _pct(cell: dict[str, Any]) -> str:
    return f"{cell['found']}/{cell['of']} ({100 * cell['share']:.0f} %)" if cell["of"] else "-"


def render(summary: dict[str, Any], *, title: str) -> str:
    tools = summary.get("tools", TOOLS)
    out = [f"### {title}", "",
           f"{summary['cases']} cases from {summary['projects']} projects.", "",
           "| | " + " | ".join(HEADINGS[t] for t in tools) + " |", "|---|" + "---|" * len(tools),
           "| all | " + " | ".join(_pct(summary["recall"][t]) for t in tools) + " |"]  # fmt: skip
    for name, key in (("shape", "by_shape"), ("family", "by_family")):
        for group, cells in summary[key].items():
            out.append(f"| {name} {group} | " + " | ".join(_pct(cells[t]) for t in tools) + " |")
    fx = summary["fix_direction"]
    out += ["",
            f"Fix direction (the original fix reviewed): {fx['cases_with_security_thread']} of {summary['cases']} "
            f"cases ({100 * (fx['share_of_cases'] or 0):.0f} %) got a posted security thread "
            f"({fx['security_threads']} security threads); {fx.get('cases_with_thread', '?')} cases got a posted "
            f"thread of any kind ({fx['threads']} threads in all).",
            f"Findings near changed lines: {summary['on_changed_lines']}. Tool errors (cases): "
            f"{summary['errors'] or 'none'}. Time: {summary['seconds']:.0f} s."]  # fmt: skip
    return "\n".join(out) + "\n"


def main(
    argv: list[str] | None = None,
    *,
    bench: str = "advisories",
    cases_file: Path = CASES_FILE,
    heldout_log: Path = HELDOUT_LOG,
    work: Path = DEFAULT_WORK,
    baselines: bool = True,
    security_only: bool = True,
) -> int:
    """`bench`, `cases_file`, `heldout_log`, `work`, `baselines`, `security_only` (count only
    reviewloop's security findings as finding the case): what bench.bugs changes."""
    parser = argparse.ArgumentParser(prog=f"python -m bench.{bench}", description=__doc__.split("\n")[0])
    parser.add_argument("--part", choices=("dev", "heldout", "all"), default="dev")
    parser.add_argument("--cases", type=Path, default=cases_file)
    parser.add_argument("--work", type=Path, default=work, help="per-case results (resumable)")
    parser.add_argument("--baselines", action=argparse.BooleanOptionalAction, default=baselines,
                        help="run bandit and semgrep beside reviewloop")  # fmt: skip
    parser.add_argument("--semgrep-rules", type=Path, default=DEFAULT_RULES, help="a semgrep-rules git mirror")
    parser.add_argument("--jobs", type=int, default=1)
    parser.add_argument("--limit", type=int, default=0, help="only the first N cases of the part")
    parser.add_argument("--only", action="append", default=[], help="only this case id (repeatable)")
    parser.add_argument("--fresh", action="store_true", help="ignore saved per-case results")
    parser.add_argument("--review-timeout", type=float, default=REVIEW_TIMEOUT_S)
    parser.add_argument("--json", type=Path, help="write the summary and per-case results here")
    parser.add_argument("--render", type=Path, help="print the report of a --json file and stop")
    parser.add_argument("--review-worker", nargs=4, metavar=("ROOT", "FIX", "REVERT", "VULNERABLE"),
                        help=argparse.SUPPRESS)  # fmt: skip
    parser.add_argument("--review-server", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.review_worker:
        print(json.dumps(review_worker(*args.review_worker)))
        return 0
    if args.review_server:
        review_server()
        return 0
    if args.render:
        data = json.loads(args.render.read_text(encoding="utf-8"))
        results = [CaseResult(**c) for c in data["cases"]]
        sys.stdout.write(render(summarize(results, security_only=security_only), title=data.get("title", "")))
        return 0
    if not args.cases.is_file():
        print(f"[{bench}] no cases at {args.cases}: build them with python -m bench.{bench}.build",
              file=sys.stderr)  # fmt: skip
        return 2
    cases = list(iter_parts(read_cases(args.cases), args.part))
    if args.only:
        cases = [c for c in cases if c.id in set(args.only)]
    if args.limit:
        cases = cases[: args.limit]
    rules = semgrep_rules(args.semgrep_rules, args.work / "cache") if args.baselines else "not asked"
    rules_file, rules_commit = (None, rules) if isinstance(rules, str) else rules
    if rules_file is None and args.baselines:
        print(f"[advisories] semgrep not run: {rules_commit}", file=sys.stderr)
    started = datetime.now(UTC)
    code = _code_commit()
    if args.part == "heldout" and not args.only and not args.limit:
        earlier = heldout_log.read_text(encoding="utf-8").splitlines() if heldout_log.is_file() else []
        if earlier:
            print(f"[{bench}] the held-out part was measured {len(earlier)} time(s) before: {earlier[-1]}",
                  file=sys.stderr)  # fmt: skip
        with heldout_log.open("a", encoding="utf-8") as log:
            log.write(f"{started:%Y-%m-%dT%H:%M:%SZ} code {code} cases {len(cases)} (measurement {len(earlier) + 1})\n")
    # per-case results are kept per code commit: a run on other code never reuses them
    results = run(cases, args.work / code / args.part, rules_file, jobs=args.jobs, fresh=args.fresh,
                  review_timeout_s=args.review_timeout, baselines=args.baselines)  # fmt: skip
    summary = summarize(results, security_only=security_only)
    title = f"bench.{bench}, {args.part} part, code {code}, {started:%Y-%m-%d}"
    sys.stdout.write(render(summary, title=title))
    if args.json:
        data = {"title": title, "part": args.part, "code_commit": code, "started": f"{started:%Y-%m-%dT%H:%M:%SZ}",
                "semgrep_rules_commit": rules_commit if rules_file else None, "summary": summary,
                "cases": [r.__dict__ for r in results]}  # fmt: skip
        args.json.write_text(json.dumps(data, indent=1, sort_keys=True) + "\n", encoding="utf-8")
    return 0


def _code_commit() -> str:
    """The short commit of the code measured, with "-dirty" when the work tree has changes."""
    try:
        commit = subprocess.run(["git", "-C", str(HERE), "rev-parse", "--short", "HEAD"], capture_output=True,
                                check=True, timeout=30).stdout.decode().strip()  # fmt: skip
        status = subprocess.run(["git", "-C", str(HERE), "status", "--porcelain", "--untracked-files=no"],
                                capture_output=True, check=True, timeout=30).stdout.strip()  # fmt: skip
    except (subprocess.CalledProcessError, OSError, subprocess.TimeoutExpired):
        return "unknown"
    return f"{commit}-dirty" if status else commit


if __name__ == "__main__":
    sys.exit(main())
