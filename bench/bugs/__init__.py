"""bench.bugs: BugsInPy bug fixes reverted as merge requests (build.py; run with bench.advisories.run)."""
