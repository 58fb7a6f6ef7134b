"""Tests of the stand-in API server's CEL rules (x-kubernetes-validations;
emulator/apiserver/cel_rules.py), driven by the real kubectl and by REST
calls: the TrainingJob CRD's own rules (a fixed job's workers, the elastic
bounds, in the parser's words), Kueue's Workload rules, and what the real
server does with rules of any CRD (transition rules, ratcheting, messages,
errors, compilation).

    python3 -m unittest -v test_emulator_cel      (from tests/k8s)
"""
import json
import os
import re
import subprocess
import sys
import tempfile
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from emulator.cluster import SOURCE_DIR, Cluster, KubectlError  # noqa: E402
from emulator.client import ApiError  # noqa: E402

TJ = "/apis/kubeps.io/v1alpha1/namespaces/default/trainingjobs"
GADGETS = "/apis/test.kubeps.io/v1/namespaces/default/gadgets"
WORKLOADS = "/apis/kueue.x-k8s.io/v1beta1/namespaces/default/workloads"
KUBEPS = os.path.join(os.environ.get("KUBEPS_BIN_DIR", os.path.join(SOURCE_DIR, "build", "bin")),
                      "kubeps")


def job(name, workers, elastic=None):
    worker = {"replicas": workers}
    if elastic:
        worker["elasticPolicy"] = {"minReplicas": elastic[0], "maxReplicas": elastic[1]}
    return {"apiVersion": "kubeps.io/v1alpha1", "kind": "TrainingJob",
            "metadata": {"name": name},
            "spec": {"model": "mlp", "dataset": {"path": "/data"},
                     "replicaSpecs": {"worker": worker}}}


def gadget_crd(rules, spec_rules=(), items=None):
    """A CRD whose spec.size and spec.parts[] carry the rules given."""
    part = {"type": "object", "required": ["name"],
            "properties": {"name": {"type": "string"}, "weight": {"type": "integer"}}}
    if items:
        part["x-kubernetes-validations"] = items
    spec = {"type": "object", "properties": {
        "size": {"type": "integer", "x-kubernetes-validations": list(rules)},
        "limit": {"type": "integer"},
        "parts": {"type": "array", "x-kubernetes-list-type": "map",
                  "x-kubernetes-list-map-keys": ["name"], "items": part}}}
    if spec_rules:
        spec["x-kubernetes-validations"] = list(spec_rules)
    return {"apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
            "metadata": {"name": "gadgets.test.kubeps.io"},
            "spec": {"group": "test.kubeps.io", "scope": "Namespaced",
                     "names": {"plural": "gadgets", "singular": "gadget", "kind": "Gadget"},
                     "versions": [{"name": "v1", "served": True, "storage": True,
                                   "schema": {"openAPIV3Schema": {
                                       "type": "object", "properties": {"spec": spec}}}}]}}


def gadget(name, **spec):
    return {"apiVersion": "test.kubeps.io/v1", "kind": "Gadget", "metadata": {"name": name},
            "spec": spec}


class CelRulesTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.c = Cluster(kubelet=False).start()  # nothing here runs pods
        cls.c.kubectl("apply", "-f", os.path.join(SOURCE_DIR, "deploy", "crd") + "/")
        cls.c.kubectl("create", "-f", os.path.join(HERE, "crds", "kueue.x-k8s.io_workloads.yaml"))

    @classmethod
    def tearDownClass(cls):
        cls.c.stop()

    def refused(self, *args, input=None):
        with self.assertRaises(KubectlError) as e:
            self.c.kubectl(*args, input=input)
        return e.exception.result.stderr.strip()

    def create_job(self, body):
        self.c.client.post(TJ, body)
        self.addCleanup(self.c.client.delete, TJ + "/" + body["metadata"]["name"])

    def put_gadget_crd(self, crd):
        self.c.kubectl("apply", "-f", "-", input=json.dumps(crd))
        self.addCleanup(self.c.kubectl, "delete", "crd", "gadgets.test.kubeps.io",
                        "--ignore-not-found")
        self.c.wait_for(lambda: self.c.kubectl("get", "gadgets", check=False).returncode == 0,
                        timeout=10, what="the Gadget type served")

    # -- the TrainingJob CRD's rules

    def test_a_fixed_job_keeps_its_workers_until_it_is_suspended(self):
        c = self.c
        self.create_job(job("fixed", 2))
        self.assertEqual(
            self.refused("scale", "trainingjob/fixed", "--replicas=3"),
            'The TrainingJob "fixed" is invalid: spec.replicaSpecs.worker.replicas: Invalid '
            'value: "object": cannot change from 2 to 3 while the job runs: it has no '
            "elasticPolicy, and its scheduler and servers are made for its number of workers; "
            "suspend it first (spec.runPolicy.suspend: true), or give it an elasticPolicy")
        # Other edits of the spec pass: the rule looks at the workers only.
        c.kubectl("patch", "trainingjob/fixed", "--type=merge", "-p",
                  '{"spec": {"epochs": 3}}')
        # Suspended (in the same edit, or before), the number may change: the
        # job starts again with it.
        c.kubectl("patch", "trainingjob/fixed", "--type=merge", "-p",
                  '{"spec": {"runPolicy": {"suspend": true}, '
                  '"replicaSpecs": {"worker": {"replicas": 3}}}}')
        c.kubectl("scale", "trainingjob/fixed", "--replicas=4")
        c.kubectl("patch", "trainingjob/fixed", "--type=merge", "-p",
                  '{"spec": {"runPolicy": {"suspend": false}, '
                  '"replicaSpecs": {"worker": {"replicas": 1}}}}')
        self.assertEqual(c.client.get(TJ + "/fixed")["spec"]["replicaSpecs"]["worker"]["replicas"],
                         1)
        self.assertIn("cannot change from 1 to 2",
                      self.refused("scale", "trainingjob/fixed", "--replicas=2"))

    def test_an_elastic_job_scales_within_its_bounds_only(self):
        c = self.c
        self.create_job(job("stretchy", 2, elastic=(1, 4)))
        c.kubectl("scale", "trainingjob/stretchy", "--replicas=4")
        self.assertEqual(
            self.refused("scale", "trainingjob/stretchy", "--replicas=5"),
            'The TrainingJob "stretchy" is invalid: spec.replicaSpecs.worker.replicas: Invalid '
            "value: \"object\": 5 is outside elasticPolicy's [1, 4]")
        # Its policy taken away, it is a fixed job from then on.
        self.assertIn("it has no elasticPolicy", self.refused(
            "patch", "trainingjob/stretchy", "--type=json", "-p",
            '[{"op": "remove", "path": "/spec/replicaSpecs/worker/elasticPolicy"}, '
            '{"op": "replace", "path": "/spec/replicaSpecs/worker/replicas", "value": 3}]'))

    def test_the_api_server_and_the_parser_refuse_a_manifest_in_the_same_words(self):
        program = {"spec": {"containers": [{"name": "worker", "image": "me/train:1",
                                            "command": ["python3", "train.py"]}]}}
        elastic = {"minReplicas": 1, "maxReplicas": 4}
        cases = {  # name: (workers, elasticPolicy, other fields of the spec)
            "valid": (2, dict(elastic, batch="global"), {"optimizer": {"schedule": {
                "warmupSteps": 10, "decay": "cosine", "decaySteps": 100}}}),
            "above": (9, elastic, {}),
            "crossed": (2, {"minReplicas": 5, "maxReplicas": 4}, {}),
            "min-alone": (2, {"minReplicas": 1}, {}),
            "max-alone": (2, {"maxReplicas": 4}, {}),
            "per-worker": (2, dict(elastic, batch="perWorker"), {}),
            "small-batch": (2, elastic, {"batchSize": 2}),
            "decay-none": (2, None, {"optimizer": {"schedule": {"decaySteps": 100}}}),
            "no-rate": (2, None, {"optimizer": {"name": "none", "schedule": {"warmupSteps": 10}},
                                  "template": program}),
            "no-decay-steps": (2, None, {"optimizer": {"schedule": {"decay": "linear"}}}),
            "floor-at-peak": (2, None, {"optimizer": {"learningRate": 0.01, "schedule": {
                "decay": "cosine", "decaySteps": 100, "minLearningRate": 0.01}}}),
            "floor-above-default": (2, None, {"optimizer": {"schedule": {
                "decay": "linear", "decaySteps": 100, "minLearningRate": 0.5}}}),
            # What the job trains: a built-in model, or the worker's own program.
            "no-dataset": (2, None, {"drop": ["dataset"]}),
            "none-built-in": (2, None, {"drop": ["model"], "optimizer": {"name": "none"}}),
            "no-program": (2, None, {"drop": ["model", "dataset"]}),
            "unnamed-program": (2, None, {"optimizer": {"name": "none"}, "template": {"spec": {
                "containers": [dict(program["spec"]["containers"][0], name=n)
                               for n in ("train", "log")]}}}),
            "agent-named": (2, None, {"optimizer": {"name": "none"}, "template": {"spec": {
                "containers": program["spec"]["containers"] + [
                    {"name": "kubeps-agent", "image": "me/agent:1"}]}}}),
            "agent-named-beside-a-model": (2, None, {"template": {"spec": {
                "containers": [{"name": "kubeps-agent", "image": "me/agent:1"},
                               {"name": "worker"}]}}}),
            "named-program": (2, None, {"optimizer": {"name": "none"}, "template": {"spec": {
                "containers": [{"name": "log", "image": "me/log:1"}] +
                program["spec"]["containers"]}}}),
        }
        for name, (workers, policy, spec) in cases.items():
            manifest = job(name, workers)
            if policy:
                manifest["spec"]["replicaSpecs"]["worker"]["elasticPolicy"] = policy
            if "template" in spec and not name.endswith("beside-a-model"):
                del manifest["spec"]["model"], manifest["spec"]["dataset"]
            if "template" in spec:
                manifest["spec"]["replicaSpecs"]["worker"]["template"] = spec.pop("template")
            for field in spec.pop("drop", []):
                del manifest["spec"][field]
            manifest["spec"].update(spec)
            with tempfile.NamedTemporaryFile("w", suffix=".yaml") as f:
                json.dump(manifest, f)
                f.flush()
                parser = subprocess.run([KUBEPS, "validate", f.name], capture_output=True,
                                        text=True)
                api = self.c.kubectl("apply", "--dry-run=server", "-f", f.name, check=False)
            said = [line.split(f.name + ": ", 1)[1].split(": ", 1)
                    for line in (parser.stdout + parser.stderr).splitlines()
                    if parser.returncode != 0 and f.name + ": " in line]
            self.assertEqual(api.returncode != 0, parser.returncode != 0,
                             "%s: the parser says %s, the API server %s" % (
                                 name, said, api.stderr))
            for field, words in said:
                self.assertRegex(api.stderr, r"(invalid: |\* )%s: (Invalid value: \"object\"|"
                                 r"Required value): %s\n" % (re.escape(field), re.escape(words)),
                                 name)
            if name not in ("valid", "named-program"):
                self.assertTrue(said, name)

    # -- Kueue's Workload

    def test_kueues_own_rules_hold_for_its_workloads(self):
        podset = {"name": "workers", "count": 2, "minCount": 3,
                  "template": {"spec": {"containers": [{"name": "w", "image": "x"}]}}}
        body = {"apiVersion": "kueue.x-k8s.io/v1beta1", "kind": "Workload",
                "metadata": {"name": "wl"}, "spec": {"queueName": "q", "podSets": [podset]}}
        with self.assertRaises(ApiError) as e:
            self.c.client.post(WORKLOADS, body)
        self.assertEqual(e.exception.code, 422)
        self.assertIn("spec.podSets[0]: Invalid value: \"object\": minCount should be positive "
                      "and less or equal to count", e.exception.status["message"])
        podset["minCount"] = 2
        self.c.client.post(WORKLOADS, body)
        self.c.client.delete(WORKLOADS + "/wl")

    # -- rules of any CRD, as the real server runs them

    def test_a_transition_rule_applies_to_updates_only(self):
        self.put_gadget_crd(gadget_crd([
            {"rule": "self >= oldSelf", "message": "size may only grow"}]))
        c = self.c
        c.client.post(GADGETS, gadget("g", size=5))  # a create: no oldSelf, no check
        c.client.patch(GADGETS + "/g", {"spec": {"size": 7}})
        with self.assertRaises(ApiError) as e:
            c.client.patch(GADGETS + "/g", {"spec": {"size": 6}})
        self.assertEqual(e.exception.status["details"]["causes"], [
            {"reason": "FieldValueInvalid", "field": "spec.size",
             "message": 'Invalid value: "integer": size may only grow'}])

    def test_a_rule_that_fails_on_an_unchanged_value_is_let_through(self):
        c = self.c
        self.put_gadget_crd(gadget_crd([]))
        c.client.post(GADGETS, gadget("old", size=50, limit=1))
        # A rule added later: the object stored before does not hold to it.
        # The real server looks at the value where the rule is: the size.
        self.put_gadget_crd(gadget_crd([
            {"rule": "self <= 10", "messageExpression": "'size ' + string(self) + ' is above 10'"}]))
        # The size left as it was: let through, with a warning.
        patched = c.kubectl("patch", "gadget", "old", "--type=merge", "-p",
                            '{"spec": {"limit": 2}}')
        self.assertIn('Warning: spec.size: Invalid value: "integer": size 50 is above 10',
                      patched.stderr)
        with self.assertRaises(ApiError) as e:
            c.client.patch(GADGETS + "/old", {"spec": {"size": 40}})
        self.assertIn('spec.size: Invalid value: "integer": size 40 is above 10',
                      e.exception.status["message"])
        with self.assertRaises(ApiError) as e:
            c.client.post(GADGETS, gadget("new", size=11))
        self.assertIn("size 11 is above 10", e.exception.status["message"])
        # A rule on the spec sees the spec changed, whatever part of it did.
        self.put_gadget_crd(gadget_crd([], spec_rules=[
            {"rule": "!has(self.size) || self.size <= 10", "fieldPath": ".size",
             "message": "size is above 10"}]))
        with self.assertRaises(ApiError) as e:
            c.client.patch(GADGETS + "/old", {"spec": {"limit": 3}})
        self.assertIn('spec.size: Invalid value: "object": size is above 10',
                      e.exception.status["message"])

    def test_list_items_are_paired_with_the_old_ones_by_their_keys(self):
        c = self.c
        self.put_gadget_crd(gadget_crd([], items=[
            {"rule": "!has(oldSelf.weight) || self.weight == oldSelf.weight",
             "message": "weight is immutable", "reason": "FieldValueForbidden"}]))
        c.client.post(GADGETS, gadget("p", parts=[{"name": "a", "weight": 1},
                                                  {"name": "b", "weight": 2}]))
        # Reordered and one added: each part is compared with its namesake.
        c.client.patch(GADGETS + "/p", {"spec": {"parts": [
            {"name": "c", "weight": 9}, {"name": "b", "weight": 2}, {"name": "a", "weight": 1}]}})
        with self.assertRaises(ApiError) as e:
            c.client.patch(GADGETS + "/p", {"spec": {"parts": [
                {"name": "c", "weight": 9}, {"name": "b", "weight": 3}]}})
        self.assertEqual(e.exception.status["details"]["causes"], [
            {"reason": "FieldValueForbidden", "field": "spec.parts[1]",
             "message": "Forbidden: weight is immutable"}])

    def test_a_rule_that_cannot_be_evaluated_fails_the_write(self):
        self.put_gadget_crd(gadget_crd([], spec_rules=[{"rule": "self.limit > 0"}]))
        with self.assertRaises(ApiError) as e:
            self.c.client.post(GADGETS, gadget("e", size=1))
        self.assertIn('spec: Invalid value: "object": ', e.exception.status["message"])
        self.assertIn("evaluating rule: self.limit > 0", e.exception.status["message"])
        with self.assertRaises(ApiError) as e:
            self.c.client.post(GADGETS, gadget("e", size=1, limit=0))
        self.assertIn('spec: Invalid value: "object": failed rule: self.limit > 0',
                      e.exception.status["message"])

    def test_a_crd_whose_rule_cannot_compile_is_refused(self):
        where = ("spec.versions[0].schema.openAPIV3Schema.properties[spec].properties[size]"
                 ".x-kubernetes-validations[0]")
        for rule, problem in (
                ({"rule": "self >"}, "compilation failed: ERROR: <input>:1:"),
                ({"rule": "self.weight > 0"}, "compilation failed: ERROR: <input>:1:5: "
                 "undefined field 'weight'"),
                ({"rule": "self > 0", "fieldPath": ".nope"},
                 'fieldPath: Invalid value: ".nope": fieldPath must be a valid path')):
            err = self.refused("apply", "-f", "-", input=json.dumps(gadget_crd([rule])))
            self.assertIn(where, err)
            self.assertIn(problem, err)
            self.assertNotEqual(self.c.kubectl("get", "crd", "gadgets.test.kubeps.io",
                                               check=False).returncode, 0)
        self.assertIn('Invalid value: apiextensions.ValidationRule{Rule:"self >", Message:""',
                      self.refused("apply", "-f", "-",
                                   input=json.dumps(gadget_crd([{"rule": "self >"}]))))
        # oldSelf where nothing pairs an item with its old self: a plain list
        crd = gadget_crd([])
        crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"][
            "properties"]["tags"] = {"type": "array", "items": {
                "type": "string", "x-kubernetes-validations": [{"rule": "self == oldSelf"}]}}
        self.assertIn("oldSelf cannot be used on the uncorrelatable portion of the schema",
                      self.refused("apply", "-f", "-", input=json.dumps(crd)))

    def test_no_rule_runs_on_a_value_of_the_wrong_type(self):
        self.put_gadget_crd(gadget_crd([], spec_rules=[{"rule": "self.limit > 0"}]))
        with self.assertRaises(ApiError) as e:
            self.c.client.post(GADGETS, gadget("t", size="big"))
        causes = e.exception.status["details"]["causes"]
        self.assertEqual([c["reason"] for c in causes],
                         ["FieldValueTypeInvalid", "FieldValueInvalid"], causes)
        self.assertEqual(causes[1]["field"], "<nil>")
        self.assertIn("some validation rules were not checked", causes[1]["message"])


if __name__ == "__main__":
    unittest.main()
