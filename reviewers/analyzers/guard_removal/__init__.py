"""Diff-aware security: what a change takes away (see `report`)."""
