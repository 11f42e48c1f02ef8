"""bench.advisories: published Python security fixes reverted as merge requests (see cases.py, build.py, run.py)."""
