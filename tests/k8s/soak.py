"""The operator's whole suite on the stand-in, several times in a row, with
every realism setting on (emulator/realism.py): late watch events, a slow
garbage collector, owner-reference enforcement, name validation and the
operator's token rotating. With --busy, as many processes as there are cores
spin beside it for the whole run, so the operator, the stand-in and the jobs
get a share of the CPU and no more, as on a loaded node.

    python3 tests/k8s/soak.py --rounds 5 [--busy] [--build-dir build]

Prints one line per round (passed or the tests that failed, and how long it
took) and exits 1 if any round failed; each round's ctest output is kept in
the folder it names.
"""
import argparse
import multiprocessing
import os
import re
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from emulator import realism  # noqa: E402

SOURCE_DIR = os.path.dirname(os.path.dirname(HERE))


def spin():
    while True:
        pass


def run_round(build_dir, pattern, log_path):
    env = dict(os.environ, **{realism.ENV: "all"})
    start = time.time()
    with open(log_path, "w") as log:
        result = subprocess.run(["ctest", "--output-on-failure", "-R", pattern], cwd=build_dir,
                                env=env, stdout=log, stderr=subprocess.STDOUT)
    with open(log_path) as log:
        failed = re.findall(r"^\s*\d+ - (\S+) \(", log.read(), re.MULTILINE)
    ran = None
    with open(log_path) as log:
        m = re.search(r"tests passed, (\d+) tests failed out of (\d+)", log.read())
        if m:
            ran = int(m.group(2))
    return result.returncode, failed, ran, time.time() - start


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--busy", action="store_true",
                   help="keep every core busy with another process during the rounds")
    p.add_argument("--build-dir", default=os.path.join(SOURCE_DIR, "build"))
    p.add_argument("--tests", default=r"^k8s\.", help="ctest -R pattern (default: %(default)s)")
    args = p.parse_args()
    logs = tempfile.mkdtemp(prefix="kubeps-soak-")
    spinners = []
    if args.busy:
        spinners = [multiprocessing.Process(target=spin, daemon=True)
                    for _ in range(os.cpu_count() or 1)]
        for s in spinners:
            s.start()
    print("%d rounds of ctest -R '%s' with %s=all%s; logs in %s" % (
        args.rounds, args.tests, realism.ENV,
        ", %d spinning processes beside it" % len(spinners) if spinners else "", logs), flush=True)
    passed = 0
    try:
        for i in range(1, args.rounds + 1):
            log = os.path.join(logs, "round-%d.log" % i)
            code, failed, ran, seconds = run_round(args.build_dir, args.tests, log)
            ok = code == 0
            passed += ok
            print("round %d: %s (%s tests, %.0f s)%s" % (
                i, "passed" if ok else "FAILED", ran, seconds,
                "" if ok else ": " + (", ".join(failed) or "see " + log)), flush=True)
    finally:
        for s in spinners:
            s.terminate()
    print("%d of %d rounds passed" % (passed, args.rounds))
    return 0 if passed == args.rounds else 1


if __name__ == "__main__":
    sys.exit(main())
