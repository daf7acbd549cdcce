"""Run every benchmark and write bench/RESULTS.md and bench/throughput.png.

    ./scripts/bench [--rounds 5]

Each throughput figure is measured for queuey and for raw pika in the same round, and
reported as the median (and min-max) of the per-round ratios: this machine is shared
and noisy, so only same-run ratios compare. Never run as a test.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import statistics
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

from queuey_core.backends.rabbitmq import RabbitMQBackend

sys.path.insert(0, str(Path(__file__).parent))

import measure  # lives beside this script

HERE = Path(__file__).parent

PAIRS: list[tuple[str, str, Callable[[], float], Callable[[], float], str]] = [
    (
        "worker throughput (20,000 no-op jobs)",
        "pika consumer, prefetch 100, basic_ack each",
        lambda: measure.raw_consumer(20_000),
        lambda: measure.queuey_worker(20_000),
        ">= 0.6",
    ),
    (
        "single enqueue() with confirms (2,000)",
        "pika publish, confirm each",
        lambda: measure.raw_publish_confirmed(2_000),
        lambda: measure.queuey_enqueue(2_000),
        ">= 0.77 (time within 1.3x)",
    ),
    (
        "batch enqueue_many() with confirms (20,000)",
        "pika SelectConnection, 1,000 confirms in flight",
        lambda: measure.raw_publish_windowed(20_000),
        lambda: measure.queuey_enqueue_many(20_000),
        ">= 0.8",
    ),
]


def machine() -> str:
    cpu = "?"
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    rabbit = "?"
    try:
        backend = RabbitMQBackend(measure.URL)
        rabbit = backend.server_version
        backend.close()
    except Exception:
        pass
    mem = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**30
    return (
        f"{os.cpu_count()} cores ({cpu}), {mem:.0f} GiB, Python {platform.python_version()}, "
        f"RabbitMQ {rabbit}, pika {__import__('pika').__version__}"
    )


def spread(values: list[float], fmt: str = "{:,.0f}") -> str:
    """``median (min-max)``."""
    low, mid, high = (fmt.format(v) for v in (min(values), statistics.median(values), max(values)))
    return f"{mid} ({low}-{high})"


def col(results: list[dict[str, float]], key: str, fmt: str = "{:.1f}") -> str:
    """One figure of several rounds, as ``median (min-max)``."""
    return spread([r[key] for r in results], fmt)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument(
        "--redraw", action="store_true", help="Redraw the chart from bench/results.json."
    )
    args = parser.parse_args()
    if args.redraw:
        saved = json.loads((HERE / "results.json").read_text())
        draw([(c["name"], c["raw"], c["queuey"]) for c in saved["chart"]], saved["when"])
        return

    rows = []
    chart = []
    for name, reference, raw_fn, queuey_fn, target in PAIRS:
        raws, ours, ratios = [], [], []
        for r in range(args.rounds):
            # Alternate which goes first, so neither always gets the warmer broker.
            order = [("raw", raw_fn), ("queuey", queuey_fn)]
            if r % 2:
                order.reverse()
            got = {}
            for label, fn in order:
                measure.reset()
                got[label] = fn()
            raws.append(got["raw"])
            ours.append(got["queuey"])
            ratios.append(got["queuey"] / got["raw"])
            print(
                f"{name}: round {r + 1}: raw {got['raw']:,.0f}/s queuey {got['queuey']:,.0f}/s",
                flush=True,
            )
        rows.append((name, reference, spread(raws), spread(ours), spread(ratios, "{:.2f}"), target))
        chart.append((name.split(" (")[0], raws, ours))

    measure.reset()
    light = [measure.latency(200, 5) for _ in range(args.rounds)]
    worker_rate = statistics.median(chart[0][2])
    busy_rate = round(worker_rate * 0.8, -1)
    busy = [measure.latency(busy_rate, 4) for _ in range(args.rounds)]
    measure.reset()
    process = [
        measure.cli_worker_rss_and_first_job(20_000) for _ in range(max(2, args.rounds // 2))
    ]
    measure.reset()

    when = datetime.datetime.now().strftime("%Y-%m-%d %H:%M")
    commit = subprocess.run(
        ["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True, check=False
    ).stdout.strip()
    lines = [
        f"Measured {when} on commit {commit}: {machine()}; {args.rounds} rounds, "
        "median (min-max). Durable queue, persistent messages.",
        "",
        "| figure | raw pika reference | raw pika msg/s | queuey msg/s | queuey / raw | target |",
        "|---|---|---|---|---|---|",
        *(f"| {a} | {b} | {c} | {d} | **{e}** | {f} |" for a, b, c, d, e, f in rows),
        "",
        "| latency, enqueue to handler start | p50 ms | p99 ms | max ms | target |",
        "|---|---|---|---|---|",
        f"| light load, 200 jobs/s | {col(light, 'p50')} | {col(light, 'p99')} "
        f"| {col(light, 'max')} | p50 < 5 |",
        f"| near saturation, {busy_rate:,.0f} jobs/s (0.8 x worker throughput) "
        f"| {col(busy, 'p50')} | {col(busy, 'p99')} | {col(busy, 'max')} | |",
        "",
        "| `queuey worker` process | value | target |",
        "|---|---|---|",
        f"| peak RSS over 20,000 jobs | {col(process, 'rss_mb')} MB | < 60 MB |",
        f"| launch to first job consumed | {col(process, 'first_job_s', '{:.2f}')} s | < 1 s |",
    ]
    (HERE / "RESULTS.md").write_text("\n".join(lines) + "\n")
    (HERE / "results.json").write_text(
        json.dumps(
            {
                "when": when,
                "chart": [{"name": n, "raw": r, "queuey": q} for n, r, q in chart],
                "latency": {"light": light, "busy": busy},
                "process": process,
            },
            indent=1,
        )
    )
    print("\n".join(lines))
    draw(chart, when)


def draw(chart: list[tuple[str, list[float], list[float]]], when: str) -> None:
    import matplotlib  # noqa: PLC0415 - only the benchmark needs it

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt  # noqa: PLC0415

    fig, ax = plt.subplots(figsize=(8, 4.2), dpi=110)
    xs = range(len(chart))
    width = 0.38
    for offset, label, idx, color in (
        (-width / 2, "raw pika", 1, "#9aa5b1"),
        (width / 2, "queuey", 2, "#2f6fdf"),
    ):
        meds = [statistics.median(row[idx]) for row in chart]  # type: ignore[arg-type]
        lows = [m - min(row[idx]) for m, row in zip(meds, chart, strict=True)]  # type: ignore[arg-type]
        highs = [max(row[idx]) - m for m, row in zip(meds, chart, strict=True)]  # type: ignore[arg-type]
        ax.bar(
            [x + offset for x in xs],
            meds,
            width,
            label=label,
            color=color,
            yerr=[lows, highs],
            capsize=4,
        )
    ax.set_xticks(list(xs), [row[0].replace(" with", "\nwith") for row in chart])
    for x, (_, raw, ours) in zip(xs, chart, strict=True):
        ratio = statistics.median(q / r for q, r in zip(ours, raw, strict=True))
        top = max(*raw, *ours)
        ax.annotate(
            f"{ratio:.2f}x",
            (x, top),
            textcoords="offset points",
            xytext=(0, 6),
            ha="center",
            fontsize=9,
        )
    ax.margins(y=0.12)
    ax.set_ylabel("messages / second (median, min-max)")
    ax.set_title(f"queuey beside raw pika, same run ({when})")
    ax.legend()
    fig.tight_layout()
    fig.savefig(HERE / "throughput.png")


if __name__ == "__main__":
    main()
