// helm-render: renders a Helm chart the way `helm template` does, for tests
// on machines where Helm itself cannot be installed.
//
//	helm-render [--name kubeps] [--namespace default] [-f values.yaml ...]
//	            [--set a.b=c ...] [--api-versions monitoring.coreos.com/v1 ...]
//	            [--kube-version v1.32.0] [--include-crds] [--notes] [--strict] CHART_DIR
//
// What it does as Helm 3 does:
//   - Chart.yaml is .Chart (Name, Version, AppVersion, Description, ...);
//     kubeVersion, when set, is checked against --kube-version.
//   - values.yaml, then every -f file in order, then every --set, are
//     coalesced: maps merge key by key, a later scalar or list replaces, a
//     null deletes the key. Numbers are float64, as Helm reads them (YAML is
//     turned into JSON first).
//   - Every file under templates/ is parsed into one template set, each named
//     "<chart>/templates/<path>"; files whose name starts with "_" only define
//     templates. Functions: sprig's (without env and expandenv), toYaml,
//     fromYaml, fromYamlArray, toJson, fromJson, fromJsonArray, include, tpl,
//     required, lookup (always empty: there is no cluster).
//   - .Release (Name, Namespace, Service "Helm", IsInstall, IsUpgrade,
//     Revision 1), .Capabilities (KubeVersion, APIVersions.Has: the built-in
//     group versions plus --api-versions), .Files (Get, GetBytes, Lines,
//     Glob, AsConfig, AsSecrets; never templates/ or Chart.yaml-level
//     secrets, only files of the chart), .Template (Name, BasePath).
//   - missing keys render as empty (missingkey=zero, "<no value>" removed)
//     unless --strict.
//   - Output: every non-empty document as "---\n# Source: <template>\n...",
//     sorted by kind in Helm's install order (stable, template path order
//     within a kind); crds/ first with --include-crds; NOTES.txt is not a
//     manifest and is printed alone with --notes.
//
// A template error, a failed `required` or `fail`, or a document that is not
// YAML ends it with exit status 1 and the template's name in the message.
package main

import (
	"bytes"
	"errors"
	"flag"
	"fmt"
	"io/ioutil"
	"os"
	"path"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"text/template"

	"github.com/Masterminds/semver"
	"github.com/Masterminds/sprig"
	"gopkg.in/yaml.v2"
)

type listFlag []string

func (l *listFlag) String() string     { return strings.Join(*l, ",") }
func (l *listFlag) Set(s string) error { *l = append(*l, s); return nil }

// ---------------------------------------------------------------- rendering

type renderer struct {
	chart      string // the chart's name
	root       *template.Template
	strict     bool
	includeErr error
}

func (r *renderer) funcs() template.FuncMap {
	f := sprig.TxtFuncMap()
	delete(f, "env")
	delete(f, "expandenv")
	f["toYaml"] = toYAML
	f["fromYaml"] = fromYAML
	f["fromYamlArray"] = fromYAMLArray
	f["toJson"] = toJSON
	f["fromJson"] = fromJSON
	f["fromJsonArray"] = fromJSONArray
	f["toToml"] = func(v interface{}) string { return "" }
	f["required"] = func(msg string, v interface{}) (interface{}, error) {
		if v == nil {
			return v, errors.New(msg)
		}
		if s, ok := v.(string); ok && s == "" {
			return v, errors.New(msg)
		}
		return v, nil
	}
	f["lookup"] = func(apiVersion, kind, namespace, name string) (map[string]interface{}, error) {
		return map[string]interface{}{}, nil
	}
	// include and tpl need the template set; they are bound for real in
	// render (text/template checks names at parse time).
	f["include"] = func(name string, data interface{}) (string, error) { return "", nil }
	f["tpl"] = func(text string, data interface{}) (string, error) { return "", nil }
	return f
}

