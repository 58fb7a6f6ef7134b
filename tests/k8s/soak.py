"""The operator's whole suite on the stand-in, several times in a row, with
every realism setting on (emulator/realism.py): late watch events, a slow
garbage collector, owner-reference enforcement, name validation and the
operator's token rotating. With --busy, as many processes as there are cores
spin beside it for the whole run, so the operator, the stand-in and the jobs
get a share of the CPU and no more, as on a loaded node.

    python3 tests/k8s/soak.py --rounds 5 [--busy] [--bin-dir build/bin]

Each round runs every tests/k8s/test_*.py in turn, as ctest's k8s.* tests
do. Prints one line per round (passed, or the modules that failed, and how
long it took) and exits 1 if any round failed; each round's output is kept
in the folder it names.
"""
import argparse
import multiprocessing
import os
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


def run_round(bin_dir, modules, log_path):
    """(the modules that failed, seconds) of one run of every module."""
    env = dict(os.environ, KUBEPS_BIN_DIR=bin_dir, PYTHONDONTWRITEBYTECODE="1",
               **{realism.ENV: "all"})
    failed = []
    start = time.time()
    with open(log_path, "w") as log:
        for module in modules:
            log.write("=== %s\n" % module)
            log.flush()
            result = subprocess.run([sys.executable, "-m", "unittest", "-v", module], cwd=HERE,
                                    env=env, stdout=log, stderr=subprocess.STDOUT)
            if result.returncode != 0:
                failed.append(module)
    return failed, time.time() - start


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--busy", action="store_true",
                   help="keep every core busy with another process during the rounds")
    p.add_argument("--bin-dir", default=os.path.join(SOURCE_DIR, "build", "bin"))
    p.add_argument("--only", nargs="*", help="these test modules (default: every test_*.py)")
    args = p.parse_args()
    modules = args.only or sorted(f[:-3] for f in os.listdir(HERE)
                                  if f.startswith("test_") and f.endswith(".py"))
    logs = tempfile.mkdtemp(prefix="kubeps-soak-")
    spinners = []
    if args.busy:
        spinners = [multiprocessing.Process(target=spin, daemon=True)
                    for _ in range(os.cpu_count() or 1)]
        for s in spinners:
            s.start()
    print("%d rounds of %d test modules with %s=all%s; logs in %s" % (
        args.rounds, len(modules), realism.ENV,
        ", %d spinning processes beside them" % len(spinners) if spinners else "", logs),
        flush=True)
    passed = 0
    try:
        for i in range(1, args.rounds + 1):
            log = os.path.join(logs, "round-%d.log" % i)
            failed, seconds = run_round(os.path.abspath(args.bin_dir), modules, log)
            passed += not failed
            print("round %d: %s (%.0f s)" % (
                i, "FAILED: " + ", ".join(failed) if failed else "passed", seconds), flush=True)
    finally:
        for s in spinners:
            s.terminate()
    print("%d of %d rounds passed" % (passed, args.rounds))
    return 0 if passed == args.rounds else 1


if __name__ == "__main__":
    sys.exit(main())
