// glmc serve driven by the official OpenAI Node SDK: chat (plain, streamed, with tools),
// completions, usage, API keys, errors (400, 401, 404, 413), and eight concurrent streams. Every
// response, chunk and error is also checked against OpenAI's published schema.
// Usage: node sdk.test.mjs BASE_URL MODEL OPENAPI_YAML API_KEY
import OpenAI from 'openai';
import { loadSchemas } from './schema.mjs';

const [baseURL, model, specPath, apiKey] = process.argv.slice(2);
const conform = loadSchemas(specPath);
const client = new OpenAI({ baseURL, apiKey, maxRetries: 0, timeout: 60_000 });
const auth = { Authorization: `Bearer ${apiKey}` };
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

const hello = [{ role: 'user', content: 'Hello!' }];

await test('chat completion', async () => {
  const r = await client.chat.completions.create({ model, messages: hello, max_tokens: 8 });
  conform('CreateChatCompletionResponse', r);
  check(r.object === 'chat.completion', `object ${r.object}`);
  check(r.choices.length === 1 && r.choices[0].message.role === 'assistant', 'one assistant choice');
  check(['stop', 'length'].includes(r.choices[0].finish_reason), `finish ${r.choices[0].finish_reason}`);
  check(r.usage.completion_tokens <= 8 && r.usage.prompt_tokens > 0, 'usage');
  check(r.usage.total_tokens === r.usage.prompt_tokens + r.usage.completion_tokens, 'total');
});

await test('streamed chat with usage', async () => {
  const stream = await client.chat.completions.create({
    model, messages: hello, max_tokens: 6, stream: true, stream_options: { include_usage: true },
  });
  let chunks = 0, finish = null, usage = null;
  for await (const chunk of stream) {
    chunks++;
    conform('CreateChatCompletionStreamResponse', chunk);
    check(chunk.object === 'chat.completion.chunk', `object ${chunk.object}`);
    if (chunk.choices.length && chunk.choices[0].finish_reason) finish = chunk.choices[0].finish_reason;
    if (chunk.usage) usage = chunk.usage;
  }
  check(chunks >= 2, `${chunks} chunks`);
  check(finish !== null, 'a finish reason');
  check(usage && usage.completion_tokens <= 6, 'usage chunk');
});

await test('greedy replies are deterministic', async () => {
  const ask = () => client.chat.completions.create({ model, messages: hello, max_tokens: 8, temperature: 0 });
  const [a, b] = await Promise.all([ask(), ask()]);
  conform('CreateChatCompletionResponse', a);
  conform('CreateChatCompletionResponse', b);
  const text = (r) => (r.choices[0].message.content ?? '') + (r.choices[0].message.reasoning_content ?? '');
  check(text(a) === text(b), 'same reply at temperature 0, batched together');
});

await test('request with tools', async () => {
  const r = await client.chat.completions.create({
    model, messages: [{ role: 'user', content: 'Weather in Paris?' }], max_tokens: 8,
    tools: [{ type: 'function', function: { name: 'get_weather', parameters: {
      type: 'object', properties: { city: { type: 'string' } }, required: ['city'] } } }],
  });
  conform('CreateChatCompletionResponse', r);
  check(r.choices[0].message.role === 'assistant', 'assistant message');
});

await test('completion', async () => {
  const r = await client.completions.create({ model, prompt: 'tensor parallel', max_tokens: 5 });
  conform('CreateCompletionResponse', r);
  check(r.object === 'text_completion' && typeof r.choices[0].text === 'string', 'text completion');
  check(r.usage.completion_tokens <= 5, 'usage');
});

await test('models', async () => {
  const list = await client.models.list();
  check(list.data.some((m) => m.id === model), 'served model listed');
  // The SDK hands back a page object, so the list body is fetched as it came over the wire.
  const raw = await (await fetch(`${baseURL}/models`, { headers: auth })).json();
  conform('ListModelsResponse', raw);
  conform('Model', await client.models.retrieve(model));
});

await test('unknown model is NotFoundError', async () => {
  try {
    await client.chat.completions.create({ model: 'no-such-model', messages: hello });
    throw new Error('accepted');
  } catch (e) {
    check(e instanceof OpenAI.NotFoundError, `got ${e?.constructor?.name}`);
    conform('ErrorResponse', { error: e.error });
    check(e.code === 'model_not_found', `code ${e.code}`);
  }
});

await test('bad parameter is BadRequestError naming it', async () => {
  try {
    await client.chat.completions.create({ model, messages: hello, temperature: 7 });
    throw new Error('accepted');
  } catch (e) {
    check(e instanceof OpenAI.BadRequestError, `got ${e?.constructor?.name}`);
    conform('ErrorResponse', { error: e.error });
    check(e.param === 'temperature', `param ${e.param}`);
  }
});

await test('context length exceeded', async () => {
  try {
    await client.chat.completions.create({ model, messages: hello, max_tokens: 100000000 });
    throw new Error('accepted');
  } catch (e) {
    check(e instanceof OpenAI.BadRequestError, `got ${e?.constructor?.name}`);
    conform('ErrorResponse', { error: e.error });
    check(e.code === 'context_length_exceeded', `code ${e.code}`);
  }
});

await test('wrong API key is AuthenticationError', async () => {
  const stranger = new OpenAI({ baseURL, apiKey: `not-${apiKey}`, maxRetries: 0 });
  try {
    await stranger.models.list();
    throw new Error('accepted');
  } catch (e) {
    check(e instanceof OpenAI.AuthenticationError, `got ${e?.constructor?.name}`);
    conform('ErrorResponse', { error: e.error });
  }
});

await test('wrong type is BadRequestError naming it', async () => {
  try {
    await client.chat.completions.create({ model, messages: hello, max_tokens: 'eight' });
    throw new Error('accepted');
  } catch (e) {
    check(e instanceof OpenAI.BadRequestError, `got ${e?.constructor?.name}`);
    conform('ErrorResponse', { error: e.error });
    check(e.param === 'max_tokens', `param ${e.param}`);
  }
});

// The SDK cannot send these, so they go through fetch.
async function rawPost(body, headers = {}) {
  const res = await fetch(`${baseURL}/chat/completions`, {
    method: 'POST', body, headers: { ...auth, 'Content-Type': 'application/json', ...headers },
  });
  const json = await res.json();
  conform('ErrorResponse', json);
  return { status: res.status, error: json.error };
}

await test('malformed JSON is 400', async () => {
  const { status, error } = await rawPost('{"model": "tiny", "messages": [');
  check(status === 400 && error.type === 'invalid_request_error', `${status} ${error.type}`);
});

await test('oversized body is 413', async () => {
  const { status } = await rawPost(JSON.stringify({ model, prompt: 'x'.repeat(33 << 20) }));
  check(status === 413, `status ${status}`);
});

await test('eight concurrent streams', async () => {
  const one = async (i) => {
    const stream = await client.chat.completions.create({
      model, messages: [{ role: 'user', content: `Stream ${i}` }], max_tokens: 6, stream: true,
    });
    let finish = null;
    for await (const chunk of stream) {
      conform('CreateChatCompletionStreamResponse', chunk);
      if (chunk.choices.length && chunk.choices[0].finish_reason) finish = chunk.choices[0].finish_reason;
    }
    return finish;
  };
  const results = await Promise.all([...Array(8).keys()].map(one));
  check(results.every((f) => f !== null), `finish reasons ${results}`);
});

console.log(`${passed} passed, ${failed} failed`);
process.exit(failed === 0 ? 0 : 1);
