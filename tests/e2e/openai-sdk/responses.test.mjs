// glmc serve's /v1/responses driven by the official OpenAI Node SDK: create (whole and streamed,
// through both create({stream: true}) and responses.stream()), input items with function calls
// and their outputs, previous_response_id, retrieve, and errors. Every response and every event
// is checked against OpenAI's published schema.
// Usage: node responses.test.mjs BASE_URL MODEL OPENAPI_YAML API_KEY
import OpenAI from 'openai';
import { loadSchemas } from './schema.mjs';

const [baseURL, model, specPath, apiKey] = process.argv.slice(2);
const conform = loadSchemas(specPath);
const client = new OpenAI({ baseURL, apiKey, maxRetries: 0, timeout: 60_000 });
let passed = 0;
let failed = 0;

async function test(name, body) {
  try {
    await body();
    passed++;
    console.log(`ok ${name}`);
  } catch (e) {
    failed++;
    console.log(`FAILED ${name}: ${e?.stack ?? e}`);
  }
}

function check(condition, message) {
  if (!condition) throw new Error(message);
}

function checkUsage(usage, maxOutput) {
  check(usage.input_tokens > 0, `input_tokens ${usage.input_tokens}`);
  check(usage.output_tokens > 0 && usage.output_tokens <= maxOutput, `output_tokens ${usage.output_tokens}`);
  check(usage.total_tokens === usage.input_tokens + usage.output_tokens, 'total_tokens');
  check(usage.output_tokens_details.reasoning_tokens <= usage.output_tokens, 'reasoning_tokens');
  check(usage.input_tokens_details.cached_tokens >= 0, 'cached_tokens');
}

await test('responses.create', async () => {
  const r = await client.responses.create({ model, input: 'Hello!', max_output_tokens: 12 });
  conform('Response', r);
  check(r.object === 'response' && r.id.startsWith('resp_'), `object ${r.object} ${r.id}`);
  check(['completed', 'incomplete'].includes(r.status), `status ${r.status}`);
  check(r.status !== 'incomplete' || r.incomplete_details.reason === 'max_output_tokens', 'incomplete_details');
  check(typeof r.output_text === 'string', 'the SDK assembles output_text');
  checkUsage(r.usage, 12);
  for (const item of r.output) {
    check(['reasoning', 'message', 'function_call'].includes(item.type), `item ${item.type}`);
  }
});

await test('create({stream: true}): the event sequence', async () => {
  const stream = await client.responses.create({
    model, input: 'Tell me a story.', max_output_tokens: 16, stream: true,
    instructions: 'You tell stories.',
  });
  const types = [];
  let sequence = 0, text = '', reasoning = '', final = null;
  for await (const event of stream) {
    conform('ResponseStreamEvent', event);
    check(event.sequence_number === sequence++, `sequence_number ${event.sequence_number}`);
    types.push(event.type);
    if (event.type === 'response.output_text.delta') text += event.delta;
    if (event.type === 'response.reasoning_text.delta') reasoning += event.delta;
    if (event.type === 'response.completed' || event.type === 'response.incomplete') final = event.response;
  }
  check(types[0] === 'response.created' && types[1] === 'response.in_progress', `opening ${types.slice(0, 2)}`);
  check(final !== null && types.at(-1).startsWith('response.'), `closing ${types.at(-1)}`);
  conform('Response', final);
  check(final.instructions === 'You tell stories.', 'instructions echoed');
  const finalText = final.output.filter((i) => i.type === 'message').map((i) => i.content[0].text).join('');
  const finalReasoning = final.output.filter((i) => i.type === 'reasoning').map((i) => i.content[0].text).join('');
  check(finalText === text, 'the text deltas make the final message');
  check(finalReasoning === reasoning, 'the reasoning deltas make the final reasoning');
  // Every item is added, then done, in order.
  const added = types.filter((t) => t === 'response.output_item.added').length;
  const done = types.filter((t) => t === 'response.output_item.done').length;
  check(added === final.output.length && done === added, `${added} added, ${done} done, ${final.output.length} items`);
});

await test('responses.stream() and finalResponse()', async () => {
  let deltas = '';
  const stream = client.responses.stream({ model, input: 'Hi there', max_output_tokens: 10 });
  stream.on('response.output_text.delta', (e) => { deltas += e.delta; });
  const r = await stream.finalResponse();
  conform('Response', r);
  check(r.output_text === deltas, `output_text ${JSON.stringify(r.output_text)} vs ${JSON.stringify(deltas)}`);
  checkUsage(r.usage, 10);
});

await test('previous_response_id and retrieve', async () => {
  const first = await client.responses.create({ model, input: 'My name is Ada.', max_output_tokens: 6 });
  const kept = await client.responses.retrieve(first.id);
  conform('Response', kept);
  check(kept.id === first.id && JSON.stringify(kept.output) === JSON.stringify(first.output), 'retrieve');
  const second = await client.responses.create({
    model, previous_response_id: first.id, input: 'What is my name?', max_output_tokens: 6,
  });
  conform('Response', second);
  check(second.previous_response_id === first.id, 'previous_response_id echoed');
  // The conversation grew: the second prompt holds the first turn too.
  check(second.usage.input_tokens > first.usage.input_tokens, 'the second prompt is longer');
});

await test('function tools and their outputs as input items', async () => {
  const tools = [{
    type: 'function', name: 'get_weather', description: 'Weather for a city', strict: false,
    parameters: { type: 'object', properties: { city: { type: 'string' } }, required: ['city'] },
  }];
  const r = await client.responses.create({
    model, tools, max_output_tokens: 8,
    input: [
      { role: 'user', content: [{ type: 'input_text', text: 'Weather in Paris?' }] },
      { type: 'function_call', call_id: 'call_1', name: 'get_weather', arguments: '{"city":"Paris"}' },
      { type: 'function_call_output', call_id: 'call_1', output: 'sunny, 21 C' },
    ],
  });
  conform('Response', r);
  check(r.tools.length === 1 && r.tools[0].name === 'get_weather', 'tools echoed');
  for (const item of r.output.filter((i) => i.type === 'function_call')) {
    check(typeof item.call_id === 'string' && JSON.parse(item.arguments), 'a function call item');
  }
});

await test('errors: unknown previous response, unknown id, bad input', async () => {
  try {
    await client.responses.create({ model, input: 'x', previous_response_id: 'resp_unknown' });
    throw new Error('no error');
  } catch (e) {
    check(e instanceof OpenAI.BadRequestError, `got ${e}`);
    check(e.param === 'previous_response_id' && e.code === 'previous_response_not_found', `${e.param} ${e.code}`);
  }
  try {
    await client.responses.retrieve('resp_unknown');
    throw new Error('no error');
  } catch (e) {
    check(e instanceof OpenAI.NotFoundError, `got ${e}`);
  }
  try {
    await client.responses.create({
      model, input: [{ role: 'user', content: [{ type: 'input_image', image_url: 'http://x/y.png' }] }],
    });
    throw new Error('no error');
  } catch (e) {
    check(e instanceof OpenAI.BadRequestError && e.param === 'input[0].content[0].type', `got ${e} ${e.param}`);
  }
});

console.log(`${passed} passed, ${failed} failed`);
process.exit(failed === 0 ? 0 : 1);
