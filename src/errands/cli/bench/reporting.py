"""The human report of ``errands bench`` (``--json`` prints the result itself)."""

from __future__ import annotations

import textwrap
from typing import Any

from . import producers
from .phases import BASELINE, RAW_BASELINE_LABELS, RAW_LABELS

REPORT_WIDTH = 100  # columns of the human report


def spread(figures: dict[str, Any]) -> str:
    """The slowest and fastest rounds' jobs/s: how much the host moved under this phase."""
    return f"{min(figures['rounds']):,.0f}-{max(figures['rounds']):,.0f}"


def report(r: dict[str, Any]) -> None:
    from .. import output

    v = r["versions"]
    print(
        _wrap(
            f"errands bench: {r['backend']}, {r['jobs']} jobs x {_rounds(r['rounds'])}, "
            f"durability={r['durability']}, {r['processes']} processes x concurrency "
            f"{r['concurrency']}, on {r['filesystem']}; errands {v['errands']}, Python "
            f"{v['python']}, SQLite {v['sqlite']}"
            + (f", PostgreSQL {v['postgresql']}" if "postgresql" in v else "")
            + f"; {r['cpus']} CPUs, load average {r['load_average']}"
        )
        + "\n"
    )
    raw, ours, ratios = r["raw"], r["errands"], r["ratios"]
    names = {
        **producers.LABELS,
        "enqueue_many": "enqueue_many",
        "process_1": "process, 1 worker process",
        "process_p": f"process, {r['processes']} worker processes",
    }
    rows = [
        (
            name,
            f"{ours[phase]['per_second']:,.0f}",
            spread(ours[phase]),
            f"{raw[BASELINE[phase]]['per_second']:,.0f}",
            spread(raw[BASELINE[phase]]),
            f"{ratios[phase]:.2f}x",
        )
        for phase, name in names.items()
    ]
    output.table(
        ["PHASE", "ERRANDS JOBS/S", "MIN-MAX", "RAW JOBS/S", "MIN-MAX", "RATIO"],
        rows,
        right=(1, 2, 3, 4, 5),
    )
    best = ", ".join(f"{p} {x:.2f}x" for p, x in r["ratios_best"].items())
    procs = f"{r['processes']} processes"
    baselines = "; ".join(
        f"{RAW_LABELS[b]}: {label}".replace("P processes", procs)
        for b, label in RAW_BASELINE_LABELS.items()
    )
    scale = r["scaling"]
    print(
        "\n"
        + _wrap(
            f"JOBS/S: the best of {_rounds(r['rounds'])}; MIN-MAX: the slowest and fastest rounds. "
            "Two ratios, each the median over rounds of a pair measured in the same round. "
            "RATIO: errands / raw doing the same work with as many processes (below 1: what "
            f"errands costs; best / best: {best}). SCALING, {procs} / 1: errands "
            f"{scale['errands']:.2f}x, raw {scale['raw']:.2f}x (what more processes buy on this "
            f"host). Raw baselines — {baselines}. enqueue one by one / raw insert + audit "
            f"row (the rows errands promises, same rounds): {r['ratios_audited']['enqueue']:.2f}x."
        )
    )
    print("\n" + _wrap(producers.summary(ours, r["producers"])))
    p, idle = r["pickup"], r["idle"]
    print(
        "\n"
        + _wrap(
            f"pickup (enqueue returned in one process → handler started in an idle worker "
            f"process), {p['samples']} jobs: p50 {p['p50_ms']} ms, p95 {p['p95_ms']} ms, "
            f"p99 {p['p99_ms']} ms, max {p['max_ms']} ms"
        )
    )
    print(f"idle worker CPU over {idle['seconds']:g} s: {idle['cpu_percent']}% of one core")


def _rounds(n: int) -> str:
    return "1 round" if n == 1 else f"{n} rounds"


def _wrap(text: str) -> str:
    return textwrap.fill(text, width=REPORT_WIDTH, break_on_hyphens=False)
