"""The benchmark's report: RESULTS.md's tables and the chart, from results.json's rounds.

Every comparison is a same-round ratio (queuey's figure over the other's, round by
round), shown as the median and the min-max over rounds.
"""

from __future__ import annotations

import math
import statistics
from pathlib import Path
from typing import Any

Rounds = list[dict[str, dict[str, Any]]]


def spread(values: list[float], fmt: str = "{:,.0f}") -> str:
    """``median (min-max)``; n/a where nothing was measured (a NaN: a worker with
    several processes reports no first job or running rate of its own)."""
    values = [v for v in values if not math.isnan(v)]
    if not values:
        return "n/a"
    low, mid, high = (fmt.format(v) for v in (min(values), statistics.median(values), max(values)))
    return f"{mid} ({low}-{high})"


def figure(rounds: Rounds, system: str, key: str = "rate") -> list[float]:
    return [r[system][key] for r in rounds if system in r]


def ratio(rounds: Rounds, ours: str, theirs: str, key: str = "rate") -> list[float]:
    return [r[ours][key] / r[theirs][key] for r in rounds if ours in r and theirs in r]


def markdown(results: dict[str, Any]) -> str:
    load = results["load"]
    lines = [
        f"Measured {results['when']} on commit {results['commit']}: {results['machine']}. "
        f"{results['rounds']} rounds, each figure the median (min-max) over rounds; ratios "
        "are taken within a round. Load average (1, 5, 15 min) "
        f"{_load(load['before'])} before, {_load(load['after'])} after "
        f"({load['minutes']:.0f} minutes; the machine is shared with other work). Durable "
        "queues, persistent messages.",
        "",
        f"**Worker throughput**: {results['jobs']:,} no-op jobs waiting, each worker a "
        "process launched as its users launch it, timed from launch until its queue is "
        "empty; 8 job threads each (queuey `--concurrency 8`, prefetch 16; Dramatiq "
        "1 process, 8 threads, its prefetch 16; Celery threads pool, 8, `acks_late`, its "
        "prefetch 32); raw pika: one consumer, prefetch 100, one `basic_ack` per message, "
        "timed from its first delivery. *Running*: the same run timed from its first job "
        "(launch left out). *CPU*: user + system time of the worker's processes over the "
        "run, launch included, per job (the broker's is not counted); load moves it far "
        "less than the rates. *queuey, SQLite file*: the same worker and jobs on the "
        "embedded backend (a fresh file a run, no broker), timed until the file holds no "
        "ready job; its ratio is queuey on RabbitMQ over it.",
        "",
        "| worker | jobs/s from launch | queuey / it | jobs/s running | queuey / it, running "
        "| CPU per job (us) | first job after launch (s) "
        "| peak RSS, largest process (MB) | peak RSS, process tree (MB) |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    worker = results["worker"]
    for system in WORKERS:
        if not figure(worker, system):
            continue
        rel = _rel(worker, system)
        running = _rel(worker, system, "running_rate")
        if system == "queuey, 2 processes":  # its target is against raw pika
            rel = f"{spread(ratio(worker, system, 'raw pika'), '{:.2f}')} (it / raw pika)"
            running = ""
        first = rss = tree = ""
        if system != "raw pika":
            first = spread(figure(worker, system, "first_job_s"), "{:.2f}")
            rss = spread(figure(worker, system, "rss_mb"), "{:.0f}")
            tree = spread(figure(worker, system, "rss_tree_mb"), "{:.0f}")
        lines.append(
            f"| {system} | {spread(figure(worker, system))} | {rel} "
            f"| {spread(figure(worker, system, 'running_rate'))} | {running} "
            f"| {spread(figure(worker, system, 'cpu_us'))} | {first} | {rss} | {tree} |"
        )
    if figure(worker, "queuey, traced"):
        lines += ["", tracing_line(worker)]
    io = results["io"]
    ideal = 64 / 0.02
    lines += [
        "",
        f"**I/O-bound**: {results['io_jobs']:,} jobs that each wait 20 ms without using the "
        "CPU (queuey: `ctx.wait`; Dramatiq: `time.sleep`), 64 job threads (queuey prefetch "
        f"128, Dramatiq's 128); the ideal is 64 / 0.02 s = {ideal:,.0f} jobs/s. Timed from "
        "the first job (a running worker), and from launch.",
        "",
        "| worker | jobs/s running | fraction of the ideal | queuey / it | jobs/s from launch |",
        "|---|---|---|---|---|",
    ]
    for system in ("queuey", "dramatiq"):
        if not figure(io, system):
            continue
        fractions = [rate / ideal for rate in figure(io, system, "running_rate")]
        rel = _rel(io, system, "running_rate")
        lines.append(
            f"| {system} | {spread(figure(io, system, 'running_rate'))} "
            f"| {spread(fractions, '{:.2f}')} | {rel} | {spread(figure(io, system))} |"
        )
    pub = results["publish"]
    lines += [
        "",
        f"**Publishing** {results['jobs']:,} jobs from one thread: queuey's `enqueue_many` "
        "(one call, every message confirmed by the broker) beside Dramatiq's `send()` and "
        "raw pika's `basic_publish`, neither confirmed, and raw pika with 1,000 confirms in "
        "flight.",
        "",
        "| publisher | msg/s | queuey / it | CPU per message (us) |",
        "|---|---|---|---|",
    ]
    names = {
        "queuey": "queuey `enqueue_many`, confirmed",
        "dramatiq": "Dramatiq `send()`, unconfirmed",
        "raw pika": "raw pika, unconfirmed",
        "raw pika confirmed": "raw pika, 1,000 confirms in flight",
    }
    for system, label in names.items():
        if not figure(pub, system):
            continue
        rel = _rel(pub, system)
        cpu = spread(figure(pub, system, "cpu_us")) if "cpu_us" in pub[0].get(system, {}) else ""
        lines.append(f"| {label} | {spread(figure(pub, system))} | {rel} | {cpu} |")
    lat = results["latency"]
    if lat:
        rate = lat[0]["rate"]
        lines += [
            "",
            f"**Latency near saturation**: a running `queuey worker` (8 threads) fed "
            f"{rate:,.0f} jobs/s (0.8 x its median running throughput above) for a few "
            "seconds; the handler measures enqueue to start.",
            "",
            "| p50 ms | p99 ms | max ms |",
            "|---|---|---|",
            f"| {spread([x['p50'] for x in lat], '{:.1f}')} "
            f"| {spread([x['p99'] for x in lat], '{:.1f}')} "
            f"| {spread([x['max'] for x in lat], '{:.1f}')} |",
        ]
    cpu = results.get("cpu")
    if cpu:
        lines += [
            "",
            "**CPU-bound**: pure-Python jobs, `--processes 1` against `--processes 2`.",
            "",
            "| processes | jobs/s | 2 / 1 |",
            "|---|---|---|",
            f"| 1 | {spread(figure(cpu, 'processes 1'))} | |",
            f"| 2 | {spread(figure(cpu, 'processes 2'))} "
            f"| **{spread(ratio(cpu, 'processes 2', 'processes 1'), '{:.2f}')}** |",
        ]
    else:
        lines += ["", "CPU-bound (`--processes`): not measured, `queuey worker` lacks it yet."]
    return "\n".join(lines) + "\n"


PUBLISHERS = ["queuey", "dramatiq", "raw pika", "raw pika confirmed"]
WORKERS = [
    "queuey",
    "queuey, traced",
    "dramatiq",
    "celery",
    "raw pika",
    "queuey, 2 processes",
    "queuey, SQLite file",
]


def tracing_line(worker: Rounds) -> str:
    """Tracing's cost, as same-round ratios of the traced worker to the untraced one."""
    running = ratio(worker, "queuey, traced", "queuey", "running_rate")
    launch = ratio(worker, "queuey, traced", "queuey")
    cpu = ratio(worker, "queuey, traced", "queuey", "cpu_us")
    return (
        "**Tracing**: the same worker with a tracer provider (the SDK's `BatchSpanProcessor` "
        "around the OTLP/HTTP exporter, sending to a receiver in the harness), on jobs that "
        "each carry a trace context of their own: a CONSUMER span per job, exported. Traced "
        "/ untraced, same round (launch included; bench/tracing.py leaves it out): running rate "
        f"{spread(running, '{:.3f}')}, rate from launch {spread(launch, '{:.3f}')}, "
        f"CPU per job {spread(cpu, '{:.3f}')}."
    )


def _rel(rounds: Rounds, system: str, key: str = "rate") -> str:
    """``queuey / system`` in bold, or nothing on queuey's own row."""
    if system == "queuey":
        return ""
    return f"**{spread(ratio(rounds, 'queuey', system, key), '{:.2f}')}**"


def _load(values: list[float] | tuple[float, ...]) -> str:
    return "/".join(f"{v:.1f}" for v in values)


def draw(results: dict[str, Any], path: Path) -> None:
    """Bars of each figure's median (with min-max), queuey beside each peer."""
    import matplotlib  # noqa: PLC0415 - only the chart needs it

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt  # noqa: PLC0415

    panels = [
        ("worker, no-op jobs (from launch)", results["worker"], WORKERS, "rate"),
        ("I/O-bound, 64 threads (running)", results["io"], ["queuey", "dramatiq"], "running_rate"),
        ("publishing", results["publish"], PUBLISHERS, "rate"),
    ]
    colors = {
        "queuey": "#2f6fdf",
        "queuey, traced": "#6f9be8",
        "queuey, 2 processes": "#1d4596",
        "queuey, SQLite file": "#8c6bb1",
        "dramatiq": "#e07b39",
        "celery": "#55a868",
        "raw pika": "#9aa5b1",
        "raw pika confirmed": "#c8ced6",
    }
    fig, axes = plt.subplots(1, len(panels), figsize=(12, 4.2), dpi=110)
    for ax, (title, rounds, systems, key) in zip(axes, panels, strict=True):
        shown = [s for s in systems if figure(rounds, s)]
        meds = [statistics.median(figure(rounds, s, key)) for s in shown]
        lows = [m - min(figure(rounds, s, key)) for m, s in zip(meds, shown, strict=True)]
        highs = [max(figure(rounds, s, key)) - m for m, s in zip(meds, shown, strict=True)]
        ax.bar(
            range(len(shown)),
            meds,
            yerr=[lows, highs],
            capsize=4,
            color=[colors[s] for s in shown],
        )
        ax.set_xticks(
            range(len(shown)),
            [s.replace(" confirmed", "\nconfirmed").replace(", ", ",\n") for s in shown],
            # Seven workers side by side: their names slanted, so that none overlap.
            rotation=35 if len(shown) > 4 else 0,
            ha="right" if len(shown) > 4 else "center",
            fontsize=8 if len(shown) > 4 else 10,
        )
        for x, s in enumerate(shown):
            if s != "queuey":
                rel = statistics.median(ratio(rounds, "queuey", s, key))
                ax.annotate(
                    f"{rel:.2f}x",
                    (x, meds[x] + highs[x]),
                    textcoords="offset points",
                    xytext=(0, 8),
                    ha="center",
                    fontsize=8,
                )
        ax.set_title(title, fontsize=10)
        ax.margins(y=0.15)
    axes[0].set_ylabel("jobs or messages / s (median, min-max)")
    fig.suptitle(
        f"queuey beside its peers, same rounds ({results['when']}); "
        "labels: queuey / it, median of rounds",
        fontsize=10,
    )
    fig.tight_layout()
    fig.savefig(path)
