"""The monitoring files in deploy/monitoring/: every metric they query is one
the code exports, the alerts and configurations pass promtool, the alerts
fire when they should, and against a real Prometheus scraping a real
`kubeps run` job the dashboard's steps/sec agrees with the workers' own
progress lines.

Needs Debian's `prometheus` package (prometheus and promtool) for all but
the static checks; without it those tests are skipped and say so.
"""
import glob
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import unittest
import urllib.parse
import urllib.request

from jobtools import KUBEPS, SOURCE_DIR, RunningJob, manifest, write_manifest

MONITORING = os.path.join(SOURCE_DIR, "deploy", "monitoring")
DASHBOARD = os.path.join(MONITORING, "grafana-dashboard.json")
RULES = os.path.join(MONITORING, "prometheus-rules.yaml")
PROMETHEUS_CONFIG = os.path.join(MONITORING, "prometheus.yml")
KUBERNETES_CONFIG = os.path.join(MONITORING, "prometheus-kubernetes.yml")
FILE_SD = os.path.join(MONITORING, "kubeps_file_sd.py")
PROMETHEUS = os.environ.get("KUBEPS_PROMETHEUS", "/usr/bin/prometheus")
PROMTOOL = shutil.which("promtool")

# Folders whose C++ sources register the exported metrics.
METRIC_SOURCES = ["common", "ps-server", "worker-agent", "operator"]
# MetricsServer::Counter/Gauge/Latency("name", ...) (common/metrics.h), and
# prometheus-cpp's builders, should a component use them directly.
REGISTRATION = re.compile(
    r'\b(Counter|Gauge|Latency|Histogram|Summary)\s*\(\s*"(kubeps_[a-z0-9_]+)"'
    r'|\bBuild(Counter|Gauge|Histogram|Summary|Info)\s*\(\s*\)\s*\.\s*Name\s*\(\s*"(kubeps_[a-z0-9_]+)"')
HISTOGRAM_KINDS = {"Latency", "Histogram", "Summary"}
METRIC_NAME = re.compile(r"\bkubeps_[a-z0-9_]+\b")
SUFFIXES = ("_bucket", "_sum", "_count")


def exported_metrics():
    """{name: kind} for every metric name registered in the C++ sources."""
    found = {}
    for folder in METRIC_SOURCES:
        for path in glob.glob(os.path.join(SOURCE_DIR, folder, "**", "*"), recursive=True):
            if not path.endswith((".h", ".cc", ".cpp", ".cu", ".hpp")):
                continue
            with open(path, errors="replace") as f:
                text = f.read()
            for m in REGISTRATION.finditer(text):
                kind, name = (m.group(1), m.group(2)) if m.group(2) else (m.group(3), m.group(4))
                found[name] = kind
    return found


def load_dashboard():
    with open(DASHBOARD) as f:
        return json.load(f)


def dashboard_panels(dashboard):
    """Every panel, those inside rows included."""
    result = []
    for panel in dashboard["panels"]:
        result.append(panel)
        result.extend(panel.get("panels", []))
    return result


def dashboard_queries(dashboard):
    """(panel title, expr) for every query of every panel."""
    return [(p["title"], t["expr"]) for p in dashboard_panels(dashboard) for t in p.get("targets", [])]


def template_variables(dashboard):
    return {v["name"]: v for v in dashboard["templating"]["list"]}


def rules_spec():
    """The PrometheusRule's spec as a plain Prometheus rules file: the
    lines under `spec:`, one indentation level less."""
    with open(RULES) as f:
        lines = f.read().splitlines()
    start = lines.index("spec:")
    body = []
    for line in lines[start + 1:]:
        if line.strip() and not line.startswith("  "):
            break
        body.append(line[2:])
    return "\n".join(body) + "\n"


