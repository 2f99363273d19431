#!/usr/bin/env node
'use strict';
// Transcribe a WAV file with a voxgate server; prints each final result as
// "[start → end] text", like `voxgate transcribe`.
//
//   node examples/transcribe.js WAV [--server host:port] [--no-pace] [--speed N] [--json] [--channels separate|mix] [--no-resume]
//   node examples/transcribe.js --capabilities [--server host:port]
//
// --json prints the session's start, every result (interim and final) and the end as
// one JSON object per line, with the field names of `voxgate-transcribe --json`
// (a final that replaces the utterance's interim text has "revised": true; the start
// says the engine's "interim_stability": "append_only" or "revisable").
// --capabilities prints the server's GetCapabilities (engine, interim_stability) as JSON.
// --phrase TEXT[:BOOST] (repeatable) adds a phrase hint: a name or term to favour.
// --non-speech reports music and DTMF digits: "[12.80s] (DTMF 5)", or with --json
// {"type": "speech_event", "event": "dtmf", "offset_s": 12.8, "digit": "5"}.
// --channels sends a multichannel WAV's channels (else it is downmixed here): "separate" has each
// recognized on its own (finals prefixed "[chN] ", N 1-based), "mix" has the server downmix them.
//
// The stream resumes by default, as `voxgate transcribe` does: a dropped connection is resumed,
// a draining server is continued in a new session, a session lost with its server process is
// redone from its last final. --no-resume: one connection, and its end is the end.
//
// Exit status: 0 on success, 1 when the RPC fails (the status code and
// ErrorInfo reason go to stderr), 2 on bad usage or an unreadable file.
const voxgate = require('..');

const USAGE = 'usage: transcribe.js WAV [--server host:port] [--no-pace] [--speed N] [--json] [--channels separate|mix] [--no-resume]\n'
  + '                     [--phrase TEXT[:BOOST]]... [--non-speech]\n'
  + '       transcribe.js --capabilities [--server host:port]';

function parseArgs(argv) {
  const args = { server: '127.0.0.1:50051', pace: 1, file: null, json: false, capabilities: false, channels: null,
    resume: true, phrases: [], nonSpeech: false };
  for (let i = 0; i < argv.length; i++) {
    const arg = argv[i];
    const value = () => {
      if (i + 1 >= argv.length) throw new Error(`${arg} needs a value`);
      return argv[++i];
    };
    if (arg === '--server') args.server = value();
    else if (arg.startsWith('--server=')) args.server = arg.slice('--server='.length);
    else if (arg === '--no-pace') args.pace = null;
    else if (arg === '--json') args.json = true;
    else if (arg === '--non-speech') args.nonSpeech = true;
    else if (arg === '--no-resume') args.resume = false;
    else if (arg === '--phrase') args.phrases.push(voxgate.parsePhrase(value()));
    else if (arg === '--capabilities') args.capabilities = true;
    else if (arg === '--channels') {
      args.channels = value();
      if (!['separate', 'mix'].includes(args.channels)) throw new Error('--channels must be separate or mix');
    }
    else if (arg === '--speed') {
      args.pace = Number(value());
      if (!(args.pace > 0)) throw new Error('--speed must be a positive number');
    } else if (arg === '-h' || arg === '--help') {
      console.log(USAGE);
      process.exit(0);
    } else if (arg.startsWith('--')) throw new Error(`unknown option ${arg}`);
    else if (args.file === null) args.file = arg;
    else throw new Error(`unexpected argument ${arg}`);
  }
  if (args.file === null && !args.capabilities) throw new Error('a WAV file is required');
  return args;
}

// An enum value as the Python client names it: 'INTERIM_STABILITY_REVISABLE' -> 'revisable'; unspecified -> ''.
const enumName = (name, prefix) => (!name || name.endsWith('_UNSPECIFIED') ? '' : name.replace(prefix, '').toLowerCase());
const stability = (name) => enumName(name, 'INTERIM_STABILITY_');

/** 'music_started', 'music_ended' or 'dtmf' for those speech events (--non-speech asks for them); else null. */
function nonSpeech(r) {
  if (r.response !== 'speech_event') return null;
  const event = enumName(r.speech_event.type, 'SPEECH_EVENT_TYPE_');
  return ['music_started', 'music_ended', 'dtmf'].includes(event) ? event : null;
}

// How the text output says them.
const SAID = { music_started: () => 'music started', music_ended: () => 'music ended', dtmf: (d) => `DTMF ${d}` };

