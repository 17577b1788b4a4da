"""How long ``atlasbus demo`` takes from the command to its traffic, cold and warm.

    python benchmarks/bench_demo_start.py [--venv DIR] [--warm-runs 2]

Makes a fresh virtualenv with ``pip install ".[demo]"`` (as the README's first command; or
takes ``--venv``, one made so), and a fresh home folder, so the first run is a new user's:
no Delta Lake jars in Ivy's cache, no numba cache, no atlasbus cache. Then runs
``atlasbus demo --duration 3`` once cold and ``--warm-runs`` times warm (same venv, same home),
timing each phase line the demo prints from the moment the command was started: Spark
starting, the warm-up, the query starting, and the traffic starting. pip's install is timed
apart (it is not part of the command).

Prints a table and writes benchmarks/results/demo-start.json.
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).parent))
from run_report import benchmark_parser, write_report

ROOT = Path(__file__).resolve().parent.parent
RESULTS = Path(__file__).parent / "results" / "demo-start.json"
# The demo's phase lines (atlasbus demo's pipeline), by how each begins after its clock.
PHASES = {
    "Spark starting": "starting Spark",
    "warm-up": "warming up Spark",
    "query starting": "starting the streaming query",
    "traffic": "query running; publishing",
}


def fresh_venv(folder: Path) -> tuple[Path, float]:
    """A virtualenv with atlasbus's demo extra, as the README installs it; its install time."""
    started = time.perf_counter()
    subprocess.run([sys.executable, "-m", "venv", str(folder)], check=True)
    subprocess.run(
        [str(folder / "bin" / "pip"), "install", "-q", f"{ROOT}[demo]"],
        check=True,
        cwd=ROOT,
    )
    return folder, time.perf_counter() - started


def one_demo(venv: Path, home: Path, work: Path) -> dict[str, Any]:
    """Run the demo; the wall seconds from the command to each phase line, and in all, and
    the lines it printed up to the traffic."""
    env = {
        key: value
        for key, value in os.environ.items()
        if not key.startswith(("SPARK_", "PYSPARK_", "ATLASBUS_", "NUMBA_", "REDIS_URL"))
    }
    # Java takes user.home from the account, not $HOME: without this, Ivy would find the
    # jars in the real home's cache and the cold run would download nothing
    env.update(
        {
            "HOME": str(home),
            "XDG_CACHE_HOME": str(home / ".cache"),
            "JAVA_TOOL_OPTIONS": f"-Duser.home={home}",
        }
    )
    command = [str(venv / "bin" / "atlasbus"), "demo", "--duration", "3", "--output", str(work)]
    started = time.perf_counter()
    process = subprocess.Popen(
        command, cwd=work.parent, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
        text=True,
    )  # fmt: skip
    assert process.stdout is not None
    seen: dict[str, float] = {}
    lines = []
    for line in process.stdout:
        lines.append(line.rstrip())
        text = line.split("] ", 1)[-1]
        for phase, start in PHASES.items():
            if phase not in seen and text.startswith(start):
                seen[phase] = time.perf_counter() - started
    code = process.wait()
    if code != 0 or "traffic" not in seen:
        raise SystemExit(f"the demo failed ({code}):\n" + "\n".join(lines[-30:]))
    # the demo's own lines up to the traffic (its clock in brackets): what each wait was
    transcript = lines[: next(i for i, x in enumerate(lines) if "query running;" in x) + 1]
    return {**seen, "whole run": time.perf_counter() - started, "transcript": transcript}


def main() -> None:
    parser = benchmark_parser(__doc__)
    parser.add_argument("--venv", type=Path, help="a virtualenv with atlasbus[demo] installed")
    parser.add_argument("--warm-runs", type=int, default=2)
    args = parser.parse_args()

    load_before = os.getloadavg()
    scratch = Path(tempfile.mkdtemp(prefix="atlasbus-bench-demo-"))
    install_s = None
    venv = args.venv
    if venv is None:
        venv, install_s = fresh_venv(scratch / "venv")
    home = scratch / "home"
    home.mkdir()
    runs = {"cold": one_demo(venv, home, scratch / "demo")}
    for index in range(args.warm_runs):
        runs[f"warm {index + 1}"] = one_demo(venv, home, scratch / "demo")
    print(f"\n{'run':<8}" + "".join(f"{phase:>16}" for phase in [*PHASES, "whole run"]))
    for name, seen in runs.items():
        print(f"{name:<8}" + "".join(f"{seen[p]:>15.1f}s" for p in [*PHASES, "whole run"]))
    if install_s is not None:
        print(f"\npip install '.[demo]' into a fresh virtualenv: {install_s:.0f} s (not counted)")
    report = {"seconds_from_the_command": runs, "pip_install_s": install_s}
    write_report(RESULTS, report, load_before, os.getloadavg())
    print(f"wrote {RESULTS}")


if __name__ == "__main__":
    main()