func (r *renderer) bind(t *template.Template) {
	includes := 0
	t.Funcs(template.FuncMap{
		"include": func(name string, data interface{}) (string, error) {
			includes++
			defer func() { includes-- }()
			if includes > 1000 {
				return "", fmt.Errorf("include %q: too deep (recursion?)", name)
			}
			var buf bytes.Buffer
			if err := r.root.ExecuteTemplate(&buf, name, data); err != nil {
				return "", err
			}
			return buf.String(), nil
		},
		"tpl": func(text string, data interface{}) (string, error) {
			clone, err := r.root.Clone()
			if err != nil {
				return "", err
			}
			t, err := clone.New("tpl").Parse(text)
			if err != nil {
				return "", fmt.Errorf("tpl: %v", err)
			}
			var buf bytes.Buffer
			if err := t.Execute(&buf, data); err != nil {
				return "", fmt.Errorf("tpl: %v", err)
			}
			return strings.ReplaceAll(buf.String(), "<no value>", ""), nil
		},
	})
}

// Helm's install order (pkg/releaseutil/kind_sorter.go); other kinds follow.
var installOrder = []string{
	"PriorityClass", "Namespace", "NetworkPolicy", "ResourceQuota", "LimitRange", "PodSecurityPolicy",
	"PodDisruptionBudget", "ServiceAccount", "Secret", "SecretList", "ConfigMap", "StorageClass",
	"PersistentVolume", "PersistentVolumeClaim", "CustomResourceDefinition", "ClusterRole",
	"ClusterRoleList", "ClusterRoleBinding", "ClusterRoleBindingList", "Role", "RoleList", "RoleBinding",
	"RoleBindingList", "Service", "DaemonSet", "Pod", "ReplicationController", "ReplicaSet", "Deployment",
	"HorizontalPodAutoscaler", "StatefulSet", "Job", "CronJob", "IngressClass", "Ingress", "APIService",
}

type manifest struct {
	source string
	kind   string
	body   string
}

var docSeparator = regexp.MustCompile(`(?m)^---[ \t]*(#.*)?$`)

func splitDocuments(source, text string) ([]manifest, error) {
	var out []manifest
	for _, doc := range docSeparator.Split(text, -1) {
		body := strings.TrimSpace(doc)
		if body == "" {
			continue
		}
		v, err := parseYAML([]byte(body))
		if err != nil {
			return nil, fmt.Errorf("%s: the rendered output is not YAML: %v\n%s", source, err, numbered(body))
		}
		if v == nil { // only comments
			continue
		}
		m, ok := v.(map[string]interface{})
		if !ok {
			return nil, fmt.Errorf("%s: a rendered document is not a map:\n%s", source, numbered(body))
		}
		kind, _ := m["kind"].(string)
		if kind == "" || m["apiVersion"] == nil {
			return nil, fmt.Errorf("%s: a rendered document has no kind or apiVersion:\n%s", source, numbered(body))
		}
		out = append(out, manifest{source: source, kind: kind, body: body})
	}
	return out, nil
}

func numbered(text string) string {
	var b strings.Builder
	for i, line := range strings.Split(text, "\n") {
		fmt.Fprintf(&b, "%4d  %s\n", i+1, line)
	}
	return b.String()
}

func sortByKind(ms []manifest) {
	rank := map[string]int{}
	for i, k := range installOrder {
		rank[k] = i
	}
	pos := func(k string) int {
		if r, ok := rank[k]; ok {
			return r
		}
		return len(installOrder)
	}
	sort.SliceStable(ms, func(i, j int) bool {
		a, b := pos(ms[i].kind), pos(ms[j].kind)
		if a != b {
			return a < b
		}
		if a == len(installOrder) && ms[i].kind != ms[j].kind {
			return ms[i].kind < ms[j].kind
		}
		return false
	})
}

func loadFiles(chartDir string) (Files, error) {
	files := Files{}
	err := filepath.Walk(chartDir, func(p string, info os.FileInfo, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(chartDir, p)
		rel = filepath.ToSlash(rel)
		if info.IsDir() {
			if rel != "." && strings.HasPrefix(info.Name(), ".") {
				return filepath.SkipDir
			}
			return nil
		}
		data, err := ioutil.ReadFile(p)
		if err != nil {
			return err
		}
		files[rel] = data
		return nil
	})
	return files, err
}

