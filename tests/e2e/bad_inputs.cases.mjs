// The bad-input catalogue: malformed HTTP and gRPC requests, each with the status the server
// must answer (run by bad_inputs.test.mjs; the gRPC cases by bad_inputs_grpc.py).
//
// HTTP case: { name, status, path = '/v1/completions', method = 'POST', body, auth = true,
//              param?, code? }  (status 200: accepted -- unknown fields are ignored)  -- body: an object (sent as JSON), a string or a Buffer (sent
//              as is); status: the expected HTTP status; param/code: the OpenAI error fields.
// Raw case:  { name, status, raw }  -- raw: the whole request as a Buffer/string on a fresh
//              socket; status: the status line's code.
// gRPC case: { name, method, request, code, auth = true }  -- request: proto3 JSON of the
//              request message (or { raw_hex } for bytes that are not a valid message);
//              code: the grpc.StatusCode name.
//
// The server runs with --api-key sk-bad --max-body-size 65536 (headers: 16 KiB).
export const KEY = 'sk-bad';

const CHAT = '/v1/chat/completions';
const deep = (n) => '['.repeat(n) + ']'.repeat(n);
const stops = (n) => Array.from({ length: n }, (_, i) => `s${i}`);

export function httpCases(model) {
  const M = model;
  const P = (extra) => ({ model: M, prompt: 'Once upon a time', max_tokens: 2, ...extra });
  const C = (extra) => ({ model: M, messages: [{ role: 'user', content: 'Hi' }], max_tokens: 2, ...extra });
  return [
    // ---- authentication, routes, methods
    { name: 'no API key', status: 401, auth: false, body: P({}), code: 'invalid_api_key' },
    { name: 'wrong API key', status: 401, auth: 'Bearer sk-wrong', body: P({}) },
    { name: 'Basic scheme instead of Bearer', status: 401, auth: 'Basic c2stYmFkOg==', body: P({}) },
    { name: 'Bearer with an empty key', status: 401, auth: 'Bearer ', body: P({}) },
    { name: 'unknown route', status: 404, path: '/v1/nothing', body: {} },
    { name: 'GET on a POST route', status: 405, method: 'GET', body: undefined },
    { name: 'DELETE on chat', status: 405, method: 'DELETE', path: CHAT, body: undefined },
    // ---- broken JSON
    { name: 'empty body', status: 400, body: '' },
    { name: 'not JSON', status: 400, body: 'model=x&prompt=y' },
    { name: 'truncated JSON', status: 400, body: '{"model": ' },
    { name: 'top-level array', status: 400, body: '[1, 2, 3]' },
    { name: 'top-level string', status: 400, body: '"hello"' },
    { name: 'trailing garbage', status: 400, body: `${JSON.stringify(P({}))} xyz` },
    { name: 'invalid UTF-8 inside a JSON string', status: 400,
      body: Buffer.concat([Buffer.from('{"model":"x","prompt":"a'), Buffer.from([0xff, 0xfe]), Buffer.from('"}')]) },
    { name: 'lone surrogate escape', status: 400, body: `{"model":"${model}","prompt":"\\ud800"}` },
    { name: 'nesting 30000 deep', status: 400, body: `{"model":"${model}","prompt":${deep(30000)}}` },
    { name: 'number 1e400 (overflows double)', status: 400, body: `{"model":"${model}","prompt":"x","temperature":1e400}` },
    { name: 'NaN literal', status: 400, body: `{"model":"${model}","prompt":"x","temperature":NaN}` },
    // ---- model and prompt
    { name: 'model omitted: the served model (as vLLM and llama.cpp)', status: 200, body: { prompt: 'x', max_tokens: 2 } },
    { name: 'model of the wrong type', status: 400, body: { model: 7, prompt: 'x' }, param: 'model' },
    { name: 'unknown model', status: 404, body: { model: 'gpt-4', prompt: 'x' }, code: 'model_not_found' },
    { name: 'prompt missing', status: 400, body: { model: M }, param: 'prompt' },
    { name: 'prompt is a number', status: 400, body: P({ prompt: 42 }), param: 'prompt' },
    { name: 'prompt is an empty array', status: 400, body: P({ prompt: [] }), param: 'prompt' },
    { name: 'prompt mixes ids and strings', status: 400, body: P({ prompt: [1, 'a'] }), param: 'prompt' },
    { name: 'token id outside the vocabulary', status: 400, body: P({ prompt: [1, 999999] }) },
    { name: 'negative token id', status: 400, body: P({ prompt: [1, -1] }) },
    { name: 'negative token id with echo (crashed the server before)', status: 400,
      body: P({ prompt: [1, -1300], echo: true }), param: 'prompt' },
    { name: 'token id beyond int32', status: 400, body: P({ prompt: [1, 4294967296] }), param: 'prompt' },
    { name: 'fractional token id', status: 400, body: P({ prompt: [1, 1.5] }), param: 'prompt' },
    { name: '65 prompts in one batch', status: 400, body: P({ prompt: Array(65).fill('x') }), param: 'prompt' },
    { name: 'prompt longer than the context', status: 400, body: P({ prompt: Array(3000).fill(5) }),
      code: 'context_length_exceeded' },
    { name: 'session_id with a batch of prompts', status: 400, body: P({ prompt: ['a', 'b'], session_id: 's' }),
      param: 'session_id' },
    // ---- sampling parameters: wrong types and out-of-range numbers
    { name: 'max_tokens negative', status: 400, body: P({ max_tokens: -1 }), param: 'max_tokens' },
    { name: 'max_tokens is a string', status: 400, body: P({ max_tokens: '5' }), param: 'max_tokens' },
    { name: 'max_tokens is 5.0', status: 400, body: P({ max_tokens: 5.5 }), param: 'max_tokens' },
    { name: 'max_tokens beyond int32', status: 400, body: P({ max_tokens: 2147483648 }), param: 'max_tokens' },
    { name: 'max_tokens beyond the context', status: 400, body: P({ max_tokens: 100000 }),
      code: 'context_length_exceeded' },
    { name: 'temperature negative', status: 400, body: P({ temperature: -0.5 }) },
    { name: 'temperature is a string', status: 400, body: P({ temperature: 'hot' }), param: 'temperature' },
    { name: 'temperature 1e39 (beyond float)', status: 400, body: P({ temperature: 1e39 }) },
    { name: 'top_p 0', status: 400, body: P({ top_p: 0 }) },
    { name: 'top_p 1.5', status: 400, body: P({ top_p: 1.5 }) },
    { name: 'top_k -2', status: 400, body: P({ top_k: -2 }), param: 'top_k' },
    { name: 'top_k fractional', status: 400, body: P({ top_k: 1.5 }), param: 'top_k' },
    { name: 'min_p 2', status: 400, body: P({ min_p: 2 }) },
    { name: 'presence_penalty 3', status: 400, body: P({ presence_penalty: 3 }) },
    { name: 'frequency_penalty -3', status: 400, body: P({ frequency_penalty: -3 }) },
    { name: 'repetition_penalty 0', status: 400, body: P({ repetition_penalty: 0 }) },
    { name: 'n 0', status: 400, body: P({ n: 0 }), param: 'n' },
    { name: 'n 17', status: 400, body: P({ n: 17 }) },
    { name: 'n is a string', status: 400, body: P({ n: '2' }), param: 'n' },
    { name: 'min_tokens above max_tokens', status: 400, body: P({ max_tokens: 2, min_tokens: 5 }) },
    { name: 'seed is a string', status: 400, body: P({ seed: 'abc' }), param: 'seed' },
    { name: 'seed beyond int64', status: 400, body: `{"model":"${model}","prompt":"x","seed":18446744073709551616}` },
    { name: 'stop is a number', status: 400, body: P({ stop: 5 }), param: 'stop' },
    { name: 'stop array holds a number', status: 400, body: P({ stop: ['a', 5] }), param: 'stop' },
    { name: 'too many stop strings (17)', status: 400, body: P({ stop: stops(17) }) },
    { name: 'empty stop string', status: 400, body: P({ stop: [''] }) },
    { name: 'stop string of 300 bytes', status: 400, body: P({ stop: ['x'.repeat(300)] }) },
    { name: 'stop_token_ids outside the vocabulary', status: 400, body: P({ stop_token_ids: [999999] }) },
    { name: 'stop_token_ids not an array', status: 400, body: P({ stop_token_ids: 3 }), param: 'stop_token_ids' },
    { name: 'logit_bias not an object', status: 400, body: P({ logit_bias: [1, 2] }), param: 'logit_bias' },
    { name: 'logit_bias key not a token id', status: 400, body: P({ logit_bias: { abc: 1 } }), param: 'logit_bias' },
    { name: 'logit_bias id outside the vocabulary', status: 400, body: P({ logit_bias: { 999999: 1 } }) },
    { name: 'logit_bias value 200', status: 400, body: P({ logit_bias: { 5: 200 } }) },
    { name: 'logit_bias value is a string', status: 400, body: P({ logit_bias: { 5: 'x' } }), param: 'logit_bias' },
    { name: 'logprobs 21', status: 400, body: P({ logprobs: 21 }), param: 'logprobs' },
    { name: 'logprobs true on completions', status: 400, body: P({ logprobs: true }), param: 'logprobs' },
    { name: 'echo is a string', status: 400, body: P({ echo: 'yes' }), param: 'echo' },
    { name: 'stream is a string', status: 400, body: P({ stream: 'yes' }), param: 'stream' },
    { name: 'stream_options not an object', status: 400, body: P({ stream: true, stream_options: true }),
      param: 'stream_options' },
    { name: 'include_usage is a string', status: 400, body: P({ stream: true, stream_options: { include_usage: 'y' } }),
      param: 'stream_options.include_usage' },
    { name: 'ignore_eos is 1', status: 400, body: P({ ignore_eos: 1 }), param: 'ignore_eos' },
    // ---- unknown fields are ignored; known extension fields of the wrong type are not
    { name: 'unknown field of an odd type is ignored (OpenAI compatible)', status: 200, body: P({ metadata_x: 5 }) },
    { name: 'unknown nested field is ignored', status: 200, body: P({ extra: [{ type: 7 }], tools: null }) },
    // ---- parameters kvserve does not implement are refused, never silently ignored
    { name: 'best_of 2', status: 400, body: P({ best_of: 2 }), param: 'best_of' },
    { name: 'suffix', status: 400, body: P({ suffix: ' the end' }), param: 'suffix' },
    { name: 'tools', status: 400, path: CHAT, body: C({ tools: [{ type: 'function', function: { name: 'f' } }] }),
      param: 'tools' },
    { name: 'response_format json_object', status: 400, path: CHAT, body: C({ response_format: { type: 'json_object' } }),
      param: 'response_format' },
    { name: 'functions of an odd type', status: 400, body: P({ functions: 5 }), param: 'functions' },
    { name: 'n above the choice limit (17)', status: 400, body: P({ n: 17 }), param: 'n' },
    { name: 'n above --max-num-seqs (9 > 8)', status: 400, body: P({ n: 9 }) },
    { name: 'session id over 256 bytes', status: 400, body: P({ session_id: 's'.repeat(257) }) },
    { name: 'session_id is a number', status: 400, body: P({ session_id: 12 }), param: 'session_id' },
    { name: 'cache_salt is an array', status: 400, body: P({ cache_salt: ['a'] }), param: 'cache_salt' },
    { name: 'priority fractional', status: 400, body: P({ priority: 0.5 }), param: 'priority' },
    { name: 'user is a number', status: 400, body: P({ user: 5 }), param: 'user' },
    // ---- chat messages
    { name: 'messages missing', status: 400, path: CHAT, body: { model: M }, param: 'messages' },
    { name: 'messages empty', status: 400, path: CHAT, body: C({ messages: [] }), param: 'messages' },
    { name: 'messages not an array', status: 400, path: CHAT, body: C({ messages: 'hi' }), param: 'messages' },
    { name: 'message not an object', status: 400, path: CHAT, body: C({ messages: ['hi'] }), param: 'messages[0]' },
    { name: 'message without role', status: 400, path: CHAT, body: C({ messages: [{ content: 'x' }] }),
      param: 'messages[0].role' },
    { name: 'unknown role', status: 400, path: CHAT, body: C({ messages: [{ role: 'wizard', content: 'x' }] }),
      param: 'messages[0].role' },
    { name: 'content is a number', status: 400, path: CHAT, body: C({ messages: [{ role: 'user', content: 5 }] }),
      param: 'messages[0].content' },
    { name: 'content part without type', status: 400, path: CHAT,
      body: C({ messages: [{ role: 'user', content: [{ text: 'x' }] }] }), param: 'messages[0].content[0]' },
    { name: 'image content part', status: 400, path: CHAT,
      body: C({ messages: [{ role: 'user', content: [{ type: 'image_url', image_url: { url: 'x' } }] }] }),
      param: 'messages[0].content[0].type' },
    { name: 'text part that is not a string', status: 400, path: CHAT,
      body: C({ messages: [{ role: 'user', content: [{ type: 'text', text: 1 }] }] }),
      param: 'messages[0].content[0].text' },
    { name: 'top_logprobs without logprobs', status: 400, path: CHAT, body: C({ top_logprobs: 2 }),
      param: 'top_logprobs' },
    { name: 'chat logprobs is an integer', status: 400, path: CHAT, body: C({ logprobs: 3 }), param: 'logprobs' },
    { name: 'max_completion_tokens negative', status: 400, path: CHAT, body: C({ max_completion_tokens: -4 }),
      param: 'max_completion_tokens' },
    // ---- tokenize / detokenize
    { name: 'tokenize without prompt', status: 400, path: '/tokenize', body: {}, param: 'prompt' },
    { name: 'tokenize prompt is a number', status: 400, path: '/tokenize', body: { prompt: 5 }, param: 'prompt' },
    { name: 'detokenize tokens not an array', status: 400, path: '/detokenize', body: { tokens: 5 }, param: 'tokens' },
    { name: 'detokenize id outside the vocabulary', status: 400, path: '/detokenize', body: { tokens: [999999] } },
    { name: 'detokenize negative id', status: 400, path: '/detokenize', body: { tokens: [-3] } },
  ];
}