def parse_rules(text):
    """The alerting rules of a rules file that keeps to this file's simple
    layout: [{alert, expr, for, labels, annotations}]."""
    rules = []
    lines = text.splitlines()
    i = 0
    section = None
    while i < len(lines):
        line = lines[i]
        stripped = line.strip()
        indent = len(line) - len(line.lstrip())
        if stripped.startswith("- alert:"):
            rules.append({"alert": stripped.split(":", 1)[1].strip(), "labels": {}, "annotations": {},
                          "_indent": indent + 2})
            section = None
        elif rules and stripped and not stripped.startswith("#"):
            rule = rules[-1]
            key, _, value = stripped.partition(":")
            value = value.strip()
            if indent == rule["_indent"]:
                section = None
                if key == "expr" and value in ("|", "|-", ">", ">-"):
                    block = []
                    while i + 1 < len(lines) and (not lines[i + 1].strip() or
                                                  len(lines[i + 1]) - len(lines[i + 1].lstrip()) > indent):
                        i += 1
                        block.append(lines[i].strip())
                    rule["expr"] = "\n".join(b for b in block if b)
                elif key in ("labels", "annotations"):
                    section = key
                else:
                    rule[key] = value
            elif section and indent > rule["_indent"]:
                if value.startswith('"'):
                    value = json.loads(value)
                rule[section][key] = value
        i += 1
    for rule in rules:
        del rule["_indent"]
    return rules


def monitoring_queries():
    """(where, expr) for every PromQL expression of the dashboard and the rules."""
    dashboard = load_dashboard()
    queries = [("dashboard panel %r" % title, expr) for title, expr in dashboard_queries(dashboard)]
    for name, variable in template_variables(dashboard).items():
        if variable.get("type") == "query":
            queries.append(("dashboard variable %r" % name, variable["definition"]))
    queries += [("alert %s" % r["alert"], r["expr"]) for r in parse_rules(rules_spec())]
    return queries


def missing_metrics(only_operator):
    """{name used by the monitoring files but not exported: [where]}."""
    exported = exported_metrics()
    missing = {}
    for where, expr in monitoring_queries():
        for name in METRIC_NAME.findall(expr):
            if name.startswith("kubeps_operator_") != only_operator:
                continue
            base = name
            for suffix in SUFFIXES:
                if name.endswith(suffix) and exported.get(name[:-len(suffix)]) in HISTOGRAM_KINDS:
                    base = name[:-len(suffix)]
            if base not in exported:
                missing.setdefault(name, []).append(where)
            elif base == name and exported[name] in HISTOGRAM_KINDS:
                # A histogram has no series of its bare name.
                missing.setdefault(name + " (a histogram: use _bucket, _sum or _count)", []).append(where)
    return missing


