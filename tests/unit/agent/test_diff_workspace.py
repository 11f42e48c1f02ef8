"""The workspace of a bare diff: the new side at its real line numbers, and nothing invented."""

from __future__ import annotations

from agent.diff import parse_unified_diff
from agent.workspaces.diff import DiffWorkspace

DIFF = (
    "diff --git a/app.py b/app.py\n"
    "index 1..2 100644\n"
    "--- a/app.py\n"
    "+++ b/app.py\n"
    "@@ -2,3 +2,4 @@ import os\n"
    " \n"
    " def run(cmd):\n"
    "+    os.system(cmd)\n"
    "     return cmd\n"
    "diff --git a/gone.py b/gone.py\n"
    "deleted file mode 100644\n"
    "--- a/gone.py\n"
    "+++ /dev/null\n"
    "@@ -1 +0,0 @@\n"
    "-x = 1\n"
    "diff --git a/old.py b/moved.py\n"
    "similarity index 100%\n"
    "rename from old.py\n"
    "rename to moved.py\n"
    "diff --git a/logo.png b/logo.png\n"
    "index 3..4 100644\n"
    "Binary files a/logo.png and b/logo.png differ\n"
)


def workspace() -> DiffWorkspace:
    return DiffWorkspace(parse_unified_diff(DIFF))


def test_read_file_puts_known_lines_at_their_numbers() -> None:
    # Line 1 is outside the hunk: blank, so line numbers stay exact.
    assert workspace().read_file("app.py") == "\n\ndef run(cmd):\n    os.system(cmd)\n    return cmd\n"


def test_files_without_known_text_read_as_none() -> None:
    ws = workspace()
    assert [ws.read_file(p) for p in ("gone.py", "moved.py", "logo.png", "other.py")] == [None] * 4


def test_list_paths_is_the_changed_paths_at_head() -> None:
    assert workspace().list_paths() == ["app.py", "logo.png", "moved.py"]


def test_search_sees_only_known_lines_and_takes_a_bad_regex_literally() -> None:
    ws = workspace()
    assert [(h.path, h.line, h.text) for h in ws.search(r"os\.system")] == [("app.py", 4, "    os.system(cmd)")]
    assert [h.line for h in ws.search("(cmd")] == [3, 4]
    assert [h.line for h in ws.search("^$")] == [2]  # the blank line the diff shows, not the filler
    assert ws.search("x = 1") == []  # deleted lines are not at head
    assert len(ws.search("cmd", max_hits=1)) == 1
