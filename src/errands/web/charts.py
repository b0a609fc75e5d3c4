"""Chart geometry for server-drawn SVG: numbers only, turned into markup by the templates
(``_charts.html``), so no chart needs a script, a library or a CDN."""

from __future__ import annotations

import math
from datetime import UTC, datetime
from typing import Any

from . import fmt

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


def _hour_label(epoch: float, days: bool = False) -> str:
    return datetime.fromtimestamp(epoch, UTC).strftime("%a %d" if days else "%H:00")


def _hour_title(epoch: float) -> str:
    """A bar's or point's hover text: the day too, for the 7-day charts."""
    return datetime.fromtimestamp(epoch, UTC).strftime("%a %d %H:00")


def _every(n: int) -> int:
    """Label every 6th hour of a day's bars, every 24th of a week's."""
    return 6 if n <= 48 else 24


LOG_TICKS = (0.001, 0.01, 0.1, 1.0, 10.0, 60.0, 600.0, 3600.0, 86400.0)
TICK_TEXT = {
    0.001: "1ms",
    0.01: "10ms",
    0.1: "100ms",
    1.0: "1s",
    10.0: "10s",
    60.0: "1m",
    600.0: "10m",
    3600.0: "1h",
    86400.0: "1d",
}


def latency(series: list[dict[str, Any]], measure: str) -> dict[str, Any]:
    """p50 and p95 of ``measure`` (wait or run) per hour as two lines on a log scale (hours
    with nothing finished have no point). Each point is also a dot of its line's colour: an
    hour alone (one point, so no line) still shows."""
    frame = _frame()
    plot_w = frame["x1"] - frame["x0"]
    plot_h = frame["y0"] - frame["y1"]
    values = [
        v
        for h in series
        for v in (h[f"{measure}_p50"], h[f"{measure}_p95"])
        if v is not None and v > 0
    ]
    low = max([t for t in LOG_TICKS if t <= min(values, default=1.0)], default=LOG_TICKS[0])
    high = min([t for t in LOG_TICKS if t >= max(values, default=1.0)], default=LOG_TICKS[-1])
    if high <= low:
        high = next((t for t in LOG_TICKS if t > low), low * 10)
    span = math.log10(high) - math.log10(low)

    def y(v: float) -> float:
        v = min(max(v, low), high)
        return round(float(frame["y0"] - plot_h * (math.log10(v) - math.log10(low)) / span), 1)

    slot = plot_w / max(len(series), 1)
    days = len(series) > 48
    lines: dict[str, list[dict[str, Any]]] = {"p50": [], "p95": []}
    for i, h in enumerate(series):
        x = round(frame["x0"] + (i + 0.5) * slot, 1)
        for p in ("p50", "p95"):
            v = h[f"{measure}_{p}"]
            if v is not None:
                label = _hour_title(h["hour"])
                lines[p].append(
                    {
                        "x": x,
                        "y": y(max(v, low)),
                        "p": p,
                        "title": f"{label} UTC: {p} {fmt.duration(v) if v < 1 else f'{v:g} s'}",
                    }
                )
    ticks = [{"y": y(t), "text": TICK_TEXT[t]} for t in LOG_TICKS if low <= t <= high]
    labels = [
        {"x": round(frame["x0"] + i * slot + 1, 1), "text": _hour_label(h["hour"], days)}
        for i, h in enumerate(series)
        if i % _every(len(series)) == 0
    ]
    return {
        **frame,
        "ticks": ticks,
        "labels": labels,
        "p50": " ".join(f"{p['x']},{p['y']}" for p in lines["p50"]),
        "p95": " ".join(f"{p['x']},{p['y']}" for p in lines["p95"]),
        "points": lines["p50"] + lines["p95"],
        "measure": measure,
        "hours": len(series),
        "lone": len(lines["p50"]) < 2,  # no line to see: larger dots
    }


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
                    "title": f"{_hour_title(h['hour'])} UTC: {n:,} {outcome}",
                }
            )
        if i % _every(len(series)) == 0:
            labels.append({"x": round(x, 1), "text": _hour_label(h["hour"], len(series) > 48)})
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
                "title": f"{_hour_title(h['hour'])} UTC: {rate:.0%} failed of {finished:,}",
            }
        )
    labels = [
        {
            "x": round(frame["x0"] + i * slot + 1, 1),
            "text": _hour_label(h["hour"], len(series) > 48),
        }
        for i, h in enumerate(series)
        if i % _every(len(series)) == 0
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


def progress(finished: list[float], total: int, start: float, now: float) -> dict[str, Any]:
    """A batch's members finished over time: a step line from the first member's creation
    to the last outcome (or now, while members are left), rising to ``total``. ``finished``:
    the members' finish times, sorted."""
    frame = _frame()
    plot_w = frame["x1"] - frame["x0"]
    plot_h = frame["y0"] - frame["y1"]
    end = finished[-1] if finished and len(finished) == total else now
    end = max(end, start + 1.0)
    top = max(total, 1)

    def x(t: float) -> float:
        return round(float(frame["x0"] + plot_w * (t - start) / (end - start)), 1)

    def y(n: int) -> float:
        return round(float(frame["y0"] - plot_h * n / top), 1)

    points = [(x(start), y(0))]
    step = max(1, len(finished) // 400)  # a large batch: a step every so many members
    for i, t in enumerate(finished, start=1):
        if i % step and i != len(finished):
            continue
        points.append((x(t), points[-1][1]))  # flat until this one finished, then up
        points.append((x(t), y(i)))
    points.append((x(end), y(len(finished))))
    fmt_time = "%H:%M:%S" if end - start < 86400 else "%a %d %H:%M"
    labels = [
        {
            "x": frame["x0"],
            "text": datetime.fromtimestamp(start, UTC).strftime(fmt_time),
            "anchor": "start",
        },
        {
            "x": frame["x1"],
            "text": datetime.fromtimestamp(end, UTC).strftime(fmt_time),
            "anchor": "end",
        },
    ]
    last = points[-1]
    return {
        **frame,
        "line": " ".join(f"{px},{py}" for px, py in points),
        "top": total,
        "done": len(finished),
        "end_dot": {"x": last[0], "y": last[1]},
        "labels": labels,
        "span": end - start,
    }
