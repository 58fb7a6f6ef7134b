"""meta.k8s.io/v1 Tables, what `kubectl get` asks for: the printer columns
of built-in types and of CRDs."""
import json

from .. import clock
from ..selector import label_selector_reqs
from .crd_schema import go_value, simple_jsonpath


# --------------------------------------------------------------------------
# Tables


def _col(name, typ="string", fmt="", desc="", priority=0):
    return {"name": name, "type": typ, "format": fmt, "description": desc, "priority": priority}


NAME_COL = _col("Name", fmt="name", desc="Name must be unique within a namespace.")
AGE_COL = _col("Age", typ="date", desc="CreationTimestamp is a timestamp representing the server "
               "time when this object was created.")


def sidecar_names(pod):
    """The pod's native sidecars: init containers with restartPolicy Always."""
    return {c["name"] for c in pod.get("spec", {}).get("initContainers", [])
            if c.get("restartPolicy") == "Always"}


def pod_status_reason(pod):
    """The STATUS column as kubectl 1.29 prints it: a failed or waiting init
    container while the pod initializes (a started sidecar does not count),
    else the containers' state."""
    status = pod.get("status", {})
    reason = status.get("reason") or status.get("phase", "Pending")
    sidecars = sidecar_names(pod)
    initialized = any(c.get("type") == "Initialized" and c.get("status") == "True"
                      for c in status.get("conditions", []))
    initializing = False
    for cs in status.get("initContainerStatuses", []):
        st = cs.get("state", {})
        if "terminated" in st and st["terminated"].get("exitCode", 0) == 0:
            continue
        if cs.get("name") in sidecars and cs.get("started"):
            continue
        if "terminated" in st:
            reason = "Init:" + (st["terminated"].get("reason") or "Error")
            initializing = True
            break
        if "waiting" in st and st["waiting"].get("reason") not in (None, "PodInitializing"):
            reason = "Init:" + st["waiting"]["reason"]
            initializing = True
            break
    if not initializing or initialized:
        for cs in reversed(status.get("containerStatuses", [])):
            st = cs.get("state", {})
            if "waiting" in st and st["waiting"].get("reason"):
                reason = st["waiting"]["reason"]
            elif "terminated" in st:
                reason = st["terminated"].get("reason") or (
                    "Signal:%d" % st["terminated"]["signal"] if st["terminated"].get("signal")
                    else "ExitCode:%d" % st["terminated"].get("exitCode", 0))
    if pod["metadata"].get("deletionTimestamp"):
        reason = "Terminating"
    return reason


def format_label_selector(selector):
    """metav1.FormatLabelSelector: `k=v,k in (a,b),!k`, or <none>."""
    parts = []
    for key, op, values in sorted(label_selector_reqs(selector), key=lambda r: r[0]):
        if op == "=":
            parts.append("%s=%s" % (key, values[0]))
        elif op in ("in", "notin"):
            parts.append("%s %s (%s)" % (key, op, ",".join(sorted(values))))
        else:
            parts.append(key if op == "exists" else "!" + key)
    return ",".join(parts) or "<none>"