def substitute(expr, job, window):
    """A dashboard expression with Grafana's variables filled in."""
    return expr.replace("$__rate_interval", window).replace("${job}", job).replace("$job", job)


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class MonitoringFilesTest(unittest.TestCase):
    def test_source_scan_finds_the_exported_metrics(self):
        exported = exported_metrics()
        # The scan itself: names registered through each helper, with their kind.
        self.assertEqual(exported.get("kubeps_worker_steps_total"), "Counter", exported)
        self.assertEqual(exported.get("kubeps_worker_loss"), "Gauge", exported)
        self.assertEqual(exported.get("kubeps_worker_push_latency_seconds"), "Latency", exported)
        self.assertIn("kubeps_rpc_resends_total", exported)
        self.assertIn("kubeps_server_updates_applied_total", exported)

    def test_monitoring_uses_only_metrics_the_code_exports(self):
        missing = missing_metrics(only_operator=False)
        self.assertFalse(missing, "metrics queried by deploy/monitoring but not registered in %s: %s"
                         % (", ".join(METRIC_SOURCES), json.dumps(missing, indent=1)))

    def test_operator_metrics_used_by_monitoring_are_exported(self):
        # kubeps_operator_jobs{phase} and kubeps_operator_replica_restarts_total{job}
        # are exported by the operator (operator/).
        missing = missing_metrics(only_operator=True)
        self.assertFalse(missing, "operator metrics queried by deploy/monitoring but not registered in "
                         "operator/: %s" % json.dumps(missing, indent=1))

    def test_dashboard(self):
        dashboard = load_dashboard()
        self.assertGreaterEqual(dashboard["schemaVersion"], 36)
        self.assertIn("DS_PROMETHEUS", [i["name"] for i in dashboard.get("__inputs", [])])
        variables = template_variables(dashboard)
        self.assertEqual(variables["DS_PROMETHEUS"]["type"], "datasource")
        self.assertEqual(variables["job"]["definition"], "label_values(kubeps_worker_steps_total, job)")
        panels = dashboard_panels(dashboard)
        ids = [p["id"] for p in panels]
        self.assertEqual(len(ids), len(set(ids)), "panel ids repeat")
        for panel in panels:
            if panel["type"] == "row":
                continue
            self.assertTrue(panel.get("targets"), panel["title"])
            for target in [panel] + panel["targets"]:
                self.assertEqual(target["datasource"]["uid"], "${DS_PROMETHEUS}", panel["title"])
        exprs = "\n".join(expr for _, expr in dashboard_queries(dashboard))
        for needed in ["sum by (job) (rate(kubeps_worker_steps_total{job=~\"$job\"}",
                       "sum by (job, rank) (rate(kubeps_worker_steps_total{job=~\"$job\"}",
                       "sum by (job) (rate(kubeps_worker_samples_total", "sum by (job, rank) (rate(kubeps_worker_samples_total",
                       "kubeps_worker_loss", "rate(kubeps_server_updates_applied_total",
                       "rate(kubeps_server_push_bytes_total", "rate(kubeps_server_pull_bytes_total",
                       "sum by (job, rpc, peer) (rate(kubeps_rpc_resends_total", "rate(kubeps_rpc_timeouts_total",
                       "kubeps_server_duplicates_suppressed_total", "kubeps_server_checkpoints_total",
                       "kubeps_worker_rollbacks_total", "kubeps_faults_injected_total",
                       "sum by (phase) (kubeps_operator_jobs)",
                       "rate(kubeps_worker_exchange_wait_seconds_sum{job=~\"$job\"}",
                       "kubeps_server_learning_rate{job=~\"$job\"}"]:
            self.assertIn(needed, exprs)
        for histogram in ["kubeps_worker_push_latency_seconds", "kubeps_worker_pull_latency_seconds"]:
            for q in ["0.5", "0.9", "0.99"]:
                self.assertRegex(exprs, r"histogram_quantile\(%s, sum by \([a-z, ]*le\) \(rate\(%s_bucket"
                                 % (re.escape(q), histogram))

    def test_rules(self):
        with open(RULES) as f:
            text = f.read()
        self.assertIn("apiVersion: monitoring.coreos.com/v1\n", text)
        self.assertIn("kind: PrometheusRule\n", text)
        rules = parse_rules(rules_spec())
        by_name = {r["alert"]: r for r in rules}
        self.assertEqual(set(by_name), {"KubepsJobStalled", "KubepsHighResendRate", "KubepsWorkerRestarts",
                                        "KubepsCheckpointWriteFailures", "KubepsCheckpointFolderHeld"})
        for rule in rules:
            self.assertIn(rule["labels"].get("severity"), ("critical", "warning", "info"), rule)
            self.assertTrue(rule["annotations"].get("summary"), rule)
            self.assertTrue(rule["annotations"].get("description"), rule)
        self.assertIn("sum by (job) (rate(kubeps_worker_steps_total[5m])) == 0", by_name["KubepsJobStalled"]["expr"])
        self.assertIn("kubeps_rpc_resends_total", by_name["KubepsHighResendRate"]["expr"])
        self.assertIn("kubeps_operator_replica_restarts_total", by_name["KubepsWorkerRestarts"]["expr"])
        self.assertIn("kubeps_server_checkpoint_failures_total",
                      by_name["KubepsCheckpointWriteFailures"]["expr"])
        self.assertIn("kubeps_server_checkpoint_folder_wait_seconds",
                      by_name["KubepsCheckpointFolderHeld"]["expr"])
        self.assertNotIn("process_start_time_seconds", text)

    def test_file_sd_generator(self):
        with tempfile.TemporaryDirectory() as tmp:
            for replica, text in [("scheduler-0", "grpc 4001\nmetrics 5001\n"),
                                  ("worker-0", "grpc 0\nmetrics 5002\n"),
                                  ("server-0", "grpc 4002\n")]:  # not published yet
                with open(os.path.join(tmp, replica + ".ports"), "w") as f:
                    f.write(text)
            out = os.path.join(tmp, "targets.json")
            subprocess.run([sys.executable, FILE_SD, tmp, out], check=True, capture_output=True, timeout=30)
            with open(out) as f:
                groups = json.load(f)
        self.assertEqual(groups, [{"targets": ["127.0.0.1:5001"], "labels": {"replica": "scheduler-0"}},
                                  {"targets": ["127.0.0.1:5002"], "labels": {"replica": "worker-0"}}])


