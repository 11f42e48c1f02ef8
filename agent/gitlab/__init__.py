"""Everything reviewloop does with GitLab, one module per part.

- `client`: the platform port over python-gitlab (reads a merge request, posts and edits notes),
  with GitLab's error mapping and retry rules.
- `models`: the GitLab objects we read and write, as plain typed values.
- `workspace`: the repository at one commit, read through the API (a `reviewers.kernel.contracts.Workspace`).
- `projects`: whether a project is on the allow-list (its id, or a path GitLab confirms).
- `review`: the worker's entry point, `review_gitlab_merge_request`: load, run the graph, publish.
- `publisher`: posting one review's results idempotently and retiring outdated threads.

The webhook bodies GitLab sends are parsed at the API layer (`api/gitlab_hooks.py`), since only
the API receives them.
"""
