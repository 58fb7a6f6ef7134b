// What templates see: .Chart, .Release, .Capabilities, .Files, .Template.

package main

import (
	"encoding/base64"
	"path"
	"regexp"
	"sort"
	"strings"
)

// ---------------------------------------------------------------- the objects templates see

// Chart is .Chart: Chart.yaml's fields with Helm's (Go) names.
type Chart struct {
	APIVersion   string
	Name         string
	Version      string
	KubeVersion  string
	Description  string
	Type         string
	Keywords     []string
	Home         string
	Sources      []string
	Icon         string
	AppVersion   string
	Deprecated   bool
	Annotations  map[string]string
	Maintainers  []map[string]string
	Dependencies []interface{}
}

type chartYAML struct {
	APIVersion   string              `yaml:"apiVersion"`
	Name         string              `yaml:"name"`
	Version      string              `yaml:"version"`
	KubeVersion  string              `yaml:"kubeVersion"`
	Description  string              `yaml:"description"`
	Type         string              `yaml:"type"`
	Keywords     []string            `yaml:"keywords"`
	Home         string              `yaml:"home"`
	Sources      []string            `yaml:"sources"`
	Icon         string              `yaml:"icon"`
	AppVersion   string              `yaml:"appVersion"`
	Deprecated   bool                `yaml:"deprecated"`
	Annotations  map[string]string   `yaml:"annotations"`
	Maintainers  []map[string]string `yaml:"maintainers"`
	Dependencies []interface{}       `yaml:"dependencies"`
}

// Release is .Release.
type Release struct {
	Name      string
	Namespace string
	Service   string
	IsInstall bool
	IsUpgrade bool
	Revision  int
}

// KubeVersion is .Capabilities.KubeVersion.
type KubeVersion struct {
	Version    string
	Major      string
	Minor      string
	GitVersion string
}

func (k KubeVersion) String() string { return k.Version }

// VersionSet is .Capabilities.APIVersions.
type VersionSet []string

// Has says whether "group/version" or "group/version/Kind" is served.
func (v VersionSet) Has(apiVersion string) bool {
	for _, x := range v {
		if x == apiVersion {
			return true
		}
	}
	return false
}

// Capabilities is .Capabilities.
type Capabilities struct {
	KubeVersion KubeVersion
	APIVersions VersionSet
	HelmVersion map[string]string
}

// The group versions a current Kubernetes serves (as Helm's default set is
// built from client-go's scheme), with the kinds Helm lists too.
var builtinAPIVersions = []string{
	"v1", "admissionregistration.k8s.io/v1", "apiextensions.k8s.io/v1", "apiregistration.k8s.io/v1",
	"apps/v1", "authentication.k8s.io/v1", "authorization.k8s.io/v1", "autoscaling/v1", "autoscaling/v2",
	"batch/v1", "certificates.k8s.io/v1", "coordination.k8s.io/v1", "discovery.k8s.io/v1",
	"events.k8s.io/v1", "flowcontrol.apiserver.k8s.io/v1", "networking.k8s.io/v1", "node.k8s.io/v1",
	"policy/v1", "rbac.authorization.k8s.io/v1", "scheduling.k8s.io/v1", "storage.k8s.io/v1",
	"v1/ConfigMap", "v1/Namespace", "v1/Pod", "v1/Secret", "v1/Service", "v1/ServiceAccount",
	"apps/v1/Deployment", "rbac.authorization.k8s.io/v1/ClusterRole", "rbac.authorization.k8s.io/v1/ClusterRoleBinding",
	"rbac.authorization.k8s.io/v1/Role", "rbac.authorization.k8s.io/v1/RoleBinding",
	"apiextensions.k8s.io/v1/CustomResourceDefinition", "coordination.k8s.io/v1/Lease",
}

// Files is .Files: the chart's files (paths relative to the chart folder).
type Files map[string][]byte

func (f Files) GetBytes(name string) []byte { return f[path.Clean(name)] }
func (f Files) Get(name string) string      { return string(f.GetBytes(name)) }

func (f Files) Lines(name string) []string {
	s := f.Get(name)
	if s == "" {
		return []string{}
	}
	return strings.Split(s, "\n")
}

func (f Files) Glob(pattern string) Files {
	out := Files{}
	for name, data := range f {
		if ok, _ := path.Match(pattern, name); ok {
			out[name] = data
		} else if strings.Contains(pattern, "**") {
			// "**" as Helm's gobwas/glob: any folders.
			re := regexp.QuoteMeta(pattern)
			re = strings.ReplaceAll(re, `\*\*`, ".*")
			re = strings.ReplaceAll(re, `\*`, "[^/]*")
			if regexp.MustCompile("^" + re + "$").MatchString(name) {
				out[name] = data
			}
		}
	}
	return out
}

func (f Files) names() []string {
	names := make([]string, 0, len(f))
	for n := range f {
		names = append(names, n)
	}
	sort.Strings(names)
	return names
}

func (f Files) AsConfig() string {
	m := map[string]string{}
	for _, n := range f.names() {
		m[path.Base(n)] = string(f[n])
	}
	return toYAML(m)
}

func (f Files) AsSecrets() string {
	m := map[string]string{}
	for _, n := range f.names() {
		m[path.Base(n)] = base64.StdEncoding.EncodeToString(f[n])
	}
	return toYAML(m)
}

// TemplateInfo is .Template.
type TemplateInfo struct {
	Name     string
	BasePath string
}
