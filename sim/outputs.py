"""Where a command's outputs go: probed before any work, written whole or not at all.

Every command that writes a folder (`sim run`, and any later command with an `--out DIR`) uses
`staged_output_dir`:

    probe = probe_output_dir(out, force=force, flag="--out")   # before any work: one clear error
    ...                                                         # validate inputs, preflight
    with staged_output_dir(probe, run_id=run_id, command="sim run") as stage:
        ...                                                     # write every file under `stage`

`stage` is a fresh hidden folder beside `out` (same file system). When the block ends normally the
stage gets the marker file `.sim-output` ({command, run_id}) and is swapped in whole: a previous
`out` is renamed away, the stage renamed onto `out`, the old folder deleted. When the block raises
(an error, Ctrl-C, SIGTERM: see `sim.cli.signals`), the stage is deleted and `out` is untouched. So
a folder never mixes two runs, and an interrupted run leaves what was there before.

A non-empty `out` is refused unless `force`; even with `force`, only a folder that sim wrote (it
holds `.sim-output`) is replaced, never a folder of other files. Files (`sim report -o FILE`) are
probed with `probe_output_file` and written with a temporary name and a rename by their writers.
"""

from __future__ import annotations

import contextlib
import errno
import json
import os
import shutil
import signal
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from sim.errors import InputError

MARKER = ".sim-output"  # {"command", "run_id"}: this folder was written whole by sim
_STAGE = ".sim-partial-"  # .<name>.sim-partial-<pid>: a folder being written
_OLD = ".sim-replaced-"  # .<name>.sim-replaced-<pid>: the previous folder, during the swap


@dataclass(frozen=True)
class OutputDir:
    """An output folder that passed `probe_output_dir`: where it goes and whether it replaces one."""

    path: Path
    flag: str
    replaces: bool  # `path` exists (an empty folder, or a sim folder replaced with --force)


