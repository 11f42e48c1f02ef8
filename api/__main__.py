"""`python -m api …` runs the `reviewloop` command line (what `accelerate launch -m api train rl …` starts
in each process)."""

from api.cli import main

main()
