"""`perdure bench`: every figure of the benchmark, on one server, in one table.

Each repetition measures, one after another on the same server:
  a. pgbench one-row INSERT commits/s at the worker's client count (ceiling.py);
  b. perdure throughput: a 3-step no-op workflow, one worker process (throughput.py);
  c. perdure latency with an idle worker: start -> first step, signal -> continue (latency.py);
  d. perdure graphs: a fan-out of 100 (and 1,000) and its join, a 10-step chain (fanout.py);
     a map over 10,000 items against the same steps in sequence, a gather of 10 naps
     (map_width.py); starts from one process, alone and with start_many (start_rate.py);
  e. the peers on the same workload: DBOS, pgqrs, Absurd (peers/);
  f. perdure throughput again with --preload finished runs in its tables (preload.py).
Every figure in the table is the median of the repetitions. See docs/benchmarks.md.
"""

from __future__ import annotations

import json
import os
import platform
import statistics
import subprocess
import sys
import time
import uuid
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import ceiling
import fanout
import latency
import map_width
import preload
import start_rate
import throughput
from harness import BENCH_DIR, Probe, counting, drop_schema, start_server

PEERS = {"dbos": "DBOS 3.4", "pgqrs": "pgqrs 0.15", "absurd": "Absurd 0.5"}
#: The peers with a fan-out of their own (peers/common.py), perdure's figure
#: for each width it has one of (its graph fan-out and join), and how many
#: fan-outs each median is taken over.
FANOUT_PEERS = ("dbos", "absurd")
FANOUT_WIDTHS = {100: "graph.fanout_ms", 1000: "graph.fanout1000_ms"}
FANOUTS = 5


@dataclass
class Options:
    """What `perdure bench` was asked to do."""

    url: str | None = None
    runs: int = 3000
    repeat: int = 3
    concurrency: int = 128
    samples: int = 200
    peers: bool = True
    preload: int = 100_000
    pgbench_seconds: int = 5
    json_path: str | None = None
    sweep: tuple[int, ...] = ()
    map_widths: tuple[int, ...] = (1000, 10_000)
    peer_fanouts: tuple[int, ...] = (100, 1000)


@dataclass
class Row:
    """One line of the table: a figure's values over the repetitions, and its goal."""

    key: str
    label: str
    unit: str
    values: list[float]
    goal: str = ""
    met: bool | None = None
    note: str = ""

    @property
    def median(self) -> float | None:
        """The median of the repetitions (None when not measured)."""
        return statistics.median(self.values) if self.values else None


