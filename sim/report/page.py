"""Page assembly: one self-contained HTML file, plotly.js inlined once, every figure drawn from JSON.

The page works offline (no external script, style, font or image). Each figure's JSON sits in a
`<script type="application/json">` block and is drawn by one loop with `Plotly.newPlot`. When every
figure has drawn, the loop writes the outcome into `#render-status` (expected, drawn, failed), and
any script error is shown in a banner; the browser test reads both from the DOM.
"""

from __future__ import annotations

import html
from dataclasses import dataclass, field

import plotly.graph_objects as go
from plotly.offline import get_plotlyjs


@dataclass(frozen=True)
class Panel:
    """One block of a section: a chart, or HTML (cards, tables), or a note saying what is missing."""

    title: str
    figure: go.Figure | None = None
    html: str = ""
    caption: str = ""
    wide: bool = False


@dataclass(frozen=True)
class Section:
    title: str
    panels: list[Panel] = field(default_factory=list)
    intro: str = ""

    @property
    def anchor(self) -> str:
        return "".join(c if c.isalnum() else "-" for c in self.title.lower()).strip("-")


def swatch(color: str) -> str:
    """A small colour square, the HTML counterpart of a legend entry."""
    return f'<span class="swatch" style="background:{color}"></span>'


def missing(title: str, what: str, *, wide: bool = False) -> Panel:
    """A panel for data this run does not contain: says so instead of drawing an empty chart."""
    return Panel(title=title, html=f'<p class="missing">Not in this run: {html.escape(what)}</p>', wide=wide)


_PLOTLY_CONFIG = (
    '{"responsive": true, "displaylogo": false, "modeBarButtonsToRemove": ["lasso2d", "select2d"],'
    ' "toImageButtonOptions": {"format": "png", "scale": 2}}'
)

# Runs before plotly.js so that an error anywhere on the page is caught and shown.
_ERROR_CAPTURE_JS = """
(function () {
  var errors = [];
  function record(msg) {
    errors.push(String(msg));
    var banner = document.getElementById("report-errors");
    if (banner) { banner.hidden = false; banner.textContent = "This page hit an error: " + errors.join(" | "); }
    var status = document.getElementById("render-status");
    if (status) { status.setAttribute("data-errors", String(errors.length)); }
  }
  window.__reportErrors = errors;
  window.addEventListener("error", function (e) { record(e.message || e); });
  window.addEventListener("unhandledrejection", function (e) { record(e.reason); });
  var consoleError = console.error;
  console.error = function () { record(Array.prototype.join.call(arguments, " ")); consoleError.apply(console, arguments); };
})();
"""

_RENDER_JS = r"""
(function () {
  var config = __PLOTLY_CONFIG__;
  var charts = Array.prototype.slice.call(document.querySelectorAll("div.chart[data-fig]"));
  var jobs = charts.map(function (div) {
    try {
      var spec = JSON.parse(document.getElementById(div.getAttribute("data-fig")).textContent);
      return Plotly.newPlot(div, spec.data, spec.layout, config);
    } catch (err) {
      window.dispatchEvent(new ErrorEvent("error", {message: div.id + ": " + err}));
      return Promise.resolve();
    }
  });
  Promise.all(jobs).then(function () {
    var drawn = charts.filter(function (div) {
      return div.querySelector(".main-svg") && div.querySelectorAll("g.trace").length > 0;
    });
    var status = document.getElementById("render-status");
    status.setAttribute("data-drawn", String(drawn.length));
    status.setAttribute("data-undrawn", charts.filter(function (d) { return drawn.indexOf(d) < 0; })
      .map(function (d) { return d.id; }).join(" "));
    status.setAttribute("data-errors", String(window.__reportErrors.length));
    status.setAttribute("data-render-ms", String(Math.round(performance.now())));
    status.setAttribute("data-state", "done");
    syncTimeAxes(charts);
  });

  // Zooming one chart over simulated time zooms every other time chart to the same window.
  function syncTimeAxes(all) {
    var synced = all.filter(function (d) { return d.layout && d.layout.meta && d.layout.meta.time_sync; });
    var busy = false;
    synced.forEach(function (div) {
      div.on("plotly_relayout", function (ev) {
        if (busy) { return; }
        var update = null;
        Object.keys(ev).forEach(function (k) {
          var m = k.match(/^xaxis\d*\.(range\[0\]|range|autorange)$/);
          if (!m || update) { return; }
          var axis = k.split(".")[0];
          if (m[1] === "autorange") { update = {"xaxis.autorange": true}; }
          else if (m[1] === "range") { update = {"xaxis.range": ev[k]}; }
          else { update = {"xaxis.range": [ev[axis + ".range[0]"], ev[axis + ".range[1]"]]}; }
        });
        if (!update) { return; }
        busy = true;
        Promise.all(synced.filter(function (o) { return o !== div; })
          .map(function (o) { return Plotly.relayout(o, update); }))
          .then(function () { busy = false; }, function () { busy = false; });
      });
    });
  }
})();
"""

