"""Risk signals come from what a change does, never from the words of its file names."""

from __future__ import annotations

from agent.diff import parse_unified_diff
from agent.risk import ANY_SIGNAL, SIGNALS, change_signals
from agent.strategy import rule_based_strategy


def one_file(path: str, removed: list[str], added: list[str], *, deleted: bool = False) -> str:
    header = f"diff --git a/{path} b/{path}\n" + ("deleted file mode 100644\n" if deleted else "")
    header += f"--- a/{path}\n+++ " + ("/dev/null" if deleted else f"b/{path}") + "\n"
    hunk = f"@@ -1,{len(removed) + 1} +1,{len(added) + 1} @@\n import os\n"
    return header + hunk + "".join(f"-{t}\n" for t in removed) + "".join(f"+{t}\n" for t in added)


def test_signals_follow_the_code_not_the_path() -> None:
    [quiet] = parse_unified_diff(one_file("auth/token_client.py", [], ["total = price * 2"]))
    assert change_signals(quiet) == []  # "auth", "token" and "client" in the name say nothing
    [busy] = parse_unified_diff(
        one_file(
            "util/misc.py", [], ["subprocess.run(cmd)", 'cur.execute("SELECT a FROM b")', "hmac.compare_digest(a, b)"]
        )
    )
    assert change_signals(busy) == ["shell", "sql", "crypto"]
    [sig] = parse_unified_diff(one_file("lib/api.py", ["def charge(amount):"], ["def charge(amount, currency):"]))
    assert change_signals(sig) == ["changes a public signature"]
    [gone] = parse_unified_diff(
        one_file("tests/test_pay.py", ["def test_refund():", "    assert refund(1)"], [], deleted=True)
    )
    assert "deletes tests" in change_signals(gone)


def test_the_rule_strategy_ranks_by_signals() -> None:
    diff = one_file("auth/login_views.py", [], ["x = 1", "y = 2"]) + one_file(
        "util/fetch.py", [], ["data = requests.get(url).json()", "y = 2"]
    )
    strategy = rule_based_strategy(parse_unified_diff(diff))
    assert strategy.plan[0].focus_paths[0] == "util/fetch.py"
    assert [r.path for r in strategy.risk_areas] == ["util/fetch.py"]
    assert "touches network" in strategy.risk_areas[0].why


def test_one_search_finds_a_line_with_a_signal_exactly_when_some_signal_pattern_does() -> None:
    lines = [
        "    rows = cur.execute('select name from users')", "SELECT a FROM b", "subprocess.run(cmd, shell=True)",
        "data = pickle.loads(blob)", "digest = hashlib.sha256(x)", "@login_required", "r = requests.get(url)",
        "with open(path) as f:", "total = price * 2", "# selection of items from the list", "reopen = 1",
        "AUTHORIZATION_HEADER = 'x'", "csrf_token = form.token",
    ]  # fmt: skip
    for line in lines:
        assert (ANY_SIGNAL.search(line) is not None) == any(p.search(line) for _, p in SIGNALS), line