def run(options: Options, say: Callable[[str], None] = print) -> dict[str, Any]:
    """Run the whole benchmark; the report (also written to ``options.json_path``)."""
    server = start_server(options.url)
    probe = Probe(server.url)
    os.environ.setdefault("PERDURE_BENCH_BIN", str(server.bin_dir or ""))
    values: dict[str, list[float]] = {}
    notes: dict[str, str] = {}

    def keep(prefix: str, figures: dict[str, Any]) -> None:
        for name, value in figures.items():
            if isinstance(value, int | float) and not isinstance(value, bool):
                values.setdefault(f"{prefix}{name}", []).append(float(value))

    preloaded = f"bench_preloaded_{uuid.uuid4().hex[:6]}"
    try:
        if options.preload:
            say(f"preloading {options.preload} finished runs with COPY ...")
            seconds = preload.preload(server.url, preloaded, options.preload)
            notes["preload"] = f"{options.preload} runs written in {seconds:.0f} s"
        clients = 0
        for rep in range(1, options.repeat + 1):
            found: dict[str, Any] = {}
            # Empty and preloaded tables back to back, in turns first, so that
            # both meet the server in the same state (their ratio is paired).
            targets: list[str | None] = [None, preloaded] if options.preload else [None]
            if rep % 2 == 0:
                targets.reverse()
            for target in targets:
                what = f"throughput ({options.runs} runs)"
                if target is not None:
                    what = f"with {options.preload} runs"
                say(f"repetition {rep}/{options.repeat}: perdure {what}")
                prefix = "perdure." if target is None else "preloaded."
                figures = throughput.measure(
                    server.url, probe, options.runs, options.concurrency, schema=target
                )
                keep(prefix, figures)
                found.update({f"{prefix}{k}": v for k, v in figures.items()})
            clients = clients or max(1, int(found["perdure.worker_connections"]))
            say(f"repetition {rep}/{options.repeat}: pgbench, {clients} client(s)")
            rate = ceiling.measure(
                server.url, probe, server.bin_dir, clients, options.pgbench_seconds
            )
            keep("pgbench.", {"commits_per_s": rate})
            found["pgbench.commits_per_s"] = rate
            say(f"repetition {rep}/{options.repeat}: latency ({options.samples} samples each)")
            keep("latency.", latency.measure(server.url, probe, options.samples))
            say(f"repetition {rep}/{options.repeat}: graphs")
            graphs = fanout.measure(server.url, probe, options.concurrency)
            keep("graph.", graphs)
            found.update({f"graph.{k}": v for k, v in graphs.items()})
            for peer in FANOUT_PEERS if options.peers else ():
                for width in options.peer_fanouts:
                    say(f"repetition {rep}/{options.repeat}: {PEERS[peer]}, fan-out of {width}")
                    result = _peer(peer, server.url, probe, options, fanout=width)
                    if "error" in result:
                        notes[f"fanout.{peer}"] = result["error"]
                        continue
                    keep(f"fanout.{peer}.w{width}.", result)
                    ours = found.get(FANOUT_WIDTHS.get(width, ""))
                    if ours:
                        # How many times faster perdure's fan-out (and join) is.
                        keep("ratio.", {f"fanout_w{width}_vs_{peer}": result["ms"] / ours})
            for width in options.map_widths:
                say(f"repetition {rep}/{options.repeat}: map of {width:,} items, and in sequence")
                figures = map_width.measure(server.url, probe, options.concurrency, width)
                if width == 10_000:
                    keep("map.", figures)
                keep(
                    f"map.w{width}.",
                    {
                        "steps_per_s": figures["map_steps_per_s"],
                        "ratio": figures["ratio"],
                        "rss_mib": figures["worker_rss_peak_mib"],
                    },
                )
            say(f"repetition {rep}/{options.repeat}: gather of 10 naps")
            keep(
                "gather.",
                {"naps_ms": map_width.gather_sleep_ms(server.url, probe, options.concurrency, 3)},
            )
            say(f"repetition {rep}/{options.repeat}: starts from one process")
            for shape, n in (("threads:16", 3000), ("many", 20_000)):
                rate, cpu = start_rate.measure(server.url, probe, shape, n, 1000)
                keep("start.", {f"{shape}_runs_per_s": rate, f"{shape}_cpu_ms": cpu})
            if options.peers:
                for peer in PEERS:
                    say(f"repetition {rep}/{options.repeat}: {PEERS[peer]}")
                    result = _peer(peer, server.url, probe, options)
                    if "error" in result:
                        notes[peer] = result["error"]
                    else:
                        keep(f"{peer}.", result)
                        found[f"{peer}.runs_per_s"] = result["runs_per_s"]
            for level in options.sweep:
                say(f"repetition {rep}/{options.repeat}: concurrency {level}")
                figures = throughput.measure(server.url, probe, options.runs, level)
                keep(f"sweep.perdure.c{level}.", {"runs_per_s": figures["runs_per_s"]})
                for peer in PEERS if options.peers else ():
                    result = _peer(peer, server.url, probe, options, level)
                    if "error" not in result:
                        keep(f"sweep.{peer}.c{level}.", {"runs_per_s": result["runs_per_s"]})
            keep("ratio.", {k: v for k, v in _ratios(found).items() if v is not None})
    finally:
        if options.preload:
            drop_schema(probe, preloaded)
        probe.close()
        server.stop()
    report = _report(options, values, notes, clients)
    if options.json_path:
        Path(options.json_path).write_text(json.dumps(report, indent=2) + "\n")
    return report


def _peer(
    name: str,
    url: str,
    probe: Probe,
    options: Options,
    concurrency: int | None = None,
    fanout: int = 0,
) -> dict[str, Any]:
    """Run one peer script through its handshake; its figures, or {"error": why}.
    With ``fanout``, its fan-out of that width instead: {"ms": median of 5}."""
    schema = f"bench_{name}_{uuid.uuid4().hex[:6]}"
    script = BENCH_DIR / "peers" / f"{name}_peer.py"
    command = [sys.executable, str(script), "--database-url", url, "--schema", schema]
    level = concurrency or options.concurrency
    command += ["--runs", str(options.runs), "--concurrency", str(level)]
    if fanout:
        command += ["--fanout", str(fanout), "--fanouts", str(FANOUTS)]
    env = dict(os.environ, PYTHONPATH=str(BENCH_DIR / "peers"))
    process = subprocess.Popen(
        command,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
    )
    assert process.stdin is not None and process.stdout is not None
    try:
        if not _read_until(process, lambda line: line.strip() == "READY"):
            return {"error": _failure(name, process)}
        with counting(probe) as window:
            process.stdin.write("go\n")
            process.stdin.flush()
            line = _read_until(process, lambda line: line.startswith("{"))
            process.wait(timeout=600)
            if not line:
                return {"error": _failure(name, process)}
            result = json.loads(line)
            probe.own += int(result.pop("own_statements", 0))
        if fanout:
            return {"ms": statistics.median(result["ms"])}
        steps = 3 * result["runs"]
        per_step = window.per(steps)
        return {
            "runs_per_s": result["runs_per_s"],
            "steps_per_s": 3 * result["runs_per_s"],
            "commits_per_step": per_step["transactions"],
            "statements_per_step": per_step["statements"],
        }
    except (OSError, ValueError, subprocess.TimeoutExpired) as exc:
        return {"error": f"{name}: {exc}"}
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
        drop_schema(probe, schema)


