"""Chart geometry for server-drawn SVG: numbers only, turned into markup by the templates
(``_charts.html``), so no chart needs a script, a library or a CDN."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

WIDTH, HEIGHT = 720, 180
LEFT, RIGHT, TOP, BOTTOM = 44, 8, 10, 22
OUTCOMES = ("succeeded", "failed", "cancelled")


def _nice(n: float) -> int:
    """The smallest 1, 2 or 5 times a power of ten at or above ``n`` (an axis maximum)."""
    step = 1
    while True:
        for m in (1, 2, 5):
            if m * step >= n:
                return m * step
        step *= 10


def _hour_label(epoch: float) -> str:
    return datetime.fromtimestamp(epoch, UTC).strftime("%H:00")


def _frame() -> dict[str, Any]:
    return {
        "w": WIDTH,
        "h": HEIGHT,
        "x0": LEFT,
        "x1": WIDTH - RIGHT,
        "y0": HEIGHT - BOTTOM,
        "y1": TOP,
    }


def throughput(series: list[dict[str, Any]]) -> dict[str, Any]:
    """Stacked bars per hour: succeeded, failed, cancelled."""
    frame = _frame()
    plot_w = frame["x1"] - frame["x0"]
    plot_h = frame["y0"] - frame["y1"]
    totals = [sum(h[o] for o in OUTCOMES) for h in series]
    top = _nice(max([*totals, 1]))
    slot = plot_w / max(len(series), 1)
    bars, labels = [], []
    for i, h in enumerate(series):
        x = frame["x0"] + i * slot + 1
        y = float(frame["y0"])
        for outcome in OUTCOMES:
            n = h[outcome]
            if not n:
                continue
            height = plot_h * n / top
            y -= height
            bars.append(
                {
                    "x": round(x, 1),
                    "y": round(y, 1),
                    "w": round(max(slot - 2, 1), 1),
                    "h": round(height, 1),
                    "cls": outcome,
                    "title": f"{_hour_label(h['hour'])} UTC: {n:,} {outcome}",
                }
            )
        if i % 6 == 0:
            labels.append({"x": round(x, 1), "text": _hour_label(h["hour"])})
    return {**frame, "bars": bars, "labels": labels, "top": top, "total": sum(totals)}


def failure_rate(series: list[dict[str, Any]]) -> dict[str, Any]:
    """Failed / finished per hour, as points on a 0-100 % line (hours with nothing finished
    have no point)."""
    frame = _frame()
    plot_w = frame["x1"] - frame["x0"]
    plot_h = frame["y0"] - frame["y1"]
    slot = plot_w / max(len(series), 1)
    points = []
    for i, h in enumerate(series):
        finished = sum(h[o] for o in OUTCOMES)
        if not finished:
            continue
        rate = h["failed"] / finished
        points.append(
            {
                "x": round(frame["x0"] + (i + 0.5) * slot, 1),
                "y": round(frame["y0"] - plot_h * rate, 1),
                "title": f"{_hour_label(h['hour'])} UTC: {rate:.0%} failed of {finished:,}",
            }
        )
    labels = [
        {"x": round(frame["x0"] + i * slot + 1, 1), "text": _hour_label(h["hour"])}
        for i, h in enumerate(series)
        if i % 6 == 0
    ]
    return {
        **frame,
        "points": points,
        "line": " ".join(f"{p['x']},{p['y']}" for p in points),
        "labels": labels,
        "mid": round(frame["y0"] - plot_h / 2, 1),
    }


def counts(by_state: dict[str, int]) -> dict[str, Any]:
    """One horizontal bar per state, scaled to the largest."""
    width, row = 360, 22
    label_w = 90
    top = max([*by_state.values(), 1])
    bars = [
        {
            "y": i * row,
            "state": state,
            "n": n,
            "w": round((width - label_w - 70) * n / top, 1),
        }
        for i, (state, n) in enumerate(by_state.items())
    ]
    return {"w": width, "h": row * len(bars), "label_w": label_w, "bars": bars}
