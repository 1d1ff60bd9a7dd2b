"""sim.outputs: output folders probed before the work, written whole or not at all (issue 17)."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from sim.errors import InputError
from sim.outputs import (
    MARKER,
    probe_output_dir,
    probe_output_file,
    probe_writable_dir,
    staged_output_dir,
)


def _write_run(out, run_id: str, files: dict[str, str], *, force: bool = False) -> None:
    with staged_output_dir(probe_output_dir(out, force=force), run_id=run_id, command="test") as stage:
        for name, text in files.items():
            (stage / name).parent.mkdir(parents=True, exist_ok=True)
            (stage / name).write_text(text)


def _listing(folder) -> set[str]:
    return {str(p.relative_to(folder)) for p in folder.rglob("*")}


def test_a_new_folder_appears_whole_with_its_marker(tmp_path):
    out = tmp_path / "a" / "b" / "run"
    _write_run(out, "r1", {"x.txt": "1", "sub/y.txt": "2"})
    assert _listing(out) == {"x.txt", "sub", "sub/y.txt", MARKER}
    assert json.loads((out / MARKER).read_text()) == {"command": "test", "run_id": "r1"}
    assert os.listdir(out.parent) == ["run"]


def test_an_empty_folder_is_used_and_a_non_empty_one_needs_force(tmp_path):
    out = tmp_path / "run"
    out.mkdir()
    _write_run(out, "r1", {"old.txt": "old"})
    with pytest.raises(InputError, match=r"--out .*run: folder holds an earlier output \(test, run r1\)"):
        probe_output_dir(out, force=False)
    _write_run(out, "r2", {"new.txt": "new"}, force=True)
    assert _listing(out) == {"new.txt", MARKER}, "the earlier output must go whole"


def test_a_failure_inside_the_block_leaves_the_previous_folder_and_no_stage(tmp_path):
    out = tmp_path / "run"
    _write_run(out, "r1", {"old.txt": "old"})
    with pytest.raises(RuntimeError), staged_output_dir(probe_output_dir(out, force=True), run_id="r2",
                                                        command="test") as stage:  # fmt: skip
        (stage / "half.txt").write_text("half")
        raise RuntimeError("stopped half way")
    assert _listing(out) == {"old.txt", MARKER}
    assert sorted(os.listdir(tmp_path)) == ["run"]


def test_parents_made_for_a_failed_write_are_removed_again(tmp_path):
    out = tmp_path / "new" / "deeper" / "run"
    with pytest.raises(RuntimeError), staged_output_dir(probe_output_dir(out, force=False), run_id="r",
                                                        command="test"):  # fmt: skip
        raise RuntimeError
    assert os.listdir(tmp_path) == []


def test_a_stage_left_by_a_killed_process_is_removed_by_the_next_write(tmp_path):
    dead = subprocess.run(
        [sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True
    )
    leftover = tmp_path / f".run.sim-partial-{int(dead.stdout)}"
    leftover.mkdir()
    (leftover / "half.parquet").write_text("x")
    _write_run(tmp_path / "run", "r1", {"x.txt": "1"})
    assert sorted(os.listdir(tmp_path)) == ["run"]


@pytest.mark.parametrize(
    "where, message",
    [("/proc/sim-test/out", "cannot write here"), ("/proc/self/status/out", "is not a folder")],
)
def test_unwritable_places_fail_the_probe_with_one_line(where, message):
    with pytest.raises(InputError, match=message) as err:
        probe_output_dir(where, force=False)
    assert len(err.value.lines) == 1 and f"--out {where}" in str(err.value)


def test_a_file_in_the_way_and_a_foreign_folder_are_refused(tmp_path):
    (tmp_path / "f").write_text("x")
    with pytest.raises(InputError, match="exists and is not a folder"):
        probe_output_dir(tmp_path / "f", force=True)
    (tmp_path / "d").mkdir()
    (tmp_path / "d" / "mine.txt").write_text("x")
    with pytest.raises(InputError, match="not written by sim"):
        probe_output_dir(tmp_path / "d", force=True)


def test_output_files_are_probed_before_the_work(tmp_path):
    probe_output_file(tmp_path / "new" / "page.html", flag="-o")  # a folder that can be made
    assert not (tmp_path / "new").exists()
    with pytest.raises(InputError, match="-o .*: is a folder, not a file"):
        probe_output_file(tmp_path, flag="-o")
    with pytest.raises(InputError, match="--html /proc/x.html: cannot write here"):
        probe_output_file("/proc/x.html", flag="--html")


def test_a_folder_written_in_place_is_probed_too(tmp_path):
    probe_writable_dir(tmp_path / "plan")
    with pytest.raises(InputError, match="cannot write here"):
        probe_writable_dir("/proc/sim-plan")


# --- every command that writes: one line before the work, never a traceback after it ---------


def _sim(*args) -> tuple[int, str]:
    """(exit code, output) as `sim` gives them: an InputError is exit 2 with its message."""
    from typer.testing import CliRunner

    from sim.cli import app

    result = CliRunner().invoke(app, [*map(str, args)], env={"COLUMNS": "200"})
    if isinstance(result.exception, InputError):
        return 2, result.output + str(result.exception)
    assert result.exception is None or isinstance(result.exception, SystemExit), repr(result.exception)
    return result.exit_code, result.output


def test_trace_commands_probe_their_outputs_first(tmp_path):
    from sim.paths import project_root

    spec = project_root() / "traces" / "agent_1M_sample.yaml"
    trace = project_root() / "traces" / "agent_1M_sample.parquet"
    assert _sim("trace", "gen", spec, "-o", tmp_path) == (
        2, f"-o/--out {tmp_path}: is a folder, not a file; allowed: a file path"
    )  # fmt: skip
    code, output = _sim("trace", "stats", trace, "--html", "/proc/x.html")
    assert code == 2 and "--html /proc/x.html: cannot write here" in output
    for days in ("inf", "nan", "0", "1e9"):
        code, output = _sim("trace", "gen", spec, "-o", tmp_path / "t.parquet", "--days", days)
        assert code == 2 and "is not a number of days" in output
    code, _ = _sim("trace", "gen", spec, "-o", tmp_path / "t.parquet", "--seed", "-1")
    assert code == 2 and not (tmp_path / "t.parquet").exists()


def test_report_probes_its_page_before_reading_the_run(tmp_path):
    # no run folder at all: the unwritable page is what it reports, before reading anything
    code, output = _sim("report", tmp_path / "missing", "-o", "/proc/r.html")
    assert (code, output) == (2, "-o/--out /proc/r.html: cannot write here (no such file or directory); "
                                 "allowed: a path in a writable folder")  # fmt: skip


def test_an_immutable_folder_is_found_by_the_probe(tmp_path):
    """`chattr +i`: even root cannot write into it or rename it (needs root and a file system with
    the attribute, else skipped)."""
    folder = tmp_path / "frozen"
    folder.mkdir()
    if os.geteuid() != 0 or subprocess.run(["chattr", "+i", str(folder)], capture_output=True).returncode:
        pytest.skip("chattr +i needs root and a file system that supports it")
    try:
        with pytest.raises(InputError, match="cannot write here"):
            probe_output_dir(folder / "run", force=False)
        with pytest.raises(InputError, match="cannot write here"):
            probe_output_dir(folder, force=True)  # empty, but it cannot be swapped away
    finally:
        subprocess.run(["chattr", "-i", str(folder)], check=True)


def test_every_float_option_of_the_cli_refuses_inf_and_nan():
    """click's float ranges let `inf` and `nan` through; every float option carries a callback
    (sim.cli.numbers.finite, or a range check of its own)."""
    import typing

    import typer

    from sim.cli import app

    def leaves(command, path):
        if hasattr(command, "commands"):
            for name, sub in command.commands.items():
                yield from leaves(sub, f"{path} {name}")
        else:
            yield path, command.callback

    floats = []
    for path, func in leaves(typer.main.get_command(app), "sim"):
        for name, hint in typing.get_type_hints(func, include_extras=True).items():
            if typing.get_origin(hint) is not typing.Annotated:
                continue
            kind, *extras = typing.get_args(hint)
            if float in (kind, *typing.get_args(kind)):
                info = next(e for e in extras if isinstance(e, typer.models.ParameterInfo))
                floats.append((f"{path} --{name}", info.callback))
    assert len(floats) >= 4
    assert [name for name, callback in floats if callback is None] == []
    code, output = _sim("sweep", "x.yaml", "--out", "/tmp/never", "--concurrency", "1", "--at-tpot-ms", "nan")
    assert code == 2 and "not a finite number" in output
