#!/usr/bin/env python3
"""Prometheus file_sd targets for a local `kubeps run` job.

`kubeps run JOB.yaml --run-dir=DIR` writes one DIR/<replica>.ports file per
replica ("grpc N" and "metrics M" lines). This writes the metrics endpoints
as a Prometheus file_sd target list:

    python3 kubeps_file_sd.py RUN_DIR TARGETS.json [--watch] [--interval S]

With --watch it rewrites the file whenever the set of targets changes (a
restarted replica publishes a new port) until interrupted. The file is
replaced atomically, so Prometheus never reads half of it. Python standard
library only.
"""
import argparse
import glob
import json
import os
import sys
import time


def targets(run_dir, host="127.0.0.1"):
    """One file_sd target group per replica that published a metrics port."""
    groups = []
    for path in sorted(glob.glob(os.path.join(run_dir, "*.ports"))):
        replica = os.path.basename(path)[:-len(".ports")]
        values = {}
        try:
            with open(path) as f:
                for line in f:
                    parts = line.split()
                    if len(parts) == 2:
                        values[parts[0]] = parts[1]
        except OSError:
            continue
        port = values.get("metrics", "")
        if not port.isdigit() or int(port) <= 0:
            continue
        groups.append({"targets": ["%s:%s" % (host, port)], "labels": {"replica": replica}})
    return groups


def write(groups, out):
    tmp = out + ".tmp"
    with open(tmp, "w") as f:
        json.dump(groups, f, indent=2)
        f.write("\n")
    os.replace(tmp, out)


def main(argv):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("run_dir", help="the --run-dir of kubeps run")
    parser.add_argument("out", help="the file_sd JSON file to write")
    parser.add_argument("--host", default="127.0.0.1", help="address the replicas listen on")
    parser.add_argument("--watch", action="store_true", help="keep the file current until interrupted")
    parser.add_argument("--interval", type=float, default=1.0, help="seconds between checks with --watch")
    args = parser.parse_args(argv)
    last = None
    try:
        while True:
            groups = targets(args.run_dir, args.host)
            if groups != last:
                write(groups, args.out)
                last = groups
            if not args.watch:
                break
            time.sleep(args.interval)
    except KeyboardInterrupt:
        pass
    print("%d targets in %s" % (len(last or []), args.out), file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
