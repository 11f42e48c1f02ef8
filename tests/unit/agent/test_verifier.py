from agent.diff import DiffIndex, parse_unified_diff
from agent.verdicts.unchanged import code_of
from agent.verifier import VerifierInputs, calibrate, verify_findings
from agent.workspaces.snapshot import SnapshotWorkspace
from reviewers.fingerprint import make_fingerprint
from reviewers.kernel.contracts import ChatMessage, Finding
from reviewers.kernel.errors import LLMOutputError

HEAD = "import os\n\n\ndef run(cmd):\n    os.system(cmd)\n    return 1\n\n\ndef untouched():\n    return 2\n"
DIFF = """diff --git a/app.py b/app.py
--- a/app.py
+++ b/app.py
@@ -3,3 +3,4 @@ import os
 
 def run(cmd):
+    os.system(cmd)
     return 1
"""


def finding(
    line: int, evidence: str, *, category: str = "security", rule: str = "r1", reviewer: str = "security"
) -> Finding:
    return Finding(
        path="app.py",
        line=line,
        end_line=line,
        category=category,  # type: ignore[arg-type]
        severity="high",
        title="shell command",
        body="runs a shell",
        evidence=evidence,
        reviewer=reviewer,  # type: ignore[arg-type]
        rule=rule,
        fingerprint=make_fingerprint(path="app.py", category=category, rule=rule, evidence=evidence),
    )


def inputs(**kw: object) -> VerifierInputs:
    files = parse_unified_diff(DIFF)
    kw.setdefault("track_record", {})  # the held-out record has its own tests (test_track_record.py)
    kw.setdefault("posting", "all")  # and so do the posting tiers (test_posting.py)
    return VerifierInputs(workspace=SnapshotWorkspace({"app.py": HEAD}), diff_index=DiffIndex(files), **kw)  # type: ignore[arg-type]


def test_real_when_evidence_is_at_the_changed_line() -> None:
    [v] = verify_findings([finding(5, "    os.system(cmd)")], inputs())
    assert v.verdict == "REAL", v.reason


def test_evidence_missing_is_a_false_positive() -> None:
    [v] = verify_findings([finding(5, "eval(user_input)")], inputs())
    assert v.verdict == "FALSE_POSITIVE"
    assert "`eval(user_input)` is not in app.py at the head commit" in v.reason


def test_line_far_from_the_change_is_a_false_positive() -> None:
    [v] = verify_findings([finding(10, "return 2")], inputs())
    assert v.verdict == "FALSE_POSITIVE"
    assert "not in or next to the change" in v.reason


def test_duplicates_within_run_and_on_the_mr() -> None:
    a = finding(5, "os.system(cmd)")
    out = verify_findings([a, a.model_copy()], inputs())
    assert sorted(v.verdict for v in out) == ["DUPLICATE", "REAL"]
    [posted] = verify_findings([a], inputs(open_fingerprints={a.fingerprint}))
    assert posted.verdict == "DUPLICATE"


def test_rejected_before_is_a_false_positive_but_a_severe_security_finding_goes_to_a_human() -> None:
    medium = finding(5, "os.system(cmd)").model_copy(update={"severity": "medium"})
    [v] = verify_findings([medium], inputs(rejected_fingerprints={medium.fingerprint: 2}))
    assert v.verdict == "FALSE_POSITIVE"
    assert v.reason.startswith(f"2 people rejected this same finding ({medium.fingerprint}) before")
    high = finding(5, "os.system(cmd)")
    [h] = verify_findings([high], inputs(rejected_fingerprints={high.fingerprint: 1}))
    assert h.verdict == "NEEDS_HUMAN_REVIEW"
    assert h.reason.startswith("1 person rejected this same finding")
    assert "a high security finding is not dropped on votes alone" in h.reason


def test_calibration_sends_a_reviewer_several_people_mostly_rejected_to_a_human() -> None:
    a = finding(5, "os.system(cmd)")
    [v] = verify_findings([a], inputs(acceptance={("security", "security"): (1, 9, 3)}))
    assert v.verdict == "NEEDS_HUMAN_REVIEW"
    assert v.reason == "security/security findings were accepted 1 of 10 times (3 people rejected them)"
    assert calibrate(a, {("security", "security"): (8, 2, 3)}) is None
    assert calibrate(a, {("security", "security"): (0, 2, 2)}) is None  # too few votes to judge
    # one or two people's many 👎 do not lower a reviewer's standing
    assert calibrate(a, {("security", "security"): (0, 40, 2)}) is None