_CSS = """
:root { --ink: #1f2328; --muted: #59636e; --line: #d8dee4; --bg: #f6f8fa; --card: #ffffff; --accent: #0072B2; }
* { box-sizing: border-box; }
body { margin: 0; background: var(--bg); color: var(--ink);
  font: 14px/1.45 system-ui, -apple-system, "Segoe UI", Roboto, Helvetica, Arial, sans-serif; }
header.top { background: #24292f; color: #fff; padding: 14px 24px 10px; }
header.top h1 { margin: 0 0 4px; font-size: 20px; font-weight: 600; }
header.top .sub { color: #c9d1d9; font-size: 13px; }
nav.toc { position: sticky; top: 0; z-index: 10; background: #fff; border-bottom: 1px solid var(--line);
  padding: 6px 24px; font-size: 13px; white-space: nowrap; overflow-x: auto; }
nav.toc a { color: var(--accent); text-decoration: none; margin-right: 16px; }
main { max-width: 1400px; margin: 0 auto; padding: 8px 24px 40px; }
section { margin-top: 22px; }
section > h2 { font-size: 17px; margin: 0 0 4px; padding-top: 40px; margin-top: -34px; }
section > p.intro { color: var(--muted); margin: 0 0 10px; max-width: 110ch; }
.grid { display: grid; grid-template-columns: repeat(auto-fit, minmax(560px, 1fr)); gap: 14px; }
.panel { background: var(--card); border: 1px solid var(--line); border-radius: 6px; padding: 8px 10px; min-width: 0; }
.panel.wide { grid-column: 1 / -1; }
.panel.bare { background: none; border: none; padding: 0; }
.panel h3 { font-size: 14px; margin: 4px 4px 6px; }
.panel .caption { color: var(--muted); font-size: 12px; margin: 2px 4px 4px; }
.missing { color: #8a6d3b; background: #fcf8e3; border: 1px dashed #e4c77b; padding: 10px 12px; border-radius: 4px; margin: 4px; }
#report-errors { background: #ffebe9; color: #82071e; border: 1px solid #ff818266; padding: 10px 24px; margin: 0; }
.cards { display: grid; grid-template-columns: repeat(auto-fill, minmax(285px, 1fr)); gap: 10px; }
.card { background: var(--card); border: 1px solid var(--line); border-radius: 6px; padding: 10px 12px; }
.card .label { color: var(--muted); font-size: 12px; text-transform: uppercase; letter-spacing: .03em; }
.card .row { display: flex; justify-content: space-between; gap: 8px; margin-top: 3px; font-variant-numeric: tabular-nums; }
.card .row .who { display: flex; align-items: center; gap: 6px; overflow: hidden; text-overflow: ellipsis; white-space: nowrap; }
.card .row .val { font-weight: 600; white-space: nowrap; }
.card .ratio { margin-top: 6px; padding-top: 5px; border-top: 1px solid var(--line); font-size: 13px; }
.better { color: #1a7f37; font-weight: 600; }
.worse { color: #cf222e; font-weight: 600; }
.swatch { display: inline-block; width: 10px; height: 10px; border-radius: 2px; flex: none; }
.verdict { background: var(--card); border: 1px solid var(--line); border-left: 4px solid var(--accent);
  border-radius: 6px; padding: 10px 16px; margin-bottom: 12px; }
.verdict p { margin: 4px 0; font-size: 15px; }
.verdict ul { margin: 4px 0 4px 18px; padding: 0; }
table.data { border-collapse: collapse; width: 100%; font-size: 13px; font-variant-numeric: tabular-nums; }
table.data th, table.data td { border-bottom: 1px solid var(--line); padding: 4px 8px; text-align: left; vertical-align: top; }
table.data th { background: #f0f3f6; position: sticky; top: 0; }
table.data td.num { text-align: right; }
table.data td.key { font-family: ui-monospace, SFMono-Regular, Menlo, Consolas, monospace; font-size: 12px; white-space: nowrap; }
.scroll { max-height: 520px; overflow: auto; }
#render-status { display: none; }
"""