// Whole requests on a raw socket (framing and limits the HTTP parser enforces).
const post = (path, payload, extra = '') =>
  `POST ${path} HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer ${KEY}\r\nContent-Type: application/json\r\n` +
  `Content-Length: ${Buffer.byteLength(payload)}\r\n${extra}\r\n${payload}`;
export const rawCases = [
  { name: 'header larger than 16 KiB', status: 431, raw: `GET /health HTTP/1.1\r\nHost: x\r\nX-Big: ${'a'.repeat(20000)}\r\n\r\n` },
  { name: 'body larger than --max-body-size', status: 413, raw: post('/v1/completions', `{"prompt":"${'a'.repeat(70000)}"}`) },
  { name: 'Content-Length over the limit, body never sent', status: 413,
    raw: `POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Length: 1000000000\r\n\r\n` },
  { name: 'API key followed by an invalid UTF-8 byte', status: 401,
    raw: Buffer.from(`GET /v1/models HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer ${KEY}\xff\r\n\r\n`, 'latin1') },
  { name: 'garbage request line', status: 400, raw: 'GARBAGE\r\n\r\n' },
  { name: 'header line without a colon', status: 400, raw: 'GET /health HTTP/1.1\r\nHost: x\r\nNoColonHere\r\n\r\n' },
  { name: 'unsupported HTTP version', status: 400, raw: 'GET /health HTTP/9.9\r\nHost: x\r\n\r\n' },
  { name: 'bad chunk size', status: 400,
    raw: `POST /v1/completions HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\nZZ\r\nabc\r\n0\r\n\r\n` },
  { name: 'Content-Length not a number', status: 400, raw: 'POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Length: abc\r\n\r\n' },
  { name: 'two different Content-Lengths', status: 400,
    raw: 'POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Length: 2\r\nContent-Length: 3\r\n\r\n{}' },
  { name: 'NUL byte in a header value', status: 400, raw: 'GET /health HTTP/1.1\r\nHost: x\r\nX-A: a\0b\r\n\r\n' },
  { name: 'path with invalid UTF-8 bytes', status: 404,
    raw: Buffer.concat([Buffer.from('GET /v1/\xff\xfe HTTP/1.1\r\nHost: x\r\n', 'latin1'),
                        Buffer.from(`Authorization: Bearer ${KEY}\r\n\r\n`)]) },
  { name: 'URL of 12 KB', status: 404, raw: `GET /${'a'.repeat(12000)} HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer ${KEY}\r\n\r\n` },
  // Request smuggling (RFC 9112 6.1, 6.3): an ambiguous framing is refused and the connection
  // closed (`closes`: exactly one response, then EOF), so the bytes after the header are never
  // answered as a request of their own.
  ...[['Transfer-Encoding gzip', 400, 'Transfer-Encoding: gzip\r\n'],
      ['Transfer-Encoding "chunked, gzip"', 400, 'Transfer-Encoding: chunked, gzip\r\n'],
      ['Transfer-Encoding "gzip, chunked"', 501, 'Transfer-Encoding: gzip, chunked\r\n'],
      ['Transfer-Encoding xchunked', 400, 'Transfer-Encoding: xchunked\r\n'],
      ['two Transfer-Encoding lines', 400, 'Transfer-Encoding: chunked\r\nTransfer-Encoding: chunked\r\n'],
      ['Transfer-Encoding and Content-Length', 400, 'Transfer-Encoding: chunked\r\nContent-Length: 40\r\n'],
  ].map(([name, status, framing]) => ({
    name: `smuggling: ${name}`, status, closes: true,
    raw: `POST /v1/completions HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer ${KEY}\r\n${framing}\r\n` +
         `0\r\n\r\nGET /metrics HTTP/1.1\r\nHost: x\r\n\r\n`,
  })),
  { name: 'Transfer-Encoding in an HTTP/1.0 request', status: 400, closes: true,
    raw: 'POST /tokenize HTTP/1.0\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\nGET /health HTTP/1.0\r\n\r\n' },
  { name: 'HTTP/1.1 without Host', status: 400, closes: true,
    raw: 'GET /health HTTP/1.1\r\n\r\nGET /health HTTP/1.1\r\nHost: x\r\n\r\n' },
  { name: 'HTTP/1.1 with two Host headers', status: 400, closes: true,
    raw: 'GET /health HTTP/1.1\r\nHost: a\r\nHost: b\r\n\r\n' },
];

