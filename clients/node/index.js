'use strict';
/**
 * voxgate Node client: stream audio to voxgate.v1.Speech/StreamingRecognize.
 *
 * The API is loaded at run time from the copy of the .proto files in ./proto
 * (scripts/gen_clients.sh refreshes it from the repository's proto/), with the
 * options in LOADER_OPTIONS; ./types has matching TypeScript types.
 *
 *   const voxgate = require('voxgate-client');
 *   const client = voxgate.createClient('127.0.0.1:50051');
 *   const { finals } = await voxgate.transcribeWav(client, 'call.wav', {
 *     onResponse: (r) => { if (r.response === 'result' && r.result.is_final) console.log(r.result.text); },
 *   });
 *
 * Failed calls reject with the grpc-js error plus `statusDetails` (see errorDetails):
 * branch on `err.statusDetails.reason` (ErrorInfo.reason, e.g. "CAPACITY").
 */
const fs = require('fs');
const path = require('path');
const grpc = require('@grpc/grpc-js');
const protoLoader = require('@grpc/proto-loader');
const protobuf = require('protobufjs');
const { DEFAULT_POLICY, resumingStream } = require('./resume');

const PROTO_DIR = path.join(__dirname, 'proto');
const SPEECH_PROTO = 'voxgate/v1/speech.proto';
// Field names as in the .proto (sample_rate_hz), 64-bit integers as strings, enums as their
// names, unset fields filled with defaults, and each oneof's case in a virtual field
// (`response: 'result'`). scripts/gen_clients.sh generates ./types with the same options.
const LOADER_OPTIONS = {
  keepCase: true,
  longs: String,
  enums: String,
  defaults: true,
  oneofs: true,
  includeDirs: [PROTO_DIR],
};
const DEFAULT_CHUNK_MS = 100;

let api = null;

/** The loaded `voxgate.v1` package: service constructors (Speech) and message types. */
function loadApi() {
  if (api === null) {
    const definition = protoLoader.loadSync(SPEECH_PROTO, LOADER_OPTIONS);
    api = grpc.loadPackageDefinition(definition).voxgate.v1;
  }
  return api;
}

/** A voxgate.v1.Speech client; plaintext unless `credentials` are given. */
function createClient(target, { credentials, options } = {}) {
  const { Speech } = loadApi();
  return new Speech(target, credentials || grpc.credentials.createInsecure(), options);
}

/**
 * Read a PCM WAV file (or Buffer): 8/16/24/32-bit integer samples, any channel count.
 * Returns { sampleRate, channels, pcm, interleaved } with `pcm` mono signed 16-bit little-endian
 * (channels averaged), at the file's own rate: resampling is the server's job; `interleaved`
 * the file's own channels as signed 16-bit little-endian frames.
 */
function readWav(source) {
  const buf = Buffer.isBuffer(source) ? source : fs.readFileSync(source);
  if (buf.length < 12 || buf.toString('ascii', 0, 4) !== 'RIFF' || buf.toString('ascii', 8, 12) !== 'WAVE') {
    throw new Error('not a RIFF/WAVE file');
  }
  let fmt = null;
  let data = null;
  for (let pos = 12; pos + 8 <= buf.length;) {
    const id = buf.toString('ascii', pos, pos + 4);
    const size = buf.readUInt32LE(pos + 4);
    const body = buf.subarray(pos + 8, Math.min(pos + 8 + size, buf.length));
    if (id === 'fmt ') {
      fmt = {
        format: body.readUInt16LE(0),
        channels: body.readUInt16LE(2),
        sampleRate: body.readUInt32LE(4),
        bits: body.readUInt16LE(14),
      };
      if (fmt.format === 0xfffe && body.length >= 26) fmt.format = body.readUInt16LE(24); // EXTENSIBLE
    } else if (id === 'data') {
      data = body;
    }
    pos += 8 + size + (size % 2); // chunks are word-aligned
  }
  if (fmt === null || data === null) throw new Error('WAV file without fmt or data chunk');
  if (fmt.format !== 1) throw new Error(`unsupported WAV format ${fmt.format} (integer PCM only)`);
  if (![8, 16, 24, 32].includes(fmt.bits)) throw new Error(`unsupported sample width ${fmt.bits} bits`);
  if (fmt.channels < 1) throw new Error('WAV file with no channels');
  const width = fmt.bits / 8;
  const frames = Math.floor(data.length / (width * fmt.channels));
  const pcm = Buffer.alloc(frames * 2);
  const interleaved = Buffer.alloc(frames * fmt.channels * 2);
  const int16 = (v) => Math.max(-32768, Math.min(32767, Math.round(v)));
  for (let i = 0; i < frames; i++) {
    let sum = 0;
    for (let c = 0; c < fmt.channels; c++) {
      const at = (i * fmt.channels + c) * width;
      let v;
      if (width === 1) v = (data[at] - 128) * 256;
      else if (width === 2) v = data.readInt16LE(at);
      else if (width === 3) v = data.readIntLE(at, 3) / 256;
      else v = data.readInt32LE(at) / 65536;
      interleaved.writeInt16LE(int16(v), (i * fmt.channels + c) * 2);
      sum += v;
    }
    pcm.writeInt16LE(int16(sum / fmt.channels), i * 2);
  }
  return { sampleRate: fmt.sampleRate, channels: fmt.channels, pcm, interleaved };
}