class DemotingJudge:
    model_name = "judge"

    def __init__(self, verdict: str | None) -> None:
        self.verdict = verdict

    def complete_json(self, messages, schema, *, purpose, json_schema=None):  # type: ignore[no-untyped-def]
        if self.verdict is None:
            raise LLMOutputError("garbage twice")
        return schema.model_validate({"verdict": self.verdict, "reason": "judged"})

    def complete_text(self, messages: list[ChatMessage], *, purpose: str, max_tokens: int = 512) -> str:
        return ""


def test_model_judgment_may_demote_but_failure_keeps_deterministic_verdict() -> None:
    a = finding(5, "os.system(cmd)")
    [demoted] = verify_findings([a], inputs(), DemotingJudge("FALSE_POSITIVE"))
    assert demoted.verdict == "NEEDS_HUMAN_REVIEW"  # an analyzer finding goes to a human, never away
    assert "disputes" in demoted.reason
    model_found = finding(5, "os.system(cmd)", rule="llm")
    [gone] = verify_findings([model_found], inputs(), DemotingJudge("FALSE_POSITIVE"))
    assert gone.verdict == "FALSE_POSITIVE"  # the model may withdraw its own kind of finding
    [kept] = verify_findings([a], inputs(), DemotingJudge(None))
    assert kept.verdict == "REAL"  # a failed judgment never loses an analyzer's finding
    assert "unavailable" in kept.reason
    [unconfirmed] = verify_findings([model_found], inputs(), DemotingJudge(None))
    assert unconfirmed.verdict == "NEEDS_HUMAN_REVIEW"  # nothing but the model vouches for its own finding
    assert unconfirmed.reason.startswith("model judgment unavailable (LLMOutputError)")
    # the model cannot promote a finding whose evidence is missing
    [fp] = verify_findings([finding(5, "not there")], inputs(), DemotingJudge("REAL"))
    assert fp.verdict == "FALSE_POSITIVE"


# --- code the merge request did not change (issue 22) ----------------------------------------------

JOB = "def run(task):\n    try:\n        task()\n    except Exception:  # pragma: no cover\n        return None\n"
JOB_COMMENT_ONLY = """diff --git a/job.py b/job.py
--- a/job.py
+++ b/job.py
@@ -1,5 +1,5 @@
 def run(task):
     try:
         task()
-    except Exception:
+    except Exception:  # pragma: no cover
         return None
"""
JOB_NEW_EXCEPT = """diff --git a/job.py b/job.py
--- a/job.py
+++ b/job.py
@@ -1,5 +1,5 @@
 def run(task):
     try:
         task()
-    except ValueError:  # pragma: no cover
+    except Exception:  # pragma: no cover
         return None
"""
JOB_MOVED = """diff --git a/legacy.py b/legacy.py
--- a/legacy.py
+++ b/legacy.py
@@ -1,7 +1,2 @@
 import os
-def run(task):
-    try:
-        task()
-    except Exception:
-        return None
 VERSION = 1
diff --git a/job.py b/job.py
new file mode 100644
--- /dev/null
+++ b/job.py
@@ -0,0 +1,5 @@
+def run(task):
+    try:
+        task()
+    except Exception:  # pragma: no cover
+        return None
"""
QUERY = (
    "def load(request, cursor):\n    query = f\"SELECT {request.args['id']}\"\n    cursor.execute(query)  # run it\n"
)
QUERY_DIFF = """diff --git a/query.py b/query.py
--- a/query.py
+++ b/query.py
@@ -1,3 +1,3 @@
 def load(request, cursor):
-    query = "SELECT 1"
-    cursor.execute(query)
+    query = f"SELECT {request.args['id']}"
+    cursor.execute(query)  # run it
"""


def finding_at(path: str, line: int, evidence: str, *, rule: str, category: str = "code_quality") -> Finding:
    return Finding(
        path=path,
        line=line,
        end_line=line,
        category=category,  # type: ignore[arg-type]
        severity="medium",
        title="finding",
        body="body",
        evidence=evidence,
        reviewer=category,  # type: ignore[arg-type]
        rule=rule,
        fingerprint=make_fingerprint(path=path, category=category, rule=rule, evidence=evidence),
    )


def inputs_for(diff: str, files: dict[str, str]) -> VerifierInputs:
    return VerifierInputs(
        workspace=SnapshotWorkspace(files),
        diff_index=DiffIndex(parse_unified_diff(diff)),
        track_record={},
        posting="all",
    )


def test_a_line_that_only_gained_a_comment_is_unchanged_code() -> None:
    blind = finding_at("job.py", 4, "    except Exception:  # pragma: no cover", rule="ruff:BLE001")
    [v] = verify_findings([blind], inputs_for(JOB_COMMENT_ONLY, {"job.py": JOB}))
    assert v.verdict == "FALSE_POSITIVE", v.reason
    assert v.reason == (
        "the code at job.py:4 is unchanged by this merge request "
        "(only a comment or indentation changed, or it moved within the file; was line 4)"
    )


