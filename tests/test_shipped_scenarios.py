"""Every file under scenarios/ works with the command its own header names (issue 32): the header names at
least one `sim ...` command on a line of its own, the command names the file (or its folder), and the
command runs in a cheap form without an error. The cheap form is the same command on a copy of the file
cut short (a few requests, a short horizon, one concurrency, the first option of each plan axis, one
layout per role in a deployment search, two cells of a fleet), so a shipped file that stops at once (weights with no room for
KV, a field the schema no longer takes, a path that moved) fails here, in CI, instead of for a user."""

from __future__ import annotations

import re
import shlex
from pathlib import Path
from typing import Any

import pytest
import yaml
from typer.testing import CliRunner

from sim.cli import app
from sim.paths import project_root

ROOT = project_root()
SHIPPED = sorted(p.relative_to(ROOT).as_posix() for p in (ROOT / "scenarios").rglob("*.yaml"))
# a header line that is a command: `#   sim run scenarios/x.yaml`; two spaces or more end it (a remark follows)
COMMAND = re.compile(r"^#\s+(sim\s.+?)(?:\s{2,}.*)?$")
SUBCOMMANDS = ("run", "sweep", "plan", "trace gen", "validate")


def header_commands(path: str) -> list[list[str]]:
    """The commands of a file's leading comment block, as argument lists without the leading `sim`."""
    commands = []
    for line in (ROOT / path).read_text().splitlines():
        if not line.startswith("#"):
            break
        match = COMMAND.match(line)
        if match:
            commands.append(shlex.split(match.group(1))[1:])
    return commands


def _invoke(args: list[str]) -> None:
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 0, f"sim {' '.join(args)}: exit {result.exit_code}\n{result.output[-3000:]}"


def _absolute_paths(data: dict[str, Any], folder: Path) -> None:
    workload = data.get("workload", {})
    for key in ("trace", "generator"):
        if workload.get(key):
            workload[key] = str((folder / workload[key]).resolve())


def _short(data: dict[str, Any], folder: Path) -> dict[str, Any]:
    """A scenario mapping cut short: a trace or generator to its first 30 requests, measured from the
    start; a benchmark client to its first 30 simulated seconds, all measured (at a high concurrency every
    request of so short a run arrives at once), and a client drawing its own lengths to at most 30 prompts. The capacity search of `sim run` is off: each of its points
    regenerates the whole workload at another rate, which no request cap shortens (tests/capacity checks
    the search on a small scenario)."""
    _absolute_paths(data, folder)
    data["capacity"] = False  # `capacity: off`
    workload = data["workload"]
    if "benchmark" in workload:
        workload.update(warmup_s=0, horizon_s=30)
        prompts = workload.pop("max_requests", None)
        if workload["benchmark"].get("lengths_drawn_by"):  # the client draws one length per prompt sent
            workload["max_requests"] = min(prompts, 30)
    else:
        workload.update(warmup_s=0, max_requests=30)
    cells = data.get("cluster", {}).get("cells")
    if cells:  # a fleet: two cells, and a generated trace of its first half hour of session starts
        data["cluster"]["cells"] = {**cells, "count": 2} if isinstance(cells, dict) else 2
        if "generator" in workload:
            workload["days"] = 0.02
    return data


def _short_copy(path: Path, out: Path) -> Path:
    data = _short(yaml.safe_load(path.read_text()), path.parent)
    out.write_text(yaml.safe_dump(data, sort_keys=False))
    return out


def _option(args: list[str], name: str) -> str | None:
    return args[args.index(name) + 1] if name in args else None


def _cheap_run(args: list[str], tmp: Path) -> None:
    _invoke(["scenario", "check", str(ROOT / args[1])])
    short = _short_copy(ROOT / args[1], tmp / "short.yaml")
    _invoke(["run", str(short), "--out", str(tmp / "run"), "--jobs", "1"])


