{{/*
The chart's name, or nameOverride.
*/}}
{{- define "kubeps.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/*
The full name: fullnameOverride, else the release name when it contains the
chart's name (release "kubeps" -> "kubeps"), else "<release>-<chart>".
*/}}
{{- define "kubeps.fullname" -}}
{{- if .Values.fullnameOverride }}
{{- .Values.fullnameOverride | trunc 63 | trimSuffix "-" }}
{{- else }}
{{- $name := default .Chart.Name .Values.nameOverride }}
{{- if contains $name .Release.Name }}
{{- .Release.Name | trunc 63 | trimSuffix "-" }}
{{- else }}
{{- printf "%s-%s" .Release.Name $name | trunc 63 | trimSuffix "-" }}
{{- end }}
{{- end }}
{{- end }}

{{/*
The name of the operator's objects: "kubeps-operator" for a release named
kubeps, as in the plain manifests of deploy/.
*/}}
{{- define "kubeps.operatorName" -}}
{{- printf "%s-operator" (include "kubeps.fullname" .) | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/*
The name of a cluster-scoped object (ClusterRole, ClusterRoleBinding): one
namespace's release must not take or overwrite another's, so the name
carries the release's namespace as well as its name.
*/}}
{{- define "kubeps.clusterScopedName" -}}
{{- printf "%s-%s" .Release.Namespace (include "kubeps.operatorName" .) | trunc 253 | trimSuffix "-" }}
{{- end }}

{{/*
"chart-version" for the helm.sh/chart label.
*/}}
{{- define "kubeps.chart" -}}
{{- printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/*
Labels of every object, but app.kubernetes.io/component.
*/}}
{{- define "kubeps.commonLabels" -}}
helm.sh/chart: {{ include "kubeps.chart" . }}
app.kubernetes.io/name: {{ include "kubeps.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- if .Chart.AppVersion }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
{{- end }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/part-of: kubeps
{{- with .Values.commonLabels }}
{{ toYaml . }}
{{- end }}
{{- end }}

{{/*
Labels of the operator's objects.
*/}}
{{- define "kubeps.labels" -}}
{{ include "kubeps.commonLabels" . }}
app.kubernetes.io/component: operator
{{- end }}

{{/*
Labels that select the operator's pods.
*/}}
{{- define "kubeps.selectorLabels" -}}
app.kubernetes.io/name: {{ include "kubeps.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/component: operator
{{- end }}

{{/*
The operator's service account.
*/}}
{{- define "kubeps.serviceAccountName" -}}
{{- if .Values.serviceAccount.create }}
{{- default (include "kubeps.operatorName" .) .Values.serviceAccount.name }}
{{- else }}
{{- required "serviceAccount.name is required when serviceAccount.create is false" .Values.serviceAccount.name }}
{{- end }}
{{- end }}

{{/*
The namespace of the leader-election Lease.
*/}}
{{- define "kubeps.leaderElectionNamespace" -}}
{{- default .Release.Namespace .Values.leaderElection.namespace }}
{{- end }}

{{/*
"repository:tag" of one image; the tag defaults to the chart's appVersion.
Call with (dict "image" .Values.image.server "context" $).
*/}}
{{- define "kubeps.image" -}}
{{- $tag := default .context.Chart.AppVersion .image.tag }}
{{- printf "%s:%s" (required "image repository is required" .image.repository) (toString $tag) }}
{{- end }}

{{/*
What the operator does to TrainingJobs and their pods, services, token
secrets and events. deploy/rbac/rbac.yaml is rendered from these
(scripts/render-deploy.sh).
*/}}
{{- define "kubeps.jobRules" -}}
# The jobs it reconciles, and their status.
- apiGroups: ["kubeps.io"]
  resources: ["trainingjobs"]
  # delete: ttlSecondsAfterFinished removes finished jobs.
  verbs: ["get", "list", "watch", "update", "patch", "delete"]
- apiGroups: ["kubeps.io"]
  resources: ["trainingjobs/status"]
  verbs: ["get", "update", "patch"]
# Every object it creates sets blockOwnerDeletion on its job, which the
# OwnerReferencesPermissionEnforcement admission plugin (OpenShift) allows
# only to who may update the job's finalizers.
- apiGroups: ["kubeps.io"]
  resources: ["trainingjobs/finalizers"]
  verbs: ["update"]
# Gang scheduling: a PodGroup per job, Volcano's or scheduler-plugins'.
- apiGroups: ["scheduling.volcano.sh", "scheduling.x-k8s.io"]
  resources: ["podgroups"]
  verbs: ["get", "create", "delete"]
# Kueue: a queued job's Workload (watched, so that an admission or an
# eviction is acted on at once; the garbage collector deletes it with
# the job; the operator deactivates it while the job is suspended, and
# deletes it when the job changed, to make it again, lifting Kueue's
# finalizer); its status,
# where Kueue admits it and the operator gives the quota back (eviction)
# and marks it Finished.
- apiGroups: ["kueue.x-k8s.io"]
  resources: ["workloads"]
  verbs: ["get", "list", "watch", "create", "delete", "patch"]
- apiGroups: ["kueue.x-k8s.io"]
  resources: ["workloads/status"]
  verbs: ["get", "update", "patch"]
# The pods and services of every job.
- apiGroups: [""]
  resources: ["pods", "services"]
  verbs: ["get", "list", "watch", "create", "delete"]
# An elastic job's scheduler pod: its desired-workers annotation.
- apiGroups: [""]
  resources: ["pods"]
  verbs: ["patch"]
# Each job's NetworkPolicy (networkPolicy.enabled): only its own pods get in.
- apiGroups: ["networking.k8s.io"]
  resources: ["networkpolicies"]
  verbs: ["get", "create"]
# The per-job token every request inside a job carries, and the TLS
# Secrets; patch: the job made an owner of those cert-manager writes.
- apiGroups: [""]
  resources: ["secrets"]
  verbs: ["get", "create", "delete", "patch"]
# With cert-manager (tls.issuer): each TLS job's Issuers and Certificates.
- apiGroups: ["cert-manager.io"]
  resources: ["issuers", "certificates"]
  verbs: ["get", "create"]
# list: the kubelet says why a pod waits in ContainerCreating (FailedMount)
# only in its Events.
- apiGroups: [""]
  resources: ["events"]
  verbs: ["create", "patch", "list"]
{{- end }}

{{/*
Leader election between the operator's replicas.
*/}}
{{- define "kubeps.leaderElectionRules" -}}
- apiGroups: ["coordination.k8s.io"]
  resources: ["leases"]
  verbs: ["get", "create", "update"]
{{- end }}

{{- /*
The NetworkPolicyPeers a job's NetworkPolicy admits to the metrics port, as
JSON for --network-policy-metrics-from: networkPolicy.metricsFrom (the
Prometheus that scrapes the jobs) and the operator's own pods, which read a
job's progress from worker 0's /metrics.
*/ -}}
{{- define "kubeps.metricsPeers" -}}
{{- $operator := dict "namespaceSelector" (dict "matchLabels" (dict "kubernetes.io/metadata.name" .Release.Namespace)) "podSelector" (dict "matchLabels" (fromYaml (include "kubeps.selectorLabels" .))) -}}
{{- append (.Values.networkPolicy.metricsFrom | default list) $operator | toJson -}}
{{- end }}
