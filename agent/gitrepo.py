"""The local git platform: a repository on disk as the source of a review.

A local review reads a range of commits and the files at its head without a checkout. Only `git`
itself ever runs, always from an argument list (never a shell). Revisions are resolved to full SHAs
before any other command sees them, so a revision such as "--output=x" can never be read as an
option; and configuration that would make git start another program (external diff, textconv,
fsmonitor) is switched off per call. The code under review is never executed.
"""

from __future__ import annotations

import os
import subprocess
import threading
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from agent.diff import parse_unified_diff
from agent.workspaces.text_cache import DEFAULT_WORKSPACE_CACHE_BYTES, TextCache
from reviewers.kernel.budget import SearchBudget
from reviewers.kernel.contracts import CoverageReason, FileChange, SearchHit
from reviewers.kernel.errors import RepositoryError
from reviewers.pattern_search import PatternSearch, search_files

__all__ = ["GitRepository", "GitWorkspace", "open_repository"]

# A local git command that runs this long is stuck (a network filesystem, a huge repository): say so.
GIT_TIMEOUT_S = 60.0
# Files above this are not handed to reviewers: generated or data files, and a prompt could not hold them.
MAX_READ_BYTES = 1 << 20
# git's own heuristic: a NUL byte among the first 8000 bytes makes a file binary.
BINARY_SNIFF_BYTES = 8000
# Files read in one `git cat-file --batch` while a model's search walks its candidates in path order.
SEARCH_READ_AHEAD = 50
# Longest matched line returned by a search; a minified line would crowd out every other hit.
MAX_HIT_CHARS = 400
SYMLINK_MODE = "120000"

# Per-call settings that keep the repository's or the user's config from changing the output we parse
# or from starting programs.
_SAFE_CONFIG = (
    "-c", "core.quotePath=true",
    "-c", "core.fsmonitor=false",
    "-c", "diff.noprefix=false",
    "-c", "diff.mnemonicPrefix=false",
    "-c", "diff.relative=false",
)  # fmt: skip


def _git_env() -> dict[str, str]:
    # GIT_DIR, GIT_WORK_TREE, GIT_INDEX_FILE and friends from a surrounding hook or tool would point
    # the commands at another repository than the one we were given.
    env = {key: value for key, value in os.environ.items() if not key.startswith("GIT_")}
    env["GIT_TERMINAL_PROMPT"] = "0"
    env["GIT_OPTIONAL_LOCKS"] = "0"  # read-only work must not take the index lock
    return env


@dataclass(frozen=True, slots=True)
class _TreeEntry:
    mode: str
    kind: str  # "blob" or "commit" (a submodule)
    object_id: str
    size: int | None


