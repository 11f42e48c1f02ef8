"""Workspaces: the repository at the head commit, as reviewers read it (`reviewers.kernel.contracts.Workspace`).

Where each implementation lives, and when a review uses it:

- `snapshot.SnapshotWorkspace`: the files at head given as text (tests, the evaluation, the replay
  environment, a recorded review with files).
- `diff.DiffWorkspace`: only a diff is known (a pasted patch, a recorded diff without files); the new
  side as far as the hunks show it.
- `agent.gitlab.workspace.GitLabWorkspace`: a GitLab merge request, files read through the API.
- `agent.gitrepo.GitWorkspace`: a local git range, files read with `git cat-file` and `git grep`.

The two platform workspaces sit with their platform because they read through its client (the
GitLab port, the `git` runner); the two over plain data sit here.
"""
