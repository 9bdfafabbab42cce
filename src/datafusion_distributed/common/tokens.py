"""Where the cluster's shared token is found when none is given: the environment."""

from __future__ import annotations

import os

TOKEN_ENV = "DATAFUSION_DISTRIBUTED_TOKEN"


def token_from_env() -> str | None:
    """The token in DATAFUSION_DISTRIBUTED_TOKEN, or None when it is unset or empty."""
    return os.environ.get(TOKEN_ENV) or None