class GitRepository:
    """A local git repository, read through the `git` command line. Build it with `open_repository`."""

    def __init__(self, root: Path) -> None:
        self.root = root

    def _git(self, *args: str, check: bool = True, stdin: bytes | None = None) -> subprocess.CompletedProcess[bytes]:
        command = ["git", "--no-pager", *_SAFE_CONFIG, *args]
        try:
            result = subprocess.run(
                command,
                cwd=self.root,
                env=_git_env(),
                input=stdin,
                capture_output=True,
                timeout=GIT_TIMEOUT_S,
                check=False,
            )
        except FileNotFoundError:
            raise RepositoryError("git is not installed (no 'git' on PATH)") from None
        except subprocess.TimeoutExpired:
            raise RepositoryError(f"git {args[0]} timed out after {GIT_TIMEOUT_S:.0f}s in {self.root}") from None
        if check and result.returncode != 0:
            message = result.stderr.decode("utf-8", errors="replace").strip().splitlines()
            detail = message[-1] if message else f"exit status {result.returncode}"
            raise RepositoryError(f"git {args[0]} failed in {self.root}: {detail}")
        return result

    def resolve(self, rev: str) -> str:
        """The full SHA of the commit a revision names (branch, tag, SHA, `HEAD~2`, ...)."""
        if not rev or rev.startswith("-") or "\0" in rev:
            raise RepositoryError(f"unknown revision: {rev!r}")
        result = self._git("rev-parse", "--verify", "--quiet", "--end-of-options", f"{rev}^{{commit}}", check=False)
        sha = result.stdout.decode("ascii", errors="replace").strip()
        if result.returncode != 0 or not sha:
            raise RepositoryError(f"unknown revision: {rev!r} in {self.root}{self._shallow_hint()}")
        return sha

    def _shallow_hint(self) -> str:
        """A shallow clone (CI jobs fetch one by default: GitLab's GIT_DEPTH) lacks older commits; say so."""
        probe = self._git("rev-parse", "--is-shallow-repository", check=False)
        if probe.returncode == 0 and probe.stdout.strip() == b"true":
            return (
                "; this is a shallow clone, so older commits are missing: fetch them with "
                "`git fetch --deepen=50` (or `git fetch --unshallow`), or set GIT_DEPTH: 0 in the CI job"
            )
        return ""

    def merge_base(self, base: str, head: str) -> str | None:
        """The best common ancestor of two revisions, or None when their histories are unrelated."""
        result = self._git("merge-base", self.resolve(base), self.resolve(head), check=False)
        if result.returncode == 1:
            return None
        if result.returncode != 0:
            raise RepositoryError(f"git merge-base failed in {self.root}: {result.stderr.decode(errors='replace')}")
        return result.stdout.decode("ascii").strip()

    def diff(self, base: str, head: str) -> str:
        """What `head` changes relative to `base` the way a merge request shows it: from the merge base
        of the two (so commits made on `base` after `head` branched off do not show up reversed), or
        from `base` itself when the histories are unrelated. Renames are detected (`-M`)."""
        head_sha = self.resolve(head)
        start = self.merge_base(base, head_sha) or self.resolve(base)
        flags = ("-M", "--no-color", "--no-ext-diff", "--no-textconv", "--src-prefix=a/", "--dst-prefix=b/")
        result = self._git("diff", *flags, start, head_sha, "--")
        return result.stdout.decode("utf-8", errors="replace")

    def changed_paths(self, base: str, head: str) -> list[str]:
        """The paths `diff` shows as present at head (added, changed, renamed to), in its order."""
        head_sha = self.resolve(head)
        start = self.merge_base(base, head_sha) or self.resolve(base)
        flags = ("-M", "--no-ext-diff", "--name-only", "--diff-filter=d", "-z")
        out = self._git("diff", *flags, start, head_sha, "--").stdout
        return [p.decode("utf-8", errors="replace") for p in out.split(b"\0") if p]

    def diff_files(self, base: str, head: str) -> list[FileChange]:
        """`diff` parsed."""
        return parse_unified_diff(self.diff(base, head))

    def workspace(self, head: str, *, cache_bytes: int = DEFAULT_WORKSPACE_CACHE_BYTES) -> GitWorkspace:
        """Read-only access to the files at a commit."""
        return GitWorkspace(self, self.resolve(head), cache_bytes=cache_bytes)


def open_repository(path: str | os.PathLike[str]) -> GitRepository:
    """The repository at or above `path` (its top level, or the git directory of a bare repository)."""
    where = Path(path).expanduser()
    if not where.is_dir():
        raise RepositoryError(f"not a git repository: {where}")
    probe = GitRepository(where)
    # Run from the top level: `git grep` would otherwise search only the subdirectory we were given.
    # A bare repository has no top level; its git directory serves.
    for query in ("--show-toplevel", "--absolute-git-dir"):
        result = probe._git("rev-parse", query, check=False)
        found = result.stdout.decode("utf-8", errors="surrogateescape").strip()
        if result.returncode == 0 and found:
            return GitRepository(Path(found))
    raise RepositoryError(f"not a git repository: {where}")


def _text_of(data: bytes) -> str | None:
    """A blob's text (bytes that are not UTF-8 replaced), or None when it is binary."""
    return None if b"\0" in data[:BINARY_SNIFF_BYTES] else data.decode("utf-8", errors="replace")


