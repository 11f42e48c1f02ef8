"""`python -m bench.advisories`: see bench.advisories.run."""

import sys

from bench.advisories.run import main

sys.exit(main())
