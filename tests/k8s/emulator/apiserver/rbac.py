"""Authorisation: with --rbac, requests of tokens outside system:masters are
checked against the stored (Cluster)Roles and (Cluster)RoleBindings, and
refused with the upstream 403 message.
"""
from .errors import ApiError

# the verb of a request for one object (collections: list, watch, deletecollection)
RESOURCE_VERBS = {"GET": "get", "POST": "create", "PUT": "update", "PATCH": "patch",
                  "DELETE": "delete"}


def rbac_rule_allows(rule, verb, group, resource, subresource, name):
    if "*" not in rule.get("verbs", []) and verb not in rule.get("verbs", []):
        return False
    if "*" not in rule.get("apiGroups", []) and group not in rule.get("apiGroups", []):
        return False
    res = resource + ("/" + subresource if subresource else "")
    resources = rule.get("resources", [])
    if "*" not in resources and res not in resources and \
            not (subresource and resource + "/*" in resources):
        return False
    names = rule.get("resourceNames")
    if names and name not in names:
        return False
    return True


def authorize(api, user, verb, group, resource, subresource, namespace, name):
    """Raises 403 unless `user` (name, groups) may `verb` the resource."""
    if not api.rbac:
        return
    username, groups = user
    if "system:masters" in groups:
        return
    store = api.store
    served = api.served
    allowed = False
    with store.lock:
        subjects_ok = lambda subs: any(  # noqa: E731
            (s.get("kind") == "User" and s.get("name") == username) or
            (s.get("kind") == "Group" and s.get("name") in groups) or
            (s.get("kind") == "ServiceAccount" and
             "system:serviceaccount:%s:%s" % (s.get("namespace"), s.get("name")) == username)
            for s in subs or [])
        bindings = [(b, None) for b in store.list(
            served[("rbac.authorization.k8s.io", "v1", "clusterrolebindings")])]
        if namespace:
            bindings += [(b, namespace) for b in store.list(
                served[("rbac.authorization.k8s.io", "v1", "rolebindings")], namespace)]
        for b, ns in bindings:
            if not subjects_ok(b.get("subjects")):
                continue
            ref = b.get("roleRef", {})
            if ref.get("kind") == "ClusterRole":
                role = store.get(served[("rbac.authorization.k8s.io", "v1", "clusterroles")],
                                 "", ref.get("name"))
            else:
                role = store.get(served[("rbac.authorization.k8s.io", "v1", "roles")],
                                 ns or "", ref.get("name"))
            for rule in (role or {}).get("rules") or []:
                if rbac_rule_allows(rule, verb, group, resource, subresource, name):
                    allowed = True
    if not allowed:
        scope = 'in the namespace "%s"' % namespace if namespace else "at the cluster scope"
        res = resource + ("/" + subresource if subresource else "")
        # apierrors.NewForbidden names the resource without its subresource
        raise ApiError(403, "Forbidden", '%s%s is forbidden: User "%s" cannot %s resource "%s" '
                       'in API group "%s" %s' % (
                           resource + (("." + group) if group else ""),
                           (' "%s"' % name) if name else "", username, verb, res, group,
                           scope), {"name": name or "", "group": group, "kind": resource})


def check_owner_references(api, user, rtype, namespace, obj):
    """The OwnerReferencesPermissionEnforcement admission plugin (on in
    OpenShift and many hardened clusters): setting blockOwnerDeletion on an
    ownerReference needs `update` on the owner's `finalizers` subresource.
    Raises the upstream 403 otherwise."""
    if not api.rbac or not api.owner_references_enforcement or "system:masters" in user[1]:
        return
    for ref in (obj.get("metadata") or {}).get("ownerReferences") or []:
        if not ref.get("blockOwnerDeletion"):
            continue
        group = ref.get("apiVersion", "").rpartition("/")[0]
        owner = next((t for t in api.served.values()
                      if t.group == group and t.kind == ref.get("kind")), None)
        if owner is None:
            continue
        try:
            authorize(api, user, "update", group, owner.plural, "finalizers",
                      namespace if owner.namespaced else None, ref.get("name"))
        except ApiError as e:
            name = (obj.get("metadata") or {}).get("name", "")
            raise ApiError(403, "Forbidden", '%s "%s" is forbidden: cannot set blockOwnerDeletion '
                           "if an ownerReference refers to a resource you can't set finalizers "
                           "on: %s" % (rtype.plural, name, e.message),
                           {"name": name, "group": rtype.group, "kind": rtype.plural})
