// clients.mjs — the official OpenAI and Anthropic client libraries against
// a running `ds4cl serve` on the script engine (tests/test_serve.c writes
// the script each scenario expects and checks the exit status and output).
//
//   node clients.mjs SCENARIO PORT KEY [MORE…]
//
// Every check throws with what was expected and what came; the last line
// printed on success is "ok SCENARIO".
import OpenAI from 'openai';
import Anthropic from '@anthropic-ai/sdk';

const [scenario, port, key] = process.argv.slice(2);
const base = `http://127.0.0.1:${port}`;
const openai = new OpenAI({ apiKey: key, baseURL: `${base}/v1`, maxRetries: 0, timeout: 30000 });
const anthropic = new Anthropic({ apiKey: key, baseURL: base, maxRetries: 0, timeout: 30000 });

function eq(got, want, what) {
  const g = JSON.stringify(got), w = JSON.stringify(want);
  if (g !== w) throw new Error(`${what}: expected ${w}, got ${g}`);
}

const weatherFn = {
  name: 'get_weather',
  description: 'The weather in a city.',
  parameters: { type: 'object', properties: { city: { type: 'string' } }, required: ['city'] },
};

async function scenarioOpenai() {
  const messages = [{ role: 'user', content: 'hi' }];
  const r1 = await openai.chat.completions.create({ model: 'ds4', messages });
  eq(r1.choices[0].message.content, 'Hello there, world.', 'plain content');
  eq(r1.choices[0].message.reasoning_content, 'let me think', 'plain reasoning');
  eq(r1.choices[0].finish_reason, 'stop', 'plain finish');

  const stream = await openai.chat.completions.create({ model: 'ds4', messages, stream: true,
    stream_options: { include_usage: true } });
  let text = '', reasoning = '', finish = null, usage = null;
  for await (const chunk of stream) {
    if (chunk.usage) usage = chunk.usage;
    const c = chunk.choices[0];
    if (!c) continue;
    text += c.delta.content ?? '';
    reasoning += c.delta.reasoning_content ?? '';
    if (c.finish_reason) finish = c.finish_reason;
  }
  eq(text, 'Hello there, world.', 'streamed content');
  eq(reasoning, 'let me think', 'streamed reasoning');
  eq(finish, 'stop', 'streamed finish');
  if (!usage || usage.completion_tokens <= 0) throw new Error('no usage chunk');

  // a tool-call round trip, the history sent back as the client got it
  const tools = [{ type: 'function', function: weatherFn }];
  const conv = [{ role: 'user', content: 'weather in Paris?' }];
  const r3 = await openai.chat.completions.create({ model: 'ds4', messages: conv, tools });
  const m3 = r3.choices[0].message;
  eq(r3.choices[0].finish_reason, 'tool_calls', 'call finish');
  eq(m3.tool_calls.length, 1, 'one call');
  eq(m3.tool_calls[0].function.name, 'get_weather', 'call name');
  eq(JSON.parse(m3.tool_calls[0].function.arguments), { city: 'Paris' }, 'call arguments');
  conv.push(m3, { role: 'tool', tool_call_id: m3.tool_calls[0].id, content: 'sunny, 24 C' });
  const r4 = await openai.chat.completions.create({ model: 'ds4', messages: conv, tools });
  eq(r4.choices[0].message.content, 'It is sunny in Paris.', 'answer after the tool');
  // only what follows the live state is read: the prompt less the earlier
  // prompt and the reply the session already holds (all of it but the
  // token that closed the call block, which ended the sampling unread)
  eq(r4.usage.prefilled_tokens, r4.usage.prompt_tokens - r3.usage.prompt_tokens - (r3.usage.completion_tokens - 1),
    'prefilled tokens of the growing conversation');
  eq(r4.usage.prompt_tokens_details.cached_tokens, r4.usage.prompt_tokens - r4.usage.prefilled_tokens, 'cached tokens');
}