/** A response as `voxgate-transcribe --json` prints it (its started, result and ended fields). */
function jsonFields(r) {
  if (r.response === 'started') {
    const s = r.started;
    const out = { type: 'started', session_id: s.session_id, engine: { name: s.engine.name, model: s.engine.model },
      interim_stability: stability(s.interim_stability) };
    const hints = enumName(s.phrase_hints, 'PHRASE_HINT_SUPPORT_'); // what the engine does with them: none|prompt|boost
    if (hints) out.phrase_hints = hints; // absent without hints
    return out;
  }
  if (r.response === 'result') {
    const m = r.result;
    const out = { type: 'result', result_id: m.result_id, utterance_index: m.utterance_index, is_final: m.is_final,
      text: m.text, delta: m.delta, start_s: voxgate.seconds(m.start_offset), end_s: voxgate.seconds(m.end_offset) };
    if (m.revised) out.revised = true; // a final that replaces the utterance's interim text
    if (m.channel) out.channel = m.channel; // 1-based, with separate recognition per channel
    return out;
  }
  const sound = nonSpeech(r);
  if (sound) {
    const out = { type: 'speech_event', event: sound, offset_s: voxgate.seconds(r.speech_event.offset) };
    if (r.speech_event.digit) out.digit = r.speech_event.digit;
    if (r.speech_event.channel) out.channel = r.speech_event.channel;
    return out;
  }
  if (r.response === 'ended') {
    return { type: 'ended', reason: r.ended.reason.replace('SESSION_END_REASON_', '').toLowerCase(),
      message: r.ended.message };
  }
  return null;
}

function capabilities(client) {
  return new Promise((resolve, reject) => {
    client.GetCapabilities({}, (err, caps) => (err ? reject(err) : resolve({
      engine: { name: caps.engine.name, model: caps.engine.model },
      interim_stability: stability(caps.interim_stability),
    })));
  });
}

async function main() {
  let args;
  try {
    args = parseArgs(process.argv.slice(2));
  } catch (e) {
    console.error(`${USAGE}\ntranscribe.js: error: ${e.message}`);
    return 2;
  }
  if (args.capabilities) {
    const client = voxgate.createClient(args.server);
    try {
      process.stdout.write(`${JSON.stringify(await capabilities(client))}\n`);
      return 0;
    } catch (err) {
      console.error(`transcribe.js: error: ${voxgate.formatError(voxgate.errorDetails(err))}`);
      return 1;
    } finally {
      client.close();
    }
  }
  try {
    voxgate.readWav(args.file); // fail early, with exit status 2, on an unreadable file
  } catch (e) {
    console.error(`transcribe.js: error: cannot read ${args.file}: ${e.message}`);
    return 2;
  }
  const client = voxgate.createClient(args.server);
  const onResponse = (r) => {
    const fields = args.json ? jsonFields(r) : null;
    if (fields) process.stdout.write(`${JSON.stringify(fields)}\n`);
    else if (args.json && r.response !== 'warning') return;
    else if (r.response === 'result' && r.result.is_final && r.result.text.trim()) {
      const start = voxgate.seconds(r.result.start_offset).toFixed(2);
      const end = voxgate.seconds(r.result.end_offset).toFixed(2);
      const prefix = r.result.channel ? `[ch${r.result.channel}] ` : '';
      process.stdout.write(`${prefix}[${start}s → ${end}s] ${r.result.text.trim()}\n`);
    } else if (nonSpeech(r)) {
      const e = r.speech_event;
      const prefix = e.channel ? `[ch${e.channel}] ` : '';
      process.stdout.write(`${prefix}[${voxgate.seconds(e.offset).toFixed(2)}s] (${SAID[nonSpeech(r)](e.digit)})\n`);
    } else if (r.response === 'warning') {
      console.error(`warning: ${r.warning.code}: ${r.warning.message}`);
    } else if (r.response === 'ended' && r.ended.reason !== 'SESSION_END_REASON_CLIENT_END') {
      const reason = r.ended.reason.replace('SESSION_END_REASON_', '').toLowerCase();
      console.error(`session ended: ${reason}${r.ended.message ? `: ${r.ended.message}` : ''}`);
    }
  };
  try {
    const { pace, channels, resume, phrases } = args;
    const options = { pace, channels, resume, phrases, nonSpeechEvents: args.nonSpeech, onResponse };
    await voxgate.transcribeWav(client, args.file, options);
    return 0;
  } catch (err) {
    const details = err.statusDetails || voxgate.errorDetails(err);
    console.error(`transcribe.js: error: ${voxgate.formatError(details)}`);
    return 1;
  } finally {
    client.close();
  }
}

main().then((code) => {
  process.exitCode = code;
});
