#!/usr/bin/env python3
"""A scaling model of a sync kubeps job on paper (docs/scaling-model.md says
how it is built and where each input comes from): predicted steps/sec for W
workers and S servers on a network of B Gbit/s, from the model's size, the
compute time of a step and the per-byte and per-request costs measured here.

    python3 bench/scaling_model.py                  # the tables of the document
    python3 bench/scaling_model.py --check 1x1=7.9 2x2=7.7 4x2=6.0
                                                    # this machine's model against figures
    python3 bench/scaling_model.py --measure
                                                    # runs the CNN at 1x1, 2x2, 4x2 here first

Standard library only; prints, and --measure runs jobs in a temporary folder.
"""
import argparse
import math
import os
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import benchlib  # noqa: E402

MIB = 1 << 20

# Parameters (float32) of the models it is asked about.
MODELS = {
    # the built-in CNN: conv 5x5x32, conv 5x5x64, dense 3136x1024, dense 1024x10, with biases
    "cnn": {"params": 32 * 25 + 32 + 64 * 32 * 25 + 64 + 3136 * 1024 + 1024 + 1024 * 10 + 10,
            "compute_ms": 30.0, "tensors": 8},
    # a 100M-parameter model (a BERT-base-sized network): its step time is an assumption
    "100M": {"params": 100_000_000, "compute_ms": 300.0, "tensors": 200},
}


# The most a request carries (worker-agent/kv/kv_worker.h): over TCP, as
# between hosts, and through shared memory, as on one host.
TCP_REQUEST_BYTES = 4 * MIB
SHARED_MEMORY_REQUEST_BYTES = 32 * MIB


def requests_per_worker(params, tensors, servers, request_bytes=TCP_REQUEST_BYTES):
    """Requests a worker sends each step, each way: every tensor is cut over
    the servers when big, and a server's parts go in requests of at most
    request_bytes, small tensors packed together."""
    per_server_bytes = params * 4 / servers
    return servers * max(1, math.ceil(per_server_bytes / request_bytes)) + min(tensors, servers)


def step_seconds(model, workers, servers, gbit, costs, overlap=True):
    """One sync step on a cluster: workers and servers on machines of their
    own, every NIC full duplex at `gbit`."""
    bytes_ = model["params"] * 4
    bandwidth = gbit * 1e9 / 8
    compute = model["compute_ms"] / 1e3
    requests = requests_per_worker(model["params"], model["tensors"], servers)
    # Each worker sends its gradients and receives the parameters once.
    worker_nic = bytes_ / bandwidth
    # Each server takes W gradients of its 1/S and sends W copies of its 1/S.
    server_nic = workers * bytes_ / servers / bandwidth
    # A server's CPU: per byte received (copy in, sum, update) and sent, and per request.
    # Requests run on the server's RPC threads side by side, one per core.
    server_cpu = (workers * bytes_ / servers * costs["server_ns_per_byte"] * 1e-9 +
                  workers * requests / servers * 2 * costs["request_us"] * 1e-6) / costs["server_cores"]
    exchange = max(worker_nic, server_nic, server_cpu) + costs["exchange_ms"] * 1e-3
    # With overlap, the exchange runs during the backward pass (two thirds of
    # the compute) except the first layer's, which is small.
    hidden = (2 / 3) * compute if overlap else 0.0
    return compute + max(0.0, exchange - hidden), {
        "worker_nic": worker_nic, "server_nic": server_nic, "server_cpu": server_cpu}


def servers_that_pay(model, workers, gbit, costs):
    """The fewest servers past which one more changes the step time by under 1%."""
    previous = None
    for servers in range(1, 4 * workers + 1):
        t, _ = step_seconds(model, workers, servers, gbit, costs, overlap=False)
        if previous is not None and previous / t < 1.01:
            return servers - 1
        previous = t
    return 4 * workers


def one_machine_steps(model, workers, servers, costs, cores, global_batch_ms):
    """This machine: every process shares `cores` (and the tensors go through
    shared memory), so a step takes the CPU time of all of it over the cores:
    the global batch's compute, and each worker's exchange (per byte both
    ways, and per request)."""
    bytes_ = model["params"] * 4
    requests = requests_per_worker(model["params"], model["tensors"], servers,
                                   SHARED_MEMORY_REQUEST_BYTES)
    exchange_cpu = workers * (2 * bytes_ * costs["host_cpu_ns_per_byte"] * 1e-9 +
                              2 * requests * costs["request_us"] * 1e-6)
    return cores / (global_batch_ms / 1e3 + exchange_cpu)


