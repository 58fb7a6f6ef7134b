"""Admission of built-in objects: the defaults the real API server fills in
(pods, services, secrets, namespaces, networkpolicies, limitranges),
ClusterIP allocation, the pod priority lookup, LimitRange and ResourceQuota
admission (limit_ranger.py, resource_quota.py), and the checks that refuse
what a real server refuses (pod spec changes beyond the mutable fields, a
container restartPolicy other than a native sidecar's).

A mixin of Api (api.py): it uses its store, served types and service IPs.
"""
import base64
import copy
import json
import uuid

from ..clock import now_iso
from .errors import ApiError, invalid
from . import limit_ranger, pod_security, resource_quota


class Admission:
    def prepare_create(self, rtype, obj, namespace):
        md = obj["metadata"]
        md["uid"] = str(uuid.uuid4())
        md["creationTimestamp"] = now_iso()
        md["generation"] = 1
        if rtype.namespaced:
            md["namespace"] = namespace
        else:
            md.pop("namespace", None)
        for k in ("deletionTimestamp", "deletionGracePeriodSeconds", "selfLink"):
            md.pop(k, None)
        if rtype.crd is not None and rtype.status:
            obj.pop("status", None)
        kind = (rtype.group, rtype.plural)
        if kind == ("", "pods"):
            self._check_restart_policies(rtype, obj)
            self._default_pod(obj)
        elif kind == ("", "services"):
            self._default_service(obj)
        elif kind == ("", "secrets"):
            self._fold_string_data(obj)
        elif kind == ("", "limitranges"):
            limit_ranger.default_limit_range(obj)
        elif kind == ("networking.k8s.io", "networkpolicies"):
            self._default_network_policy(obj)
        elif kind == ("", "namespaces"):
            obj.setdefault("spec", {"finalizers": ["kubernetes"]})
            obj["status"] = {"phase": "Active"}
        elif kind == ("apiextensions.k8s.io", "customresourcedefinitions"):
            self._check_crd(obj)

    @staticmethod
    def _fold_string_data(obj):
        sd = obj.pop("stringData", None)
        if sd:
            data = obj.setdefault("data", {})
            for k, v in sd.items():
                data[k] = base64.b64encode(str(v).encode()).decode()
        if not obj.get("type"):
            obj["type"] = "Opaque"

    @staticmethod
    def _default_network_policy(obj):
        """SetDefaults_NetworkPolicySpec and _NetworkPolicyPort: policyTypes
        Ingress, plus Egress when there are egress rules; protocol TCP."""
        spec = obj.setdefault("spec", {})
        spec.setdefault("podSelector", {})
        if not spec.get("policyTypes"):
            spec["policyTypes"] = ["Ingress"] + (["Egress"] if spec.get("egress") else [])
        for rule in (spec.get("ingress") or []) + (spec.get("egress") or []):
            for p in rule.get("ports") or []:
                p.setdefault("protocol", "TCP")

    @staticmethod
    def _default_pod(obj):
        spec = obj.setdefault("spec", {})
        spec.setdefault("restartPolicy", "Always")
        spec.setdefault("terminationGracePeriodSeconds", 30)
        spec.setdefault("dnsPolicy", "ClusterFirst")
        spec.setdefault("schedulerName", "default-scheduler")
        spec.setdefault("securityContext", {})
        spec.setdefault("enableServiceLinks", True)
        spec.setdefault("preemptionPolicy", "PreemptLowerPriority")
        spec.setdefault("priority", 0)
        spec.setdefault("serviceAccountName", spec.get("serviceAccount", "default"))
        spec.setdefault("serviceAccount", spec["serviceAccountName"])
        for c in spec.get("containers", []) + spec.get("initContainers", []):
            image = c.get("image", "")
            tag = image.rsplit("/", 1)[-1]
            latest = ":" not in tag or tag.endswith(":latest")
            c.setdefault("imagePullPolicy", "Always" if latest else "IfNotPresent")
            c.setdefault("terminationMessagePath", "/dev/termination-log")
            c.setdefault("terminationMessagePolicy", "File")
            resources = c.setdefault("resources", {})
            # A resource with a limit and no request requests the limit.
            for name, value in (resources.get("limits") or {}).items():
                resources.setdefault("requests", {}).setdefault(name, value)
            for p in c.get("ports", []):
                p.setdefault("protocol", "TCP")
        qos = "BestEffort"
        if any(c.get("resources", {}).get("requests") or c.get("resources", {}).get("limits")
               for c in spec.get("containers", [])):
            qos = "Burstable"
        obj["status"] = {"phase": "Pending", "qosClass": qos}
        if spec.get("schedulingGates"):
            # As the API server's pod strategy says of a gated pod at its creation.
            obj["status"]["conditions"] = [{
                "type": "PodScheduled", "status": "False", "reason": "SchedulingGated",
                "message": "Scheduling is blocked due to non-empty scheduling gates",
                "lastProbeTime": None, "lastTransitionTime": now_iso()}]

    @staticmethod
    def _check_restart_policies(rtype, obj):
        """A container's own restartPolicy (Kubernetes 1.29+): "Always" on an
        init container makes it a native sidecar; nothing else is allowed."""
        spec = obj.get("spec", {})
        causes = []
        for i, c in enumerate(spec.get("initContainers", [])):
            policy = c.get("restartPolicy")
            if policy is not None and policy != "Always":
                causes.append(("spec.initContainers[%d].restartPolicy" % i, "FieldValueNotSupported",
                               'Unsupported value: "%s": supported values: "Always"' % policy))
            elif policy is None and any(k in c for k in ("startupProbe", "readinessProbe",
                                                           "livenessProbe", "lifecycle")):
                field = next(k for k in ("startupProbe", "readinessProbe", "livenessProbe",
                                         "lifecycle") if k in c)
                causes.append(("spec.initContainers[%d].%s" % (i, field), "FieldValueForbidden",
                               "Forbidden: may not be set for init containers without "
                               "restartPolicy=Always"))
        for i, c in enumerate(spec.get("containers", [])):
            if "restartPolicy" in c:
                causes.append(("spec.containers[%d].restartPolicy" % i, "FieldValueForbidden",
                               "Forbidden: may not be set for non-init containers"))
        if causes:
            raise invalid(rtype, obj["metadata"]["name"], causes)

    def _default_service(self, obj):
        spec = obj.setdefault("spec", {})
        spec.setdefault("type", "ClusterIP")
        spec.setdefault("sessionAffinity", "None")
        for p in spec.get("ports", []):
            p.setdefault("protocol", "TCP")
            p.setdefault("targetPort", p.get("port"))
        if spec.get("clusterIP") in (None, ""):
            for ip in self.service_ips:
                if ip not in self.used_service_ips:
                    self.used_service_ips.add(ip)
                    spec["clusterIP"] = ip
                    break
        if spec.get("clusterIP") == "None":
            spec["clusterIPs"] = ["None"]
        else:
            spec["clusterIPs"] = [spec["clusterIP"]]
        spec.setdefault("ipFamilies", ["IPv4"])
        spec.setdefault("ipFamilyPolicy", "SingleStack")
        spec.setdefault("internalTrafficPolicy", "Cluster")
        obj.setdefault("status", {"loadBalancer": {}})

    def _admit_pod(self, obj, namespace):
        ns_obj = self.store.get(self.served[("", "v1", "namespaces")], "", namespace)
        pod_security.admit(ns_obj, obj)
        pc = obj.get("spec", {}).get("priorityClassName")
        t = self.served[("scheduling.k8s.io", "v1", "priorityclasses")]
        if not pc:
            # The Priority admission plugin: the globalDefault class, the
            # lower of two (a race between their writers).
            defaults = [c for c in self.store.list(t) if c.get("globalDefault")]
            if defaults:
                lowest = min(defaults, key=lambda c: c.get("value", 0))
                pc = obj["spec"]["priorityClassName"] = lowest["metadata"]["name"]
        if pc and pc not in ("system-cluster-critical", "system-node-critical"):
            if self.store.get(t, "", pc) is None:
                raise ApiError(403, "Forbidden", 'pods "%s" is forbidden: no PriorityClass with '
                               'name %s was found' % (obj["metadata"]["name"], pc))
            obj["spec"]["priority"] = self.store.get(t, "", pc).get("value", 0)
        limit_ranger.admit(self, obj, namespace)
        resource_quota.admit(self, obj, namespace)

    def _check_pod_update(self, rtype, old, new):
        ospec, nspec = copy.deepcopy(old.get("spec", {})), copy.deepcopy(new.get("spec", {}))
        self._default_pod({"spec": nspec})
        # Scheduling gates may only be removed (Kubernetes 1.30); while the
        # pod was gated, its nodeSelector may gain keys: how Kueue's
        # topology ungater places a pod.
        ogates, ngates = ospec.pop("schedulingGates", None) or [], \
            nspec.pop("schedulingGates", None) or []
        old_names = {g.get("name") for g in ogates}
        for i, gate in enumerate(ngates):
            if gate.get("name") not in old_names:
                raise invalid(rtype, new["metadata"]["name"], [(
                    "spec.schedulingGates[%d].name" % i, "FieldValueForbidden",
                    "Forbidden: only deletion is allowed, but found new scheduling gate '%s'"
                    % gate.get("name"))])
        oselector, nselector = ospec.get("nodeSelector") or {}, nspec.get("nodeSelector") or {}
        if ogates and oselector != nselector:
            if any(nselector.get(k) != v for k, v in oselector.items()):
                raise invalid(rtype, new["metadata"]["name"], [(
                    "spec.nodeSelector", "FieldValueInvalid",
                    "Invalid value: %s: only additions to spec.nodeSelector are allowed (no "
                    "mutations or deletions)" % json.dumps(nselector, sort_keys=True))])
            ospec.pop("nodeSelector", None)
            nspec.pop("nodeSelector", None)
        # Tolerations may be added; one there stays, tolerationSeconds aside.
        def without_seconds(t):
            return {k: v for k, v in t.items() if k != "tolerationSeconds"}
        kept = [without_seconds(t) for t in nspec.get("tolerations") or []]
        if any(without_seconds(t) not in kept for t in ospec.get("tolerations") or []):
            raise invalid(rtype, new["metadata"]["name"], [(
                "spec.tolerations", "FieldValueForbidden",
                "Forbidden: existing toleration can not be modified except its "
                "tolerationSeconds")])
        for s in (ospec, nspec):
            for c in s.get("containers", []) + s.get("initContainers", []):
                c.pop("image", None)
            s.pop("activeDeadlineSeconds", None)
            s.pop("tolerations", None)
            s.pop("terminationGracePeriodSeconds", None)
        if ospec != nspec:
            raise invalid(rtype, new["metadata"]["name"], [(
                "spec", "FieldValueForbidden",
                "Forbidden: pod updates may not change fields other than `spec.containers[*].image`"
                ",`spec.initContainers[*].image`,`spec.activeDeadlineSeconds`,`spec.tolerations` "
                "(only additions to existing tolerations),`spec.terminationGracePeriodSeconds` "
                "(allow it to be set to 1 if it was previously negative)")])