def _read_until(process: subprocess.Popen[str], wanted: Callable[[str], bool]) -> str:
    assert process.stdout is not None
    for line in process.stdout:
        if wanted(line):
            return line
    return ""


def _failure(name: str, process: subprocess.Popen[str]) -> str:
    process.wait(timeout=60)
    tail = (process.stderr.read() if process.stderr else "").strip().splitlines()[-3:]
    return f"{name} exited with code {process.returncode}: {' / '.join(tail)}"


def _report(
    options: Options, values: dict[str, list[float]], notes: dict[str, str], clients: int
) -> dict[str, Any]:
    def row(
        key: str, label: str, unit: str, goal: str = "", source: str = "", **check: float
    ) -> Row:
        r = Row(key, label, unit, values.get(source or key, []))
        r.goal = goal
        if r.median is not None and check:
            bound = check.get("at_most", check.get("at_least"))
            assert bound is not None
            r.met = r.median <= bound if "at_most" in check else r.median >= bound
        return r

    rows = [
        row("pgbench.commits_per_s", f"pgbench one-row INSERT, {clients} client(s)", "commits/s"),
        row("perdure.runs_per_s", "perdure: 3-step runs, 1 worker", "runs/s"),
        row("perdure.steps_per_s", "perdure: steps", "steps/s"),
        row("perdure.commits_per_step", "perdure: commits per step", "", "≤ 1", at_most=1.0),
        row("perdure.round_trips_per_step", "perdure: round trips per step", "", "≤ 1", at_most=1),
        row("perdure.statements_per_step", "perdure: statements per step", ""),
        row("perdure.wal_flushes_per_step", "perdure: WAL flushes per step", ""),
        row("perdure.step_p50_ms", "perdure: step latency p50", "ms"),
        row("perdure.step_p99_ms", "perdure: step latency p99", "ms"),
        row("perdure.worker_cpu_ms_per_run", "perdure: worker CPU per run", "ms"),
        row("perdure.server_cpu_ms_per_run", "perdure: PostgreSQL CPU per run", "ms"),
        row("latency.start_p50_ms", "start → first step p50", "ms", "< 5", at_most=5.0),
        row("latency.start_p99_ms", "start → first step p99", "ms"),
        row("latency.signal_p50_ms", "signal → continue p50", "ms", "< 5", at_most=5.0),
        row("latency.signal_p99_ms", "signal → continue p99", "ms"),
        row("graph.fanout_ms", "graph: fan-out of 100 + join", "ms", "< 150", at_most=150.0),
        row("graph.fanout1000_ms", "graph: fan-out of 1,000 + join", "ms", "< 1500", at_most=1500),
        row("graph.chain_ms", "graph: chain of 10 steps", "ms"),
        row(
            "map.map_steps_per_s",
            "ctx.map over 10,000 items, 1 worker",
            "steps/s",
            "≥ 3000",
            at_least=3000.0,
        ),
        row(
            "map.ratio",
            "ratio: map steps/s / the same steps in sequence",
            "",
            "≥ 0.6",
            at_least=0.6,
        ),
        row("map.worker_rss_peak_mib", "map of 10,000: worker peak RSS", "MiB"),
        row("gather.naps_ms", "gather of 10 steps sleeping 50 ms", "ms", "< 100", at_most=100.0),
        row(
            "start.threads:16_runs_per_s",
            "app.start, 16 threads, 1 process",
            "runs/s",
            "≥ 3000",
            at_least=3000.0,
        ),
        row(
            "start.threads:16_cpu_ms",
            "app.start: client CPU per start",
            "ms",
            "≤ 0.2",
            at_most=0.2,
        ),
        row(
            "start.many_runs_per_s",
            "app.start_many, batches of 1,000",
            "runs/s",
            "≥ 20000",
            at_least=20000.0,
        ),
    ]
    for width in options.map_widths:
        rows.append(row(f"map.w{width}.steps_per_s", f"ctx.map over {width:,} items", "steps/s"))
        rows.append(
            row(
                f"map.w{width}.ratio",
                f"ratio: map / sequence, {width:,} items",
                "",
                "≥ 0.6",
                at_least=0.6,
            )
        )
        rows.append(
            row(
                f"map.w{width}.rss_mib",
                f"map of {width:,}: worker peak RSS",
                "MiB",
                "< 500",
                at_most=500.0,
            )
        )
    for peer, label in PEERS.items():
        rows.append(row(f"{peer}.runs_per_s", f"{label}: 3-step runs", "runs/s"))
        rows[-1].note = notes.get(peer, "")
        rows.append(row(f"{peer}.commits_per_step", f"{label}: commits per step", ""))
        rows.append(row(f"{peer}.statements_per_step", f"{label}: statements per step", ""))
    for peer in FANOUT_PEERS if options.peers else ():
        for width in options.peer_fanouts:
            rows.append(
                row(
                    f"fanout.{peer}.w{width}.ms",
                    f"{PEERS[peer]}: fan-out of {width:,} one-step tasks, wait for all",
                    "ms",
                )
            )
            rows[-1].note = notes.get(f"fanout.{peer}", "")
            rows.append(
                row(
                    f"fanout_w{width}_vs_{peer}",
                    f"ratio: {PEERS[peer]} fan-out of {width:,} / perdure's graph",
                    "",
                    source=f"ratio.fanout_w{width}_vs_{peer}",
                )
            )
    for level in options.sweep:
        for system, label in {"perdure": "perdure", **PEERS}.items():
            key = f"sweep.{system}.c{level}.runs_per_s"
            if key in values:
                rows.append(row(key, f"{label}: 3-step runs, concurrency {level}", "runs/s"))
    if options.preload:
        rows.append(
            row("preloaded.runs_per_s", f"perdure with {options.preload} finished runs", "runs/s")
        )
    # Each ratio is the median of the repetitions' ratios: the two figures of
    # a ratio come from the same repetition, measured minutes apart at most.
    ratio_rows = [
        row(name, label, "", goal, source=f"ratio.{name}", at_least=bound)
        for name, label, goal, bound in (
            ("perdure_vs_dbos", "ratio: perdure / DBOS runs/s", "≥ 10", 10.0),
            ("perdure_vs_best_queue", "ratio: perdure / best(pgqrs, Absurd)", "≥ 5", 5.0),
            ("steps_vs_pgbench", "ratio: perdure steps/s / pgbench commits/s", "≥ 0.5", 0.5),
            ("preloaded_vs_empty", "ratio: perdure with finished runs / empty", "≥ 0.9", 0.9),
        )
    ]
    rows += ratio_rows
    ratios = {r.key: r.median for r in ratio_rows}
    return {
        "when": time.strftime("%Y-%m-%d %H:%M:%S %Z"),
        "machine": {
            "cores": os.cpu_count(),
            "python": platform.python_version(),
            "load_average": os.getloadavg(),
        },
        "options": asdict(options),
        "rows": [{**asdict(r), "median": r.median} for r in rows],
        "ratios": ratios,
        "notes": notes,
    }


def number(value: float | None) -> str:
    """A figure as the table shows it: whole above 100, else two decimals."""
    if value is None:
        return "n/a"
    if abs(value) >= 100:
        return f"{value:,.0f}"
    return f"{value:.2f}"


def _ratios(m: dict[str, float | None]) -> dict[str, float | None]:
    def div(a: float | None, b: float | None) -> float | None:
        return None if a is None or not b else a / b

    queues = [v for v in (m.get("pgqrs.runs_per_s"), m.get("absurd.runs_per_s")) if v]
    return {
        "perdure_vs_dbos": div(m.get("perdure.runs_per_s"), m.get("dbos.runs_per_s")),
        "perdure_vs_best_queue": div(m.get("perdure.runs_per_s"), max(queues, default=None)),
        "steps_vs_pgbench": div(m.get("perdure.steps_per_s"), m.get("pgbench.commits_per_s")),
        "preloaded_vs_empty": div(m.get("preloaded.runs_per_s"), m.get("perdure.runs_per_s")),
    }
