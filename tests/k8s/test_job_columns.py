"""What a user sees of a TrainingJob with the real kubectl on the emulated
cluster: the columns of `kubectl get tj` for a finished job (its phase, the
step training really ended at, steps/sec, progress, ETA, loss and test
accuracy, each also a status field), and `kubectl explain` of the CRD's
fields, from the OpenAPI v3 documents the API server publishes.

    KUBEPS_BIN_DIR=build/bin python3 -m unittest -v test_job_columns   (from tests/k8s)
"""
import math
import re
import unittest

from operator_harness import apply, training_job
from operator_test_case import SharedClusterTestCase

CRD = "/apis/apiextensions.k8s.io/v1/customresourcedefinitions/trainingjobs.kubeps.io"
COLUMNS = ["NAME", "PHASE", "WORKERS", "STEP", "STEPS/S", "PROGRESS", "ETA", "LOSS", "ACCURACY",
           "AGE"]


def words(text):
    """`text` with its white space made single spaces: explain wraps lines."""
    return " ".join(text.split())


class JobColumnsTest(SharedClusterTestCase):
    def test_get_shows_a_finished_jobs_last_step_progress_and_accuracy(self):
        c, name, steps = self.c, "columns", 300
        apply(c, training_job(name, max_steps=steps, servers=1))
        job = self.wait_phase(name, "Succeeded", timeout=120)

        # What worker 0 printed as it ended: the real last step and accuracy.
        log = c.kubectl("logs", name + "-worker-0").stdout
        m = re.search(r"\[worker 0\] test accuracy (\d\.\d+) \(test loss [\d.]+\) after (\d+) "
                      r"steps", log)
        self.assertIsNotNone(m, log[-2000:])
        accuracy, last_step = m.group(1), int(m.group(2))
        self.assertEqual(last_step, steps)

        lines = c.kubectl("get", "tj", name).stdout.splitlines()
        self.assertEqual(lines[0].split(), COLUMNS, lines)
        row = dict(zip(COLUMNS, lines[1].split()))
        self.assertEqual(row["NAME"], name, lines)
        self.assertEqual(row["PHASE"], "Succeeded", lines)
        self.assertEqual(row["WORKERS"], "2/2", lines)
        self.assertEqual(int(row["STEP"]), last_step, lines)
        self.assertGreater(float(row["STEPS/S"]), 0, lines)
        self.assertEqual(row["PROGRESS"], "100%", lines)
        self.assertEqual(row["ETA"], "0s", lines)
        self.assertTrue(math.isfinite(float(row["LOSS"])) and float(row["LOSS"]) > 0, lines)
        self.assertEqual(row["ACCURACY"], accuracy, lines)
        self.assertGreater(float(accuracy), 0.5, lines)

        # Every column is a status field too.
        st = job["status"]
        self.assertEqual(st["step"], last_step, st)
        self.assertEqual(st["totalSteps"], steps, st)
        self.assertEqual((st["stepsPerSecond"], st["progress"], st["eta"], st["loss"],
                          st["testAccuracy"]),
                         (row["STEPS/S"], "100%", "0s", row["LOSS"], accuracy), st)
        self.delete_job(name)

    def test_explain_prints_the_field_descriptions_of_the_crd(self):
        c = self.c
        schema = c.client.get(CRD)["spec"]["versions"][0]["schema"]["openAPIV3Schema"]
        spec = schema["properties"]["spec"]
        c.kubectl("get", "tj")   # kubectl learns of the CRD (its discovery cache)
        for path, node in (("trainingjob.spec", spec),
                           ("trainingjob.spec.checkpoint", spec["properties"]["checkpoint"]),
                           ("trainingjob.status", schema["properties"]["status"])):
            out = words(c.kubectl("explain", path).stdout)
            self.assertIn("KIND: TrainingJob", out)
            self.assertIn("VERSION: v1alpha1", out)
            self.assertIn(words(node["description"]), out, path)
            for field, child in node["properties"].items():
                self.assertRegex(out, r"\b%s <" % re.escape(field), path)
                if "description" in child:
                    self.assertIn(words(child["description"]), out, "%s.%s" % (path, field))
        out = words(c.kubectl("explain", "trainingjob.spec.checkpoint.intervalSteps").stdout)
        self.assertIn("FIELD: intervalSteps <integer>", out)
        self.assertIn(words(spec["properties"]["checkpoint"]["properties"]["intervalSteps"]
                            ["description"]), out)


if __name__ == "__main__":
    unittest.main()
