// kubeps-crdgen: prints what is generated from the TrainingJob's field table
// (api/training_job_schema.cc). scripts/generate-crd.sh runs it to write the
// committed files; nothing else needs it.
//
//   kubeps-crdgen crd      the CustomResourceDefinition (helm/kubeps/crds/trainingjobs.yaml)
//   kubeps-crdgen fields   the README's table of the spec's fields (Markdown)
#include <iostream>

#include "api/crd.h"
#include "common/command_line.h"

int main(int argc, char** argv) {
  CLI::App app{"kubeps-crdgen: the TrainingJob CRD and field table, from the field table"};
  app.require_subcommand(1);
  CLI::App* crd = app.add_subcommand("crd", "print the CustomResourceDefinition (YAML)");
  app.add_subcommand("fields", "print the table of the spec's fields (Markdown)");
  if (auto exit_code = kubeps::ParseCommandLine(app, argc, argv)) return *exit_code;
  std::cout << (crd->parsed() ? kubeps::api::TrainingJobCrdYaml()
                              : kubeps::api::TrainingJobFieldsMarkdown());
  return std::cout.good() ? 0 : 1;
}
