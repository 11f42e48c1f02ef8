"""Verifiable merge-request environments synthesised from real released Python code (ASTRA-style).

`sources` finds packages, `edits` makes benign changes, `plants` adds labeled defects and decoys,
`profile` is the team that votes, `build` puts merge requests together as replay cases that RL, the
gate and `reviewloop eval-model` read like any other replay set.
"""
