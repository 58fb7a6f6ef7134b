// Evaluates a CustomResourceDefinition's CEL rules (x-kubernetes-validations)
// for the stand-in's API server (tests/k8s/emulator/apiserver/cel_rules.py),
// with Buf's CEL implementation for ECMAScript; the real API server uses
// cel-go, which Debian does not package.
//
// One JSON request per line on stdin, one JSON answer per line on stdout:
//   {"op": "compile", "expression": E}
//       -> {"ok": true} | {"error": "..."}
//   {"op": "eval", "expressions": [E...], "schema": S, "self": V, "oldSelf": O}
//       -> {"results": [{"value": <the result as JSON>} | {"error": "..."}, ...]}
// (every rule of one value in one request: the value is sent and typed once)
// `oldSelf` is left out where the object has no old value (a create).
// Values are typed by their schema as the API server types them: an
// `integer` is a CEL int, a `number` a double.
import { createInterface } from "node:readline";
import { celEnv, isCelError, parse, plan } from "@bufbuild/cel";

const env = celEnv();
const planned = new Map();

function compiled(expression) {
  let program = planned.get(expression);
  if (!program) {
    program = plan(env, parse(expression));
    planned.set(expression, program);
  }
  return program;
}

function typed(value, schema) {
  if (value === null || value === undefined) return null;
  if (schema && schema["x-kubernetes-int-or-string"]) {
    return Number.isInteger(value) ? BigInt(value) : value;
  }
  const type = schema ? schema.type : undefined;
  if (type === "integer") return BigInt(value);
  if (type === "number") return value;
  if (Array.isArray(value)) return value.map((item) => typed(item, schema && schema.items));
  if (typeof value === "object") {
    const out = {};
    for (const [key, item] of Object.entries(value)) {
      let child;
      if (schema && schema.properties) child = schema.properties[key];
      if (!child && schema && typeof schema.additionalProperties === "object") {
        child = schema.additionalProperties;
      }
      out[key] = typed(item, child);
    }
    return out;
  }
  // Under x-kubernetes-preserve-unknown-fields: a whole number is an int.
  if (typeof value === "number" && Number.isInteger(value)) return BigInt(value);
  return value;
}

function asJson(value) {
  return JSON.parse(JSON.stringify(value, (_, v) => (typeof v === "bigint" ? Number(v) : v)));
}

function failure(error) {
  return { error: String(error && error.message ? error.message : error) };
}

function evaluated(expression, bindings) {
  try {
    const result = compiled(expression)(bindings);
    if (isCelError(result)) return { error: result.message };
    return { value: asJson(result) };
  } catch (error) {
    return failure(error);
  }
}

function answer(request) {
  if (request.op === "compile") {
    try {
      compiled(request.expression);
      return { ok: true };
    } catch (error) {
      return failure(error);
    }
  }
  const bindings = { self: typed(request.self, request.schema) };
  if ("oldSelf" in request) bindings.oldSelf = typed(request.oldSelf, request.schema);
  return { results: request.expressions.map((expression) => evaluated(expression, bindings)) };
}

const lines = createInterface({ input: process.stdin });
lines.on("line", (line) => {
  process.stdout.write(JSON.stringify(answer(JSON.parse(line))) + "\n");
});
