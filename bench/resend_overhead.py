#!/usr/bin/env python3
"""What the resend machinery costs when nothing goes wrong.

Runs the same sync MLP job (2 servers, 2 workers, Adam, batch 64 per worker,
no injected faults) with maxResends 10 (the default) and with maxResends 0
(one attempt per call), alternately, N times each: the machine is noisy, so
interleaving spreads any drift over both. Each run's speed is the steps/sec
worker 0 reports on its "test accuracy ... (X steps/sec)" line (training
steps over training time, start-up and evaluation excluded). Prints every
run, then the median steps/sec of each setting and the ratio
resends-on / resends-off (1.0: no cost; 0.95: resends cost 5%).

Usage:
    python3 bench/resend_overhead.py [--runs N] [--steps S] [--bin-dir DIR]

    --runs N      runs of each setting (default 5)
    --steps S     KUBEPS_MAX_STEPS of each run (default 400)
    --bin-dir     where kubeps is (default $KUBEPS_BIN_DIR or build/bin)

Python standard library only. Takes about (N * 2) x (a few seconds).
"""
import argparse
import os
import re
import statistics
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(os.path.dirname(HERE), "tests", "integration"))

SPEED = re.compile(r"\[worker (\d+)\] test accuracy [\d.]+ .*\(([\d.]+) steps/sec\)")


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--steps", type=int, default=400)
    parser.add_argument("--bin-dir", default="")
    args = parser.parse_args()
    if args.bin_dir:
        os.environ["KUBEPS_BIN_DIR"] = os.path.abspath(args.bin_dir)
    import jobtools  # reads KUBEPS_BIN_DIR

    folder = tempfile.mkdtemp(prefix="kubeps-resend-bench-")
    settings = (("maxResends 10", 10), ("maxResends 0", 0))
    paths = {}
    for label, resends in settings:
        text = jobtools.manifest_with("resend-bench-%d" % resends, {"maxResends": resends})
        paths[label] = jobtools.write_manifest(folder, text, "resends-%d.yaml" % resends)

    speeds = {label: [] for label, _ in settings}
    print("sync MLP, 2 servers, 2 workers, %d steps per run, %d runs of each setting, interleaved"
          % (args.steps, args.runs))
    for run in range(args.runs):
        order = settings if run % 2 == 0 else settings[::-1]
        for label, _ in order:
            code, job = jobtools.run_job(paths[label], env={"KUBEPS_MAX_STEPS": str(args.steps)})
            if code != 0:
                sys.exit("run failed (%s):\n%s" % (label, job.output()))
            found = SPEED.findall(job.output())
            if not found:
                sys.exit("no steps/sec on a test accuracy line (%s):\n%s" % (label, job.output()))
            value = float(found[-1][1])
            speeds[label].append(value)
            print("  run %d  %-14s %8.1f steps/sec" % (run + 1, label, value), flush=True)

    on = statistics.median(speeds["maxResends 10"])
    off = statistics.median(speeds["maxResends 0"])
    print("median steps/sec: maxResends 10: %.1f, maxResends 0: %.1f" % (on, off))
    print("ratio (resends on / off): %.3f" % (on / off))


if __name__ == "__main__":
    main()