def table_for(rtype, objects, include_object="Metadata", with_columns=True):
    kind = (rtype.group, rtype.plural)
    if rtype.printer_columns is not None:
        cols = [NAME_COL] + [_col(c["name"], c.get("type", "string"), c.get("format", ""),
                                  c.get("description", ""), c.get("priority", 0))
                             for c in rtype.printer_columns]
    elif kind == ("", "pods"):
        cols = [NAME_COL, _col("Ready", desc="The aggregate readiness state of this pod for "
                               "accepting traffic."),
                _col("Status", desc="The aggregate status of the containers in this pod."),
                _col("Restarts", desc="The number of times the containers in this pod have been "
                     "restarted and when the last container in this pod has restarted."),
                AGE_COL, _col("IP", desc="IP address assigned to the pod", priority=1),
                _col("Node", desc="Name of the node assigned to the pod", priority=1)]
    elif kind == ("", "services"):
        cols = [NAME_COL, _col("Type"), _col("Cluster-IP"), _col("External-IP"), _col("Port(s)"),
                AGE_COL, _col("Selector", priority=1)]
    elif kind == ("", "namespaces"):
        cols = [NAME_COL, _col("Status"), AGE_COL]
    elif kind == ("", "events"):
        cols = [_col("Last Seen"), _col("Type"), _col("Reason"), _col("Object"), _col("Message")]
    elif kind == ("", "nodes"):
        cols = [NAME_COL, _col("Status"), _col("Roles"), AGE_COL, _col("Version")]
    elif kind == ("apiextensions.k8s.io", "customresourcedefinitions"):
        cols = [NAME_COL, _col("Created At", typ="date")]
    elif kind == ("", "secrets"):
        cols = [NAME_COL, _col("Type"), _col("Data", typ="integer"), AGE_COL]
    elif kind == ("apps", "deployments"):
        cols = [NAME_COL, _col("Ready"), _col("Up-to-date", typ="integer"),
                _col("Available", typ="integer"), AGE_COL]
    elif kind == ("coordination.k8s.io", "leases"):
        cols = [NAME_COL, _col("Holder"), AGE_COL]
    elif kind == ("networking.k8s.io", "networkpolicies"):
        cols = [NAME_COL, _col("Pod-Selector", desc="Selects the pods to which this "
                               "NetworkPolicy object applies."), AGE_COL]
    else:
        cols = [NAME_COL, AGE_COL]
    rows = []
    for obj in objects:
        md = obj.get("metadata", {})
        created = md.get("creationTimestamp")
        if rtype.printer_columns is not None:
            cells = [md.get("name")]
            for c in rtype.printer_columns:
                v = simple_jsonpath(obj, c.get("jsonPath", ""))
                if v is None:
                    cells.append(None)
                elif c.get("type") == "date":
                    cells.append(clock.age(v) if isinstance(v, str) else None)
                elif c.get("type") == "string":
                    cells.append(v if isinstance(v, str) else json.dumps(v)
                                 if isinstance(v, (dict, list)) else go_value(v))
                else:
                    cells.append(v)
        elif kind == ("", "pods"):
            st = obj.get("status", {})
            sidecars = sidecar_names(obj)
            css = st.get("containerStatuses", []) + [
                c for c in st.get("initContainerStatuses", []) if c.get("name") in sidecars]
            ncont = len(obj.get("spec", {}).get("containers", [])) + len(sidecars)
            ready = sum(1 for c in css if c.get("ready"))
            restarts = sum(c.get("restartCount", 0) for c in css + [
                c for c in st.get("initContainerStatuses", []) if c.get("name") not in sidecars])
            cells = [md.get("name"), "%d/%d" % (ready, ncont), pod_status_reason(obj), restarts,
                     clock.age(created), st.get("podIP") or "<none>",
                     obj.get("spec", {}).get("nodeName") or "<none>"]
        elif kind == ("", "services"):
            spec = obj.get("spec", {})
            ports = ",".join("%s/%s" % (p.get("port"), p.get("protocol", "TCP"))
                             for p in spec.get("ports", [])) or "<none>"
            sel = ",".join("%s=%s" % kv for kv in sorted((spec.get("selector") or {}).items()))
            cells = [md.get("name"), spec.get("type", "ClusterIP"), spec.get("clusterIP", ""),
                     "<none>", ports, clock.age(created), sel or "<none>"]
        elif kind == ("", "namespaces"):
            cells = [md.get("name"), obj.get("status", {}).get("phase", "Active"),
                     clock.age(created)]
        elif kind == ("", "events"):
            io = obj.get("involvedObject", {})
            last = obj.get("lastTimestamp") or obj.get("eventTime") or created
            cells = [clock.age(last), obj.get("type", ""), obj.get("reason", ""),
                     "%s/%s" % ((io.get("kind") or "").lower(), io.get("name", "")),
                     obj.get("message", "")]
        elif kind == ("", "nodes"):
            ready = next((c.get("status") for c in obj.get("status", {}).get("conditions", [])
                          if c.get("type") == "Ready"), "Unknown")
            cells = [md.get("name"), "Ready" if ready == "True" else "NotReady", "<none>",
                     clock.age(created),
                     obj.get("status", {}).get("nodeInfo", {}).get("kubeletVersion", "")]
        elif kind == ("apiextensions.k8s.io", "customresourcedefinitions"):
            cells = [md.get("name"), created]
        elif kind == ("", "secrets"):
            cells = [md.get("name"), obj.get("type", "Opaque"), len(obj.get("data") or {}),
                     clock.age(created)]
        elif kind == ("apps", "deployments"):
            st = obj.get("status", {})
            cells = [md.get("name"), "%d/%d" % (st.get("readyReplicas", 0),
                                                obj.get("spec", {}).get("replicas", 1)),
                     st.get("updatedReplicas", 0), st.get("availableReplicas", 0),
                     clock.age(created)]
        elif kind == ("coordination.k8s.io", "leases"):
            cells = [md.get("name"), obj.get("spec", {}).get("holderIdentity", ""),
                     clock.age(created)]
        elif kind == ("networking.k8s.io", "networkpolicies"):
            cells = [md.get("name"), format_label_selector(
                obj.get("spec", {}).get("podSelector")), clock.age(created)]
        else:
            cells = [md.get("name"), clock.age(created)]
        if include_object == "Object":
            ro = obj
        elif include_object == "None":
            ro = None
        else:
            ro = {"kind": "PartialObjectMetadata", "apiVersion": "meta.k8s.io/v1",
                  "metadata": md}
        row = {"cells": cells}
        if ro is not None:
            row["object"] = ro
        rows.append(row)
    table = {"kind": "Table", "apiVersion": "meta.k8s.io/v1", "metadata": {}, "rows": rows}
    if with_columns:
        table["columnDefinitions"] = cols
    else:
        table["columnDefinitions"] = None
    return table


def wants_table(accept):
    return "as=Table" in (accept or "")
