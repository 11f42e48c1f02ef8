"""The `reviewloop` command line. Each concern registers its commands from its own module in
`api/commands/`; heavy imports (torch, TRL) happen inside the commands that need them."""

from __future__ import annotations

import sys

# Command modules register themselves on `app` when imported.
from api.commands import dev as _dev  # noqa: F401
from api.commands import envgen as _envgen  # noqa: F401
from api.commands import failures as _failures  # noqa: F401
from api.commands import learning as _learning  # noqa: F401
from api.commands import retrain as _retrain  # noqa: F401
from api.commands import review as _review  # noqa: F401
from api.commands import rl as _rl  # noqa: F401
from api.commands import service as _service  # noqa: F401
from api.commands.app import app

USAGE_ERROR_EXIT = 2  # what every command exits with on an error the user must fix


def main() -> None:
    from pydantic import ValidationError

    from agent.service_settings import describe_settings_error

    try:
        app()
    except ValidationError as exc:
        # one line per setting, without the value pydantic would print: it may be a secret (issue 40)
        sys.stderr.write(f"reviewloop: {describe_settings_error(exc)}\n")
        sys.exit(USAGE_ERROR_EXIT)


if __name__ == "__main__":
    main()