async function scenarioAnthropic() {
  const r1 = await anthropic.messages.create({ model: 'ds4', max_tokens: 200,
    thinking: { type: 'enabled', budget_tokens: 1024 }, messages: [{ role: 'user', content: 'hi' }] });
  eq(r1.content.map((b) => b.type), ['thinking', 'text'], 'blocks with thinking');
  eq(r1.content[0].thinking, 'let me think', 'thinking text');
  eq(r1.content[1].text, 'Hello there, world.', 'text');
  eq(r1.stop_reason, 'end_turn', 'stop reason');

  const r2 = await anthropic.messages.create({ model: 'ds4', max_tokens: 200,
    messages: [{ role: 'user', content: 'no thinking' }] });
  eq(r2.content.map((b) => b.type), ['text'], 'blocks without thinking');
  eq(r2.content[0].text, 'Plain answer.', 'plain text');

  const tools = [{ name: weatherFn.name, description: weatherFn.description, input_schema: weatherFn.parameters }];
  const conv = [{ role: 'user', content: 'weather in Paris?' }];
  const thinking = { type: 'enabled', budget_tokens: 1024 };
  const stream = anthropic.messages.stream({ model: 'ds4', max_tokens: 400, thinking, tools, messages: conv });
  let deltas = '';
  stream.on('text', (t) => { deltas += t; });
  const r3 = await stream.finalMessage();
  eq(r3.content.map((b) => b.type), ['thinking', 'text', 'tool_use'], 'streamed blocks');
  eq(deltas, 'Checking.', 'streamed text');
  eq(r3.content[2].name, 'get_weather', 'tool name');
  eq(r3.content[2].input, { city: 'Paris' }, 'tool input');
  eq(r3.stop_reason, 'tool_use', 'tool stop reason');

  conv.push({ role: 'assistant', content: r3.content },
    { role: 'user', content: [{ type: 'tool_result', tool_use_id: r3.content[2].id, content: 'sunny, 24 C' }] });
  const r4 = await anthropic.messages.create({ model: 'ds4', max_tokens: 400, thinking, tools, messages: conv });
  eq(r4.content.at(-1).text, 'It is sunny in Paris.', 'answer after the tool');
  const held = r3.usage.input_tokens + r3.usage.cache_read_input_tokens + r3.usage.output_tokens - 1;
  eq(r4.usage.cache_read_input_tokens, held, 'prompt tokens read from the live session');
}

async function scenarioResponses() {
  const r1 = await openai.responses.create({ model: 'ds4', input: 'hi', reasoning: { effort: 'high' } });
  eq(r1.output.map((i) => i.type), ['reasoning', 'message'], 'output items');
  eq(r1.output_text, 'Hello there, world.', 'output text');

  const tools = [{ type: 'function', ...weatherFn }];
  const input = [{ role: 'user', content: 'weather in Paris?' }];
  const stream = await openai.responses.create({ model: 'ds4', input, tools, reasoning: { effort: 'high' }, stream: true });
  let done = null, text = '';
  for await (const ev of stream) {
    if (ev.type === 'response.output_text.delta') text += ev.delta;
    if (ev.type === 'response.completed') done = ev.response;
  }
  if (!done) throw new Error('no response.completed event');
  eq(text, 'Checking.', 'streamed text');
  const call = done.output.find((i) => i.type === 'function_call');
  eq(call.name, 'get_weather', 'call name');
  eq(JSON.parse(call.arguments), { city: 'Paris' }, 'call arguments');

  input.push(...done.output.filter((i) => i.type !== 'reasoning'),
    { type: 'function_call_output', call_id: call.call_id, output: 'sunny, 24 C' });
  const r3 = await openai.responses.create({ model: 'ds4', input, tools, reasoning: { effort: 'high' } });
  eq(r3.output_text, 'It is sunny in Paris.', 'answer after the tool');
  eq(r3.usage.input_tokens_details.cached_tokens, done.usage.input_tokens + done.usage.output_tokens - 1,
    'prompt tokens read from the live session');
}

async function scenarioDisconnect() {
  const ac = new AbortController();
  const stream = await openai.chat.completions.create({ model: 'ds4', stream: true,
    messages: [{ role: 'user', content: 'a long one' }] }, { signal: ac.signal });
  let got = '';
  try {
    for await (const chunk of stream) {
      got += chunk.choices[0]?.delta?.content ?? '';
      if (got.length >= 3) ac.abort();
    }
  } catch (e) {
    if (!ac.signal.aborted) throw e;
  }
  if (got.length < 3) throw new Error(`the stream ended early: ${JSON.stringify(got)}`);
  // the server is free for the next request at once
  const t0 = Date.now();
  const r = await openai.chat.completions.create({ model: 'ds4', messages: [{ role: 'user', content: 'next' }] });
  eq(r.choices[0].message.content, 'Done.', 'the next request');
  console.log(`next request took ${Date.now() - t0} ms`);
}

