"""Where the project's data folders are: next to the package in a checkout (`pip install -e .`).
`SIM_HOME` overrides the project root, `SIM_SHARED` the shared fact base and public traces."""

from __future__ import annotations

import os
from pathlib import Path


def project_root() -> Path:
    env = os.environ.get("SIM_HOME")
    return Path(env) if env else Path(__file__).resolve().parent.parent


def hwprofiles_dir() -> Path:
    return project_root() / "hwprofiles"


def shared_dir() -> Path:
    env = os.environ.get("SIM_SHARED")
    return Path(env) if env else project_root().parent / "shared"


def public_traces_dir() -> Path:
    return shared_dir() / "traces" / "public"
