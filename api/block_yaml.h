// Writes JSON as block-style YAML the way the repository's hand-written
// manifests look (two-space indents, short lists of scalars in flow style,
// keys in insertion order), for the generated CRD. Strings are left plain
// only where YAML 1.1 and 1.2 both read them back as the same string, so
// kubectl, the API server and PyYAML all agree on the result.
//
// Pure function: safe from any thread.
#ifndef KUBEPS_API_BLOCK_YAML_H_
#define KUBEPS_API_BLOCK_YAML_H_

#include <string>

#include <nlohmann/json.hpp>

namespace kubeps::api {

// `document` must be an object; the text ends with a newline.
std::string ToBlockYaml(const nlohmann::ordered_json& document);

}  // namespace kubeps::api

#endif  // KUBEPS_API_BLOCK_YAML_H_
