"""`python -m bench.bugs`: BugsInPy's bugs reverted as merge requests, reviewed as bench.advisories does.

    python -m bench.bugs --part dev|heldout [--limit N] [--json FILE]

Recall at the buggy lines (posted, listed, any verdict) and threads posted on the fix direction;
bandit and semgrep are not run unless `--baselines` (they look for security issues, not bugs).
"""

import sys
from pathlib import Path

from bench.advisories.run import main
from bench.bugs.build import CASES_FILE

HERE = Path(__file__).parent

sys.exit(
    main(
        bench="bugs",
        cases_file=CASES_FILE,
        heldout_log=HERE / "heldout_runs.log",
        work=HERE / ".runs",
        baselines=False,
        security_only=False,  # a bug is found by a finding of any kind
    )
)
