"""The `reviewloop` command line. Each concern registers its commands from its own module in
`api/commands/`; heavy imports (torch, TRL) happen inside the commands that need them."""

from __future__ import annotations

from api.commands.app import app


def main() -> None:
    app()


# Command modules register themselves on `app` when imported.
from api.commands import dev as _dev  # noqa: E402,F401
from api.commands import envgen as _envgen  # noqa: E402,F401
from api.commands import failures as _failures  # noqa: E402,F401
from api.commands import learning as _learning  # noqa: E402,F401
from api.commands import retrain as _retrain  # noqa: E402,F401
from api.commands import review as _review  # noqa: E402,F401
from api.commands import rl as _rl  # noqa: E402,F401
from api.commands import service as _service  # noqa: E402,F401

if __name__ == "__main__":
    main()
