// The chart's values as Helm reads and merges them, and the YAML and JSON
// functions templates call.

package main

import (
	"encoding/json"
	"fmt"
	"io/ioutil"
	"strings"

	"gopkg.in/yaml.v2"
)

// ---------------------------------------------------------------- YAML and values

// yamlToJSONValue converts what yaml.v2 decodes (map[interface{}]interface{})
// into JSON-shaped values, as sigs.k8s.io/yaml does before json.Unmarshal.
func yamlToJSONValue(v interface{}) (interface{}, error) {
	switch t := v.(type) {
	case map[interface{}]interface{}:
		out := make(map[string]interface{}, len(t))
		for k, val := range t {
			var key string
			switch kk := k.(type) {
			case string:
				key = kk
			case int, int64, uint64, float64, bool:
				key = fmt.Sprint(kk)
			case nil:
				key = "null"
			default:
				return nil, fmt.Errorf("unsupported map key %#v", k)
			}
			c, err := yamlToJSONValue(val)
			if err != nil {
				return nil, err
			}
			out[key] = c
		}
		return out, nil
	case []interface{}:
		out := make([]interface{}, len(t))
		for i, val := range t {
			c, err := yamlToJSONValue(val)
			if err != nil {
				return nil, err
			}
			out[i] = c
		}
		return out, nil
	default:
		return t, nil
	}
}

// parseYAML reads one YAML document into JSON-shaped Go values (maps of
// string keys, []interface{}, float64 numbers, strings, bools, nil).
func parseYAML(data []byte) (interface{}, error) {
	var raw interface{}
	if err := yaml.Unmarshal(data, &raw); err != nil {
		return nil, err
	}
	v, err := yamlToJSONValue(raw)
	if err != nil {
		return nil, err
	}
	// A round trip through JSON gives float64 numbers, as in Helm.
	b, err := json.Marshal(v)
	if err != nil {
		return nil, err
	}
	var out interface{}
	if err := json.Unmarshal(b, &out); err != nil {
		return nil, err
	}
	return out, nil
}

func readValuesFile(file string) (map[string]interface{}, error) {
	data, err := ioutil.ReadFile(file)
	if err != nil {
		return nil, err
	}
	v, err := parseYAML(data)
	if err != nil {
		return nil, fmt.Errorf("%s: %v", file, err)
	}
	if v == nil {
		return map[string]interface{}{}, nil
	}
	m, ok := v.(map[string]interface{})
	if !ok {
		return nil, fmt.Errorf("%s: the values must be a map, not %T", file, v)
	}
	return m, nil
}

// coalesce merges src over dst as Helm merges user values over a chart's:
// maps recursively, anything else replaced, null deletes.
func coalesce(dst, src map[string]interface{}) map[string]interface{} {
	out := make(map[string]interface{}, len(dst))
	for k, v := range dst {
		out[k] = v
	}
	for k, v := range src {
		if v == nil {
			delete(out, k)
			continue
		}
		srcMap, srcIsMap := v.(map[string]interface{})
		dstMap, dstIsMap := out[k].(map[string]interface{})
		if srcIsMap && dstIsMap {
			out[k] = coalesce(dstMap, srcMap)
		} else {
			out[k] = v
		}
	}
	return out
}

// setValue applies one --set a.b.c=value (value parsed as YAML scalar:
// numbers, booleans, null; everything else a string).
func setValue(vals map[string]interface{}, expr string) error {
	eq := strings.Index(expr, "=")
	if eq <= 0 {
		return fmt.Errorf("--set %q: expected key=value", expr)
	}
	keys := strings.Split(expr[:eq], ".")
	var value interface{}
	parsed, err := parseYAML([]byte(expr[eq+1:]))
	switch parsed.(type) {
	case float64, bool, nil:
		if err == nil {
			value = parsed
		}
	default:
		value = expr[eq+1:]
	}
	if err != nil {
		value = expr[eq+1:]
	}
	if expr[eq+1:] == "" {
		value = ""
	}
	m := vals
	for _, k := range keys[:len(keys)-1] {
		next, ok := m[k].(map[string]interface{})
		if !ok {
			next = map[string]interface{}{}
			m[k] = next
		}
		m = next
	}
	m[keys[len(keys)-1]] = value
	return nil
}

func toYAML(v interface{}) string {
	// As sigs.k8s.io/yaml.Marshal: JSON first (json tags, sorted keys), then
	// YAML through yaml.v2.
	j, err := json.Marshal(v)
	if err != nil {
		return ""
	}
	var obj interface{}
	if err := yaml.Unmarshal(j, &obj); err != nil {
		return ""
	}
	out, err := yaml.Marshal(obj)
	if err != nil {
		return ""
	}
	return strings.TrimSuffix(string(out), "\n")
}

func fromYAML(s string) map[string]interface{} {
	m := map[string]interface{}{}
	v, err := parseYAML([]byte(s))
	if err != nil {
		m["Error"] = err.Error()
		return m
	}
	if vm, ok := v.(map[string]interface{}); ok {
		return vm
	}
	return m
}

func fromYAMLArray(s string) []interface{} {
	v, err := parseYAML([]byte(s))
	if err != nil {
		return []interface{}{err.Error()}
	}
	if a, ok := v.([]interface{}); ok {
		return a
	}
	return []interface{}{}
}

func toJSON(v interface{}) string {
	b, err := json.Marshal(v)
	if err != nil {
		return ""
	}
	return string(b)
}

func fromJSON(s string) map[string]interface{} {
	m := map[string]interface{}{}
	if err := json.Unmarshal([]byte(s), &m); err != nil {
		m["Error"] = err.Error()
	}
	return m
}

func fromJSONArray(s string) []interface{} {
	a := []interface{}{}
	if err := json.Unmarshal([]byte(s), &a); err != nil {
		a = []interface{}{err.Error()}
	}
	return a
}
