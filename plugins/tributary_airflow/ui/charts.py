"""Small inline SVG charts drawn on the server: no script, no library, nothing fetched."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from markupsafe import Markup, escape

__all__ = ["Series", "bar_chart"]

_WIDTH, _HEIGHT, _PAD = 280, 64, 14


@dataclass(frozen=True, slots=True)
class Series:
    """One stacked layer of a bar chart: a value per run (oldest first) and its colour."""

    name: str
    values: Sequence[float]
    colour: str


def _number(value: float, unit: str) -> str:
    if unit == "B":
        for step, suffix in ((1 << 30, "GiB"), (1 << 20, "MiB"), (1 << 10, "KiB")):
            if value >= step:
                return f"{value / step:.1f} {suffix}"
        return f"{value:.0f} B"
    return f"{value:.3g}{(' ' + unit) if unit else ''}"


def bar_chart(title: str, labels: Sequence[str], layers: Sequence[Series], unit: str = "") -> Markup:
    """A stacked bar per run (oldest left), its maximum written at the top; each bar's tooltip
    names the run and every layer's value. An empty chart says so."""
    runs = len(labels)
    totals = [sum(layer.values[i] for layer in layers) for i in range(runs)]
    peak = max(totals, default=0) or 1
    bar = (_WIDTH - 2) / max(runs, 1)
    parts = [
        f'<svg class="chart" role="img" width="{_WIDTH}" height="{_HEIGHT + _PAD}" '
        f'viewBox="0 0 {_WIDTH} {_HEIGHT + _PAD}" aria-label="{escape(title)}">',
        f'<text x="0" y="10" font-size="10" fill="#475467">{escape(title)} · max {_number(max(totals, default=0), unit)}</text>',
    ]
    for i in range(runs):
        top = float(_HEIGHT + _PAD)
        tip = f"{labels[i]}: " + ", ".join(f"{s.name} {_number(s.values[i], unit)}" for s in layers)
        for layer in layers:
            height = layer.values[i] / peak * (_HEIGHT - 2)
            top -= height
            parts.append(
                f'<rect x="{1 + i * bar:.1f}" y="{top:.1f}" width="{max(bar - 2, 1):.1f}" height="{height:.1f}" '
                f'fill="{layer.colour}"><title>{escape(tip)}</title></rect>'
            )
    if not runs:
        parts.append(f'<text x="0" y="{_PAD + 20}" font-size="11" fill="#667085">no runs yet</text>')
    parts.append("</svg>")
    return Markup("".join(parts))
