"""The resource types the API server serves: group, version, plural, kind,
scope, subresources and, for custom resources, the schema and printer columns
of their CRD; and the built-in types every cluster has.
"""

ALL_VERBS = ["create", "delete", "deletecollection", "get", "list", "patch", "update", "watch"]


class ResourceType:
    def __init__(self, group, version, plural, kind, namespaced=True, singular=None,
                 short_names=(), categories=(), status=False, subresources=(),
                 verbs=None, schema=None, printer_columns=None, crd=None,
                 allow_unconditional_update=True, scale=None):
        self.group, self.version, self.plural, self.kind = group, version, plural, kind
        self.namespaced = namespaced
        self.singular = singular or kind.lower()
        self.short_names = list(short_names)
        self.categories = list(categories)
        self.status = status
        self.subresources = list(subresources)
        self.verbs = verbs or list(ALL_VERBS)
        self.schema = schema
        self.printer_columns = printer_columns
        self.crd = crd
        self.allow_unconditional_update = allow_unconditional_update
        # a CRD version's subresources.scale: {specReplicasPath, statusReplicasPath,
        # labelSelectorPath} (scale.py); served as autoscaling/v1 Scale
        self.scale = scale
        if scale is not None:
            self.subresources.append(("scale", "Scale", ["get", "patch", "update"],
                                      "autoscaling", "v1"))

    @property
    def gv(self):
        return self.group + "/" + self.version if self.group else self.version

    @property
    def key(self):
        return (self.group, self.plural)

    @property
    def qualified(self):
        return self.plural + ("." + self.group if self.group else "")

    def discovery(self):
        out = [{"name": self.plural, "singularName": self.singular, "namespaced": self.namespaced,
                "kind": self.kind, "verbs": self.verbs}]
        if self.short_names:
            out[0]["shortNames"] = self.short_names
        if self.categories:
            out[0]["categories"] = self.categories
        if self.status:
            out.append({"name": self.plural + "/status", "singularName": "",
                        "namespaced": self.namespaced, "kind": self.kind,
                        "verbs": ["get", "patch", "update"]})
        for sub, kind, verbs, *group_version in self.subresources:
            entry = {"name": self.plural + "/" + sub, "singularName": "",
                     "namespaced": self.namespaced, "kind": kind, "verbs": verbs}
            if group_version:   # a subresource of another group's kind (kubectl drain looks)
                entry["group"], entry["version"] = group_version
            out.append(entry)
        return out


def builtin_types():
    R = ResourceType
    return [
        R("", "v1", "pods", "Pod", short_names=["po"], categories=["all"], status=True,
          subresources=[("binding", "Binding", ["create"]), ("log", "Pod", ["get"]),
                        ("eviction", "Eviction", ["create"], "policy", "v1")]),
        R("", "v1", "services", "Service", short_names=["svc"], categories=["all"], status=True),
        R("", "v1", "secrets", "Secret"),
        R("", "v1", "configmaps", "ConfigMap", short_names=["cm"]),
        R("", "v1", "events", "Event", short_names=["ev"]),
        R("", "v1", "namespaces", "Namespace", namespaced=False, short_names=["ns"], status=True,
          verbs=["create", "delete", "get", "list", "patch", "update", "watch"]),
        R("", "v1", "serviceaccounts", "ServiceAccount", short_names=["sa"]),
        R("", "v1", "endpoints", "Endpoints", short_names=["ep"]),
        R("", "v1", "resourcequotas", "ResourceQuota", short_names=["quota"], status=True),
        R("", "v1", "limitranges", "LimitRange", short_names=["limits"]),
        R("", "v1", "persistentvolumeclaims", "PersistentVolumeClaim", short_names=["pvc"],
          status=True),
        R("policy", "v1", "poddisruptionbudgets", "PodDisruptionBudget", short_names=["pdb"],
          status=True),
        R("", "v1", "nodes", "Node", namespaced=False, short_names=["no"], status=True),
        R("apps", "v1", "deployments", "Deployment", short_names=["deploy"], categories=["all"],
          status=True),
        R("apps", "v1", "statefulsets", "StatefulSet", short_names=["sts"], categories=["all"],
          status=True),
        R("apps", "v1", "replicasets", "ReplicaSet", short_names=["rs"], categories=["all"],
          status=True),
        R("coordination.k8s.io", "v1", "leases", "Lease"),
        R("networking.k8s.io", "v1", "networkpolicies", "NetworkPolicy", short_names=["netpol"]),
        R("rbac.authorization.k8s.io", "v1", "clusterroles", "ClusterRole", namespaced=False),
        R("rbac.authorization.k8s.io", "v1", "clusterrolebindings", "ClusterRoleBinding",
          namespaced=False),
        R("rbac.authorization.k8s.io", "v1", "roles", "Role"),
        R("rbac.authorization.k8s.io", "v1", "rolebindings", "RoleBinding"),
        R("scheduling.k8s.io", "v1", "priorityclasses", "PriorityClass", namespaced=False,
          short_names=["pc"]),
        R("apiextensions.k8s.io", "v1", "customresourcedefinitions", "CustomResourceDefinition",
          namespaced=False, short_names=["crd", "crds"], status=True),
    ]