def _cheap_sweep(args: list[str], tmp: Path) -> None:
    _invoke(["scenario", "check", str(ROOT / args[1])])
    short = _short_copy(ROOT / args[1], tmp / "short.yaml")
    cheap = ["sweep", str(short), "--out", str(tmp / "sweep"), "--workers", "1"]
    gpus = _option(args, "--gpus")
    if gpus is not None:  # the deployment search: one layout per role, every P:D split it divides
        layouts = ["--colocated-layouts", "dp8", "--prefill-layouts", "dp8", "--decode-layouts", "dp8"]
        cheap += ["--gpus", gpus, "--concurrency", "8", *layouts]
    else:
        cheap += ["--concurrency", "2"]
    for flag in ("--at-tpot-ms", "--at-tpot-percentile"):
        if _option(args, flag) is not None:
            cheap += [flag, str(_option(args, flag))]
    _invoke(cheap)


def _cheap_plan(args: list[str], tmp: Path) -> None:
    """The plan with the first option of each axis, one node per pool and the template cut short."""
    path = ROOT / args[1]
    plan = yaml.safe_load(path.read_text())
    template = _short_copy(path.parent / plan["template"], tmp / "template.yaml")
    plan["template"] = str(template)
    plan["space"] = {axis: dict([next(iter(options.items()))]) for axis, options in plan["space"].items()}
    plan["nodes"] = {"min": 1, "max": 1, "ratios": dict([next(iter(plan["nodes"]["ratios"].items()))])}
    (tmp / "plan.yaml").write_text(yaml.safe_dump(plan, sort_keys=False))
    _invoke(["plan", str(tmp / "plan.yaml"), "--out", str(tmp / "plan"), "--workers", "1"])


def _cheap_trace_gen(args: list[str], tmp: Path) -> None:
    _invoke(["trace", "gen", str(ROOT / args[2]), "-o", str(tmp / "trace.parquet"), "--days", "0.01"])


def _cheap_validate(args: list[str], tmp: Path) -> None:
    """Every case file of the folder, each case's scenario cut short and read at a TPOT its first point
    already passes (a case whose target no point brackets is reported, not an error)."""
    cases = tmp / "cases"
    cases.mkdir()
    for path in sorted((ROOT / str(_option(args, "--cases"))).glob("*.yaml")):
        case = yaml.safe_load(path.read_text())
        folder = path.parent  # the paths of an inline scenario are relative to the case file
        if isinstance(case["scenario"], str):
            folder = (path.parent / case["scenario"]).parent
            case["scenario"] = yaml.safe_load((path.parent / case["scenario"]).read_text())
        case["scenario"] = _short(case["scenario"], folder)
        case["at"] = {"tpot_p50_ms": 1}  # a target the first point passes: the search stops there
        (cases / path.name).write_text(yaml.safe_dump(case, sort_keys=False))
    _invoke(["validate", "--cases", str(cases), "--json"])


CHEAP = {
    "run": _cheap_run,
    "sweep": _cheap_sweep,
    "plan": _cheap_plan,
    "trace gen": _cheap_trace_gen,
    "validate": _cheap_validate,
}


def _subcommand(args: list[str]) -> str:
    return next(s for s in SUBCOMMANDS if args[: len(s.split())] == s.split())


@pytest.mark.parametrize("path", SHIPPED)
def test_every_shipped_file_names_its_own_command(path):
    commands = header_commands(path)
    assert commands, f"{path}: its header names no `sim ...` command on a line of its own"
    for args in commands:
        assert any(args[: len(s.split())] == s.split() for s in SUBCOMMANDS), (path, args)
        assert path in args or str(Path(path).parent) in args, (path, args)


# each distinct command once (the validation cases share theirs), named by the command itself
COMMANDS = sorted({" ".join(args) for path in SHIPPED for args in header_commands(path)})


@pytest.mark.parametrize("command", COMMANDS)
def test_every_shipped_command_runs_in_a_cheap_form(command, tmp_path):
    args = shlex.split(command)
    CHEAP[_subcommand(args)](args, tmp_path)
