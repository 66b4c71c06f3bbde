"""A line chart as SVG text, without a plotting library: enough for a benchmark's time series."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from html import escape

COLOURS = ("#1f77b4", "#d62728", "#2ca02c", "#ff7f0e", "#9467bd")
WIDTH, HEIGHT, MARGIN = 800, 300, 50


def line_chart(
    title: str,
    xs: Sequence[float],
    series: Mapping[str, Sequence[float]],
    x_label: str = "",
    markers: Sequence[tuple[float, str]] = (),
) -> str:
    """One chart, every series on the same y axis from 0 to the largest value; `markers` are
    labelled vertical lines at x positions (an event such as a load step)."""
    top = max((v for values in series.values() for v in values), default=1.0) or 1.0
    right = max(xs, default=1.0) or 1.0
    plot_w, plot_h = WIDTH - 2 * MARGIN, HEIGHT - 2 * MARGIN

    def point(x: float, y: float) -> str:
        return f"{MARGIN + x / right * plot_w:.1f},{HEIGHT - MARGIN - y / top * plot_h:.1f}"

    parts = [
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{WIDTH}" height="{HEIGHT}" font-family="sans-serif" '
        'font-size="11">',
        f'<rect width="{WIDTH}" height="{HEIGHT}" fill="white"/>',
        f'<text x="{MARGIN}" y="20" font-size="13">{escape(title)}</text>',
        f'<line x1="{MARGIN}" y1="{HEIGHT - MARGIN}" x2="{WIDTH - MARGIN}" y2="{HEIGHT - MARGIN}" stroke="black"/>',
        f'<line x1="{MARGIN}" y1="{MARGIN}" x2="{MARGIN}" y2="{HEIGHT - MARGIN}" stroke="black"/>',
        f'<text x="{MARGIN - 5}" y="{MARGIN + 4}" text-anchor="end">{top:.2f}</text>',
        f'<text x="{MARGIN - 5}" y="{HEIGHT - MARGIN}" text-anchor="end">0</text>',
        f'<text x="{WIDTH - MARGIN}" y="{HEIGHT - MARGIN + 15}" text-anchor="end">{right:.1f} {escape(x_label)}</text>',
    ]
    for fraction in (0.25, 0.5, 0.75):  # light gridlines, so values can be read off
        y = HEIGHT - MARGIN - fraction * plot_h
        parts.append(f'<line x1="{MARGIN}" y1="{y:.1f}" x2="{WIDTH - MARGIN}" y2="{y:.1f}" stroke="#e0e0e0"/>')
        parts.append(f'<text x="{MARGIN - 5}" y="{y + 4:.1f}" text-anchor="end">{fraction * top:.2f}</text>')
    for x, label in markers:
        at = point(x, 0).split(",")[0]
        parts.append(
            f'<line x1="{at}" y1="{MARGIN}" x2="{at}" y2="{HEIGHT - MARGIN}" stroke="grey" stroke-dasharray="4 3"/>'
        )
        parts.append(f'<text x="{at}" y="{MARGIN - 4}" text-anchor="middle" fill="grey">{escape(label)}</text>')
    for index, (name, values) in enumerate(series.items()):
        colour = COLOURS[index % len(COLOURS)]
        if values:
            path = " ".join(point(x, y) for x, y in zip(xs, values, strict=True))
            parts.append(f'<polyline fill="none" stroke="{colour}" stroke-width="1.5" points="{path}"/>')
        parts.append(f'<text x="{MARGIN + 10 + index * 175}" y="{HEIGHT - 12}" fill="{colour}">{escape(name)}</text>')
    parts.append("</svg>")
    return "\n".join(parts) + "\n"