def test_a_genuinely_new_except_is_kept() -> None:
    blind = finding_at("job.py", 4, "    except Exception:  # pragma: no cover", rule="ruff:BLE001")
    [v] = verify_findings([blind], inputs_for(JOB_NEW_EXCEPT, {"job.py": JOB}))
    assert v.verdict == "REAL", v.reason


def test_code_moved_verbatim_from_another_file_is_unchanged_code() -> None:
    blind = finding_at("job.py", 4, "    except Exception:  # pragma: no cover", rule="ruff:BLE001")
    [v] = verify_findings([blind], inputs_for(JOB_MOVED, {"job.py": JOB, "legacy.py": "import os\nVERSION = 1\n"}))
    assert v.verdict == "FALSE_POSITIVE", v.reason
    assert v.reason == "the code at job.py:4 is unchanged by this merge request (it moved from legacy.py:5)"


def test_a_sink_whose_neighbour_changed_is_not_unchanged_code() -> None:
    taint = finding_at(
        "query.py", 3, "    cursor.execute(query)  # run it", rule="python:sql-interpolation", category="security"
    )
    line_rule = finding_at(
        "query.py", 3, "    cursor.execute(query)  # run it", rule="bandit:B608", category="security"
    )
    verdicts = {
        v.finding.rule: v for v in verify_findings([taint, line_rule], inputs_for(QUERY_DIFF, {"query.py": QUERY}))
    }
    assert verdicts["python:sql-interpolation"].verdict == "REAL", verdicts["python:sql-interpolation"].reason
    # the line above it changed, so this line's meaning may have too: not "unchanged" for a line rule
    # either; it folds into the taint finding as before
    assert verdicts["bandit:B608"].verdict == "DUPLICATE", verdicts["bandit:B608"].reason


GENERIC_EXCEPT_ELSEWHERE = """diff --git a/job.py b/job.py
--- a/job.py
+++ b/job.py
@@ -1,10 +1,10 @@
 def load(path):
     try:
         return read(path)
-    except Exception:
+    except OSError:
         return None
 def run(task):
     try:
-        task()
-    except ValueError:
+        task(retries=3)
+    except Exception:
         return None
"""
GENERIC_JOB = (
    "def load(path):\n    try:\n        return read(path)\n    except OSError:\n        return None\n"
    "def run(task):\n    try:\n        task(retries=3)\n    except Exception:\n        return None\n"
)


def test_a_generic_line_deleted_in_one_place_and_written_anew_in_another_is_new() -> None:
    blind = finding_at("job.py", 9, "    except Exception:", rule="ruff:BLE001")
    [v] = verify_findings([blind], inputs_for(GENERIC_EXCEPT_ELSEWHERE, {"job.py": GENERIC_JOB}))
    assert v.verdict == "REAL", v.reason


def test_comments_are_dropped_only_outside_strings() -> None:
    assert code_of("    except Exception:  # pragma: no cover", path="a.py") == "except Exception :"
    assert code_of('x = "# not a comment"', path="a.py") != code_of('x = ""', path="a.py")
    assert code_of("  total += 1 // count", path="a.js") == "total += 1"
    assert code_of('  url = "http://x" // home', path="a.js") == 'url = "http://x" // home'
    assert code_of("    # only a comment", path="a.py") == ""


SINK = "def load(request, cursor):\n    query = f\"SELECT {request.args['id']}\"\n    cursor.execute(query)  # run it\n"
SINK_COMMENT_ONLY = """diff --git a/query.py b/query.py
--- a/query.py
+++ b/query.py
@@ -1,3 +1,3 @@
 def load(request, cursor):
     query = f"SELECT {request.args['id']}"
-    cursor.execute(query)
+    cursor.execute(query)  # run it
"""


def test_a_taint_finding_on_a_sink_line_that_only_gained_a_comment_is_kept() -> None:
    taint = finding_at("query.py", 3, "    cursor.execute(query)  # run it", rule="python:sql-interpolation",
                       category="security")  # fmt: skip
    line_rule = finding_at("query.py", 3, "    cursor.execute(query)  # run it", rule="ruff:S608", category="security")
    verdicts = {
        v.finding.rule: v
        for v in verify_findings([taint, line_rule], inputs_for(SINK_COMMENT_ONLY, {"query.py": SINK}))
    }
    # the flow into the sink is the analyzer's claim, judged on its own; the line rule's finding is old code
    assert verdicts["python:sql-interpolation"].verdict == "REAL", verdicts["python:sql-interpolation"].reason
    assert verdicts["ruff:S608"].verdict == "FALSE_POSITIVE", verdicts["ruff:S608"].reason