/**
 * A phrase hint from 'TEXT' or 'TEXT:BOOST' (the last colon, when a number follows it), as
 * StreamingConfig.phrase_hints takes it: { value, boost } (no boost: the server's default).
 */
function parsePhrase(spec) {
  const colon = spec.lastIndexOf(':');
  const boost = colon >= 0 ? spec.slice(colon + 1).trim() : '';
  if (boost !== '' && Number.isFinite(Number(boost))) return { value: spec.slice(0, colon), boost: Number(boost) };
  return { value: spec };
}

/** Split `data` into Buffers of `size` bytes (the last may be shorter). */
function* chunks(data, size) {
  for (let i = 0; i < data.length; i += size) yield data.subarray(i, i + size);
}

const sleep = (ms) => new Promise((resolve) => setTimeout(resolve, ms));

/**
 * One StreamingRecognize session: send `config` (a StreamingConfig object, proto field
 * names), then each Buffer of `audio` (an iterable or async iterable, in the configured
 * encoding), then half-close.
 *
 * options.pace: speed against real time (1 = real time, the default for live-like
 *   sending); null or 0 sends as fast as flow control allows. Needs `bytesPerSecond`.
 * options.bytesPerSecond: audio bytes per second (for pacing).
 * options.onResponse(response): called for every StreamingRecognizeResponse.
 * options.metadata: a grpc.Metadata for the call; options.deadline: a Date or ms timestamp.
 * options.resume: true (or a policy object, fields as in resume.js's DEFAULT_POLICY) to survive
 *   what ends a connection but not the call: a dropped connection is resumed, a draining server
 *   is continued in a new session, a session lost with its server process is redone from its
 *   last final (see resume.js). The caller sees one stream. Needs a raw encoding.
 *
 * Resolves to { responses, finals, ended } when the server closes with OK; rejects with
 * the grpc-js error (with `statusDetails` from errorDetails) otherwise.
 */
function streamRecognize(client, config, audio, options = {}) {
  const { pace = null, bytesPerSecond = 0, metadata, deadline } = options;
  if (pace && !(bytesPerSecond > 0)) throw new Error('pacing needs bytesPerSecond');
  if (!options.resume) return oneConnection(client, config, audio, options);
  const connect = (request, pieces, onResponse) => oneConnection(client, request, pieces, { onResponse, metadata, deadline });
  return resumingStream(connect, config, audio, options, grpc, errorDetails);
}

/** One call of StreamingRecognize: streamRecognize without resume. */
function oneConnection(client, config, audio, options) {
  const { pace = null, bytesPerSecond = 0, onResponse, metadata, deadline } = options;
  const call = client.StreamingRecognize(metadata || new grpc.Metadata(), deadline ? { deadline } : {});
  const responses = [];
  let done = false;

  const writing = (async () => {
    const write = async (request) => {
      if (!call.write(request)) await new Promise((resolve) => call.once('drain', resolve));
    };
    await write({ config });
    const start = Date.now();
    let sentSeconds = 0;
    for await (const piece of audio) {
      if (done) return;
      if (pace) {
        const delay = start + (sentSeconds / pace) * 1000 - Date.now();
        if (delay > 0) await sleep(delay);
        if (done) return;
        sentSeconds += piece.length / bytesPerSecond;
      }
      await write({ audio: piece });
    }
    if (!done) call.end();
  })();

  return new Promise((resolve, reject) => {
    call.on('data', (response) => {
      responses.push(response);
      if (onResponse) onResponse(response);
    });
    call.on('error', (err) => {
      done = true;
      err.statusDetails = errorDetails(err);
      reject(err);
    });
    // Success needs both the OK status and the end of the responses ('status' can come
    // before the last buffered 'data' events are delivered).
    let streamEnded = false;
    let statusOk = false;
    const finish = () => {
      if (!streamEnded || !statusOk) return;
      done = true;
      const finals = responses.filter((r) => r.response === 'result' && r.result.is_final).map((r) => r.result);
      const last = responses[responses.length - 1];
      resolve({ responses, finals, ended: last && last.response === 'ended' ? last.ended : null });
    };
    call.on('end', () => {
      streamEnded = true;
      finish();
    });
    call.on('status', (status) => {
      statusOk = status.code === grpc.status.OK;
      finish();
    });
    writing.catch((err) => {
      done = true;
      call.cancel();
      reject(err);
    });
  });
}

/**
 * Stream a WAV file's audio (downmixed to mono LINEAR16 at the file's rate) in
 * `chunkMs` pieces (100 ms by default), paced at `pace` x real time (default 1; null: no pacing).
 * Other options: interimResults (default true), wordTimeOffsets, languageCode, channels
 * ('separate': a multichannel file's channels sent interleaved and each recognized on its own,
 * results carrying `channel` 1..N; 'mix': sent so and downmixed by the server), phrases (phrase
 * hints: [{ value, boost }], e.g. from parsePhrase), and those of streamRecognize.
 */
