"""`python -m bench.review_loop`: review one synthetic 10,000-line MR over and over, until killed.

The CPU load of a busy worker, for the webhook benchmark's runs "with a review beside the API".
"""

from __future__ import annotations

from bench.pipeline import review_once
from bench.synthetic import synthetic_diff

CHANGED_LINES = 10_000
FILES = 100


def main() -> None:
    diff, files = synthetic_diff(changed_lines=CHANGED_LINES, files=FILES, seed=7)
    while True:
        review_once(diff, files)


if __name__ == "__main__":
    main()