COLLECT = """def collect(item, into=[], *, limit=None):
    into.append(item)
    return into[:limit]
"""
COLLECT_DIFF = """diff --git a/collect.py b/collect.py
--- a/collect.py
+++ b/collect.py
@@ -1,3 +1,3 @@
-def collect(item, into=[]):
+def collect(item, into=[], *, limit=None):
     into.append(item)
-    return into
+    return into[:limit]
"""
COLLECT_MORE = """def collect(item, into=[], *, seen={}):
    into.append(item)
    return into
"""
COLLECT_MORE_DIFF = """diff --git a/collect.py b/collect.py
--- a/collect.py
+++ b/collect.py
@@ -1,3 +1,3 @@
-def collect(item, into=[]):
+def collect(item, into=[], *, seen={}):
     into.append(item)
     return into
"""


def test_a_ruff_complaint_the_edited_line_already_had_is_not_new() -> None:
    """The change adds a parameter to a signature whose `into=[]` default was already there: the same
    B006 in the same function before and after, so the change did not write it (as `if x == str:`
    turned into `elif x == str:` under a new branch keeps its E721)."""
    default = finding_at("collect.py", 1, "def collect(item, into=[], *, limit=None):", rule="ruff:B006")
    [v] = verify_findings([default], inputs_for(COLLECT_DIFF, {"collect.py": COLLECT}))
    assert v.verdict == "FALSE_POSITIVE", v.reason
    assert "already reported 1x in collect before this change" in v.reason


def test_a_ruff_complaint_the_change_adds_beside_an_old_one_is_kept() -> None:
    """The change adds a second mutable default (`seen={}`): one more B006 in the function than the
    base had, so every one of them is kept (which is new cannot be told)."""
    default = finding_at("collect.py", 1, "def collect(item, into=[], *, seen={}):", rule="ruff:B006")
    [v] = verify_findings([default], inputs_for(COLLECT_MORE_DIFF, {"collect.py": COLLECT_MORE}))
    assert v.verdict == "REAL", v.reason


IMPORTS = "from typing import Iterable, Iterator, Iterable\n\n\ndef first(items: Iterable[int]) -> Iterator[int]:\n    return iter(items)\n"
IMPORTS_DIFF = """diff --git a/pool.py b/pool.py
--- a/pool.py
+++ b/pool.py
@@ -1,4 +1,2 @@
-import ssl
-
-from typing import Iterable, Iterator, Iterable, List
+from typing import Iterable, Iterator, Iterable
 
"""


def test_a_ruff_message_that_names_a_line_is_the_same_complaint_when_the_line_moved() -> None:
    """The duplicate `Iterable` was already there; the change drops a name and the import above it, so
    ruff's F811 now says "from line 1" where the base said "from line 3": the same complaint."""
    twice = finding_at("pool.py", 1, "from typing import Iterable, Iterator, Iterable", rule="ruff:F811")
    [v] = verify_findings([twice], inputs_for(IMPORTS_DIFF, {"pool.py": IMPORTS}))
    assert v.verdict == "FALSE_POSITIVE", v.reason


JOBS = (
    "import subprocess\n\n\ndef run_job(target):\n    subprocess.run(f'make {target}', shell=True)\n    return 'ok'\n"
)
WEB = (
    "from flask import Flask, request\n\nfrom jobs import run_job\n\napp = Flask(__name__)\n\n\n"
    "@app.post('/run')\ndef start():\n    return run_job(request.form['target'])\n"
)
WEB_GAINED_RETURN = """diff --git a/web.py b/web.py
--- a/web.py
+++ b/web.py
@@ -8,4 +8,3 @@ app = Flask(__name__)
 @app.post('/run')
 def start():
-    run_job(request.form['target'])
-    return 'ok'
+    return run_job(request.form['target'])
"""
WEB_NEW_FLOW = """diff --git a/web.py b/web.py
--- a/web.py
+++ b/web.py
@@ -8,3 +8,3 @@ app = Flask(__name__)
 @app.post('/run')
 def start():
-    return run_job('all')
+    return run_job(request.form['target'])
"""


def test_a_flow_the_base_already_had_is_not_made_by_a_change_that_only_returns_its_result() -> None:
    shell = finding_at("web.py", 10, "    return run_job(request.form['target'])", rule="python:shell-interpolation",
                       category="security").model_copy(update={"confidence": "high"})  # fmt: skip
    files = {"web.py": WEB, "jobs.py": JOBS}
    [old] = verify_findings([shell], inputs_for(WEB_GAINED_RETURN, files))
    assert old.verdict == "FALSE_POSITIVE", old.reason
    assert "request.form" in old.reason and "before the change" in old.reason
    # the same line where the change brought the request's value to the sink: the flow is new
    [new] = verify_findings([shell], inputs_for(WEB_NEW_FLOW, files))
    assert new.verdict == "REAL", new.reason
