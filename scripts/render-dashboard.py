#!/usr/bin/env python3
"""Draw the Grafana dashboard (deploy/grafana/lahar-dashboard.json) from a Prometheus, without
Grafana: every panel's queries are evaluated over a time range through Prometheus' HTTP API, drawn
as line charts in a static HTML page laid out as the dashboard's grid, and a headless Chromium
takes a screenshot of it. No Debian, PyPI or npm package provides Grafana itself.

    .venv/bin/python scripts/render-dashboard.py --prometheus http://127.0.0.1:9090 \\
        --start 1764140000 --end 1764140120 --output docs/dashboard.png

Writes OUTPUT (PNG), and beside it the page (.html) and the data drawn (.json). Needs
`chromium-headless-shell` or `chromium` (scripts/setup.sh installs it as root). The picture in
docs/dashboard.png was made this way from a `lahar up --demo` run
(tests/observability/test_dashboard_demo.py does the same)."""

from __future__ import annotations

import argparse
import html
import json
import math
import re
import shutil
import subprocess
import sys
import tempfile
import time
import urllib.parse
import urllib.request
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
DASHBOARD = ROOT / "deploy" / "grafana" / "lahar-dashboard.json"
COLUMN = 64  # pixels per grid column (24 columns)
ROW = 30  # pixels per grid row
COLOURS = ("#73bf69", "#f2cc0c", "#5794f2", "#ff9830", "#f2495c", "#b877d9", "#8ab8ff", "#fade2a", "#ca95e5")
VARIABLE = re.compile(r"\$\{[^}]*\}|\$[A-Za-z_][A-Za-z0-9_]*")
MAX_SERIES = 8  # per panel, the rest summed up in the legend as "+N more"


def values_for(start: float, end: float) -> dict[str, str]:
    """Grafana's variables: every node and queue, a rate window fit for the range."""
    window = max(15, int((end - start) / 8))
    return {"node": ".*", "queue": ".*", "__rate_interval": f"{window}s", "__interval": "15s", "__range": "1h"}


def substitute(expr: str, values: dict[str, str]) -> str:
    return VARIABLE.sub(lambda m: values[m.group().strip("${}").split(":")[0]], expr)


def query_range(base: str, expr: str, start: float, end: float, step: float) -> list[dict[str, Any]]:
    query = urllib.parse.urlencode({"query": expr, "start": start, "end": end, "step": step})
    with urllib.request.urlopen(f"{base}/api/v1/query_range?{query}", timeout=30) as response:
        body = json.loads(response.read())
    if body.get("status") != "success":
        raise RuntimeError(f"{expr}: {body}")
    return list(body["data"]["result"])


def legend(template: str, labels: dict[str, str]) -> str:
    return re.sub(r"\{\{\s*(\w+)\s*\}\}", lambda m: labels.get(m.group(1), ""), template or "") or json.dumps(labels)


def panel_data(
    base: str, panel: dict[str, Any], start: float, end: float, values: dict[str, str]
) -> list[dict[str, Any]]:
    step = max(1.0, (end - start) / 200)
    series = []
    for target in panel.get("targets", []):
        for found in query_range(base, substitute(target["expr"], values), start, end, step):
            points = [(float(t), float(v)) for t, v in found["values"] if math.isfinite(float(v))]
            if points:
                series.append({"name": legend(target.get("legendFormat", ""), found["metric"]), "points": points})
    return series


def nice(value: float) -> str:
    magnitude = abs(value)
    if magnitude >= 1e9:
        return f"{value / 1e9:.3g}G"
    if magnitude >= 1e6:
        return f"{value / 1e6:.3g}M"
    if magnitude >= 1e3:
        return f"{value / 1e3:.3g}k"
    if magnitude and magnitude < 0.01:
        return f"{value:.1e}"
    return f"{value:.3g}"


def chart(series: list[dict[str, Any]], width: int, height: int, start: float, end: float) -> str:
    """An SVG line chart: time on x, the series' range on y, four gridlines."""
    if not series:
        middle = f'x="{width // 2}" y="{height // 2}"'
        return f'<svg width="{width}" height="{height}"><text {middle} class="none">No data</text></svg>'
    left, bottom = 52, 18
    plot_w, plot_h = width - left - 8, height - bottom - 6
    ys = [v for s in series for _, v in s["points"]]
    low, high = min(0.0, min(ys)), max(ys)
    if high <= low:
        high = low + 1
    span = end - start or 1

    def x(t: float) -> float:
        return left + (t - start) / span * plot_w

    def y(v: float) -> float:
        return 6 + plot_h - (v - low) / (high - low) * plot_h

    parts = [f'<svg width="{width}" height="{height}">']
    for index in range(5):
        value = low + (high - low) * index / 4
        parts.append(f'<line x1="{left}" x2="{left + plot_w}" y1="{y(value):.1f}" y2="{y(value):.1f}" class="grid"/>')
        parts.append(f'<text x="{left - 4}" y="{y(value) + 4:.1f}" class="tick" text-anchor="end">{nice(value)}</text>')
    for index in range(4):
        at = start + span * index / 3
        parts.append(
            f'<text x="{x(at):.1f}" y="{height - 4}" class="tick" text-anchor="middle">'
            f"{time.strftime('%H:%M:%S', time.gmtime(at))}</text>"
        )
    for index, item in enumerate(series[:MAX_SERIES]):
        path = " ".join(f"{x(t):.1f},{y(v):.1f}" for t, v in item["points"])
        parts.append(f'<polyline points="{path}" stroke="{COLOURS[index % len(COLOURS)]}" class="line"/>')
    parts.append("</svg>")
    return "".join(parts)


