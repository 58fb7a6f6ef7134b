"""A Kubernetes API server emulator for tests: the REST semantics that the
real `kubectl` and a controller rely on, in one process, in memory.

What is emulated
  * discovery: /version, /api, /api/v1, /apis, /apis/G/V (legacy JSON; the
    aggregated-discovery Accept types are answered with plain JSON, which
    client-go accepts and falls back on), /openapi/v2 (an empty protobuf
    document: kubectl then skips client-side validation and leaves field
    validation to this server), /openapi/v3 (the group versions of CRDs, with
    each CRD's schema, for `kubectl explain`: openapi.py; for built-in types
    kubectl falls back to its compiled-in strategic-merge types).
  * resources: core/v1 pods (+status, binding, log, eviction: eviction.py,
    honouring policy/v1 poddisruptionbudgets), services (+status),
    secrets, configmaps, events, namespaces (+status), serviceaccounts,
    endpoints, persistentvolumeclaims (+status), nodes (+status); apps/v1 deployments, statefulsets, replicasets
    (stored only, nothing runs them); coordination.k8s.io/v1 leases;
    networking.k8s.io/v1 networkpolicies (defaulted as upstream; the kubelet
    emulator enforces them, emulator/kubelet/network_policy.py);
    rbac.authorization.k8s.io/v1 (cluster)roles and (cluster)rolebindings;
    scheduling.k8s.io/v1 priorityclasses; apiextensions.k8s.io/v1
    customresourcedefinitions; and every served version of every registered
    CRD (dynamic, appears in discovery at once).
  * metadata: uid, resourceVersion (one global counter, as in etcd),
    generation (bumped when anything but metadata/status changes),
    creationTimestamp, deletionTimestamp/deletionGracePeriodSeconds,
    generateName, finalizers (deletion waits for them to be removed).
  * create/get/list/update/patch/delete/deletecollection, dryRun=All.
    PUT with a stale metadata.resourceVersion -> 409 Conflict; PUT without one
    is unconditional for built-ins and 422 for custom resources (as upstream).
    An update that changes nothing is not written (no new resourceVersion,
    no watch event).
  * PATCH: merge-patch+json, json-patch+json, strategic-merge-patch+json for
    built-in types (see patches.strategic_merge_patch for the covered subset;
    custom resources answer 415 like the real server), apply-patch+yaml
    (server-side apply, simplified: the applied object is merged like a merge
    patch and created when missing; no field managers, JSON bodies only).
  * list/watch: labelSelector (=, ==, !=, in, notin, exists, !key),
    fieldSelector (any dotted field path, =, ==, !=), resourceVersion,
    resourceVersionMatch, watch=1 (newline-delimited JSON events, chunked),
    allowWatchBookmarks (BOOKMARK every --bookmark-interval seconds and on
    request), sendInitialEvents (initial-events-end bookmark), timeoutSeconds.
    The last --event-window changes are kept; a watch from an older
    resourceVersion gets an ERROR event with a Status of code 410 (reason
    Expired), as the watch cache does; a list with resourceVersionMatch=Exact
    gets HTTP 410.
  * status subresource: for pods, services, nodes, namespaces and CRs that
    enable it, writes to /status change only .status and writes to the main
    resource never change .status (creation drops it for CRs).
  * scale subresource of CRs whose CRD version declares subresources.scale
    (scale.py): an autoscaling/v1 Scale read at specReplicasPath,
    statusReplicasPath and labelSelectorPath; PUT and PATCH (merge, JSON
    patch; strategic merge is 415 as for any CR) write spec.replicas only,
    through the CR's update (resourceVersion precondition, generation,
    schema validation, watch event); in discovery as group autoscaling,
    version v1, so `kubectl scale` works; authorised as "PLURAL/scale". A
    subresource a CRD does not declare, or a verb /scale does not serve, is
    answered in plain text (404, 405) as the CRD handler's http.Error does.
  * CRDs: structural checks (type required, properties and additionalProperties
    mutually exclusive, metadata.name = plural.group), Established condition,
    per-request pruning, defaulting and validation against openAPIV3Schema
    (type, enum, minimum/maximum with exclusive bounds, min/maxLength,
    pattern, min/maxItems, required, nullable, additionalProperties,
    x-kubernetes-preserve-unknown-fields). Unknown fields are pruned; with
    fieldValidation=Strict (kubectl's default) they are rejected with 400
    `strict decoding error: unknown field "spec.x"`, with Warn they come back
    as Warning headers. Invalid objects get 422 with details.causes[].
    Deleting a CRD deletes its objects.
  * Tables (Accept: application/json;as=Table;g=meta.k8s.io;v=v1): printer
    columns of CRDs (simple JSONPath), and kubectl-like columns for pods,
    services, namespaces, events, nodes, networkpolicies; Name/Age for the rest; also on watch.
  * pods: defaults (restartPolicy Always, terminationGracePeriodSeconds 30,
    schedulerName default-scheduler, dnsPolicy, enableServiceLinks, image pull
    policy, phase Pending); graceful deletion: a pod bound to a node (spec.nodeName)
    and not finished gets deletionTimestamp and stays until the kubelet deletes
    it with gracePeriodSeconds=0; pods/log reads the log files that
    the kubelet emulator writes under --log-dir (follow, previous, tailLines,
    container); services get a clusterIP from --service-cidr (or keep None).
    secrets: stringData is folded into data.
  * ownerReferences garbage collection: when an object goes away, every
    object whose ownerReferences all point at objects that are gone is
    deleted (background propagation; Orphan removes the references;
    Foreground is treated as Background), recursively.
  * Kubernetes' validation of the names the operator derives (validation.py):
    Service names (DNS-1035), pod hostnames and subdomains (DNS-1123 labels)
    and label values, each at most 63 characters: 422 Invalid otherwise.
  * Pod Security admission (pod_security.py) on namespaces labelled
    pod-security.kubernetes.io/enforce=baseline|restricted: 403 with the
    upstream message listing every failed check.
  * authentication with bearer tokens (401 otherwise); with --rbac, requests
    of service-account tokens are authorised against the stored
    (Cluster)Role(Binding)s (403 with the upstream message otherwise), and
    the OwnerReferencesPermissionEnforcement admission plugin is on:
    blockOwnerDeletion needs `update` on the owner's finalizers.

Test hooks (POST, admin token required):
  /_emulator/compact        forget every change so far: any watch or exact
                            list from an older resourceVersion gets 410 Gone
  /_emulator/cut-watches    end every open watch stream (?mode=abort drops the
                            TCP connection without the final chunk)
  /_emulator/bookmark       send a BOOKMARK now on every watch that allows them
  /_emulator/token          body {"token":..., "user":..., "groups":[...],
                            "expiresIn": seconds (optional)} adds a bearer token
  /_emulator/settings       body {"watchDelay": {plural: seconds}, "gcDelay": s,
                            "throttle": {"user", "fraction", "burst",
                            "retryAfterSeconds"}}: deliver each watch event of
                            those resources that long after the write's
                            response (order kept), collect dependents that
                            long after their owner, answer that user's
                            requests (a fraction, or the next `burst`) 429
                            TooManyRequests with Retry-After (flow_control.py)
                            ("requestLogSize": n keeps the last n requests)
  /_emulator/expire-token   body {"token":...}: refused (401) from now on, as
                            a rotated service-account token is once it expires
  GET /_emulator/requests   the last 2000 finished requests, oldest first:
                            [{seq, verb, path, code, user, time}] (a watch is
                            logged when its stream ends); a write also has
                            object: {name, uid, resourceVersion, controllerUid,
                            phase}
  GET /_emulator/watches    the open watch streams: [{user, path, openedAfter}],
                            openedAfter the seq of the last request logged
                            before the stream began
  GET /_emulator/healthz    "ok" (also /healthz, /readyz, /livez)

Modules
  api.py                the Api: served types and the REST verbs over the store
  store.py              objects, resourceVersion, the change window, watch fan-out
  resources.py          resource types, the built-in ones
  admission.py          defaults and checks of built-in objects
  crds.py, crd_schema.py  CRDs; pruning, defaulting, validating custom resources
  scale.py              the scale subresource of custom resources
  garbage_collector.py  ownerReferences, orphaning, namespace deletion
  rbac.py               authorisation with the stored RBAC objects
  flow_control.py       429 Too Many Requests (API Priority and Fairness)
  errors.py             Status objects of failures
  discovery.py          /version, /api, /apis, OpenAPI
  openapi.py            the OpenAPI v3 documents of the CRDs' group versions
  routing.py            the HTTP handler: authentication, paths, verbs
  watch.py, pod_log.py  the streaming responses
  tables.py             meta.k8s.io Tables (kubectl get columns)
  protobuf.py           protobuf bodies of kubectl's typed clients
  hooks.py              /_emulator/ test hooks
  certificates.py       the CA and the serving certificate
  __main__.py           the program: python3 -m emulator.apiserver
"""
