// glmc serve's /v1/messages driven by the official Anthropic TypeScript SDK: create, streaming
// (the SDK's MessageStream assembling the events), thinking, tool_use / tool_result turns,
// stop_sequences, count_tokens, and Anthropic-shaped errors.
// Usage: node sdk.test.mjs BASE_URL MODEL API_KEY
import Anthropic from '@anthropic-ai/sdk';

const [baseURL, model, apiKey] = process.argv.slice(2);
const client = new Anthropic({ baseURL, apiKey, maxRetries: 0, timeout: 60_000 });
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

function checkMessage(m, maxTokens) {
  check(m.type === 'message' && m.role === 'assistant' && m.id.startsWith('msg_'), `message ${m.id}`);
  check(m.model === model, `model ${m.model}`);
  check(['end_turn', 'max_tokens', 'stop_sequence', 'tool_use'].includes(m.stop_reason), `stop_reason ${m.stop_reason}`);
  check(m.usage.input_tokens > 0 && m.usage.output_tokens > 0 && m.usage.output_tokens <= maxTokens,
    `usage ${JSON.stringify(m.usage)}`);
  for (const block of m.content) {
    check(['text', 'thinking', 'tool_use'].includes(block.type), `block ${block.type}`);
  }
}

const hello = [{ role: 'user', content: 'Hello!' }];
// Greedy: the same request gives the same reply.
const greedy = { top_k: 1 };

await test('messages.create', async () => {
  const m = await client.messages.create({ model, max_tokens: 12, messages: hello, system: 'Be brief.' });
  checkMessage(m, 12);
  check(m.content.every((b) => b.type !== 'thinking'), 'no thinking unless asked for');
});

await test('messages.stream assembles the events', async () => {
  const events = [];
  let text = '';
  const stream = client.messages.stream({ model, max_tokens: 12, messages: hello });
  stream.on('streamEvent', (e) => events.push(e.type));
  stream.on('text', (delta) => { text += delta; });
  const m = await stream.finalMessage();
  checkMessage(m, 12);
  check(events[0] === 'message_start' && events.at(-1) === 'message_stop', `events ${events}`);
  check(events.includes('message_delta'), 'a message_delta');
  const blocks = m.content.filter((b) => b.type === 'text').map((b) => b.text).join('');
  check(blocks === text, `text ${JSON.stringify(blocks)} vs ${JSON.stringify(text)}`);
});

await test('thinking blocks, streamed and whole', async () => {
  const request = {
    model, max_tokens: 1100, messages: hello, thinking: { type: 'enabled', budget_tokens: 1024 }, ...greedy,
  };
  const whole = await client.messages.create(request);
  checkMessage(whole, 1100);
  // The think block comes first (it is absent when the model closes it at once).
  const thinking = whole.content.filter((b) => b.type === 'thinking');
  check(thinking.length <= 1 && (thinking.length === 0 || whole.content[0].type === 'thinking'),
    `blocks ${whole.content.map((b) => b.type)}`);
  // Signed: base64 of an HMAC-SHA256 (44 characters), the same text's the same in the stream.
  check(thinking.every((b) => typeof b.thinking === 'string' && /^[A-Za-z0-9+/]{43}=$/.test(b.signature)),
    `thinking block ${JSON.stringify(thinking)}`);
  const streamed = await client.messages.stream(request).finalMessage();
  check(JSON.stringify(streamed.content) === JSON.stringify(whole.content), 'the stream assembles the same blocks');
});

await test('tool_use and tool_result turns', async () => {
  const tools = [{
    name: 'get_weather', description: 'Weather for a city',
    input_schema: { type: 'object', properties: { city: { type: 'string' } }, required: ['city'] },
  }];
  const m = await client.messages.create({
    model, max_tokens: 8, tools, tool_choice: { type: 'auto' },
    messages: [
      { role: 'user', content: 'Weather in Paris?' },
      { role: 'assistant', content: [
        { type: 'text', text: 'Let me check.' },
        { type: 'tool_use', id: 'toolu_1', name: 'get_weather', input: { city: 'Paris' } }] },
      { role: 'user', content: [{ type: 'tool_result', tool_use_id: 'toolu_1', content: 'sunny' }] },
    ],
  });
  checkMessage(m, 8);
  for (const block of m.content.filter((b) => b.type === 'tool_use')) {
    check(typeof block.id === 'string' && typeof block.input === 'object', 'a tool_use block');
  }
});

await test('stop_sequences end the reply with stop_reason stop_sequence', async () => {
  const request = { model, max_tokens: 24, messages: hello, ...greedy };
  const free = await client.messages.create(request);
  const text = free.content.filter((b) => b.type === 'text').map((b) => b.text).join('');
  // A stop sequence from inside the reply's text (greedy: the reply repeats).
  const start = Math.floor(text.length / 2);
  const stop = text.slice(start, start + 2);
  check(stop.trim().length > 0 || text.length < 4, 'a reply long enough to cut');
  if (stop.trim().length === 0) return;
  const cut = await client.messages.create({ ...request, stop_sequences: [stop] });
  check(cut.stop_reason === 'stop_sequence' && cut.stop_sequence === stop, `${cut.stop_reason} ${cut.stop_sequence}`);
  const cutText = cut.content.filter((b) => b.type === 'text').map((b) => b.text).join('');
  check(text.startsWith(cutText) && !cutText.includes(stop), `cut ${JSON.stringify(cutText)}`);
});

await test('count_tokens matches the usage', async () => {
  // Long enough to span several prefill chunks: sent again, it resumes from a kept state.
  const request = { model, messages: hello, system: 'Count me. '.repeat(150) };
  const counted = await client.messages.countTokens(request);
  const m = await client.messages.create({ ...request, max_tokens: 4 });
  // Anthropic's input_tokens is the uncached part: the prompt is it and the cache reads.
  const prompt = m.usage.input_tokens + m.usage.cache_read_input_tokens;
  check(counted.input_tokens === prompt, `${counted.input_tokens} vs ${JSON.stringify(m.usage)}`);
  const again = await client.messages.create({ ...request, max_tokens: 4 });
  check(again.usage.cache_read_input_tokens > 0 &&
        again.usage.input_tokens + again.usage.cache_read_input_tokens === counted.input_tokens,
    `the same prompt again reads its kept state: ${JSON.stringify(again.usage)}`);
});

await test("errors in Anthropic's shape", async () => {
  try {
    await client.messages.create({ model, max_tokens: 4, messages: [{ role: 'user', content: [{ type: 'image', source: { type: 'url', url: 'http://x/y.png' } }] }] });
    throw new Error('no error');
  } catch (e) {
    check(e instanceof Anthropic.BadRequestError, `got ${e}`);
    check(e.error?.type === 'error' && e.error.error.type === 'invalid_request_error', JSON.stringify(e.error));
    check(e.error.error.message.includes('messages[0].content[0].type'), e.error.error.message);
  }
  try {
    await client.messages.create({ model: 'no-such-model', max_tokens: 4, messages: hello });
    throw new Error('no error');
  } catch (e) {
    check(e instanceof Anthropic.NotFoundError && e.error.error.type === 'not_found_error', `got ${e}`);
  }
  try {
    await new Anthropic({ baseURL, apiKey: 'wrong', maxRetries: 0 }).messages.create({ model, max_tokens: 4, messages: hello });
    throw new Error('no error');
  } catch (e) {
    check(e instanceof Anthropic.AuthenticationError && e.error.error.type === 'authentication_error', `got ${e}`);
  }
});

console.log(`${passed} passed, ${failed} failed`);
process.exit(failed === 0 ? 0 : 1);