def measure_here(setups, bin_dir, steps=100, warmup=20):
    """steps/sec of the built-in CNN at a global batch of 128 for each
    "WxS": `kubeps run`, median of worker 0's windows after the warm-up."""
    folder = tempfile.mkdtemp(prefix="kubeps-scaling-model-")
    measured = {}
    for setup in setups:
        workers, servers = (int(x) for x in setup.split("x"))
        manifest = benchlib.write_job(folder, "model-check-%dx%d" % (workers, servers), {
            "mode": "sync", "model": "cnn", "dataset": {"path": benchlib.DATA_DIR},
            "optimizer": {"name": "adam", "learningRate": 0.001}, "batchSize": 128 // workers,
            "progressIntervalMs": 1000,
            "replicaSpecs": {"ps": {"replicas": servers}, "worker": {"replicas": workers}}})
        lines = benchlib.run([os.path.join(bin_dir, "kubeps"), "run", manifest],
                             {"KUBEPS_MAX_STEPS": str(steps + warmup)})
        measured[setup] = benchlib.median(benchlib.window_speeds(lines, "worker 0", warmup))
        print("    %s: %.2f steps/sec" % (setup, measured[setup]), flush=True)
    return measured


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--server-ns-per-byte", type=float, default=0.20,
                   help="CPU per byte beyond the kernel's (kv_goodput 1x1: 1M and 10M rows)")
    p.add_argument("--exchange-ms", type=float, default=1.1,
                   help="a push+pull's fixed latency (kv_goodput 1x1: 1M and 10M rows)")
    p.add_argument("--request-us", type=float, default=20.0,
                   help="CPU per request beyond its bytes, either end (an assumption)")
    p.add_argument("--host-cpu-ns-per-byte", type=float, default=0.16,
                   help="this machine: CPU per byte moved each way between a worker and a server "
                        "on one host, through shared memory (kv_goodput 1x1's shared-memory rows)")
    p.add_argument("--server-cores", type=int, default=4,
                   help="cores each server machine gives its requests")
    p.add_argument("--cores", type=int, default=2, help="this machine's cores (--check)")
    p.add_argument("--global-batch-ms", type=float, default=60.0,
                   help="this machine: CPU time of the CNN's forward and backward pass over a "
                        "global batch of 128 (trainer_bench, one thread)")
    p.add_argument("--check", nargs="*", default=[],
                   help="WxS=steps/sec measured here, e.g. 2x2=7.7: compared with the model")
    p.add_argument("--measure", action="store_true",
                   help="measure the CNN here at 1x1, 2x2 and 4x2 first, and check against that")
    p.add_argument("--bin-dir", default=benchlib.DEFAULT_BIN_DIR)
    args = p.parse_args()
    checks = dict(item.split("=") for item in args.check)
    if args.measure:
        print("measuring the CNN here (global batch 128):", flush=True)
        checks.update({k: str(v) for k, v in
                       measure_here(["1x1", "2x2", "4x2"], args.bin_dir).items()})
    costs = {"server_ns_per_byte": args.server_ns_per_byte, "request_us": args.request_us,
             "exchange_ms": args.exchange_ms, "server_cores": args.server_cores,
             "host_cpu_ns_per_byte": args.host_cpu_ns_per_byte}

    for name, model in MODELS.items():
        print("%s: %.1f MB of parameters, %.0f ms of compute a step (a worker's)"
              % (name, model["params"] * 4 / 1e6, model["compute_ms"]))
        for gbit in (25, 100):
            print("  %d Gbit/s, steps/sec with overlap (without), and what bounds the exchange"
                  % gbit)
            print("  %8s" % "workers" + "".join("%22s" % ("%d servers" % s) for s in (4, 8, 16)))
            for workers in (8, 16, 64):
                cells = []
                for servers in (4, 8, 16):
                    with_overlap, parts = step_seconds(model, workers, servers, gbit, costs)
                    without, _ = step_seconds(model, workers, servers, gbit, costs, overlap=False)
                    bound = max(parts, key=parts.get).replace("_", " ")
                    cells.append("%6.2f (%5.2f) %s" % (1 / with_overlap, 1 / without,
                                                       {"worker nic": "W", "server nic": "S",
                                                        "server cpu": "C"}[bound]))
                print("  %8d" % workers + "".join("%22s" % c for c in cells))
            print("  servers past which one more gains under 1%%: %s" % ", ".join(
                "%d workers: %d" % (w, servers_that_pay(model, w, gbit, costs)) for w in (8, 16, 64)))
        print()
    print("bounds: W a worker's NIC, S a server's NIC, C a server's CPU")

    if checks:
        print("\nthis machine (%d cores, one host), the CNN at a global batch of 128:" % args.cores)
        print("  %-6s %10s %10s %7s" % ("setup", "model", "measured", "ratio"))
        for setup, measured in checks.items():
            workers, servers = (int(x) for x in setup.split("x"))
            predicted = one_machine_steps(MODELS["cnn"], workers, servers, costs, args.cores,
                                          args.global_batch_ms)
            print("  %-6s %10.2f %10.2f %7.2f" % (setup, predicted, float(measured),
                                                   float(measured) / predicted))


if __name__ == "__main__":
    main()