def _figure_json(fig: go.Figure) -> str:
    """Figure JSON safe inside a <script> block: '<' only occurs inside JSON strings, so escaping it is lossless."""
    return fig.to_json(validate=False, pretty=False).replace("<", "\\u003c")


def _panel_html(panel: Panel, fig_id: str | None) -> str:
    cls = (
        "panel"
        + (" wide" if panel.wide else "")
        + (" bare" if panel.figure is None and not panel.title else "")
    )
    parts = [f'<div class="{cls}">']
    if panel.figure is None and panel.title:
        parts.append(f"<h3>{html.escape(panel.title)}</h3>")
    if panel.html:
        parts.append(panel.html)
    if fig_id is not None:
        # reserve the chart's height so the page does not jump as charts draw
        height = (
            f' style="min-height:{int(panel.figure.layout.height)}px"' if panel.figure.layout.height else ""
        )
        parts.append(f'<div class="chart" id="{fig_id}" data-fig="{fig_id}-data"{height}></div>')
    if panel.caption:
        parts.append(f'<p class="caption">{html.escape(panel.caption)}</p>')
    parts.append("</div>")
    return "".join(parts)


def figures_of(sections: list[Section]) -> list[go.Figure]:
    return [p.figure for s in sections for p in s.panels if p.figure is not None]


def render_page(title: str, subtitle: str, sections: list[Section], run_ids: tuple[str, ...] = ()) -> str:
    """The whole page as one string. Deterministic: the same sections give the same bytes. `run_ids`
    (of the runs drawn) go into a `sim-run-ids` meta tag."""
    body: list[str] = []
    data: list[str] = []
    n = 0
    for section in sections:
        body.append(f'<section id="{section.anchor}"><h2>{html.escape(section.title)}</h2>')
        if section.intro:
            body.append(f'<p class="intro">{html.escape(section.intro)}</p>')
        body.append('<div class="grid">')
        for panel in section.panels:
            fig_id = None
            if panel.figure is not None:
                fig_id = f"fig-{n}"
                n += 1
                data.append(
                    f'<script type="application/json" id="{fig_id}-data">{_figure_json(panel.figure)}</script>'
                )
            body.append(_panel_html(panel, fig_id))
        body.append("</div></section>")
    toc = "".join(f'<a href="#{s.anchor}">{html.escape(s.title)}</a>' for s in sections)
    return "\n".join(
        [
            "<!DOCTYPE html>",
            '<html lang="en"><head><meta charset="utf-8">',
            '<meta name="viewport" content="width=device-width, initial-scale=1">',
            f'<meta name="sim-run-ids" content="{html.escape(" ".join(run_ids))}">',
            f"<title>{html.escape(title)}</title>",
            f"<style>{_CSS}</style>",
            f"<script>{_ERROR_CAPTURE_JS}</script>",
            "</head><body>",
            f'<header class="top"><h1>{html.escape(title)}</h1><div class="sub">{html.escape(subtitle)}</div></header>',
            '<p id="report-errors" hidden></p>',
            f'<nav class="toc">{toc}</nav>',
            "<main>",
            *body,
            "</main>",
            f'<div id="render-status" data-state="pending" data-expected="{n}" data-drawn="0" data-errors="0"></div>',
            *data,
            # plotly.js last: the verdict, cards and tables paint before the 4.8 MB script is parsed
            f"<script>{get_plotlyjs()}</script>",
            f"<script>{_RENDER_JS.replace('__PLOTLY_CONFIG__', _PLOTLY_CONFIG)}</script>",
            "</body></html>",
        ]
    )
