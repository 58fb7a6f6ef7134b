#!/usr/bin/env python3
"""Elastic workers, measured: the CNN example (deploy/examples/fashion-mnist-cnn.yaml,
3 epochs, global batch 128) scaled 2 -> 4 -> 1 workers while it trains, against
the same job with 2 workers throughout, run one after the other.

Prints the test accuracy of both (the goal: within 0.5 points), and for each
change the time from `kubeps scale` to the first progress line past the step
the change took effect at, worker 0's steps/sec over the 10 s before the
command and after the change, and the time the change cost: the time between
the progress lines around it, less what its steps take at those two paces.

    python3 bench/elastic.py [--bin-dir build/bin] [--epochs 3]
"""
import argparse
import os
import re
import subprocess
import sys
import tempfile
import threading
import time

import yaml

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from benchlib import DEFAULT_BIN_DIR, SOURCE_DIR, write_job  # noqa: E402

PROGRESS = re.compile(r"^\[worker 0\] epoch \d+/\d+ step \d+/\d+ total_steps (\d+) ")
CHANGE = re.compile(r"workers from step (\d+): (\d+) ")
ACCURACY = re.compile(r"test accuracy ([\d.]+)")


class Job:
    """`kubeps run` in the background, its lines with their arrival times."""

    def __init__(self, kubeps, path, run_dir):
        self.lines = []
        self.process = subprocess.Popen([kubeps, "run", path, "--run-dir=" + run_dir],
                                        stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                        text=True)
        self.start = time.time()
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self):
        for line in self.process.stdout:
            self.lines.append((time.time(), line.rstrip("\n")))

    def steps(self):
        """(time, total_steps) of worker 0's progress lines."""
        return [(t, int(m.group(1))) for t, line in list(self.lines)
                for m in [PROGRESS.match(line)] if m]

    def wait_for_step(self, step):
        while not any(s >= step for _, s in self.steps()):
            if self.process.poll() is not None:
                sys.exit("the job ended before step %d:\n%s" % (step, self.output()))
            time.sleep(0.05)

    def wait_for(self, regex, after):
        while True:
            for t, line in list(self.lines):
                m = regex.search(line)
                if m and t >= after:
                    return t, m
            if self.process.poll() is not None:
                sys.exit("no line matching %s:\n%s" % (regex.pattern, self.output()))
            time.sleep(0.05)

    def speed(self, begin, end):
        """Worker 0's steps/sec between two times, from its progress lines."""
        inside = [(t, s) for t, s in self.steps() if begin <= t <= end]
        if len(inside) < 2:
            return float("nan")
        return (inside[-1][1] - inside[0][1]) / (inside[-1][0] - inside[0][0])

    def finish(self):
        code = self.process.wait()
        if code != 0:
            sys.exit("the job failed (exit %d):\n%s" % (code, self.output()))
        return float(ACCURACY.findall(self.output())[-1])

    def output(self):
        return "\n".join(line for _, line in self.lines)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--bin-dir", default=os.environ.get("KUBEPS_BIN_DIR", DEFAULT_BIN_DIR))
    parser.add_argument("--epochs", type=int, default=3)
    args = parser.parse_args()
    kubeps = os.path.join(args.bin_dir, "kubeps")
    with open(os.path.join(SOURCE_DIR, "deploy/examples/fashion-mnist-cnn.yaml")) as f:
        spec = yaml.safe_load(f)["spec"]
    spec["epochs"] = args.epochs
    spec["progressIntervalMs"] = 200
    spec["replicaSpecs"]["worker"].pop("template", None)
    total = args.epochs * 60000 // 128
    folder = tempfile.mkdtemp(prefix="kubeps-bench-elastic-")

    print("fixed: 2 workers throughout", flush=True)
    fixed = Job(kubeps, write_job(folder, "cnn-fixed", spec), os.path.join(folder, "fixed"))
    fixed_accuracy = fixed.finish()

    print("elastic: 2 -> 4 -> 1 workers at a third and two thirds of the steps", flush=True)
    spec["replicaSpecs"]["worker"]["elasticPolicy"] = {"minReplicas": 1, "maxReplicas": 4}
    job = Job(kubeps, write_job(folder, "cnn-elastic", spec), os.path.join(folder, "elastic"))
    rows = []
    for workers, at in ((4, total // 3), (1, 2 * total // 3)):
        job.wait_for_step(at)
        asked = time.time()
        subprocess.run([kubeps, "scale", "cnn-elastic", "--workers=%d" % workers,
                        "--run-dir=" + os.path.join(folder, "elastic")], check=True,
                       stdout=subprocess.DEVNULL)
        _, change = job.wait_for(CHANGE, asked)
        step = int(change.group(1))
        job.wait_for_step(step + 1)
        t0, s0 = max((t, s) for t, s in job.steps() if s <= step)
        t1, s1 = min((t, s) for t, s in job.steps() if s > step)
        time.sleep(10)
        before, after = job.speed(asked - 10, asked), job.speed(t1, t1 + 10)
        lost = (t1 - t0) - (step - s0) / before - (s1 - step) / after
        rows.append((workers, step, t1 - asked, before, after, lost))
    elastic_accuracy = job.finish()

    print("\n| change | at step | kubeps scale to the first step past it | steps/s before | "
          "steps/s after | time lost at the change |\n| --- | --- | --- | --- | --- | --- |")
    had = 2
    for workers, step, seconds, speed_before, speed_after, lost in rows:
        print("| %d -> %d | %d | %.2f s | %.2f | %.2f | %.2f s |" % (
            had, workers, step, seconds, speed_before, speed_after, lost))
        had = workers
    gap = abs(elastic_accuracy - fixed_accuracy) * 100
    print("\ntest accuracy after %d epochs: 2 workers throughout %.4f, scaled 2 -> 4 -> 1 %.4f: "
          "%.2f points apart (goal: within 0.5) %s" % (args.epochs, fixed_accuracy,
                                                      elastic_accuracy, gap,
                                                      "PASS" if gap <= 0.5 else "MISSED"))


if __name__ == "__main__":
    main()
