"""The CLI entry point: help works, bad input is one line on stderr with exit code 2."""

import subprocess
import sys

from typer.testing import CliRunner

from sim.cli import app
from sim.errors import InputError


def test_help_lists_command_groups():
    result = CliRunner().invoke(app, ["--help"])
    assert result.exit_code == 0
    assert "Simulate GPU clusters" in result.output


def test_input_error_names_file_field_value_and_allowed():
    err = InputError("unknown model", file="s.yaml", where="models[0]", value="gpt", allowed=["a", "b"])
    assert str(err) == "s.yaml: models[0]: unknown model (got 'gpt'); allowed: a, b"


def test_main_turns_input_error_into_exit_2_without_traceback(tmp_path):
    code = (
        "import sim.cli as c\n"
        "from sim.errors import InputError\n"
        "def boom():\n"
        "    raise InputError('bad value', file='x.yaml', where='a.b', value=-1, allowed='>= 0')\n"
        "c.app = type('A', (), {'__call__': lambda self: boom()})()\n"
        "c.main()\n"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert proc.returncode == 2
    assert "x.yaml: a.b: bad value (got -1); allowed: >= 0" in proc.stderr
    assert "Traceback" not in proc.stderr
