// Checks glmc's responses against the schemas of OpenAI's OpenAPI description, so that the
// e2e suite asserts the wire format itself and not only what the SDK happens to read.
import fs from 'node:fs';
import Ajv from 'ajv';
import yaml from 'js-yaml';

// The description is OpenAPI 3.0: `nullable: true` is not JSON Schema, so it becomes a null
// alternative (and null joins an enum) before ajv sees it.
function normaliseNullable(node) {
  if (Array.isArray(node)) {
    node.forEach(normaliseNullable);
    return;
  }
  if (!node || typeof node !== 'object') return;
  Object.values(node).forEach(normaliseNullable);
  if (node.nullable === undefined) return;
  const nullable = node.nullable === true;
  delete node.nullable;
  if (!nullable) return;
  if (typeof node.type === 'string') {
    node.type = [node.type, 'null'];
    if (Array.isArray(node.enum) && !node.enum.includes(null)) node.enum.push(null);
  } else {
    const inner = { ...node };
    Object.keys(node).forEach((k) => delete node[k]);
    node.anyOf = [inner, { type: 'null' }];
  }
}

export function loadSchemas(specPath) {
  const spec = yaml.load(fs.readFileSync(specPath, 'utf8'));
  normaliseNullable(spec.components);
  // Not strict: the description carries OpenAPI-only keywords (discriminator, x-oaiMeta, ...).
  const ajv = new Ajv({ strict: false, allErrors: true, validateFormats: false });
  ajv.addSchema({ $id: 'openai', components: spec.components });
  /** Throws, naming every violation, unless `value` is a valid `components.schemas[name]`. */
  return function conform(name, value) {
    const validate = ajv.getSchema(`openai#/components/schemas/${name}`);
    if (!validate) throw new Error(`no schema ${name} in ${specPath}`);
    if (!validate(value)) {
      const errors = validate.errors.map((e) => `${e.instancePath || '/'} ${e.message}`);
      throw new Error(`not a valid ${name}: ${errors.join('; ')}\n  ${JSON.stringify(value)}`);
    }
  };
}