async function scenarioConcurrent() {
  const ask = (i) => (i % 2
    ? anthropic.messages.create({ model: 'ds4', max_tokens: 100, messages: [{ role: 'user', content: 'q' + 'x'.repeat(i) }] })
      .then((r) => r.content.at(-1).text)
    : openai.chat.completions.create({ model: 'ds4', messages: [{ role: 'user', content: 'q' + 'x'.repeat(i) }] })
      .then((r) => r.choices[0].message.content));
  const got = await Promise.all([0, 1, 2, 3, 4, 5].map(ask));
  eq(got.sort(), ['Reply 1.', 'Reply 2.', 'Reply 3.', 'Reply 4.', 'Reply 5.', 'Reply 6.'], 'the replies');
}

async function scenarioAuth() {
  const bad = new OpenAI({ apiKey: 'wrong', baseURL: `${base}/v1`, maxRetries: 0 });
  try {
    await bad.models.list();
    throw new Error('a wrong key was accepted');
  } catch (e) {
    eq(e.status, 401, 'status with a wrong key');
  }
  const badA = new Anthropic({ apiKey: 'wrong', baseURL: base, maxRetries: 0 });
  try {
    await badA.messages.create({ model: 'ds4', max_tokens: 10, messages: [{ role: 'user', content: 'x' }] });
    throw new Error('a wrong key was accepted');
  } catch (e) {
    eq(e.status, 401, 'anthropic status with a wrong key');
    eq(e.error?.error?.type, 'authentication_error', 'anthropic error type');
  }
  const models = await openai.models.list();
  eq(models.data.length, 1, 'one model');
}

// `stopped PORT KEY PID API`: the server (PID) is sent SIGTERM once the
// stream of API (chat, messages, responses) has begun; the client must see
// the failure, not take the text so far for the whole reply.
async function scenarioStopped() {
  const [pid, api] = process.argv.slice(5);
  let stopped = false;
  const stop = () => {
    if (!stopped) process.kill(Number(pid), 'SIGTERM');
    stopped = true;
  };
  const messages = [{ role: 'user', content: 'go' }];
  if (api === 'responses') {
    const stream = await openai.responses.create({ model: 'ds4', input: 'go', stream: true });
    let failed = null;
    for await (const ev of stream) {
      if (ev.type === 'response.output_text.delta') stop();
      if (ev.type === 'response.failed') failed = ev.response;
    }
    if (!failed) throw new Error('no response.failed event');
    eq(failed.status, 'failed', 'status');
    if (!/shutting down/.test(failed.error?.message)) throw new Error(`the error: ${JSON.stringify(failed.error)}`);
    return;
  }
  try {
    if (api === 'chat') {
      const stream = await openai.chat.completions.create({ model: 'ds4', messages, stream: true });
      for await (const chunk of stream) if (chunk.choices[0]?.delta?.content) stop();
    } else {
      const stream = await anthropic.messages.create({ model: 'ds4', max_tokens: 100, messages, stream: true });
      for await (const ev of stream) if (ev.type === 'content_block_delta') stop();
    }
  } catch (e) {
    if (!(e instanceof OpenAI.APIError) && !(e instanceof Anthropic.APIError)) throw e;
    if (!/shutting down/.test(e.message)) throw new Error(`the error does not say why: ${e.message}`);
    if (api === 'messages') eq(e.error?.error?.type, 'overloaded_error', 'error type');
    if (!stopped) throw new Error('the stream failed before the server was stopped');
    return;
  }
  throw new Error('the stream ended without an error');
}

const scenarios = { openai: scenarioOpenai, anthropic: scenarioAnthropic, responses: scenarioResponses,
  disconnect: scenarioDisconnect, concurrent: scenarioConcurrent, auth: scenarioAuth, stopped: scenarioStopped };
try {
  await scenarios[scenario]();
  console.log(`ok ${scenario}`);
} catch (e) {
  console.log(`FAILED ${scenario}: ${e.stack || e}${e.cause ? `\ncause: ${e.cause.stack || e.cause} ${e.cause.cause ? (e.cause.cause.stack || e.cause.cause) : ""}` : ""}`);
  process.exit(1);
}
