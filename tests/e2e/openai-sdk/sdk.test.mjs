// glmc serve driven by the official OpenAI Node SDK: chat (plain, streamed, with tools, with
// logprobs, with n choices), completions, usage, API keys, errors (400, 401, 404, 413, 503),
// clients that leave, and eight concurrent streams. Every response, chunk and error is also
// checked against OpenAI's published schema. BUSY_URL is a server with one slot and a one-request
// waiting queue.
// Usage: node sdk.test.mjs BASE_URL MODEL OPENAPI_YAML API_KEY BUSY_URL
import OpenAI from 'openai';
import { loadSchemas } from './schema.mjs';

const [baseURL, model, specPath, apiKey, busyURL] = process.argv.slice(2);
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

await test('request ids and cached tokens', async () => {
  // The server echoes a client's X-Request-Id (the SDK reads it as _request_id) and makes one
  // otherwise. A prompt sent twice resumes the second time from a state kept at one of its
  // prefill chunk boundaries: so it spans several chunks.
  const long = 'Count the cached tokens, please. '.repeat(100);
  const ask = { model, messages: [{ role: 'user', content: long }], max_tokens: 2 };
  const first = await client.chat.completions.create(ask, { headers: { 'X-Request-Id': 'e2e-request-1' } });
  check(first._request_id === 'e2e-request-1', `request id ${first._request_id}`);
  const second = await client.chat.completions.create(ask);
  check(/^req_[0-9a-f]{32}$/.test(second._request_id), `generated request id ${second._request_id}`);
  conform('CreateChatCompletionResponse', second);
  const cached = second.usage.prompt_tokens_details.cached_tokens;
  check(cached > 0 && cached < second.usage.prompt_tokens, `cached_tokens ${cached} of ${second.usage.prompt_tokens}`);
  try {
    await client.chat.completions.create({ ...ask, temperature: 'hot' }, { headers: { 'X-Request-Id': 'e2e-bad' } });
    throw new Error('no error');
  } catch (e) {
    check(e instanceof OpenAI.BadRequestError && e.requestID === 'e2e-bad', `error request id ${e.requestID}`);
  }
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

// Checks one token's logprobs (ChatCompletionTokenLogprob) at temperature 0 with `k` alternatives:
// each logprob at most 0, the alternatives most likely first, and the sampled token, the greedy
// one, the first of them with its own logprob.
function checkTokenLogprob(t, k) {
  check(typeof t.token === 'string' && Array.isArray(t.bytes), `token ${JSON.stringify(t)}`);
  check(Number.isFinite(t.logprob) && t.logprob <= 0, `logprob ${t.logprob}`);
  check(t.top_logprobs.length === k, `${t.top_logprobs.length} alternatives, asked for ${k}`);
  t.top_logprobs.forEach((a, i) => {
    check(typeof a.token === 'string' && Number.isFinite(a.logprob) && a.logprob <= 0,
      `alternative ${JSON.stringify(a)}`);
    check(i === 0 || a.logprob <= t.top_logprobs[i - 1].logprob, 'alternatives sorted, most likely first');
  });
  const first = t.top_logprobs[0];
  check(first.token === t.token && JSON.stringify(first.bytes) === JSON.stringify(t.bytes) &&
        Math.abs(first.logprob - t.logprob) < 1e-4,
    `greedy token ${JSON.stringify(t.token)} ${t.logprob} is not the most likely ${JSON.stringify(first)}`);
}

await test('chat logprobs', async () => {
  const ask = { model, messages: hello, max_tokens: 6, temperature: 0, logprobs: true, top_logprobs: 3 };
  const r = await client.chat.completions.create(ask);
  conform('CreateChatCompletionResponse', r);
  const logprobs = r.choices[0].logprobs;
  check(logprobs !== null && logprobs.refusal === null, `logprobs ${JSON.stringify(logprobs)}`);
  // Every generated token has its entry, the reasoning's included.
  check(logprobs.content.length === r.usage.completion_tokens,
    `${logprobs.content.length} entries for ${r.usage.completion_tokens} tokens`);
  logprobs.content.forEach((t) => checkTokenLogprob(t, 3));

  // Streamed: the chunks carry the same entries between them.
  const stream = await client.chat.completions.create({
    ...ask, stream: true, stream_options: { include_usage: true },
  });
  const streamed = [];
  let usage = null;
  for await (const chunk of stream) {
    conform('CreateChatCompletionStreamResponse', chunk);
    if (chunk.usage) usage = chunk.usage;
    for (const choice of chunk.choices) streamed.push(...(choice.logprobs?.content ?? []));
  }
  streamed.forEach((t) => checkTokenLogprob(t, 3));
  // At temperature 0 both replies are the greedy one.
  check(streamed.length === logprobs.content.length &&
        streamed.every((t, i) => t.token === logprobs.content[i].token &&
                                 Math.abs(t.logprob - logprobs.content[i].logprob) < 1e-4),
    'streamed logprobs are the whole reply\'s');
  check(usage && streamed.length === usage.completion_tokens, `${streamed.length} streamed entries`);

  // Not asked for: null.
  const plain = await client.chat.completions.create({ model, messages: hello, max_tokens: 2 });
  check(plain.choices[0].logprobs === null, 'no logprobs unless asked');
});

await test('n = 2 gives two choices', async () => {
  const ask = { model, messages: hello, max_tokens: 6, temperature: 1, seed: 7 };
  const r = await client.chat.completions.create({ ...ask, n: 2 });
  conform('CreateChatCompletionResponse', r);
  check(r.choices.length === 2, `${r.choices.length} choices`);
  check(r.choices[0].index === 0 && r.choices[1].index === 1, `indices ${r.choices.map((c) => c.index)}`);
  for (const c of r.choices) {
    check(c.message.role === 'assistant' && ['stop', 'length'].includes(c.finish_reason),
      `choice ${JSON.stringify(c)}`);
  }
  check(r.usage.completion_tokens <= 12, `usage ${r.usage.completion_tokens} over both choices`);
  // Choice i draws with the key seed + i: it is the one-choice reply with that seed.
  const text = (c) => (c.message.reasoning_content ?? '') + '|' + (c.message.content ?? '');
  for (const i of [0, 1]) {
    const one = await client.chat.completions.create({ ...ask, seed: 7 + i });
    check(text(one.choices[0]) === text(r.choices[i]),
      `choice ${i} ${JSON.stringify(text(r.choices[i]))} != seed ${7 + i}'s ${JSON.stringify(text(one.choices[0]))}`);
  }

  // Streamed: one choice a chunk, each with its index, each choice finishing once.
  const stream = await client.chat.completions.create({ ...ask, n: 2, stream: true });
  const finishes = [0, 0];
  for await (const chunk of stream) {
    conform('CreateChatCompletionStreamResponse', chunk);
    check(chunk.choices.length === 1, `${chunk.choices.length} choices in a chunk`);
    const { index, finish_reason: finish } = chunk.choices[0];
    check(index === 0 || index === 1, `index ${index}`);
    if (finish) finishes[index]++;
  }
  check(finishes[0] === 1 && finishes[1] === 1, `finish chunks ${finishes}`);
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

// The metric's value in BASE's Prometheus text, or NaN.
async function metric(base, name) {
  const text = await (await fetch(`${base.replace(/\/v1$/, '')}/metrics`, { headers: auth })).text();
  const line = text.split('\n').find((l) => l.startsWith(`${name}{`));
  return line ? Number(line.split(' ').pop()) : NaN;
}

await test('a full waiting queue is 503; clients that leave free the server', async () => {
  const busy = new OpenAI({ baseURL: busyURL, apiKey, maxRetries: 0 });
  const leave = new AbortController();
  // Long enough to hold the only slot for seconds: nothing finishes on its own during the test.
  const long = { model, messages: hello, max_tokens: 3000, ignore_eos: true, stream: true };
  const running = await busy.chat.completions.create(long, { signal: leave.signal });
  await running[Symbol.asyncIterator]().next(); // its first token: it holds the slot
  // A streamed reply's headers come once the request is queued, so this one is waiting.
  await busy.chat.completions.create(long, { signal: leave.signal });
  try {
    await busy.chat.completions.create({ model, messages: hello, max_tokens: 4 });
    throw new Error('accepted');
  } catch (e) {
    check(e instanceof OpenAI.InternalServerError && e.status === 503, `got ${e?.status} ${e}`);
    conform('ErrorResponse', { error: e.error });
  }
  leave.abort();
  // Both cancelled: the running one at its next step, the waiting one before it is admitted.
  while ((await metric(busyURL, 'vllm:http_requests_client_disconnected_total')) !== 2 ||
         (await metric(busyURL, 'vllm:num_requests_running')) !== 0 ||
         (await metric(busyURL, 'vllm:num_requests_waiting')) !== 0) {
    await new Promise((resolve) => setTimeout(resolve, 20));
  }
  const r = await busy.chat.completions.create({ model, messages: hello, max_tokens: 4 });
  conform('CreateChatCompletionResponse', r);
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
