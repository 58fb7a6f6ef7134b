"""Tests of the stand-in API server's scale subresource of custom resources
(emulator/apiserver/scale.py), driven by the real `kubectl scale` and by
REST calls: the autoscaling/v1 Scale a CRD's subresources.scale paths make,
writes of spec.replicas through it (preconditions, validation, generation,
watch events), discovery, RBAC and the CRD checks of the paths.

    python3 -m unittest -v test_emulator_scale      (from tests/k8s)
"""
import json
import os
import sys
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from emulator.cluster import SOURCE_DIR, Cluster  # noqa: E402
from emulator.client import ApiError  # noqa: E402

TJ = "/apis/kubeps.io/v1alpha1/namespaces/default/trainingjobs"
WIDGETS = "/apis/test.kubeps.io/v1/namespaces/default/widgets"
SCALE = {"specReplicasPath": ".spec.replicaSpecs.worker.replicas",
         "statusReplicasPath": ".status.workerReplicas",
         "labelSelectorPath": ".status.workerSelector"}


def trainingjob_crd():
    """The chart's TrainingJob CRD, with the scale subresource added where
    it does not declare it yet."""
    with open(os.path.join(SOURCE_DIR, "helm", "kubeps", "crds", "trainingjobs.yaml")) as f:
        text = f.read()
    if "specReplicasPath" not in text:
        status = "      subresources:\n        status: {}\n"
        assert status in text, "the CRD's subresources moved: update this test"
        text = text.replace(status, status + "        scale:\n" + "".join(
            "          %s: %s\n" % kv for kv in SCALE.items()), 1)
    return text


def crd(plural, kind, subresources, spec_properties):
    return {"apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
            "metadata": {"name": plural + ".test.kubeps.io"},
            "spec": {"group": "test.kubeps.io", "scope": "Namespaced",
                     "names": {"plural": plural, "singular": kind.lower(), "kind": kind},
                     "versions": [{
                         "name": "v1", "served": True, "storage": True,
                         "subresources": subresources,
                         "schema": {"openAPIV3Schema": {"type": "object", "properties": {
                             "spec": {"type": "object", "properties": spec_properties},
                             "status": {"type": "object",
                                        "x-kubernetes-preserve-unknown-fields": True}}}}}]}}


def job(name, workers):
    """An elastic job: the CRD's rules refuse a scale of a fixed one
    (test_emulator_cel)."""
    return {"apiVersion": "kubeps.io/v1alpha1", "kind": "TrainingJob",
            "metadata": {"name": name},
            "spec": {"dataset": {"path": "/data"},
                     "replicaSpecs": {"worker": {"replicas": workers, "elasticPolicy": {
                         "minReplicas": 1, "maxReplicas": 16}}}}}


class ScaleSubresourceTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        # no node: nothing here runs pods; RBAC on for the authorisation test
        # (the admin's token is system:masters)
        cls.c = Cluster(kubelet=False, rbac=True).start()
        cls.c.kubectl("apply", "-f", "-", input=trainingjob_crd())
        cls.c.kubectl("apply", "-f", "-", input=json.dumps(crd(
            "widgets", "Widget", {"status": {}, "scale": {
                "specReplicasPath": ".spec.replicas", "statusReplicasPath": ".status.replicas"}},
            {"replicas": {"type": "integer", "minimum": 0}, "size": {"type": "string"}})))
        cls.c.kubectl("apply", "-f", "-", input=json.dumps(crd(
            "plains", "Plain", {}, {"replicas": {"type": "integer"}})))

    @classmethod
    def tearDownClass(cls):
        cls.c.stop()

    def make_job(self, name, workers=2):
        obj = self.c.client.post(TJ, job(name, workers))
        self.addCleanup(self.c.client.delete, TJ + "/" + name)
        return obj

    def expect_error(self, call, code):
        with self.assertRaises(ApiError) as e:
            call()
        self.assertEqual(e.exception.code, code, e.exception.body)
        return e.exception

    def test_discovery_lists_the_scale_subresource(self):
        resources = {r["name"]: r for r in
                     self.c.client.get("/apis/kubeps.io/v1alpha1")["resources"]}
        scale = resources["trainingjobs/scale"]
        self.assertEqual((scale["group"], scale["version"], scale["kind"], scale["namespaced"]),
                         ("autoscaling", "v1", "Scale", True))
        self.assertEqual(sorted(scale["verbs"]), ["get", "patch", "update"])
        self.assertIn("trainingjobs/status", resources)
        plains = [r["name"] for r in self.c.client.get("/apis/test.kubeps.io/v1")["resources"]]
        self.assertIn("widgets/scale", plains)
        self.assertNotIn("plains/scale", plains)
        # and in the group version's OpenAPI document, answering a Scale
        index = self.c.client.get("/openapi/v3")["paths"]["apis/kubeps.io/v1alpha1"]
        doc = self.c.client.get(index["serverRelativeURL"])
        path = doc["paths"]["/apis/kubeps.io/v1alpha1/namespaces/{namespace}/trainingjobs/"
                            "{name}/scale"]
        self.assertEqual(sorted(path), ["get", "patch", "put"])
        self.assertEqual(path["get"]["x-kubernetes-group-version-kind"],
                         {"group": "autoscaling", "version": "v1", "kind": "Scale"})
        self.assertIn("io.k8s.api.autoscaling.v1.Scale", doc["components"]["schemas"])

    def test_get_scale_reads_the_paths_of_the_crd(self):
        c = self.c
        tj = self.make_job("getme", workers=3)
        raw = "/apis/kubeps.io/v1alpha1/namespaces/default/trainingjobs/getme/scale"
        scale = json.loads(c.kubectl("get", "--raw", raw).stdout)
        md = tj["metadata"]
        self.assertEqual(scale, {
            "kind": "Scale", "apiVersion": "autoscaling/v1",
            "metadata": {"name": "getme", "namespace": "default", "uid": md["uid"],
                         "resourceVersion": md["resourceVersion"],
                         "creationTimestamp": md["creationTimestamp"]},
            # no status yet: 0 replicas, no selector
            "spec": {"replicas": 3}, "status": {"replicas": 0}})
        c.client.patch(TJ + "/getme/status", {"status": {
            "workerReplicas": 2, "workerSelector": "kubeps.io/job=getme,kubeps.io/role=worker"}})
        scale = c.client.get(TJ + "/getme/scale")
        self.assertEqual(scale["status"], {
            "replicas": 2, "selector": "kubeps.io/job=getme,kubeps.io/role=worker"})
        # kubectl get --subresource=scale: a Table of the CRD's columns
        out = c.kubectl("get", "tj", "getme", "--subresource=scale").stdout
        self.assertEqual(out.splitlines()[0].split()[:2], ["NAME", "PHASE"])
        self.assertEqual(out.splitlines()[1].split()[0], "getme")
        # what is not there
        e = self.expect_error(lambda: c.client.get(TJ + "/nope/scale"), 404)
        self.assertEqual(e.status["message"], 'trainingjobs.kubeps.io "nope" not found')

    def test_kubectl_scale_patches_the_scale_and_only_the_replicas(self):
        c = self.c
        before = self.make_job("elastic")
        c.client.patch(TJ + "/elastic/status", {"status": {"phase": "Running",
                                                           "workerReplicas": 2}})
        before = c.client.get(TJ + "/elastic")
        out = c.kubectl("scale", "trainingjob/elastic", "--replicas=4").stdout
        self.assertEqual(out.strip(), "trainingjob.kubeps.io/elastic scaled")
        after = c.client.get(TJ + "/elastic")
        self.assertEqual(after["spec"]["replicaSpecs"]["worker"]["replicas"], 4)
        self.assertEqual(after["metadata"]["generation"], before["metadata"]["generation"] + 1)
        self.assertEqual(after["status"], before["status"])
        after["spec"]["replicaSpecs"]["worker"]["replicas"] = 2
        self.assertEqual(after["spec"], before["spec"])
        # what kubectl 1.32 sent: a merge patch of the Scale
        writes = [r for r in c.requests() if r["path"].endswith("/trainingjobs/elastic/scale")]
        self.assertEqual([(r["verb"], r["code"]) for r in writes], [("PATCH", 200)])
        # one watch event, MODIFIED, with the new replicas
        events = list(c.client.watch(TJ + "?watch=1&timeoutSeconds=1&resourceVersion=" +
                                     before["metadata"]["resourceVersion"], timeout=10))
        self.assertEqual([(e["type"], e["object"]["spec"]["replicaSpecs"]["worker"]["replicas"])
                          for e in events], [("MODIFIED", 4)])
        # the short name; with --current-replicas kubectl gets the Scale and PUTs it
        out = c.kubectl("scale", "tj", "elastic", "--replicas=1", "--current-replicas=4").stdout
        self.assertEqual(out.strip(), "trainingjob.kubeps.io/elastic scaled")
        writes = [r for r in c.requests() if r["path"].endswith("/trainingjobs/elastic/scale")]
        self.assertEqual([(r["verb"], r["code"]) for r in writes[1:]],
                         [("GET", 200), ("PUT", 200)])
        self.assertEqual(c.client.get(TJ + "/elastic/scale")["spec"]["replicas"], 1)
        r = c.kubectl("scale", "tj", "elastic", "--replicas=3", "--current-replicas=4",
                      check=False)
        self.assertNotEqual(r.returncode, 0)
        self.assertIn("Expected replicas to be 4, was 1", r.stderr)
        # --resource-version: compared by kubectl with the Scale's, then a
        # precondition of the PUT
        stale = before["metadata"]["resourceVersion"]
        r = c.kubectl("scale", "tj", "elastic", "--replicas=3", "--resource-version=" + stale,
                      check=False)
        self.assertNotEqual(r.returncode, 0)
        current = c.client.get(TJ + "/elastic")["metadata"]["resourceVersion"]
        self.assertIn("Expected resource version to be %s, was %s" % (stale, current), r.stderr)
        c.kubectl("scale", "tj", "elastic", "--replicas=2", "--resource-version=" + current)
        c.kubectl("scale", "tj", "elastic", "--replicas=1")
        # the CR's schema validates the replicas (minimum: 1), with its field
        # path; a bound is no type error, so the CEL rules run as well
        r = c.kubectl("scale", "tj", "elastic", "--replicas=0", check=False)
        self.assertNotEqual(r.returncode, 0)
        self.assertIn('The TrainingJob "elastic" is invalid: \n'
                      "* spec.replicaSpecs.worker.replicas: Invalid value: 0: "
                      "spec.replicaSpecs.worker.replicas in body should be greater than or "
                      "equal to 1\n* spec.replicaSpecs.worker.replicas: Invalid value: "
                      "\"object\": 0 is outside elasticPolicy's [1, 16]", r.stderr)
        self.assertEqual(c.client.get(TJ + "/elastic/scale")["spec"]["replicas"], 1)

    def test_put_and_patch_of_the_scale(self):
        c = self.c
        self.make_job("rest")
        scale = c.client.get(TJ + "/rest/scale")
        rv = scale["metadata"]["resourceVersion"]
        # PUT with the current resourceVersion
        scale["spec"]["replicas"] = 5
        new = c.client.put(TJ + "/rest/scale", scale)
        self.assertEqual(new["spec"]["replicas"], 5)
        self.assertGreater(int(new["metadata"]["resourceVersion"]), int(rv))
        self.assertEqual(c.client.get(TJ + "/rest")["metadata"]["generation"], 2)
        # PUT with a stale one: 409, nothing written
        e = self.expect_error(lambda: c.client.put(TJ + "/rest/scale", scale), 409)
        self.assertEqual(e.reason, "Conflict")
        self.assertEqual(e.status["message"], 'Operation cannot be fulfilled on '
                         'trainingjobs.kubeps.io "rest": the object has been modified; please '
                         'apply your changes to the latest version and try again')
        # PUT without one is unconditional (unlike a PUT of the custom resource)
        new = c.client.put(TJ + "/rest/scale", {"apiVersion": "autoscaling/v1", "kind": "Scale",
                                                "metadata": {"name": "rest"},
                                                "spec": {"replicas": 6}})
        self.assertEqual(new["spec"]["replicas"], 6)
        # a Scale of another name
        e = self.expect_error(lambda: c.client.put(TJ + "/rest/scale", {
            "metadata": {"name": "other"}, "spec": {"replicas": 2}}), 400)
        self.assertIn("does not match the name on the URL", e.status["message"])
        # JSON patch and merge patch
        new = c.client.patch(TJ + "/rest/scale", [
            {"op": "test", "path": "/spec/replicas", "value": 6},
            {"op": "replace", "path": "/spec/replicas", "value": 7}], kind="json")
        self.assertEqual(new["spec"]["replicas"], 7)
        new = c.client.patch(TJ + "/rest/scale", {"spec": {"replicas": 8}})
        self.assertEqual(new["spec"]["replicas"], 8)
        # a patch that carries a stale resourceVersion: its precondition
        e = self.expect_error(lambda: c.client.patch(TJ + "/rest/scale", {
            "metadata": {"resourceVersion": rv}, "spec": {"replicas": 2}}), 409)
        # strategic merge patch: 415, as for any custom resource
        e = self.expect_error(lambda: c.client.patch(TJ + "/rest/scale", {
            "spec": {"replicas": 2}}, kind="strategic"), 415)
        self.assertEqual(e.status["message"], "the body of the request was in an unknown format "
                         "- accepted media types include: application/json-patch+json, "
                         "application/merge-patch+json, application/apply-patch+yaml")
        # invalid replicas: 422 in the custom resource's words
        e = self.expect_error(lambda: c.client.patch(TJ + "/rest/scale", {
            "spec": {"replicas": 0}}), 422)
        self.assertEqual(e.status["message"], 'TrainingJob.kubeps.io "rest" is invalid: '
                         "[spec.replicaSpecs.worker.replicas: Invalid value: 0: "
                         "spec.replicaSpecs.worker.replicas in body should be greater than or "
                         "equal to 1, spec.replicaSpecs.worker.replicas: Invalid value: "
                         "\"object\": 0 is outside elasticPolicy's [1, 16]]")
        self.assertEqual(e.status["details"]["causes"][0]["field"],
                         "spec.replicaSpecs.worker.replicas")
        # the same replicas: nothing written; dryRun: nothing written
        cur = c.client.get(TJ + "/rest")
        same = c.client.patch(TJ + "/rest/scale", {"spec": {"replicas": 8}})
        self.assertEqual(same["metadata"]["resourceVersion"], cur["metadata"]["resourceVersion"])
        dry = c.client.patch(TJ + "/rest/scale?dryRun=All", {"spec": {"replicas": 9}})
        self.assertEqual(dry["spec"]["replicas"], 9)
        self.assertEqual(c.client.get(TJ + "/rest"), cur)
        # verbs the subresource does not serve: the CRD handler's plain 405
        e = self.expect_error(lambda: c.client.post(TJ + "/rest/scale", {}), 405)
        self.assertEqual(e.body, 'unhandled verb "create"\n')

    def test_scale_where_the_crd_has_none_or_the_replicas_are_missing(self):
        c = self.c
        c.client.post("/apis/test.kubeps.io/v1/namespaces/default/plains", {
            "apiVersion": "test.kubeps.io/v1", "kind": "Plain", "metadata": {"name": "p"},
            "spec": {"replicas": 1}})
        e = self.expect_error(lambda: c.client.get(
            "/apis/test.kubeps.io/v1/namespaces/default/plains/p/scale"), 404)
        self.assertEqual(e.body, "the server could not find the requested resource\n")
        r = c.kubectl("scale", "plain/p", "--replicas=2", check=False)
        self.assertNotEqual(r.returncode, 0)
        # a Widget with no spec.replicas: GET is a 500, a patch must name the replicas
        c.client.post(WIDGETS, {"apiVersion": "test.kubeps.io/v1", "kind": "Widget",
                                "metadata": {"name": "w"}, "spec": {"size": "big"}})
        e = self.expect_error(lambda: c.client.get(WIDGETS + "/w/scale"), 500)
        self.assertEqual((e.reason, e.status["message"]), (
            "InternalError", 'Internal error occurred: the spec replicas field ".spec.replicas" '
            "does not exist"))
        e = self.expect_error(lambda: c.client.patch(WIDGETS + "/w/scale", {
            "metadata": {"labels": {"a": "b"}}}), 400)
        self.assertEqual(e.status["message"],
                         'the spec replicas field ".spec.replicas" cannot be empty')
        self.assertEqual(c.kubectl("scale", "widget/w", "--replicas=0").stdout.strip(),
                         "widget.test.kubeps.io/w scaled")
        self.assertEqual(c.client.get(WIDGETS + "/w")["spec"], {"size": "big", "replicas": 0})
        self.assertEqual(c.client.get(WIDGETS + "/w/scale")["status"], {"replicas": 0})

    def test_rbac_authorises_trainingjobs_scale(self):
        c = self.c
        self.make_job("guarded")
        user = "system:serviceaccount:kubeps-system:kubeps-operator"
        rules = [{"apiGroups": ["kubeps.io"], "resources": ["trainingjobs"],
                  "verbs": ["get", "list", "patch", "update"]}]

        def role(extra):
            c.kubectl("apply", "-f", "-", input=json.dumps({
                "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role",
                "metadata": {"name": "scaler", "namespace": "default"}, "rules": rules + extra}))
        role([])
        c.kubectl("apply", "-f", "-", input=json.dumps({
            "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding",
            "metadata": {"name": "scaler", "namespace": "default"},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role",
                        "name": "scaler"},
            "subjects": [{"kind": "ServiceAccount", "name": "kubeps-operator",
                          "namespace": "kubeps-system"}]}))
        self.addCleanup(c.kubectl, "delete", "role,rolebinding", "scaler")
        # patch on trainingjobs is not patch on trainingjobs/scale
        r = c.kubectl("scale", "tj", "guarded", "--replicas=3", "-n", "default", operator=True,
                      check=False)
        self.assertNotEqual(r.returncode, 0)
        self.assertIn('trainingjobs.kubeps.io "guarded" is forbidden: User "%s" cannot patch '
                      'resource "trainingjobs/scale" in API group "kubeps.io" in the namespace '
                      '"default"' % user, r.stderr)
        role([{"apiGroups": ["kubeps.io"], "resources": ["trainingjobs/scale"],
               "verbs": ["get", "patch"]}])
        out = c.kubectl("scale", "tj", "guarded", "--replicas=3", "-n", "default",
                        operator=True).stdout
        self.assertEqual(out.strip(), "trainingjob.kubeps.io/guarded scaled")
        # get and patch, not update: kubectl's PUT (with --current-replicas) is refused
        r = c.kubectl("scale", "tj", "guarded", "--replicas=2", "--current-replicas=3",
                      "-n", "default", operator=True, check=False)
        self.assertIn('cannot update resource "trainingjobs/scale"', r.stderr)
        self.assertEqual(c.client.get(TJ + "/guarded/scale")["spec"]["replicas"], 3)

    def test_the_crd_paths_are_checked_as_upstream(self):
        c = self.c
        bad = crd("bads", "Bad", {"scale": {"specReplicasPath": ".status.replicas",
                                            "labelSelectorPath": "selector"}},
                  {"replicas": {"type": "integer"}})
        r = c.kubectl("apply", "-f", "-", input=json.dumps(bad), check=False)
        self.assertNotEqual(r.returncode, 0)
        prefix = "spec.versions[0].subresources.scale."
        for message in (
                prefix + 'specReplicasPath: Invalid value: ".status.replicas": should be a json '
                'path under .spec',
                prefix + "statusReplicasPath: Required value",
                prefix + 'labelSelectorPath: Invalid value: "selector": must be a simple json '
                'path starting with .'):
            self.assertIn(message, r.stderr)


if __name__ == "__main__":
    unittest.main()
