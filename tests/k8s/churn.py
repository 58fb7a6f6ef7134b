"""Churn: many short TrainingJobs on the stand-in with every realism setting
on (late watch events, a slow garbage collector, RBAC with owner-reference
enforcement, name validation, the operator's token rotated mid-run), in a
seeded random order: some left to finish, some deleted while running and
applied again under the same name at once (a new uid, while the old one's
objects still wait for the garbage collector), some deleted once finished,
some failed by their deadline. Then it counts what must never happen:

  * a job that did not end in its expected phase;
  * a pod created for a job after its terminal status was written (ordered
    by resourceVersion, one global counter, from the request log);
  * an object (pod, service, secret) that changed controllers (adopted), or
    that is owned by a uid other than the live job of its owner's name once
    the garbage collector is done, or a live job's pod owned by another uid.

Used by bench/operator_bench.py churn (100 jobs) and test_churn.py (10).
"""
import collections
import json
import random
import time

from emulator.realism import GC_DELAY, WATCH_DELAY
from operator_harness import (OPERATOR_USER, PODS, TJ, Operator, apply, job_pods,
                              kubelet_output, training_job)

FINISH = "finish"                    # left to run to the end: Succeeded
REPLACE = "replace"                  # deleted while Running, applied again at once: the new one Succeeded
DELETE_FINISHED = "delete-finished"  # deleted once Succeeded
DEADLINE = "deadline"                # activeDeadlineSeconds 2 and no step cap: Failed
# the mix, repeated and shuffled: every action is in any plan of 4 or more jobs
MIX = [REPLACE, DELETE_FINISHED, FINISH, DEADLINE, REPLACE, FINISH, DELETE_FINISHED, REPLACE,
       FINISH, DELETE_FINISHED]
TERMINAL = ("Succeeded", "Failed")
OWNED_KINDS = {"pods": PODS, "services": "/api/v1/namespaces/default/services",
               "secrets": "/api/v1/namespaces/default/secrets"}


def every_setting_on(cluster):
    """Late watch events per resource and a garbage collector seconds behind;
    RBAC, owner-reference enforcement and name validation are on in a
    Cluster(rbac=True). The request log keeps the whole run for the checks."""
    cluster.settings(watch_delay=WATCH_DELAY, gc_delay=GC_DELAY, request_log_size=1000000)


def plan(count, seed):
    """[(job name, action, cleanPodPolicy)] in a seeded random order."""
    rng = random.Random(seed)
    actions = [MIX[i % len(MIX)] for i in range(count)]
    rng.shuffle(actions)
    return [("churn-%d" % i, action, rng.choice([None, "All", "Running"]))
            for i, action in enumerate(actions)]


def manifest(name, action, clean_pod_policy, first_of_replace=False, steps=25):
    if action == DEADLINE:
        # 50 epochs: far longer than the deadline, however fast the job steps
        return training_job(name, epochs=50, max_steps=0, active_deadline=2, workers=1, servers=1,
                            clean_pod_policy=clean_pod_policy)
    # the first job of a REPLACE runs long enough to be deleted while Running
    return training_job(name, max_steps=100000 if first_of_replace else steps, workers=1,
                        servers=1, clean_pod_policy=clean_pod_policy)



def resource_of(path):
    """"pods", "trainingjobs/status"...: the resource (and subresource) a request's path names."""
    parts = path.split("?")[0].strip("/").split("/")
    if "namespaces" in parts and len(parts) > parts.index("namespaces") + 2:
        rest = parts[parts.index("namespaces") + 2:]
        return rest[0] + ("/" + rest[2] if len(rest) > 2 else "")
    return parts[-1]

class Supervisor:
    """The operator as its Deployment keeps it: started again when it exits."""

    def __init__(self, cluster):
        self.cluster = cluster
        self.restarts = 0
        self.operator = Operator(cluster)

    def check(self):
        if self.operator.proc.poll() is not None:
            self.restarts += 1
            self.operator.stop()
            self.operator = Operator(self.cluster, name="operator-%d" % self.restarts)

    def stop(self):
        self.operator.stop()


class JobRun:
    """One job name through its action; `expected` maps each uid it had to the
    phase that uid must end in (None: deleted before finishing)."""

    def __init__(self, name, action, clean_pod_policy):
        self.name, self.action, self.clean_pod_policy = name, action, clean_pod_policy
        self.expected = collections.OrderedDict()
        self.state = "submitted"
        self.started = time.time()
        self.done = False

    def uid(self):
        return next(reversed(self.expected))


