#!/usr/bin/python3
"""Compression: the CNN example's test accuracy and bytes on the wire with float32, fp16 and 2-bit gradients.

Runs deploy/examples/fashion-mnist-cnn.yaml (2 servers, 2 workers, sync,
Adam 1e-3 on the servers, global batch 128, 3 epochs) through `kubeps run`
once per gradient encoding (spec.compression.type none, fp16, 2bit), one
after the other, and prints for each: the test accuracy the job reports at
its end, the bytes the servers received in pushes
(kubeps_server_push_bytes_total, scraped while the job runs, so the figure
misses at most the last fraction of a second) per push and in all, their
ratio to float32's, and the run's time.

2-bit is MXNet's scheme: each value goes as +threshold, -threshold or 0 and
the rest stays in the worker's residual. --threshold sets it
(spec.compression.threshold in a manifest; default here 0.01). A value
moves at most one threshold a step, so the threshold must be about as large
as the bigger gradients, or their residuals grow faster than they drain and
only signs get through: this example's gradients are of the order of 1e-3
to 1e-2, and at 0.001 it reached 69% test accuracy after 3 epochs, at 0.01
88%. MXNet's default of 0.5 would hold nearly every value back for
hundreds of steps.

Usage (nothing else running meanwhile; about 10 minutes on 2 cores):

    python3 bench/compression.py [--epochs 3] [--threshold 0.01] \\
        [--types none,fp16,2bit] [--bin-dir build/bin]

Not a test: the exit code is 0 whatever the figures, unless a job fails.
"""
import argparse
import json
import os
import re
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
SOURCE_DIR = os.path.dirname(HERE)
sys.path.insert(0, os.path.join(SOURCE_DIR, "tests", "integration"))
EXAMPLE = os.path.join(SOURCE_DIR, "deploy", "examples", "fashion-mnist-cnn.yaml")
SERVERS = ("server-0", "server-1")
ACCURACY = re.compile(r"test accuracy ([\d.]+)")


def manifest(folder, compression, epochs, threshold):
    import yaml
    with open(EXAMPLE) as f:
        job = yaml.safe_load(f)
    job["metadata"]["name"] = "cnn-" + compression
    job["spec"]["epochs"] = epochs
    if compression != "none":
        job["spec"]["compression"] = {"type": compression, "threshold": threshold}
    path = os.path.join(folder, "cnn-%s.yaml" % compression)
    with open(path, "w") as f:
        json.dump(job, f, indent=2)
    return path


def run(path):
    """(test accuracy, bytes pushed, pushes, seconds) of one run of the job at `path`."""
    import jobtools  # reads KUBEPS_BIN_DIR, set by main()
    print("  $ %s run %s" % (jobtools.KUBEPS, path), flush=True)
    start = time.time()
    job = jobtools.RunningJob(path)
    scrapes = jobtools.scrape_while_running(job, SERVERS)
    code = job.wait(timeout=3600)
    seconds = time.time() - start
    if code != 0:
        sys.exit("kubeps run failed:\n" + job.output())
    accuracy = ACCURACY.findall(job.output())
    if not accuracy:
        sys.exit("no test accuracy in the job's output:\n" + job.output())
    pushed = jobtools.total(scrapes, "kubeps_server_push_bytes_total")
    pushes = jobtools.total(scrapes, "kubeps_server_pushes_total")
    return float(accuracy[-1]), pushed, pushes, seconds


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--epochs", type=int, default=3)
    parser.add_argument("--threshold", type=float, default=0.01, help="2-bit threshold")
    parser.add_argument("--types", default="none,fp16,2bit", help="comma-separated encodings")
    parser.add_argument("--bin-dir", default=os.path.join(SOURCE_DIR, "build", "bin"))
    args = parser.parse_args()
    os.environ["KUBEPS_BIN_DIR"] = os.path.abspath(args.bin_dir)
    folder = tempfile.mkdtemp(prefix="kubeps-compression-")
    results = {}
    for compression in [t for t in args.types.split(",") if t]:
        print("%s:" % compression, flush=True)
        results[compression] = run(manifest(folder, compression, args.epochs, args.threshold))
        accuracy, pushed, pushes, seconds = results[compression]
        print("    test accuracy %.4f, %.0f bytes in %.0f pushes, %.0f s"
              % (accuracy, pushed, pushes, seconds), flush=True)
    base = results.get("none")
    print("\nCNN example, %d epochs, 2 ps x 2 workers (2-bit threshold %g)"
          % (args.epochs, args.threshold))
    print("%-6s %9s %13s %14s %9s %7s" % ("type", "accuracy", "bytes/push", "bytes pushed",
                                         "vs none", "time s"))
    for compression, (accuracy, pushed, pushes, seconds) in results.items():
        per_push = pushed / pushes if pushes else float("nan")
        ratio = "%.4f" % (per_push / (base[1] / base[2])) if base and base[2] else "-"
        print("%-6s %9.4f %13.0f %14.0f %9s %7.0f" % (compression, accuracy, per_push, pushed,
                                                      ratio, seconds))


if __name__ == "__main__":
    main()
