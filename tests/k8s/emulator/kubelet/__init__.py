"""A node emulator for tests: a kubelet (plus the scheduler's binding step
and a kube-proxy) that runs pods as local processes, talking to the API server
(emulator.apiserver) only through its REST API, with its own token, as a kubelet
does.

Scheduling: a pod with no spec.nodeName whose schedulerName is empty or
"default-scheduler" is bound to this node (POST pods/NAME/binding), like the
default scheduler with one node, when the node fits it: its nodeSelector's
labels are the node's and its requests are within the node's allocatable
(cpu, memory, pods; no nvidia.com/gpu). A pod that does not fit stays
Pending with PodScheduled False, reason Unschedulable and the scheduler's
message ("0/1 nodes are available: 1 Insufficient nvidia.com/gpu. ..."), and
is looked at again every 2 s. Pods asking for another scheduler stay Pending,
as they would on a cluster without that scheduler. Affinity, taints and the
requests of other pods are not checked.

Images: pulled before the container is configured. A reference that does
not parse is InvalidImageName; an image on a registry ending in ".invalid",
or matching a --missing-image pattern, fails to pull: ErrImagePull, then
ImagePullBackOff (back-off as for restarts), the message naming the image.
Every other image pulls.

Containers: each container is one local process group.
  * The program: the basename of command[0] (or of the image's last path
    segment when there is no command) is looked up in every --bin-dir; then an
    absolute command[0] that exists on this machine runs as is (so /bin/sh
    works in tests whatever the image); then PATH. --image IMAGE=PROGRAM maps
    an image (with or without tag) to the program used when the container has
    no command (an image's ENTRYPOINT). Otherwise the container fails with
    reason StartError, exit code 128, as containerd reports it.
  * Environment: only what the pod says (no variables of the kubelet leak in
    except PATH, LANG and the names given with --pass-env), plus HOSTNAME,
    KUBERNETES_SERVICE_HOST/PORT (the emulated API server). env with value,
    $(VAR) expansion (also in command and args), valueFrom.fieldRef
    (metadata.name, metadata.namespace, metadata.uid, metadata.labels['k'],
    metadata.annotations['k'], spec.nodeName, spec.serviceAccountName,
    status.podIP, status.podIPs, status.hostIP), secretKeyRef and
    configMapKeyRef (optional honoured; a missing one keeps the container
    Waiting with CreateContainerConfigError and is retried), resourceFieldRef
    (the container's limit, or the node's capacity), envFrom.
  * Working directory: workingDir when set (created if missing), else the pod's
    own folder under --state-dir.
  * Logs: <state-dir>/logs/<ns>_<pod>_<uid>/<container>.<restartCount>.log,
    served by the API server as pods/log (kubectl logs, -f, --previous).
  * Volumes: secret, configMap (files for each key, or `items`), emptyDir
    (a per-pod folder), hostPath (the path itself), downwardAPI (labels,
    annotations, one label or annotation as metadata.annotations['KEY'],
    name, namespace, uid; rewritten atomically as soon as the pod's labels or
    annotations change), persistentVolumeClaim (a Bound claim: a
    folder of the node's per claim). A Secret or ConfigMap that does not
    exist (not optional), or a missing key of its `items`, keeps the pod
    Pending in ContainerCreating with Warning Events reason FailedMount
    ("MountVolume.SetUp failed for volume ..."), retried with back-off; a
    claim that does not exist or is not Bound leaves the pod Unschedulable.
    How a mountPath becomes visible:
      - isolation "namespace" (the default where unshare(2) works, e.g. as
        root): every container runs in its own mount and UTS namespace
        (`unshare --mount --uts`), the volume folder is bind-mounted on the
        real mountPath (created empty on the host when missing), a per-pod
        hosts file is bind-mounted on /etc/hosts and the hostname is the pod's
        hostname, exactly what the process would see in a container;
      - isolation "none": no namespaces; each mountPath that does not exist on
        the host is created as a symbolic link to the volume folder and removed
        when the pod goes (mountPaths that exist and are not ours are left
        alone and the container fails with CreateContainerError).
  * Networking: every pod gets its own loopback address 127.X.0.N (X per node emulator, N from 2
    up), reported as status.podIP. All pods share the host's network
    namespace, so a process must listen on its pod IP (status.podIP through
    a fieldRef), not on 0.0.0.0, when two pods use the same port.
  * NetworkPolicy (ingress), enforced as a CNI plugin's agent does: each pod's
    processes run in a net_cls cgroup of their own and one nftables table
    (`inet kubeps_emu_MARKER`) drops, by that cgroup's classid, the new
    connections the policies do not allow to a pod IP, or to a ClusterIP
    Service port whose endpoints would refuse them; the node's own traffic
    always passes; egress is not enforced; ipBlock is approximated
    (network_policy.py). Needs root, nft and the net_cls cgroup (mounted when
    it is not); the Node's annotation kubeps.io/network-policy says
    "enforced" or "unavailable: REASON" (policy_enforcer.py).
  * DNS: pod hostname (spec.hostname or the pod name), <hostname>.<subdomain>
    when a headless Service named <subdomain> exists in the namespace, and
    Services (<svc>, <svc>.<ns>, <svc>.<ns>.svc, <svc>.<ns>.svc.cluster.local)
    resolve through hosts-file entries: a headless Service to the pod IPs of
    its ready endpoints (publishNotReadyAddresses honoured), a ClusterIP
    Service to its clusterIP. In the "namespace" isolation each pod has its own
    hosts file (short names relative to its namespace) kept up to date in
    place; with --host-dns (the default when isolation is "none") the same
    entries (FQDN and <name>.<ns> forms, plus short names of every namespace)
    also go to the machine's /etc/hosts between `# BEGIN kubeps-emulator ID`
    and `# END kubeps-emulator ID` markers, removed on exit.
  * kube-proxy: each ClusterIP Service (clusterIPs come from the API server's
    --service-cidr, 127.1.0.0/16 by default) is served on clusterIP:port by a
    TCP proxy that connects round-robin to the ready endpoints' targetPort
    (numbers or container port names).
  * Lifecycle: phases Pending -> Running -> Succeeded/Failed, conditions
    PodScheduled, Initialized, ContainersReady, Ready; containerStatuses with
    state waiting/running/terminated (exitCode, signal, reason Completed,
    Error or StartError; message: the container's terminationMessagePath,
    or with terminationMessagePolicy FallbackToLogsOnError and a non-zero
    exit and nothing written there, its log's last 80 lines, at most 2048
    bytes), lastState, restartCount, ready, started; init
    containers run in order first. restartPolicy Always/OnFailure/Never is
    honoured with a crash-loop back-off (--backoff seconds, doubling, capped at
    --max-backoff; reason CrashLoopBackOff while waiting). readinessProbe and
    livenessProbe (exec, tcpSocket, httpGet; initialDelaySeconds,
    periodSeconds, failureThreshold, successThreshold) are run; without a
    readinessProbe a running container is ready. activeDeadlineSeconds fails
    the pod with reason DeadlineExceeded.
  * Deletion: when the API server marks the pod with a deletionTimestamp, every
    process group gets SIGTERM, then SIGKILL after the grace period, the final
    status is written and the pod is deleted with gracePeriodSeconds=0 (and a
    uid precondition), as a kubelet does.
On exit (SIGTERM/SIGINT) the kubelet stops every process group it started and
removes its /etc/hosts entries, mount-path links, nftables table and cgroups.

Modules
  node.py            the Kubelet: node registration, processes, shutdown
  informers.py       list + watch of pods and Services, pod workers
  scheduling.py      binding pods to the node, or Unschedulable
  images.py          image pulls: InvalidImageName, ErrImagePull, ImagePullBackOff
  pod_worker.py      one pod's lifecycle and status
  containers.py      container state, exit codes, $(VAR) expansion
  environment.py     a container's environment and program
  volumes.py         secret, configMap, downwardAPI, emptyDir, hostPath, claim volumes
  events.py          the Events the kubelet records (FailedMount), aggregated
  runtime.py         container processes, namespaces, mounts, logs
  probes.py          readiness and liveness probes
  networking.py      pod IPs, Service endpoints, the proxy and DNS sync loop
  service_proxy.py   kube-proxy of one ClusterIP Service port
  network_policy.py  NetworkPolicy semantics: who may connect, the nftables table
  policy_enforcer.py pod net_cls cgroups, the table kept in step, the Node annotation
  dns.py             hosts files: per pod and the machine's /etc/hosts
  log.py             the kubelet's own messages
  __main__.py        the program: python3 -m emulator.kubelet
"""