def page(dashboard: dict[str, Any], data: dict[int, list[dict[str, Any]]], start: float, end: float) -> tuple[str, int]:
    blocks, bottom = [], 0
    for panel in dashboard["panels"]:
        grid = panel["gridPos"]
        x, y, w, h = grid["x"] * COLUMN, grid["y"] * ROW, grid["w"] * COLUMN, grid["h"] * ROW
        bottom = max(bottom, y + h)
        title = html.escape(panel.get("title", ""))
        if panel.get("type") == "row":
            blocks.append(f'<div class="row" style="left:{x}px;top:{y}px;width:{w - 8}px">{title}</div>')
            continue
        series = data.get(panel["id"], [])
        names = "".join(
            f'<span><i style="background:{COLOURS[i % len(COLOURS)]}"></i>{html.escape(s["name"])}</span>'
            for i, s in enumerate(series[:MAX_SERIES])
        )
        if len(series) > MAX_SERIES:
            names += f"<span>+{len(series) - MAX_SERIES} more</span>"
        blocks.append(
            f'<div class="panel" style="left:{x}px;top:{y}px;width:{w - 8}px;height:{h - 8}px">'
            f'<div class="title">{title}</div>{chart(series, w - 16, h - 74, start, end)}'
            f'<div class="legend">{names}</div></div>'
        )
    when = (
        f"{time.strftime('%Y-%m-%d %H:%M:%S', time.gmtime(start))} – {time.strftime('%H:%M:%S', time.gmtime(end))} UTC"
    )
    style = """
body { margin: 0; background: #111217; color: #ccccdc; font: 12px Inter, Helvetica, Arial, sans-serif; }
h1 { font-size: 16px; font-weight: 500; margin: 10px 12px; }
.board { position: relative; margin: 0 8px; }
.panel { position: absolute; background: #181b1f; border: 1px solid #2c3235; border-radius: 3px; padding: 4px;
         overflow: hidden; }
.row { position: absolute; font-size: 14px; font-weight: 500; padding-top: 6px; }
.title { font-weight: 500; margin: 2px 4px 4px; white-space: nowrap; overflow: hidden; text-overflow: ellipsis; }
.grid { stroke: #2c3235; stroke-width: 1; } .tick { fill: #8e8e8e; font-size: 10px; }
.line { fill: none; stroke-width: 1.5; } .none { fill: #8e8e8e; font-size: 13px; text-anchor: middle; }
.legend { font-size: 10px; line-height: 14px; max-height: 42px; overflow: hidden; margin: 2px 4px; }
.legend span { margin-right: 10px; white-space: nowrap; }
.legend i { display: inline-block; width: 10px; height: 3px; margin: 0 4px 2px 0; }
"""
    body = "".join(blocks)
    text = (
        f"<!doctype html><html><head><meta charset='utf-8'><title>{html.escape(dashboard['title'])}</title>"
        f"<style>{style}</style></head><body><h1>{html.escape(dashboard['title'])} · {when}</h1>"
        f'<div class="board" style="height:{bottom}px">{body}</div></body></html>'
    )
    return text, bottom + 48


def browser() -> str:
    for name in ("chromium-headless-shell", "chromium", "chromium-browser", "google-chrome"):
        found = shutil.which(name) or (
            f"/usr/lib/chromium/{name}" if Path(f"/usr/lib/chromium/{name}").exists() else None
        )
        if found:
            return found
    raise SystemExit("render-dashboard: no Chromium found (apt-get install chromium-headless-shell)")


def screenshot(page_path: Path, output: Path, height: int) -> None:
    with tempfile.TemporaryDirectory() as profile:
        done = subprocess.run(
            [
                browser(),
                "--headless",
                "--no-sandbox",
                "--disable-gpu",
                "--hide-scrollbars",
                f"--user-data-dir={profile}",
                f"--window-size={24 * COLUMN + 16},{height}",
                f"--screenshot={output}",
                page_path.as_uri(),
            ],
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )
    if done.returncode != 0 or not output.exists():
        raise SystemExit(f"render-dashboard: Chromium failed ({done.returncode}): {done.stderr[-2000:]}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--prometheus", required=True, help="its base URL, e.g. http://127.0.0.1:9090")
    parser.add_argument("--start", type=float, required=True, help="unix seconds")
    parser.add_argument("--end", type=float, required=True, help="unix seconds")
    parser.add_argument("--output", type=Path, required=True, help="the PNG to write")
    parser.add_argument("--dashboard", type=Path, default=DASHBOARD)
    args = parser.parse_args(argv)
    if not args.end > args.start:
        parser.error("--end must be after --start")
    dashboard = json.loads(args.dashboard.read_text())
    values = values_for(args.start, args.end)
    base = args.prometheus.rstrip("/")
    data = {
        panel["id"]: panel_data(base, panel, args.start, args.end, values)
        for panel in dashboard["panels"]
        if panel.get("targets")
    }
    text, height = page(dashboard, data, args.start, args.end)
    page_path = args.output.with_suffix(".html")
    page_path.write_text(text)
    args.output.with_suffix(".json").write_text(json.dumps({str(k): v for k, v in data.items()}))
    screenshot(page_path.resolve(), args.output.resolve(), height)
    print(f"wrote {args.output} ({sum(1 for s in data.values() if s)} of {len(data)} panels with data)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
