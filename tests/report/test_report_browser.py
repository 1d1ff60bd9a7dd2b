"""Pages rendered in headless Chromium (offline): every chart draws, nothing logs, nothing fails.

The end-to-end test runs the real simulator on scenarios/smoke.yaml; the others use synthetic runs so
that the page machinery is checked even where the simulator's scenario is absent.
"""

import html
import json
from pathlib import Path

import pytest
from report_browser import render
from report_synth import V41, write_run
from typer.testing import CliRunner

from sim.cli import app
from sim.paths import project_root
from sim.report.page import Panel, Section, render_page
from sim.report.theme import new_figure

SMOKE = project_root() / "scenarios" / "smoke.yaml"


def assert_clean(r, expected: int) -> None:
    assert r.status.get("data-state") == "done", r.status
    assert r.expected == expected
    assert r.drawn == expected, f"charts not drawn: {r.status.get('data-undrawn')}"
    assert r.status.get("data-errors") == "0" and r.banner == ""
    assert r.console == [], r.console


def make_page(args: list[str]) -> int:
    result = CliRunner().invoke(app, [*args, "--json"])
    assert result.exit_code == 0, result.output
    return json.loads(result.stdout)["charts"]


# Zooms the first time chart once the page has drawn, then records every time chart's x range.
ZOOM_PROBE = """<script>
(function wait() {
  var status = document.getElementById("render-status");
  if (status.getAttribute("data-state") !== "done") { return setTimeout(wait, 20); }
  var timed = Array.prototype.filter.call(document.querySelectorAll("div.chart"),
    function (d) { return d.layout.meta && d.layout.meta.time_sync; });
  Plotly.relayout(timed[0], {"xaxis.range": [1, 2]}).then(function () {
    setTimeout(function () {
      status.setAttribute("data-probe", JSON.stringify(timed.map(function (d) { return d.layout.xaxis.range; })));
    }, 50);
  });
})();
</script></body>"""


def test_compare_page_of_synthetic_runs_draws_every_chart_and_zooms_time_charts_together(tmp_path):
    a = write_run(tmp_path / "a", n_requests=300)
    b = write_run(tmp_path / "b", n_requests=200, models=(V41,), seed=2)
    out = tmp_path / "cmp.html"
    charts = make_page(["compare", str(a), str(b), "-o", str(out)])
    out.write_text(out.read_text().replace("</body>", ZOOM_PROBE))
    r = render(out, tmp_path)
    assert_clean(r, charts)
    assert json.loads(html.unescape(r.status["data-probe"])) == [[1, 2]] * 4


def test_a_broken_chart_is_caught_and_reported(tmp_path):
    """Negative control: the harness must see a chart that fails (else the test above proves nothing)."""
    fig = new_figure().add_scatter(x=[0, 1], y=[1, 2])
    page = render_page("t", "s", [Section("S", [Panel("ok", fig), Panel("broken", fig)])])
    page = page.replace(
        '<script type="application/json" id="fig-1-data">{',
        '<script type="application/json" id="fig-1-data">{{',
    )
    path = tmp_path / "broken.html"
    path.write_text(page)
    r = render(path, tmp_path)
    assert r.expected == 2 and r.drawn == 1
    assert r.status.get("data-undrawn") == "fig-1"
    assert int(r.status.get("data-errors", "0")) >= 1 and "fig-1" in r.banner


@pytest.mark.slow
def test_report_of_the_smoke_scenario_renders_in_chromium(tmp_path):
    if not SMOKE.is_file():
        pytest.skip(f"{SMOKE} not found (the simulator's smoke scenario)")
    run = tmp_path / "run"
    result = CliRunner().invoke(app, ["run", str(SMOKE), "--out", str(run)])
    assert result.exit_code == 0, result.output
    charts = make_page(["report", str(run)])
    assert charts >= 12  # every section of a two-model run has its charts
    page = run / "report.html"
    r = render(page, tmp_path)
    assert_clean(r, charts)
    assert "Not in this run: per-request" not in Path(page).read_text()
