"""Charts of the performance page: static SVG, written by ``python -m perf report``.

One chart per scenario, one row per pair of the page's table: a bar from
1x to the median ratio (aioflux's speed over the other's), a whisker over
the rounds' min-max, and a tick at the target, if any. All charts share
one logarithmic scale, so bars compare across scenarios. The SVG is
written by hand (no plotting library, nothing fetched when the site
builds) and is the same text for the same data, so ``--check`` can tell a
stale chart.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from xml.sax.saxutils import escape, quoteattr

__all__ = ["Bar", "chart_markdown", "render_chart", "shared_scale", "ticks"]

WIDTH = 760
LEFT, RIGHT = 16, 16          # margins of the plot area
TITLE_H = 34                  # the title's band
ROW_H = 38                    # a label line, then the bar under it
AXIS_H = 34                   # tick labels under the last row
BAR_H = 10
# Passed, missed, no target: readable on Material's light and dark pages
# alike, since the chart keeps its own white background.
COLORS = {"PASS": "#2e7d32", "MISS": "#c62828", "": "#3949ab"}
TEXT = "#212121"
MUTED = "#616161"
GRID = "#e0e0e0"
FONT = "system-ui, -apple-system, 'Segoe UI', Roboto, Helvetica, Arial, sans-serif"


@dataclass(frozen=True)
class Bar:
    """One pair of a scenario: ``mine`` against ``other``.

    ``median``/``low``/``high`` are the per-round ratios' median, min and max
    (None: not measured); ``verdict`` is "PASS", "MISS" or "" without a target.
    """

    mine: str
    other: str
    median: float | None
    low: float | None
    high: float | None
    target: float | None
    verdict: str


def shared_scale(bars: Sequence[Bar]) -> tuple[float, float]:
    """The powers of two around every ratio of ``bars`` (and 1x)."""
    values = [v for b in bars for v in (b.low, b.high, b.target) if v is not None and v > 0]
    values.append(1.0)
    low = 2.0 ** math.floor(math.log2(min(values)))
    high = 2.0 ** math.ceil(math.log2(max(values)))
    if high == low:
        high *= 2
    return low, high


def ticks(low: float, high: float) -> list[float]:
    """Powers of two from ``low`` to ``high``; every other one past ten of them."""
    count = round(math.log2(high / low))
    step = 1 if count <= 10 else 2
    return [low * 2.0**i for i in range(0, count + 1, step)]


def _label(value: float) -> str:
    return f"{value:g}x"


def _fmt(value: float) -> str:
    # Coordinates rounded to 0.1 px: the same data, the same text.
    return f"{value:.1f}".rstrip("0").rstrip(".")


def render_chart(scenario: str, bars: Sequence[Bar], scale: tuple[float, float]) -> str:
    """The SVG of one scenario's pairs, on ``scale`` (see ``shared_scale``)."""
    low, high = scale
    plot_w = WIDTH - LEFT - RIGHT
    height = TITLE_H + ROW_H * len(bars) + AXIS_H

    def x(ratio: float) -> float:
        ratio = min(max(ratio, low), high)
        return LEFT + plot_w * math.log(ratio / low) / math.log(high / low)

    title = f"{scenario}: aioflux's speed over each other's (median of rounds, min-max)"
    plot_top, plot_bottom = TITLE_H, TITLE_H + ROW_H * len(bars)
    out = [
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{WIDTH}" height="{height}" '
        f'viewBox="0 0 {WIDTH} {height}" role="img" aria-label={quoteattr(title)} '
        f'font-family="{FONT}" font-size="12">',
        f"<title>{escape(title)}</title>",
        f'<rect width="{WIDTH}" height="{height}" rx="6" fill="#ffffff"/>',
        f'<text x="{LEFT}" y="22" font-size="14" font-weight="600" fill="{TEXT}">'
        f"{escape(scenario)}</text>",
        f'<text x="{WIDTH - RIGHT}" y="22" text-anchor="end" fill="{MUTED}">'
        "ratio: aioflux's speed / theirs, log scale</text>",
    ]
    for tick in ticks(low, high):
        tx = _fmt(x(tick))
        stroke = MUTED if tick == 1 else GRID
        out.append(f'<line x1="{tx}" y1="{plot_top}" x2="{tx}" y2="{plot_bottom}" '
                   f'stroke="{stroke}" stroke-width="1"/>')
        out.append(f'<text x="{tx}" y="{plot_bottom + 16}" text-anchor="middle" '
                   f'fill="{MUTED}">{_label(tick)}</text>')
    for i, bar in enumerate(bars):
        top = TITLE_H + ROW_H * i
        # A white outline keeps the label legible where a grid line crosses it.
        out.append(f'<text x="{LEFT}" y="{top + 13}" fill="{TEXT}" stroke="#ffffff" '
                   f'stroke-width="3" paint-order="stroke">'
                   f"{escape(bar.mine)} vs {escape(bar.other)}</text>")
        if bar.median is None:
            out.append(f'<text x="{WIDTH - RIGHT}" y="{top + 13}" text-anchor="end" '
                       f'fill="{MUTED}">not measured</text>')
            continue
        figure = f"{bar.median:.2f}x"
        if bar.low is not None and bar.high is not None:
            figure += f" ({bar.low:.2f}-{bar.high:.2f})"
        if bar.target is not None:
            figure += f", target >= {_label(bar.target)} {bar.verdict}"
        color = COLORS.get(bar.verdict, COLORS[""])
        out.append(f'<text x="{WIDTH - RIGHT}" y="{top + 13}" text-anchor="end" '
                   f'fill="{color}" stroke="#ffffff" stroke-width="3" paint-order="stroke">'
                   f"{escape(figure)}</text>")
        y0, mid = top + 19, top + 19 + BAR_H / 2
        a, b = sorted((x(1.0), x(bar.median)))
        out.append(f'<rect x="{_fmt(a)}" y="{y0}" width="{_fmt(max(b - a, 1.0))}" '
                   f'height="{BAR_H}" fill="{color}" fill-opacity="0.85"/>')
        if bar.low is not None and bar.high is not None:
            lo, hi = _fmt(x(bar.low)), _fmt(x(bar.high))
            out.append(f'<path d="M{lo} {_fmt(mid)}H{hi}M{lo} {y0 + 2}V{y0 + BAR_H - 2}'
                       f'M{hi} {y0 + 2}V{y0 + BAR_H - 2}" stroke="{TEXT}" '
                       'stroke-width="1.2" fill="none"/>')
        if bar.target is not None:
            tx = _fmt(x(bar.target))
            out.append(f'<line x1="{tx}" y1="{y0 - 4}" x2="{tx}" y2="{y0 + BAR_H + 4}" '
                       f'stroke="{TEXT}" stroke-width="2"/>')
    out.append("</svg>")
    return "\n".join(out) + "\n"


def chart_markdown(scenarios: Sequence[str], folder: str) -> str:
    """The page's images, one per scenario, from ``folder`` (relative to the page)."""
    return "\n\n".join(
        f"![{name}: aioflux's speed over each other client's, median of rounds "
        f"with min-max]({folder}/{name}.svg)" for name in scenarios)