@unittest.skipUnless(PROMTOOL, "promtool is not installed (Debian package prometheus)")
class PromtoolTest(unittest.TestCase):
    def setUp(self):
        self.dir = tempfile.mkdtemp(prefix="kubeps-promtool-")
        self.rules = os.path.join(self.dir, "kubeps-rules.yml")
        with open(self.rules, "w") as f:
            f.write(rules_spec())

    def tearDown(self):
        shutil.rmtree(self.dir, ignore_errors=True)

    def promtool(self, *args):
        return subprocess.run([PROMTOOL] + list(args), capture_output=True, text=True, timeout=60)

    def test_check_rules(self):
        result = self.promtool("check", "rules", self.rules)
        self.assertEqual(result.returncode, 0, result.stdout + result.stderr)
        self.assertIn("SUCCESS: %d rules found" % len(parse_rules(rules_spec())),
                      result.stdout + result.stderr)

    def test_check_local_config(self):
        # A copy beside the extracted rules, so the rule_files glob matches.
        config = os.path.join(self.dir, "prometheus.yml")
        shutil.copy(PROMETHEUS_CONFIG, config)
        result = self.promtool("check", "config", config)
        output = result.stdout + result.stderr
        self.assertEqual(result.returncode, 0, output)
        self.assertIn("SUCCESS: 1 rule files found", output)

    def test_check_kubernetes_config(self):
        result = self.promtool("check", "config", KUBERNETES_CONFIG)
        output = result.stdout + result.stderr
        if "field kubernetes_sd_configs not found" in output:
            self.skipTest("this promtool is built without Kubernetes service discovery (Debian's is)")
        self.assertEqual(result.returncode, 0, output)

    def test_alerts_fire_when_they_should(self):
        """promtool's rule unit tests on synthetic series: each alert fires for
        the job in trouble, with its labels and annotations, and not for a
        healthy one."""
        rules = {r["alert"]: r for r in parse_rules(rules_spec())}

        def expected(alert, job, node=None):
            labels = dict(rules[alert]["labels"], job=job, **({"node": node} if node else {}))
            annotations = {k: v.replace("{{ $labels.job }}", job).replace("{{ $labels.node }}", str(node))
                           for k, v in rules[alert]["annotations"].items()}
            return [{"exp_labels": labels, "exp_annotations": annotations}]

        def worker(metric, job, values, rank="0"):
            return {"series": '%s{job="%s",role="worker",node="worker-%s",rank="%s"}' % (metric, job, rank, rank),
                    "values": values}

        def server(metric, job, values):
            return {"series": '%s{job="%s",role="server",node="server-0"}' % (metric, job), "values": values}

        tests = {
            "rule_files": [os.path.basename(self.rules)],
            "evaluation_interval": "1m",
            "tests": [{
                "interval": "1m",
                "input_series": [
                    # "stuck" steps for 5 minutes, then its workers stay up with no steps.
                    worker("kubeps_worker_steps_total", "stuck", "0+10x5 50+0x25"),
                    worker("kubeps_worker_steps_total", "stuck", "0+10x5 50+0x25", rank="1"),
                    worker("kubeps_worker_steps_total", "healthy", "0+10x30"),
                    # "done" stops after 5 minutes: its series end (a finished job).
                    worker("kubeps_worker_steps_total", "done", "0+10x5"),
                    # "flaky" resends 15% as many requests as the servers handle.
                    {"series": 'kubeps_rpc_resends_total{job="flaky",role="worker",node="worker-0",rank="0",'
                               'rpc="Push",peer="server-0"}', "values": "0+30x30"},
                    server("kubeps_server_pushes_total", "flaky", "0+100x30"),
                    server("kubeps_server_pulls_total", "flaky", "0+100x30"),
                    {"series": 'kubeps_rpc_resends_total{job="healthy",role="worker",node="worker-0",rank="0",'
                               'rpc="Push",peer="server-0"}', "values": "0+1x30"},
                    server("kubeps_server_pushes_total", "healthy", "0+100x30"),
                    server("kubeps_server_pulls_total", "healthy", "0+100x30"),
                    # The operator restarted "crashy" once a minute, "healthy" once.
                    {"series": 'kubeps_operator_replica_restarts_total{job="crashy"}', "values": "0+1x30"},
                    {"series": 'kubeps_operator_replica_restarts_total{job="healthy"}', "values": "0 1+0x30"},
                    # A server of "held" waits for its checkpoint folder from the start;
                    # one of "healthy" waited 40 s for a stopping predecessor, then held it.
                    server("kubeps_server_checkpoint_folder_wait_seconds", "held", "0+60x30"),
                    server("kubeps_server_checkpoint_folder_wait_seconds", "healthy", "0 40 0x28"),
                ],
                "alert_rule_test": [
                    {"eval_time": "4m", "alertname": "KubepsJobStalled", "exp_alerts": []},
                    {"eval_time": "20m", "alertname": "KubepsJobStalled",
                     "exp_alerts": expected("KubepsJobStalled", "stuck")},
                    {"eval_time": "2m", "alertname": "KubepsHighResendRate", "exp_alerts": []},
                    {"eval_time": "20m", "alertname": "KubepsHighResendRate",
                     "exp_alerts": expected("KubepsHighResendRate", "flaky")},
                    {"eval_time": "20m", "alertname": "KubepsWorkerRestarts",
                     "exp_alerts": expected("KubepsWorkerRestarts", "crashy")},
                    {"eval_time": "2m", "alertname": "KubepsCheckpointFolderHeld", "exp_alerts": []},
                    {"eval_time": "3m", "alertname": "KubepsCheckpointFolderHeld",
                     "exp_alerts": expected("KubepsCheckpointFolderHeld", "held", "server-0")},
                ],
            }],
        }
        path = os.path.join(self.dir, "alerts_test.yml")
        with open(path, "w") as f:
            json.dump(tests, f, indent=1)  # JSON is YAML
        result = self.promtool("test", "rules", path)
        self.assertEqual(result.returncode, 0, result.stdout + result.stderr)
        self.assertIn("SUCCESS", result.stdout + result.stderr)


