"""Find and read hardware profiles: `hwprofiles/<id>.yaml`, or any path to such a file."""

from __future__ import annotations

from pathlib import Path

from sim.config.errors import validate_or_raise
from sim.config.yamlio import read_yaml_mapping
from sim.errors import InputError
from sim.hardware.schema import HwProfile
from sim.paths import hwprofiles_dir


def hw_names() -> list[str]:
    """Ids of the profiles in `sim.paths.hwprofiles_dir()` (top-level `*.yaml`; file name = id)."""
    folder = hwprofiles_dir()
    return sorted(p.stem for p in folder.glob("*.yaml")) if folder.is_dir() else []


def hw_path(name_or_path: str | Path) -> Path:
    """The file a profile name or path refers to; an InputError listing the known ids otherwise."""
    text = str(name_or_path)
    if text.endswith((".yaml", ".yml")) or "/" in text:
        return Path(text)
    path = hwprofiles_dir() / f"{text}.yaml"
    if not path.is_file():
        raise InputError("unknown hardware profile", where="hardware", value=text, allowed=hw_names())
    return path


def load_hw(name_or_path: str | Path) -> HwProfile:
    """Read and validate one profile; every problem of the file becomes one InputError line."""
    path = hw_path(name_or_path)
    profile = validate_or_raise(HwProfile, read_yaml_mapping(path), file=str(path))
    if path.parent.resolve() == hwprofiles_dir().resolve() and profile.id != path.stem:
        raise InputError(
            "profile id must equal the file name",
            file=str(path),
            where="id",
            value=profile.id,
            allowed=path.stem,
        )
    return profile


def load_all_hw() -> list[HwProfile]:
    """Every profile of `hwprofiles_dir()`, sorted by id."""
    return [load_hw(name) for name in hw_names()]