// gRPC (kvserve.v1.Generation), by bad_inputs_grpc.py.
export function grpcCases(model) {
  const g = (extra) => ({ prompt: 'Once upon a time', sampling: { maxTokens: 2 }, ...extra });
  return [
    { name: 'no API key', method: 'Generate', request: g({}), code: 'UNAUTHENTICATED', auth: false },
    { name: 'wrong API key', method: 'GenerateStream', request: g({}), code: 'UNAUTHENTICATED', auth: 'Bearer nope' },
    { name: 'prompt and prompt_tokens both set', method: 'Generate', request: g({ promptTokens: [1, 2] }),
      code: 'INVALID_ARGUMENT' },
    { name: 'neither prompt nor prompt_tokens', method: 'Generate', request: { sampling: { maxTokens: 2 } },
      code: 'INVALID_ARGUMENT' },
    { name: 'prompt token outside the vocabulary', method: 'Generate',
      request: { promptTokens: [1, 999999], sampling: { maxTokens: 2 } }, code: 'INVALID_ARGUMENT' },
    { name: 'negative prompt token (stream)', method: 'GenerateStream',
      request: { promptTokens: [1, -7], sampling: { maxTokens: 2 } }, code: 'INVALID_ARGUMENT' },
    { name: 'temperature negative', method: 'Generate', request: g({ sampling: { maxTokens: 2, temperature: -1 } }),
      code: 'INVALID_ARGUMENT' },
    { name: 'top_p 0', method: 'Generate', request: g({ sampling: { maxTokens: 2, topP: 0 } }), code: 'INVALID_ARGUMENT' },
    { name: 'temperature NaN', method: 'Generate', request: g({ sampling: { maxTokens: 2, temperature: 'NaN' } }),
      code: 'INVALID_ARGUMENT' },
    { name: 'max_tokens negative', method: 'Generate', request: g({ sampling: { maxTokens: -5 } }),
      code: 'INVALID_ARGUMENT' },
    { name: 'max_tokens beyond the context', method: 'Generate', request: g({ sampling: { maxTokens: 1000000 } }),
      code: 'OUT_OF_RANGE' },
    { name: 'n 100', method: 'Generate', request: g({ options: { n: 100 } }), code: 'INVALID_ARGUMENT' },
    { name: 'negative n', method: 'Generate', request: g({ options: { n: -1 } }), code: 'INVALID_ARGUMENT' },
    { name: '17 stop strings', method: 'Generate',
      request: g({ sampling: { maxTokens: 2, stop: Array.from({ length: 17 }, (_, i) => `s${i}`) } }),
      code: 'INVALID_ARGUMENT' },
    { name: 'logit_bias id outside the vocabulary', method: 'Generate',
      request: g({ sampling: { maxTokens: 2, logitBias: { 999999: 1 } } }), code: 'INVALID_ARGUMENT' },
    { name: 'logprobs 21', method: 'Generate', request: g({ sampling: { maxTokens: 2, logprobs: 21 } }),
      code: 'INVALID_ARGUMENT' },
    { name: 'min_tokens above max_tokens', method: 'Generate', request: g({ sampling: { maxTokens: 2, minTokens: 9 } }),
      code: 'INVALID_ARGUMENT' },
    { name: 'unknown model', method: 'Generate', request: g({ options: { model: 'gpt-4' } }), code: 'NOT_FOUND' },
    { name: 'chat without messages', method: 'Chat', request: { sampling: { maxTokens: 2 } }, code: 'INVALID_ARGUMENT' },
    { name: 'chat with an unknown role', method: 'ChatStream',
      request: { messages: [{ role: 'wizard', content: 'x' }], sampling: { maxTokens: 2 } }, code: 'INVALID_ARGUMENT' },
    { name: 'detokenize an id outside the vocabulary', method: 'Detokenize', request: { tokenIds: [999999] },
      code: 'INVALID_ARGUMENT' },
    { name: 'tokenize for an unknown model', method: 'Tokenize', request: { text: 'x', model: 'gpt-4' },
      code: 'NOT_FOUND' },
    // Bytes that are not a valid request: kvserve decodes them itself (raw methods), so the
    // client learns what is wrong instead of grpc++'s bare UNIMPLEMENTED.
    { name: 'not a protobuf message', method: 'Generate', request: { raw_hex: 'ffffffffffffffffff' },
      code: 'INVALID_ARGUMENT' },
    { name: 'invalid UTF-8 in a proto3 string', method: 'Generate', request: { raw_hex: '0a02fffe' },
      code: 'INVALID_ARGUMENT' },
    { name: 'invalid UTF-8 in a chat message (stream)', method: 'ChatStream', request: { raw_hex: '0a060a0475736572120200ff' },
      code: 'INVALID_ARGUMENT' },
    { name: 'invalid UTF-8 in Tokenize', method: 'Tokenize', request: { raw_hex: '0a02c328' }, code: 'INVALID_ARGUMENT' },
    { name: 'n above max-num-seqs', method: 'Generate', request: g({ options: { n: 16 } }), code: 'INVALID_ARGUMENT' },
    { name: 'session id over 256 bytes', method: 'Generate', request: g({ options: { sessionId: 's'.repeat(257) } }),
      code: 'INVALID_ARGUMENT' },
    { name: 'message larger than --max-body-size', method: 'Generate',
      request: { prompt: 'a'.repeat(70000), sampling: { maxTokens: 2 } }, code: 'RESOURCE_EXHAUSTED' },
  ].map((c) => ({ ...c, model }));
}