def read_marker(folder: Path) -> dict | None:
    """The `.sim-output` marker of a folder sim wrote ({command, run_id}), or None."""
    try:
        data = json.loads((folder / MARKER).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


def probe_output_dir(path: Path, *, force: bool, flag: str = "--out") -> OutputDir:
    """Check, before any work, that `path` can become a new output folder: not a file, empty or
    (with `force`) an earlier sim output, and its parent writable. One InputError otherwise."""
    path = Path(path)
    where = f"{flag} {path}"
    if path.exists() and not path.is_dir():
        raise InputError("exists and is not a folder", where=where, allowed="a new or empty folder")
    replaces = path.is_dir()
    if replaces and _has_entries(path, flag):
        marker = read_marker(path)
        if marker is None:
            raise InputError("folder is not empty and was not written by sim; refusing to replace it",
                             where=where, allowed="a new or empty folder")  # fmt: skip
        if not force:
            raise InputError(
                f"folder holds an earlier output ({marker.get('command', 'sim')}, run {marker.get('run_id')})",
                where=where, allowed="a new or empty folder, or --force to replace that output whole",
            )  # fmt: skip
    _probe_parent(path, flag)
    if replaces:
        _probe_rename(path, flag)
    return OutputDir(path=path, flag=flag, replaces=replaces)


@contextlib.contextmanager
def staged_output_dir(out: OutputDir, *, run_id: str, command: str) -> Iterator[Path]:
    """Yield a fresh folder beside `out.path`; swap it in whole when the block succeeds, delete it
    when the block raises (see the module doc)."""
    final = out.path
    _remove_stale(final)
    created = _make_parents(final.parent, out.flag)
    stage = final.parent / f".{final.name}{_STAGE}{os.getpid()}"
    try:
        try:
            stage.mkdir()
        except OSError as err:
            raise _unwritable(final, out.flag, err) from None
        yield stage
        (stage / MARKER).write_text(json.dumps({"command": command, "run_id": run_id}) + "\n")
        _swap_in(stage, final)
    except BaseException:
        shutil.rmtree(stage, ignore_errors=True)
        for folder in reversed(created):
            with contextlib.suppress(OSError):
                folder.rmdir()  # only if still empty
        raise


def probe_output_file(path: Path, *, flag: str) -> None:
    """Check, before any work, that a file can be written at `path` (its writer renames a
    temporary file onto it): not a folder, and its folder exists or can be made and is writable."""
    path = Path(path)
    if path.is_dir():
        raise InputError("is a folder, not a file", where=f"{flag} {path}", allowed="a file path")
    _probe_parent(path, flag)
    if path.exists():
        _probe_rename(path, flag)


def probe_writable_dir(path: Path, *, flag: str = "--out") -> None:
    """Check, before any work, a folder that a command writes into in place (`sim plan` resumes from
    its ledger there): not a file, and writable where it is or will be made."""
    path = Path(path)
    if path.exists() and not path.is_dir():
        raise InputError("exists and is not a folder", where=f"{flag} {path}", allowed="a folder")
    _probe_parent(path / "probe", flag)


# --- internals ---------------------------------------------------------------------------------


def _has_entries(path: Path, flag: str) -> bool:
    try:
        with os.scandir(path) as entries:
            return any(True for _ in entries)
    except OSError as err:
        raise _unwritable(path, flag, err) from None


def _unwritable(path: Path, flag: str, err: OSError) -> InputError:
    reason = os.strerror(err.errno) if err.errno else str(err)
    return InputError(f"cannot write here ({reason.lower()})", where=f"{flag} {path}",
                      allowed="a path in a writable folder")  # fmt: skip


def _existing_ancestor(path: Path) -> Path:
    folder = path.parent
    while not folder.exists() and folder != folder.parent:
        folder = folder.parent
    return folder


def _probe_parent(path: Path, flag: str) -> None:
    """Create and delete a file in the nearest existing folder above `path` (what the write will
    need): finds read-only and pseudo file systems (/proc), missing permission and immutable folders."""
    folder = _existing_ancestor(path)
    if not folder.is_dir():
        raise InputError(f"{folder} is not a folder", where=f"{flag} {path}",
                         allowed="a path in a writable folder")  # fmt: skip
    probe = folder / f".sim-probe-{os.getpid()}"
    try:
        probe.mkdir()
    except OSError as err:
        raise _unwritable(path, flag, err) from None
    probe.rmdir()


def _probe_rename(path: Path, flag: str) -> None:
    """The swap renames `path` away: check that it can (an immutable folder cannot be renamed)."""
    aside = path.with_name(f".{path.name}{_OLD}{os.getpid()}")
    with _signals_held():
        try:
            os.rename(path, aside)
        except OSError as err:
            raise _unwritable(path, flag, err) from None
        os.rename(aside, path)


def _make_parents(folder: Path, flag: str) -> list[Path]:
    """mkdir -p, returning the folders it made (removed again if the write fails)."""
    missing = []
    while not folder.exists():
        missing.append(folder)
        folder = folder.parent
    made = []
    for folder in reversed(missing):
        try:
            folder.mkdir()
        except FileExistsError:
            continue
        except OSError as err:
            for done in reversed(made):
                with contextlib.suppress(OSError):
                    done.rmdir()
            raise _unwritable(folder, flag, err) from None
        made.append(folder)
    return made


def _swap_in(stage: Path, final: Path) -> None:
    """Rename `stage` onto `final`, moving an existing `final` away first; no signal can land
    between the two renames."""
    aside = final.with_name(f".{final.name}{_OLD}{os.getpid()}")
    with _signals_held():
        if final.exists():
            os.rename(final, aside)
            try:
                os.rename(stage, final)
            except OSError:
                os.rename(aside, final)
                raise
        else:
            os.rename(stage, final)
    shutil.rmtree(aside, ignore_errors=True)


def _remove_stale(final: Path) -> None:
    """Stages and replaced folders left beside `final` by a process that no longer exists
    (SIGKILL, power loss): nothing else can remove them."""
    if not final.parent.is_dir():
        return
    for kind in (_STAGE, _OLD):
        for leftover in final.parent.glob(f".{final.name}{kind}*"):
            pid = leftover.name.rsplit("-", 1)[-1]
            if pid.isdigit() and not _alive(int(pid)):
                shutil.rmtree(leftover, ignore_errors=True)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except OSError as err:
        return err.errno == errno.EPERM
    return True


@contextlib.contextmanager
def _signals_held() -> Iterator[None]:
    """Delay SIGINT and SIGTERM across a few renames that must not be split."""
    held = {signal.SIGINT, signal.SIGTERM}
    previous = signal.pthread_sigmask(signal.SIG_BLOCK, held)
    try:
        yield
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, previous)