@unittest.skipUnless(os.path.exists(PROMETHEUS), "Prometheus is not installed at %s (Debian package prometheus)"
                     % PROMETHEUS)
class PrometheusEndToEndTest(unittest.TestCase):
    """A real Prometheus, configured by deploy/monitoring/prometheus.yml and
    kubeps_file_sd.py, scrapes a real job; the dashboard's queries run on it."""

    JOB = "monitoring-e2e"
    WINDOW = 20  # seconds: the rate window the dashboard's $__rate_interval stands for here
    REPLICAS = ["scheduler-0", "server-0", "server-1", "worker-0", "worker-1"]

    def setUp(self):
        self.assertTrue(os.path.exists(KUBEPS), "build kubeps first: " + KUBEPS)
        # The job, Prometheus and the test on one core, as a cpuset would
        # keep them: a rate and the progress lines agree at any speed, and
        # the test, which mostly waits for a rate window, can run beside
        # those that compute (tests/CMakeLists.txt).
        cores = os.sched_getaffinity(0)
        os.sched_setaffinity(0, {min(cores)})
        self.addCleanup(os.sched_setaffinity, 0, cores)
        self.dir = tempfile.mkdtemp(prefix="kubeps-monitoring-")
        self.job = None
        self.prometheus = None
        self.prometheus_log = None

    def tearDown(self):
        if self.prometheus is not None and self.prometheus.poll() is None:
            self.prometheus.send_signal(signal.SIGTERM)
            try:
                self.prometheus.wait(timeout=20)
            except subprocess.TimeoutExpired:
                self.prometheus.kill()
                self.prometheus.wait()
        if self.prometheus_log is not None:
            self.prometheus_log.close()
        if self.job is not None and self.job.process.poll() is None:
            self.job.interrupt()  # kubeps run stops its children
            try:
                self.job.process.wait(timeout=60)
            except subprocess.TimeoutExpired:
                self.job.process.kill()
                self.job.process.wait()
        if self.job is not None:
            self.job.close()
        shutil.rmtree(self.dir, ignore_errors=True)

    def api(self, path, **params):
        url = "http://127.0.0.1:%d/api/v1/%s" % (self.port, path)
        if params:
            url += "?" + urllib.parse.urlencode(params)
        with urllib.request.urlopen(url, timeout=10) as response:
            body = json.loads(response.read().decode())
        self.assertEqual(body.get("status"), "success", body)
        return body["data"]

    def query(self, expr, at):
        data = self.api("query", query=expr, time="%.3f" % at)
        self.assertEqual(data["resultType"], "vector", expr)
        return [(r["metric"], float(r["value"][1])) for r in data["result"]]

    def prometheus_output(self):
        with open(os.path.join(self.dir, "prometheus.log"), errors="replace") as f:
            return f.read()[-3000:]

    def wait_until(self, what, condition, timeout):
        deadline = time.time() + timeout
        while time.time() < deadline:
            if self.prometheus.poll() is not None:
                self.fail("Prometheus exited with %s:\n%s" % (self.prometheus.returncode, self.prometheus_output()))
            if self.job.process.poll() is not None:
                self.fail("the job ended early:\n" + self.job.output())
            value = condition()
            if value:
                return value
            time.sleep(0.5)
        self.fail("%s: not within %d s\njob:\n%s\nprometheus:\n%s"
                  % (what, timeout, self.job.output()[-3000:], self.prometheus_output()))

    def start_prometheus(self, run_dir):
        # The example configuration, scraping every second instead of every 5 s.
        with open(PROMETHEUS_CONFIG) as f:
            config = f.read()
        for key in ["scrape_interval", "evaluation_interval", "refresh_interval"]:
            self.assertIn("%s: 5s" % key, config)
            config = config.replace("%s: 5s" % key, "%s: 1s" % key)
        with open(os.path.join(self.dir, "prometheus.yml"), "w") as f:
            f.write(config)
        with open(os.path.join(self.dir, "kubeps-rules.yml"), "w") as f:
            f.write(rules_spec())
        subprocess.run([sys.executable, FILE_SD, run_dir, os.path.join(self.dir, "kubeps-targets.json")],
                       check=True, capture_output=True, timeout=30)
        self.port = free_port()
        self.prometheus_log = open(os.path.join(self.dir, "prometheus.log"), "w")
        self.prometheus = subprocess.Popen(
            [PROMETHEUS, "--config.file=" + os.path.join(self.dir, "prometheus.yml"),
             "--storage.tsdb.path=" + os.path.join(self.dir, "data"),
             "--web.listen-address=127.0.0.1:%d" % self.port],
            stdout=self.prometheus_log, stderr=subprocess.STDOUT)

    def targets_up(self):
        try:
            active = self.api("targets")["activeTargets"]
        except (OSError, ValueError):
            return False
        return len(active) == len(self.REPLICAS) and all(t["health"] == "up" for t in active)

    def test_dashboard_steps_per_second_agrees_with_progress_lines(self):
        # 200 epochs: the 2 x 2 MLP job makes some 650 steps a second, and 40 epochs could end
        # before Prometheus is up and a whole rate window has passed; tearDown stops it.
        spec = json.loads(manifest(self.JOB, model="mlp", ps=2, workers=2, batch=64, epochs=200))
        spec["spec"]["progressIntervalMs"] = 1000
        path = write_manifest(self.dir, json.dumps(spec, indent=2))
        run_dir = os.path.join(self.dir, "run")
        self.job = RunningJob(path, run_dir=run_dir)
        for replica in self.REPLICAS:
            self.job.ports(replica)
        self.start_prometheus(run_dir)
        self.wait_until("all %d targets up in Prometheus" % len(self.REPLICAS), self.targets_up, 60)

        # Once both workers train, let a whole rate window of scrapes pass.
        self.wait_until("progress lines from both workers",
                        lambda: self.job.progress(0) and self.job.progress(1), 120)
        training_since = time.time()
        self.wait_until("a %d s window of training" % self.WINDOW,
                        lambda: time.time() > training_since + self.WINDOW + 3, self.WINDOW + 10)
        at = time.time() - 1.5  # the latest scrapes are in by then

        dashboard = load_dashboard()
        queries = {title: expr for title, expr in dashboard_queries(dashboard)}
        window = "%ds" % self.WINDOW
        per_job = self.query(substitute(queries["Steps/sec per job"], self.JOB, window), at)
        per_worker = self.query(substitute(queries["Steps/sec per worker"], self.JOB, window), at)

        # The progress lines printed in the same window: each one is a worker's
        # steps/sec since its previous line (about 1 s).
        lines = {}
        for p in self.job.progress():
            if at - self.WINDOW < self.job.start + p["time"] <= at:
                lines.setdefault(p["rank"], []).append(p["steps_per_sec"])
        self.assertEqual(sorted(lines), [0, 1], self.job.output())
        from_lines = {rank: sum(v) / len(v) for rank, v in lines.items()}

        self.assertEqual(len(per_job), 1, per_job)
        self.assertEqual(per_job[0][0], {"job": self.JOB})
        job_rate, job_lines = per_job[0][1], sum(from_lines.values())
        print("\nsteps/sec over %s: dashboard (Prometheus) %.2f, progress lines %.2f (%s lines), "
              "difference %.1f%%" % (window, job_rate, job_lines, sum(len(v) for v in lines.values()),
                                     100 * (job_rate - job_lines) / job_lines))
        self.assertGreater(job_rate, 0)
        self.assertLess(abs(job_rate - job_lines), 0.10 * job_lines)

        by_rank = {int(m["rank"]): v for m, v in per_worker}
        self.assertEqual(sorted(by_rank), [0, 1], per_worker)
        for rank in (0, 1):
            print("worker %d: dashboard %.2f, progress lines %.2f" % (rank, by_rank[rank], from_lines[rank]))
            self.assertLess(abs(by_rank[rank] - from_lines[rank]), 0.10 * from_lines[rank])

        # Every other query of the dashboard runs on this Prometheus; those
        # on metrics every job exports from the start return data.
        always = {"kubeps_worker_steps_total", "kubeps_worker_samples_total", "kubeps_worker_loss",
                  "kubeps_worker_step_duration_seconds_bucket", "kubeps_worker_push_latency_seconds_bucket",
                  "kubeps_worker_step_duration_seconds_sum", "kubeps_worker_exchange_wait_seconds_sum",
                  "kubeps_worker_pull_latency_seconds_bucket", "kubeps_worker_push_bytes_total",
                  "kubeps_worker_pull_bytes_total", "kubeps_worker_rollbacks_total",
                  "kubeps_server_pushes_total", "kubeps_server_pulls_total", "kubeps_server_updates_applied_total",
                  "kubeps_server_push_bytes_total", "kubeps_server_pull_bytes_total",
                  "kubeps_server_duplicates_suppressed_total", "kubeps_server_checkpoints_total",
                  "kubeps_scheduler_registered_nodes"}
        for title, expr in dashboard_queries(dashboard):
            result = self.query(substitute(expr, self.JOB, window), at)
            if set(METRIC_NAME.findall(expr)) <= always:
                self.assertTrue(result, "panel %r: no data for %s" % (title, expr))
                self.assertTrue(all(v == v for _, v in result), "panel %r: NaN in %s" % (title, result))
        loss = self.query(substitute(queries["Loss"], self.JOB, window), at)
        self.assertTrue(all(0 < v < 5 for _, v in loss), loss)
        nodes = self.query(substitute(queries["Registered nodes"], self.JOB, window), at)
        self.assertEqual([v for _, v in nodes], [4.0])

        # The alerts load and evaluate on real series; a training job is not stalled.
        def evaluated():
            groups = self.api("rules")["groups"]
            rules = [r for g in groups for r in g["rules"]]
            evaluated_once = all(r.get("lastEvaluation", "").startswith("2") and
                                 not r["lastEvaluation"].startswith("0001") for r in rules)
            return rules if len(rules) == len(parse_rules(rules_spec())) and evaluated_once else None
        rules = self.wait_until("the alerting rules evaluated", evaluated, 30)
        for rule in rules:
            self.assertEqual(rule["health"], "ok", rule)
            self.assertEqual(rule["state"], "inactive", rule)


if __name__ == "__main__":
    unittest.main()