function transcribeWav(client, wav, options = {}) {
  const { chunkMs = DEFAULT_CHUNK_MS, interimResults = true, wordTimeOffsets = false, languageCode = '' } = options;
  const { sampleRate, channels, pcm, interleaved } = readWav(wav);
  const multichannel = Boolean(options.channels) && channels > 1;
  const config = {
    encoding: 'AUDIO_ENCODING_LINEAR16',
    sample_rate_hz: sampleRate,
    audio_channel_count: multichannel ? channels : 1,
    language_code: languageCode,
    interim_results: interimResults,
    enable_word_time_offsets: wordTimeOffsets,
  };
  if (multichannel) config.channel_mode = options.channels === 'mix' ? 'CHANNEL_MODE_DOWNMIX' : 'CHANNEL_MODE_SEPARATE';
  if (options.phrases && options.phrases.length) config.phrase_hints = { phrases: options.phrases };
  if (options.nonSpeechEvents) config.non_speech_events = true; // music and DTMF as speech events
  const frame = 2 * config.audio_channel_count;
  const chunkBytes = Math.max(1, Math.floor((sampleRate * chunkMs) / 1000)) * frame;
  const pace = options.pace === undefined ? 1 : options.pace;
  return streamRecognize(client, config, chunks(multichannel ? interleaved : pcm, chunkBytes),
    { ...options, pace, bytesPerSecond: sampleRate * frame });
}

/** Seconds in a google.protobuf.Duration as the loader returns it (null: 0). */
function seconds(duration) {
  return duration ? Number(duration.seconds) + duration.nanos / 1e9 : 0;
}

// The google.rpc messages carried in grpc-status-details-bin (a subset of
// google/rpc/status.proto and error_details.proto: the fields voxgate sends).
const RPC_TYPES = protobuf.parse(`
  syntax = "proto3";
  package google.rpc;
  message Any { string type_url = 1; bytes value = 2; }
  message Status { int32 code = 1; string message = 2; repeated Any details = 3; }
  message ErrorInfo { string reason = 1; string domain = 2; map<string, string> metadata = 3; }
  message Duration { int64 seconds = 1; int32 nanos = 2; }
  message RetryInfo { Duration retry_delay = 1; }
  message BadRequest {
    message FieldViolation { string field = 1; string description = 2; }
    repeated FieldViolation field_violations = 1;
  }
`, { keepCase: true }).root;
const STATUS_NAMES = Object.fromEntries(Object.entries(grpc.status).map(([name, code]) => [code, name]));

/**
 * The code, message and google.rpc details of a failed call: { code ("UNAVAILABLE"), message,
 * and when the server sent them reason, domain, metadata (ErrorInfo), retryDelaySeconds
 * (RetryInfo), fieldViolations (BadRequest) }.
 */
function errorDetails(err) {
  const out = { code: STATUS_NAMES[err.code] || 'UNKNOWN', message: err.details || err.message || '' };
  const raw = err.metadata ? err.metadata.get('grpc-status-details-bin') : [];
  if (!raw || raw.length === 0) return out;
  const type = (name) => RPC_TYPES.lookupType(`google.rpc.${name}`);
  const plain = (name, bytes) => type(name).toObject(type(name).decode(bytes), { longs: String, defaults: true });
  let status;
  try {
    status = plain('Status', raw[0]);
  } catch (e) {
    return out;
  }
  out.message = out.message || status.message;
  for (const any of status.details) {
    const name = any.type_url.slice(any.type_url.lastIndexOf('/') + 1);
    if (name === 'google.rpc.ErrorInfo') {
      const info = plain('ErrorInfo', any.value);
      Object.assign(out, { reason: info.reason, domain: info.domain, metadata: info.metadata });
    } else if (name === 'google.rpc.RetryInfo') {
      out.retryDelaySeconds = seconds(plain('RetryInfo', any.value).retry_delay);
    } else if (name === 'google.rpc.BadRequest') {
      out.fieldViolations = plain('BadRequest', any.value).field_violations;
    }
  }
  return out;
}

/** One line for humans, e.g. "UNAVAILABLE (CAPACITY): no free slot; retry in 2s". */
function formatError(details) {
  let line = details.code + (details.reason ? ` (${details.reason})` : '') + `: ${details.message}`;
  for (const v of details.fieldViolations || []) line += `; ${v.field}: ${v.description}`;
  if (details.retryDelaySeconds !== undefined) line += `; retry in ${details.retryDelaySeconds}s`;
  return line;
}

module.exports = {
  DEFAULT_POLICY,
  LOADER_OPTIONS,
  PROTO_DIR,
  chunks,
  createClient,
  errorDetails,
  formatError,
  grpc,
  loadApi,
  parsePhrase,
  readWav,
  seconds,
  streamRecognize,
  transcribeWav,
};
