#!/usr/bin/env python3
"""Operator benchmarks on the Kubernetes stand-in (tests/k8s): figures, not
tests. Run from the repository root after building:

    python3 bench/operator_bench.py submissions --count 100   # jobs in a row: start-up races
    python3 bench/operator_bench.py startup --count 20        # kubectl apply -> all pods Running
    python3 bench/operator_bench.py burst --count 200         # jobs at once: operator RSS and CPU
    python3 bench/operator_bench.py churn --count 100 --seed 1  # delete, re-apply, every setting on

`submissions` runs N short jobs (5 steps) one after another and counts every
job that does not succeed (a worker that starts before the scheduler's name
resolves, a lost registration...). `startup` measures, for N jobs one at a
time, the time from `kubectl apply` returning to all five pods Running, and
prints the median. `burst` creates N jobs in one `kubectl apply` with no node
(pods stay Pending: 5 N processes would not fit on one machine), waits until
the operator has reconciled every job (status written, five pods each) and
prints how long that took and the operator's peak RSS and CPU seconds.
`churn` runs N short jobs (1 ps, 1 worker), 4 at a time, with every realism
setting of the stand-in on, deleting some while running and applying them
again at once, deleting some once finished, rotating the operator's token
twice (tests/k8s/churn.py); it prints how long that took and the counts,
and exits 1 when a count that must be 0 is not.
"""
import argparse
import json
import os
import statistics
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(os.path.dirname(HERE), "tests", "k8s"))
from emulator.cluster import Cluster  # noqa: E402
from operator_harness import BIN, DEPLOY, Operator, job_pods, phase_of, training_job  # noqa: E402
import churn as churn_run  # noqa: E402

TJ = "/apis/kubeps.io/v1alpha1/namespaces/default/trainingjobs"


def start(kubelet=True):
    cluster = Cluster(bin_dirs=[BIN], rbac=True, kubelet=kubelet).start()
    cluster.kubectl("apply", "-f", os.path.join(DEPLOY, "crd") + "/", "-f", os.path.join(DEPLOY, "rbac") + "/")
    return cluster, Operator(cluster)


def wait(predicate, timeout, interval=0.05):
    deadline = time.time() + timeout
    while time.time() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(interval)
    return None


def submissions(count):
    cluster, operator = start()
    failures = []
    try:
        for i in range(count):
            name = "sub-%d" % i
            cluster.kubectl("apply", "-f", "-", input=json.dumps(training_job(name, max_steps=5)))
            phase = wait(lambda: phase_of(cluster, name) in ("Succeeded", "Failed") and phase_of(cluster, name), 120)
            if phase != "Succeeded":
                job = cluster.client.get(TJ + "/" + name)
                failures.append((name, phase, job.get("status", {}).get("message")))
            cluster.kubectl("delete", "tj", name, "--wait=false")
            print("%d/%d %s" % (i + 1, count, phase), flush=True)
    finally:
        operator.stop()
        cluster.stop()
    print("submissions: %d jobs in a row, %d failures" % (count, len(failures)))
    for failure in failures:
        print("  failed: %s %s: %s" % failure)


def startup(count):
    cluster, operator = start()
    times = []
    try:
        for i in range(count):
            name = "startup-%d" % i
            cluster.kubectl("apply", "-f", "-", input=json.dumps(training_job(name, max_steps=5)))
            applied = time.time()
            running = lambda: sum(p.get("status", {}).get("phase") in ("Running", "Succeeded")  # noqa: E731
                                  for p in job_pods(cluster, name)) == 5
            if wait(running, 60, interval=0.02):
                times.append(time.time() - applied)
            wait(lambda: phase_of(cluster, name) in ("Succeeded", "Failed"), 120)
            cluster.kubectl("delete", "tj", name, "--wait=false")
    finally:
        operator.stop()
        cluster.stop()
    print("startup: kubectl apply -> all 5 pods running, %d jobs: median %.2f s, min %.2f s, max %.2f s"
          % (len(times), statistics.median(times), min(times), max(times)))


def proc_figures(pid):
    with open("/proc/%d/status" % pid) as f:
        peak = next(int(line.split()[1]) for line in f if line.startswith("VmHWM"))
    with open("/proc/%d/stat" % pid) as f:
        fields = f.read().rsplit(")", 1)[1].split()
    ticks = os.sysconf("SC_CLK_TCK")
    return peak / 1024.0, (int(fields[11]) + int(fields[12])) / ticks


def burst(count):
    cluster, operator = start(kubelet=False)
    try:
        jobs = {"apiVersion": "v1", "kind": "List", "items": [training_job("burst-%d" % i) for i in range(count)]}
        began = time.time()
        cluster.kubectl("apply", "-f", "-", input=json.dumps(jobs))

        def all_reconciled():
            items = cluster.client.get(TJ)["items"]
            pods = cluster.client.get("/api/v1/namespaces/default/pods")["items"]
            return (len(items) == count and all(j.get("status", {}).get("phase") for j in items)
                    and len(pods) == 5 * count)
        done = wait(all_reconciled, 600, interval=0.5)
        took = time.time() - began
        rss_mb, cpu_s = proc_figures(operator.proc.pid)
    finally:
        operator.stop()
        cluster.stop()
    print("burst: %d TrainingJobs at once: %s in %.1f s; operator peak RSS %.1f MiB, CPU %.2f s"
          % (count, "all reconciled (status and 5 pods each)" if done else "NOT all reconciled", took,
             rss_mb, cpu_s))


def churn(count, seed):
    # the same cluster as the k8s tests' (test_operator.new_cluster)
    cluster = Cluster(bin_dirs=[BIN], rbac=True, stream_logs=True, backoff=0.3).start()
    try:
        cluster.kubectl("apply", "-f", os.path.join(DEPLOY, "crd") + "/", "-f", os.path.join(DEPLOY, "rbac") + "/")
        churn_run.every_setting_on(cluster)
        print("churn: seed %d, %d jobs" % (seed, count), flush=True)
        run = churn_run.Churn(cluster, count, seed, log=lambda line: print(line, flush=True)).run()
        counts = run.counts()
    finally:
        cluster.stop()
    print("churn: %d jobs in %.1f s" % (count, run.took))
    print(churn_run.report(counts, seed))
    return 1 if any(churn_run.must_be_zero(counts).values()) else 0


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("what", choices=["submissions", "startup", "burst", "churn"])
    parser.add_argument("--count", type=int)
    parser.add_argument("--seed", type=int, default=1, help="churn: the order of the actions")
    args = parser.parse_args()
    default = {"submissions": 100, "startup": 20, "burst": 200, "churn": 100}[args.what]
    if args.what == "churn":
        sys.exit(churn(args.count or default, args.seed))
    {"submissions": submissions, "startup": startup, "burst": burst}[args.what](args.count or default)


if __name__ == "__main__":
    main()