class GitWorkspace:
    """The files of one commit, read with `git ls-tree`, `git cat-file` and `git grep`. Implements
    `reviewers.kernel.contracts.Workspace`; reads are cached, and it is safe to share between threads."""

    def __init__(self, repo: GitRepository, head_sha: str, *, cache_bytes: int = DEFAULT_WORKSPACE_CACHE_BYTES) -> None:
        self.repo = repo
        self.head_sha = head_sha
        self._lock = threading.Lock()
        self._tree: dict[str, _TreeEntry] | None = None
        self.cache = TextCache(cache_bytes)  # bounded: see agent.workspaces.text_cache

    def _entries(self) -> dict[str, _TreeEntry]:
        with self._lock:
            if self._tree is None:
                out = self.repo._git("ls-tree", "-r", "-l", "-z", "--full-tree", self.head_sha).stdout
                tree: dict[str, _TreeEntry] = {}
                for record in out.split(b"\0"):
                    if not record:
                        continue
                    meta, _, raw_path = record.partition(b"\t")
                    mode, kind, object_id, size = meta.decode("ascii").split()
                    path = raw_path.decode("utf-8", errors="replace")
                    tree[path] = _TreeEntry(mode, kind, object_id, int(size) if size.isdigit() else None)
                self._tree = tree
            return self._tree

    def read_file(self, path: str) -> str | None:
        """The file's text at head (bytes that are not UTF-8 replaced); None when absent, a submodule
        or symlink, binary, or over 1 MiB."""
        cached, known = self.cache.lookup(path)
        if cached:
            return known
        entry = self._entries().get(path)
        text: str | None = None
        if entry is not None and self._entry_reason(entry) is None:
            text = _text_of(self.repo._git("cat-file", "blob", entry.object_id).stdout)
        self.cache.store(path, text)
        return text

    def read_files(self, paths: Sequence[str]) -> None:
        """Read many files into the cache in one `git cat-file --batch` (a process per file costs a
        10,000-line change of fifty files a quarter of a second); `read_file` then finds them."""
        entries = self._entries()
        wanted: list[tuple[str, _TreeEntry]] = []
        room = self.cache.max_bytes  # what the cache could keep: the batch is held in memory at once
        for path in dict.fromkeys(paths):
            entry = entries.get(path)
            if entry is None or self._entry_reason(entry) is not None:
                continue
            room -= entry.size or 0
            if room < 0:
                break
            wanted.append((path, entry))
        if len(wanted) < 2:
            return
        ids = b"".join(entry.object_id.encode("ascii") + b"\n" for _, entry in wanted)
        out = self.repo._git("cat-file", "--batch", stdin=ids).stdout
        at = 0
        for path, entry in wanted:
            header_end = out.index(b"\n", at)
            object_id, kind, size = out[at:header_end].decode("ascii").split()
            if object_id != entry.object_id or kind != "blob":
                return  # not the answer asked for: leave the rest to `read_file`
            start = header_end + 1
            self.cache.store(path, _text_of(out[start : start + int(size)]))
            at = start + int(size) + 1

    def unreadable_reason(self, path: str) -> tuple[CoverageReason, str] | None:
        entry = self._entries().get(path)
        if entry is None:
            return None
        reason = self._entry_reason(entry)
        if reason is None and self.read_file(path) is None:
            return "binary", "binary content (a NUL byte near the start)"
        return reason

    @staticmethod
    def _entry_reason(entry: _TreeEntry) -> tuple[CoverageReason, str] | None:
        """Why a tree entry is not read as text, before its content is fetched."""
        if entry.kind != "blob":
            return "unavailable", "a submodule"
        if entry.mode == SYMLINK_MODE:
            return "unavailable", "a symbolic link"
        if entry.size is None or entry.size > MAX_READ_BYTES:
            return "size", f"{entry.size} bytes, over the {MAX_READ_BYTES}-byte limit for reading a file"
        return None

    def list_paths(self) -> list[str]:
        """Every file at head (submodules left out), sorted."""
        return sorted(path for path, entry in self._entries().items() if entry.kind == "blob")

    def search(self, pattern: str, *, max_hits: int = 50, budget: SearchBudget | None = None) -> list[SearchHit]:
        """Lines matching a regular expression in the text files at head, at most `max_hits`, in path order.

        The analyzers' patterns (no `budget`: escaped names, linear to match) go to `git grep -E`; a
        pattern git rejects as a regex is searched as a literal string. A pattern with the search tool's
        call `budget` is the model's, and a prompt injection can write it: git's engine has
        backreferences (`(.*)(.*)(.*)(.*)\\4\\3\\2\\1c` takes seconds on forty short lines), and
        only a clock could stop it. So it runs on RE2 like every other workspace's model searches
        (`reviewers.pattern_search`), each line charged to the budget: over the files that hold its
        required literal (`git grep -F -l`, a linear scan), or every file when it has none, in path order.
        """
        if max_hits <= 0:
            return []
        if budget is not None:
            return self._search_counted(pattern, max_hits=max_hits, budget=budget)
        hits, bad_regex = self._grep(pattern, max_hits=max_hits, mode="-E")
        if bad_regex:
            hits, failed = self._grep(pattern, max_hits=max_hits, mode="-F")
            if failed:
                raise RepositoryError(f"git grep failed for {pattern!r} in {self.repo.root}")
        return hits

    def _search_counted(self, pattern: str, *, max_hits: int, budget: SearchBudget) -> list[SearchHit]:
        search = PatternSearch(pattern, literal_on_error=True, budget=budget)
        if "\n" in search.literal:
            return []  # no line holds a newline
        # argv cannot carry a NUL byte: such a literal is looked for in every file, as one with none
        literal = search.literal if "\0" not in search.literal else ""
        paths = sorted(self._paths_containing(literal) if literal else self.list_paths())
        position = {path: index for index, path in enumerate(paths)}

        def text_of(path: str) -> str | None:
            if not self.cache.lookup(path)[0]:  # read ahead in one `git cat-file --batch`
                self.read_files(paths[position[path] : position[path] + SEARCH_READ_AHEAD])
            return self.read_file(path)

        return search_files(search, paths, text_of, max_hits=max_hits)

    def _paths_containing(self, literal: str) -> list[str]:
        """The text files at head that hold `literal` somewhere (`git grep -F -l`: no regex engine)."""
        result = self.repo._git("grep", "-l", "-I", "-z", "-F", "-e", literal, self.head_sha, "--", check=False)
        if result.returncode not in (0, 1):
            raise RepositoryError(f"git grep failed for {literal!r} in {self.repo.root}")
        prefix = self.head_sha + ":"
        return [raw.decode("utf-8", errors="replace").removeprefix(prefix) for raw in result.stdout.split(b"\0") if raw]

    def _grep(self, pattern: str, *, max_hits: int, mode: str) -> tuple[list[SearchHit], bool]:
        """Streams `git grep` and stops it once `max_hits` lines came back; the flag says git refused.
        One stuck for GIT_TIMEOUT_S is stopped (`RepositoryError`)."""
        command = ["git", "--no-pager", *_SAFE_CONFIG, "grep", "-n", "-I", "-z", "--no-color", mode]
        command += ["-e", pattern, self.head_sha, "--"]
        prefix = self.head_sha + ":"
        hits: list[SearchHit] = []
        with subprocess.Popen(
            command,
            cwd=self.repo.root,
            env=_git_env(),
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
        ) as proc:
            timed_out = threading.Event()

            def stop_stuck_grep() -> None:
                timed_out.set()
                proc.kill()

            timer = threading.Timer(GIT_TIMEOUT_S, stop_stuck_grep)
            timer.start()
            try:
                for raw in proc.stdout or ():
                    parts = raw.rstrip(b"\n").split(b"\0", 2)
                    if len(parts) != 3 or not parts[1].isdigit():
                        continue
                    path = parts[0].decode("utf-8", errors="replace").removeprefix(prefix)
                    text = parts[2].decode("utf-8", errors="replace").removesuffix("\r")[:MAX_HIT_CHARS]
                    hits.append(SearchHit(path=path, line=int(parts[1]), text=text))
                    if len(hits) >= max_hits:
                        proc.kill()
                        break
            finally:
                timer.cancel()
            returncode = proc.wait()
        if timed_out.is_set():
            raise RepositoryError(f"git grep timed out after {GIT_TIMEOUT_S:.0f}s in {self.repo.root}")
        # 0: matches, 1: none, killed by us: enough matches; 128 (or anything else): git refused.
        refused = len(hits) < max_hits and returncode not in (0, 1)
        return hits, refused