class Churn:
    def __init__(self, cluster, count, seed, concurrency=4, job_timeout=180, log=print):
        self.c, self.seed, self.concurrency, self.job_timeout = cluster, seed, concurrency, job_timeout
        self.plan = plan(count, seed)
        self.log = log
        self.runs = []
        self.rotations = 0
        self.stuck = []   # (name, phase, pods, kubelet lines): jobs that did not end in time
        self.took = None

    # -- the run

    def run(self):
        began = time.time()
        self.supervisor = Supervisor(self.c)
        try:
            pending = list(self.plan)
            rotate_at = {len(pending) // 3, 2 * len(pending) // 3}
            active = []
            submitted = 0
            while pending or active:
                self.supervisor.check()
                while pending and len(active) < self.concurrency:
                    if submitted in rotate_at:
                        rotate_at.discard(submitted)
                        self.c.rotate_operator_token(expire_old=True)
                        self.rotations += 1
                    run = JobRun(*pending.pop(0))
                    self.submit(run, first_of_replace=run.action == REPLACE)
                    self.runs.append(run)
                    active.append(run)
                    submitted += 1
                jobs = {j["metadata"]["name"]: j for j in self.c.client.get(TJ)["items"]}
                for run in list(active):
                    self.step(run, jobs.get(run.name))
                    if run.done:
                        active.remove(run)
                        self.log("%d/%d %s %s: %s in %.1f s" % (
                            sum(r.done for r in self.runs), len(self.plan), run.name, run.action,
                            run.state, time.time() - run.started))
                time.sleep(0.2)
            self.took = time.time() - began
            self.settle()
        finally:
            self.supervisor.stop()
        return self

    def submit(self, run, first_of_replace=False):
        apply(self.c, manifest(run.name, run.action, run.clean_pod_policy, first_of_replace))
        run.expected[self.c.client.get(TJ + "/" + run.name)["metadata"]["uid"]] = (
            None if first_of_replace else "Failed" if run.action == DEADLINE else "Succeeded")

    def delete(self, run):
        self.c.kubectl("delete", "tj", run.name, "--wait=false")

    def step(self, run, job):
        phase = (job or {}).get("status", {}).get("phase")
        live = job is not None and job["metadata"]["uid"] == run.uid()
        if time.time() - run.started > self.job_timeout:
            self.stuck.append(self.stuck_report(run, phase))
            run.state, run.done = "timed out in phase %s" % phase, True
        elif run.state == "submitted" and run.action == REPLACE and live and phase == "Running":
            # deleted while running, and applied again at once: the old one's
            # pods, services and secret are still there for GC_DELAY seconds
            self.delete(run)
            old = run.uid()
            self.c.wait_for(lambda: all(j["metadata"]["uid"] != old
                                        for j in self.c.client.get(TJ)["items"]),
                            timeout=30, what="%s deleted" % run.name)
            self.submit(run)
            run.state = "replaced"
        elif run.state in ("submitted", "replaced") and live and phase in TERMINAL:
            if run.action == DELETE_FINISHED:
                self.delete(run)
                run.state = "deleted once %s" % phase
            else:
                run.state = phase
            run.done = True

    def stuck_report(self, run, phase):
        pods = [(p["metadata"]["name"], p.get("status", {}).get("phase"),
                 [s.get("state") for s in p.get("status", {}).get("containerStatuses", [])])
                for p in job_pods(self.c, run.name)]
        return (run.name, phase, pods, kubelet_tail(self.c, run.name + "-").splitlines())

    def settle(self):
        """Waits until the garbage collector has removed every object of a
        deleted job (its delay and a few seconds for the late events)."""
        live = {j["metadata"]["uid"] for j in self.c.client.get(TJ)["items"]}

        def collected():
            return all(owner_uid(o) in live or owner_uid(o) is None for o in self.owned_objects())
        try:
            self.c.wait_for(collected, timeout=GC_DELAY + 30, interval=0.5,
                            what="the objects of deleted jobs collected")
        except AssertionError:
            pass   # counted by the checks
        time.sleep(GC_DELAY)   # a pod made late would show now

    # -- the checks

    def owned_objects(self):
        return [(kind, o) for kind, path in OWNED_KINDS.items()
                for o in self.c.client.get(path)["items"] if owner_uid(o) is not None]

    def counts(self):
        requests = self.c.requests()
        writes = [r for r in requests if r.get("object") and r["code"] in (200, 201)]
        phases = collections.defaultdict(list)   # uid -> [(rv, phase)] of its writes
        terminal_rv = {}                         # uid -> rv of its first terminal status
        for r in writes:
            if r["path"].startswith(TJ):
                o = r["object"]
                phases[o["uid"]].append(o["phase"])
                if o["phase"] in TERMINAL and o["uid"] not in terminal_rv:
                    terminal_rv[o["uid"]] = int(o["resourceVersion"])
        live = {j["metadata"]["name"]: j for j in self.c.client.get(TJ)["items"]}

        wrong_phase = []
        for run in self.runs:
            for uid, want in run.expected.items():
                seen = [p for p in phases[uid] if p]
                job = live.get(run.name)
                final = job.get("status", {}).get("phase") if job and job["metadata"]["uid"] == uid \
                    else (seen[-1] if seen else None)
                # after a terminal phase a job never changes phase again
                after = seen[seen.index(final):] if final in TERMINAL else []
                ok = (final == want if want else final not in TERMINAL) and set(after) <= {final}
                if not ok:
                    wrong_phase.append((run.name, uid, want, final, seen))

        pods_after_terminal = []
        for r in writes:
            o = r["object"]
            if r["verb"] == "POST" and r["path"].split("?")[0] == PODS and \
                    o["controllerUid"] in terminal_rv and \
                    int(o["resourceVersion"]) > terminal_rv[o["controllerUid"]]:
                pods_after_terminal.append((o["name"], o["controllerUid"], r["seq"]))

        controllers = collections.defaultdict(set)   # object uid -> controller uids it had
        for r in writes:
            path = r["path"].split("?")[0]
            if any(path.startswith(p) for p in OWNED_KINDS.values()) and r["object"]["controllerUid"]:
                controllers[(r["object"]["name"], r["object"]["uid"])].add(r["object"]["controllerUid"])
        adopted = [(key, sorted(uids)) for key, uids in controllers.items() if len(uids) > 1]
        foreign = []
        for kind, o in self.owned_objects():
            ref = controller_ref(o)
            job = live.get(ref.get("name"))
            labelled = (o["metadata"].get("labels") or {}).get("kubeps.io/job-name")
            holder = live.get(labelled) if labelled else None
            if (job is None or job["metadata"]["uid"] != ref["uid"]) or \
                    (holder is not None and holder["metadata"]["uid"] != ref["uid"]):
                foreign.append((kind, o["metadata"]["name"], ref["uid"]))

        operator = [r for r in requests if r["user"] == OPERATOR_USER]
        by_code = collections.Counter(r["code"] for r in operator)
        refused = collections.Counter("%s %s" % (r["verb"], resource_of(r["path"]))
                                      for r in operator if r["code"] == 409)
        return {
            "jobs": len(self.plan), "submissions": sum(len(r.expected) for r in self.runs),
            "actions": collections.Counter(r.action for r in self.runs),
            "right_phase": sum(len(r.expected) for r in self.runs) - len(wrong_phase),
            "wrong_phase": wrong_phase, "pods_after_terminal": pods_after_terminal,
            "adopted": adopted, "foreign_objects": foreign, "stuck": self.stuck,
            "operator_requests": len(operator), "operator_requests_by_code": dict(by_code),
            "operator_409s": dict(refused),
            "operator_restarts": self.supervisor.restarts, "token_rotations": self.rotations,
            "request_log_complete": requests[0]["seq"] == 1 if requests else True,
        }


def controller_ref(obj):
    return next((r for r in obj["metadata"].get("ownerReferences") or [] if r.get("controller")), {})


def owner_uid(obj):
    return controller_ref(obj).get("uid")


def must_be_zero(counts):
    return {k: len(counts[k]) for k in ("wrong_phase", "pods_after_terminal", "adopted",
                                         "foreign_objects", "stuck")}


def report(counts, seed):
    """The printed summary; each list of failures in detail below it."""
    lines = ["churn (seed %d): %d jobs, %d submissions %s" % (
        seed, counts["jobs"], counts["submissions"], dict(sorted(counts["actions"].items())))]
    lines.append("  right phase: %d, wrong phase: %d" % (counts["right_phase"], len(counts["wrong_phase"])))
    lines.append("  pods created after their job's terminal status: %d" % len(counts["pods_after_terminal"]))
    lines.append("  objects adopted (controller changed): %d; owned by a uid other than the live job "
                 "of that name: %d" % (len(counts["adopted"]), len(counts["foreign_objects"])))
    lines.append("  jobs that did not end in time: %d" % len(counts["stuck"]))
    lines.append("  operator: %d requests %s, %d restarts, %d token rotations" % (
        counts["operator_requests"], json.dumps(counts["operator_requests_by_code"], sort_keys=True),
        counts["operator_restarts"], counts["token_rotations"]))
    lines.append("  operator's 409s (a status written over a newer job, or a name taken): %s"
                 % json.dumps(counts["operator_409s"], sort_keys=True))
    if not counts["request_log_complete"]:
        lines.append("  WARNING: the request log lost its oldest entries: the counts are partial")
    for key in ("wrong_phase", "pods_after_terminal", "adopted", "foreign_objects", "stuck"):
        for item in counts[key]:
            lines.append("  %s: %s" % (key, item if key != "stuck" else "\n    ".join(
                [repr(item[:3])] + item[3])))
    return "\n".join(lines)


def kubelet_tail(cluster, pod_name, lines=30):
    """The kubelet's last lines about `pod_name`."""
    try:
        out = kubelet_output(cluster)
    except OSError as e:
        return "(no kubelet log: %s)" % e
    return "\n".join([l for l in out.splitlines() if l.startswith("kubelet:") and pod_name in l][-lines:])