func parseKubeVersion(v string) (KubeVersion, error) {
	sv, err := semver.NewVersion(v)
	if err != nil {
		return KubeVersion{}, fmt.Errorf("--kube-version %q: %v", v, err)
	}
	return KubeVersion{
		Version:    "v" + sv.String(),
		Major:      strconv.FormatUint(sv.Major(), 10),
		Minor:      strconv.FormatUint(sv.Minor(), 10),
		GitVersion: "v" + sv.String(),
	}, nil
}

func run() error {
	var valueFiles, sets, apiVersions listFlag
	name := flag.String("name", "release-name", "the release name (.Release.Name)")
	namespace := flag.String("namespace", "default", "the release namespace (.Release.Namespace)")
	kubeVersion := flag.String("kube-version", "v1.32.0", ".Capabilities.KubeVersion")
	includeCRDs := flag.Bool("include-crds", false, "print the chart's crds/ first")
	notes := flag.Bool("notes", false, "print the rendered NOTES.txt instead of the manifests")
	strict := flag.Bool("strict", false, "fail on a missing value (missingkey=error)")
	flag.Var(&valueFiles, "f", "a values file merged over values.yaml (repeatable)")
	flag.Var(&valueFiles, "values", "same as -f")
	flag.Var(&sets, "set", "key.path=value merged last (repeatable)")
	flag.Var(&apiVersions, "api-versions", "an extra API version for .Capabilities.APIVersions.Has (repeatable)")
	flag.Var(&apiVersions, "a", "same as --api-versions")
	flag.Usage = func() {
		fmt.Fprintf(os.Stderr, "usage: helm-render [flags] CHART_DIR\n")
		flag.PrintDefaults()
	}
	// Flags may follow the chart folder, as with helm.
	var positional []string
	args := os.Args[1:]
	for len(args) > 0 {
		if err := flag.CommandLine.Parse(args); err != nil {
			return err
		}
		args = flag.Args()
		if len(args) > 0 {
			positional = append(positional, args[0])
			args = args[1:]
		}
	}
	if len(positional) != 1 {
		flag.Usage()
		return errors.New("expected exactly one chart folder")
	}
	chartDir := positional[0]

	chartData, err := ioutil.ReadFile(filepath.Join(chartDir, "Chart.yaml"))
	if err != nil {
		return err
	}
	var cy chartYAML
	if err := yaml.UnmarshalStrict(chartData, &cy); err != nil {
		return fmt.Errorf("Chart.yaml: %v", err)
	}
	if cy.APIVersion != "v2" {
		return fmt.Errorf("Chart.yaml: apiVersion %q: only v2 charts are supported", cy.APIVersion)
	}
	if cy.Name == "" || cy.Version == "" {
		return errors.New("Chart.yaml: name and version are required")
	}
	if _, err := semver.StrictNewVersion(cy.Version); err != nil {
		return fmt.Errorf("Chart.yaml: version %q is not SemVer 2: %v", cy.Version, err)
	}
	chart := Chart{APIVersion: cy.APIVersion, Name: cy.Name, Version: cy.Version, KubeVersion: cy.KubeVersion,
		Description: cy.Description, Type: cy.Type, Keywords: cy.Keywords, Home: cy.Home, Sources: cy.Sources,
		Icon: cy.Icon, AppVersion: cy.AppVersion, Deprecated: cy.Deprecated, Annotations: cy.Annotations,
		Maintainers: cy.Maintainers, Dependencies: cy.Dependencies}
	kv, err := parseKubeVersion(*kubeVersion)
	if err != nil {
		return err
	}
	if cy.KubeVersion != "" {
		c, err := semver.NewConstraint(cy.KubeVersion)
		if err != nil {
			return fmt.Errorf("Chart.yaml: kubeVersion %q: %v", cy.KubeVersion, err)
		}
		if v, _ := semver.NewVersion(kv.Version); !c.Check(v) {
			return fmt.Errorf("chart requires kubeVersion: %s which is incompatible with Kubernetes %s",
				cy.KubeVersion, kv.Version)
		}
	}

	values := map[string]interface{}{}
	if _, err := os.Stat(filepath.Join(chartDir, "values.yaml")); err == nil {
		if values, err = readValuesFile(filepath.Join(chartDir, "values.yaml")); err != nil {
			return err
		}
	}
	for _, vf := range valueFiles {
		user, err := readValuesFile(vf)
		if err != nil {
			return err
		}
		values = coalesce(values, user)
	}
	setVals := map[string]interface{}{}
	for _, s := range sets {
		if err := setValue(setVals, s); err != nil {
			return err
		}
	}
	values = coalesce(values, setVals)

	files, err := loadFiles(chartDir)
	if err != nil {
		return err
	}
	caps := Capabilities{
		KubeVersion: kv,
		APIVersions: append(append(VersionSet{}, builtinAPIVersions...), apiVersions...),
		HelmVersion: map[string]string{"version": "v3.16.0", "go_version": "go1.19"},
	}
	release := Release{Name: *name, Namespace: *namespace, Service: "Helm", IsInstall: true, Revision: 1}

	// Parse every template into one set.
	r := &renderer{chart: cy.Name, strict: *strict}
	r.root = template.New("gotpl")
	if *strict {
		r.root.Option("missingkey=error")
	} else {
		r.root.Option("missingkey=zero")
	}
	r.root.Funcs(r.funcs())
	var names []string
	for _, f := range files.names() {
		if !strings.HasPrefix(f, "templates/") {
			continue
		}
		tname := path.Join(cy.Name, f)
		if _, err := r.root.New(tname).Parse(string(files[f])); err != nil {
			return fmt.Errorf("parse error in %v", err)
		}
		names = append(names, tname)
	}
	r.bind(r.root)

	// Files as templates see them: what Helm's chart loader leaves in
	// chart.Files (not templates/, Chart.yaml, values.yaml, ...); .helmignore
	// is not read.
	visible := Files{}
	for n, d := range files {
		switch {
		case strings.HasPrefix(n, "templates/"), strings.HasPrefix(n, "charts/"),
			n == "Chart.yaml", n == "Chart.lock", n == "values.yaml", n == "values.schema.json":
		default:
			visible[n] = d
		}
	}

	var ms []manifest
	var notesText string
	for _, tname := range names {
		base := path.Base(tname)
		if strings.HasPrefix(base, "_") {
			continue
		}
		isNotes := strings.HasSuffix(tname, "/NOTES.txt")
		data := map[string]interface{}{
			"Values":       values,
			"Chart":        chart,
			"Release":      release,
			"Capabilities": caps,
			"Files":        visible,
			"Template":     TemplateInfo{Name: tname, BasePath: path.Join(cy.Name, "templates")},
		}
		var buf bytes.Buffer
		if err := r.root.ExecuteTemplate(&buf, tname, data); err != nil {
			return fmt.Errorf("render error in %v", err)
		}
		out := strings.ReplaceAll(buf.String(), "<no value>", "")
		if isNotes {
			notesText = out
			continue
		}
		docs, err := splitDocuments(tname, out)
		if err != nil {
			return err
		}
		ms = append(ms, docs...)
	}
	if *notes {
		fmt.Print(notesText)
		return nil
	}
	sortByKind(ms)
	var w bytes.Buffer
	if *includeCRDs {
		for _, f := range files.names() {
			if strings.HasPrefix(f, "crds/") && (strings.HasSuffix(f, ".yaml") || strings.HasSuffix(f, ".yml") || strings.HasSuffix(f, ".json")) {
				docs, err := splitDocuments(path.Join(cy.Name, f), string(files[f]))
				if err != nil {
					return err
				}
				for _, d := range docs {
					fmt.Fprintf(&w, "---\n# Source: %s\n%s\n", d.source, d.body)
				}
			}
		}
	}
	for _, m := range ms {
		fmt.Fprintf(&w, "---\n# Source: %s\n%s\n", m.source, m.body)
	}
	_, err = os.Stdout.Write(w.Bytes())
	return err
}

func main() {
	if err := run(); err != nil {
		fmt.Fprintf(os.Stderr, "Error: %v\n", err)
		os.Exit(1)
	}
}
