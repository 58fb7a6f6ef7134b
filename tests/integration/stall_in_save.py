"""Runs a training program whose first life stalls in its save of one step, for
test_user_code: a worker that dies after the servers checkpointed a step and before its
program's own save of that step was written, as an eviction may catch it.

    python3 stall_in_save.py STEP MARKER PROGRAM [ARGS...]

runs PROGRAM (as `python3 PROGRAM ARGS...` would) with torch.save patched on worker-0
(KUBEPS_NODE_ID): its first save to a file named step-<STEP, 8 digits>.pt.tmp, while MARKER
does not exist, creates MARKER, prints "stalled in the save of step STEP" and sleeps until
the process is killed. A later life of the worker finds MARKER and saves as usual.
"""
import os
import runpy
import sys
import time

import torch


def main():
    step, marker, program = int(sys.argv[1]), sys.argv[2], sys.argv[3]
    stalled_name = "step-%08d.pt.tmp" % step
    save = torch.save

    def save_or_stall(obj, path, *args, **kwargs):
        if (os.environ.get("KUBEPS_NODE_ID") == "worker-0" and
                os.path.basename(str(path)) == stalled_name and not os.path.exists(marker)):
            with open(marker, "w"):
                pass
            print("stalled in the save of step %d" % step, flush=True)
            while True:
                time.sleep(60)
        return save(obj, path, *args, **kwargs)

    torch.save = save_or_stall
    sys.argv = sys.argv[3:]
    sys.path.insert(0, os.path.dirname(os.path.abspath(program)))
    runpy.run_path(program, run_name="__main__")


if __name__ == "__main__":
    main()
