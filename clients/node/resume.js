'use strict';
/**
 * Automatic resume for streamRecognize (options.resume): the behaviour of the Python client's
 * voxgate_client.resume, on grpc-js.
 *
 * - A dropped connection (UNAVAILABLE before the session's `ended`) is resumed: the client
 *   reconnects with backoff for as long as the server holds the session (its resume window),
 *   presents the session's resume token, the last `seq` it received and the offset it resends
 *   audio from (the last acknowledged one), and resends what it kept. The
 *   server sends again the responses after that seq; results are de-duplicated by result id.
 *   SESSION_ATTACHED (the server has not seen the old connection go yet) is retried too.
 * - SessionEnded{DRAINING} with audio left: a new session with the same config on the same target
 *   (a balancer picks another instance), resending from where the drained session stopped
 *   (`ended.audio_duration`).
 * - SESSION_NOT_FOUND after the session heard audio (its server process died, e.g. a crashed worker
 *   of `voxgate serve --workers N`): a new session that redoes the audio from the end of the last
 *   final result. The acknowledged audio after that final is kept for this.
 *
 * The caller sees one stream: after a seam a second `started`, then `seq`, `utterance_index` and
 * every audio offset continue those of the sessions before. Memory is bounded: at most
 * `maxUnackedBytes` of unacknowledged audio (reading the caller's iterable waits beyond it) and
 * as much again of acknowledged audio after the last final.
 */

const DEFAULT_POLICY = Object.freeze({
  // How long one disconnect is retried; null: as long as the server holds the session, its
  // SessionStarted.resume_window (30 s on a default server).
  reconnectWindowMs: null,
  maxAttempts: null, // also a cap on reconnects in a row for one disconnect; null: none but the window
  backoffMs: 200, // the first pause between attempts, doubled each time ...
  maxBackoffMs: 5000, // ... up to this
  maxUnackedBytes: 4194304, // audio kept unacknowledged before reading waits (the Python client's default)
  flowStatusIntervalMs: 200, // how often the server acknowledges audio
  reconnectOnDrain: true,
  restartLostSessions: true,
  attachedWaitMs: 60000, // how long SESSION_ATTACHED is retried
});

const BYTES_PER_SAMPLE = { AUDIO_ENCODING_LINEAR16: 2, AUDIO_ENCODING_MULAW: 1, AUDIO_ENCODING_ALAW: 1 };
// A session ending so closes its stream with an error status; any other end, with OK.
const ENDS_IN_ERROR = new Set(['SESSION_END_REASON_ERROR', 'SESSION_END_REASON_ENGINE_LOST']);

// A voxgate server's default resume window: assumed until a session tells its own.
const DEFAULT_RESUME_WINDOW_MS = 30000;

const sleep = (ms) => new Promise((resolve) => setTimeout(resolve, ms));

function policyOf(resume) {
  const policy = { ...DEFAULT_POLICY, ...(resume === true ? {} : resume) };
  const unset = (v) => v === null || v === undefined;
  if (!((unset(policy.maxAttempts) || policy.maxAttempts >= 1) && policy.backoffMs >= 0 && policy.maxUnackedBytes > 0)) {
    throw new Error('resume needs maxAttempts >= 1 (or null), backoffMs >= 0 and maxUnackedBytes > 0');
  }
  if (!(unset(policy.reconnectWindowMs) || policy.reconnectWindowMs >= 0)) {
    throw new Error('resume needs reconnectWindowMs >= 0 (or null)');
  }
  return policy;
}

/** The pause before attempt number `tries` (1, 2, ...): backoffMs doubled each time, up to maxBackoffMs. */
const backoff = (p, tries) => Math.min(p.backoffMs * 2 ** (tries - 1), p.maxBackoffMs);

/** Nanoseconds (BigInt) of a google.protobuf.Duration as the loader returns it (null: 0). */
const nanos = (d) => (d ? BigInt(d.seconds) * 1000000000n + BigInt(d.nanos) : 0n);
const duration = (ns) => ({ seconds: String(ns / 1000000000n), nanos: Number(ns % 1000000000n) });

/** The successive sessions of one stream as one: offsets, seq and utterance indexes continued. */
class Timeline {
  constructor(sampleRate, frameBytes) {
    this.rate = BigInt(sampleRate);
    this.frameBytes = frameBytes;
    this.audioBytes = 0; // stream audio before the current session's
    this.audioNs = 0n;
    this.seq = 0;
    this.utterances = 0;
    this.lastSeq = 0; // highest seq passed to the caller
    this.nextUtterance = 0; // one past the highest utterance_index of a final passed on
  }

  bytesOf(d) {
    return Number((nanos(d) * this.rate) / 1000000000n) * this.frameBytes;
  }

  newSession(audioBytes) {
    this.audioBytes = audioBytes;
    this.audioNs = (BigInt(audioBytes / this.frameBytes) * 1000000000n) / this.rate;
    this.seq = this.lastSeq;
    this.utterances = this.nextUtterance;
  }

  apply(r) {
    const shift = (d) => (d ? duration(nanos(d) + this.audioNs) : d);
    if (this.seq || this.audioNs || this.utterances) {
      if (Number(r.seq)) r.seq = String(Number(r.seq) + this.seq);
      if (r.response === 'result') {
        const m = r.result;
        m.utterance_index += this.utterances;
        m.start_offset = shift(m.start_offset);
        m.end_offset = shift(m.end_offset);
        for (const w of m.words || []) {
          w.start_offset = shift(w.start_offset);
          w.end_offset = shift(w.end_offset);
        }
      } else if (r.response === 'speech_event') {
        r.speech_event.offset = shift(r.speech_event.offset);
      } else if (r.response === 'flow_status') {
        r.flow_status.acked_audio_bytes = String(Number(r.flow_status.acked_audio_bytes) + this.audioBytes);
        r.flow_status.acked_audio_offset = shift(r.flow_status.acked_audio_offset);
      }
    }
    this.lastSeq = Math.max(this.lastSeq, Number(r.seq));
    // Finals only: a lost session's successor transcribes the utterance in progress again.
    if (r.response === 'result' && r.result.is_final) {
      this.nextUtterance = Math.max(this.nextUtterance, r.result.utterance_index + 1);
    }
  }
}

/**
 * The caller's audio as read, what is not yet acknowledged (resent on a resume) and the
 * acknowledged audio after the last final (resent when a lost session is redone). Each connection
 * reads it through `connectionAudio(epoch)`, from the oldest unacknowledged byte on.
 */
class Outbox {
  constructor(audio, maxUnacked, pace, bytesPerSecond) {
    this.iterator = audio[Symbol.asyncIterator] ? audio[Symbol.asyncIterator]() : audio[Symbol.iterator]();
    this.maxUnacked = maxUnacked;
    this.pace = pace;
    this.bytesPerSecond = bytesPerSecond;
    this.buffer = []; // {offset, end, data}: read and not acknowledged, in order
    this.redo = []; // acknowledged after the last final
    this.redoBytes = 0;
    this.offset = 0; // audio bytes read from the iterable
    this.acked = 0;
    this.finalizedAt = 0;
    this.sentEnd = 0; // the current connection has been handed the audio up to here
    this.exhausted = false;
    this.failure = null; // the iterable's own error: never retried
    this.epoch = 0;
    this.waiters = [];
    this.reading = null;
    this.startedAt = null; // when the first audio went out (pacing)
  }

  wake() {
    for (const resolve of this.waiters.splice(0)) resolve();
  }

  changed() {
    return new Promise((resolve) => this.waiters.push(resolve));
  }

  newEpoch() {
    this.epoch += 1;
    this.wake();
    return this.epoch;
  }

  resumeOffset() {
    return this.buffer.length ? this.buffer[0].offset : this.offset;
  }

  ack(acked) {
    this.acked = Math.max(this.acked, acked);
    this.release();
    this.wake();
  }

  // Only audio this connection was handed is released: a resumed stream must resend every byte
  // from its resume offset, and acks logged before the drop may arrive first.
  release() {
    while (this.buffer.length && this.buffer[0].end <= Math.min(this.acked, this.sentEnd)) {
      const entry = this.buffer.shift();
      if (entry.end <= this.finalizedAt) continue;
      this.redo.push(entry);
      this.redoBytes += entry.data.length;
      while (this.redo.length && this.redoBytes > this.maxUnacked) this.redoBytes -= this.redo.shift().data.length;
    }
  }

  finalized(offset) {
    this.finalizedAt = Math.max(this.finalizedAt, offset);
    while (this.redo.length && this.redo[0].end <= this.finalizedAt) this.redoBytes -= this.redo.shift().data.length;
  }

  /** A new session takes over at stream offset `offset`; returns where its audio starts (later
   * when the audio from `offset` is no longer held). */
  restartAt(offset) {
    offset = Math.min(offset, this.offset);
    this.buffer = this.redo.filter((e) => e.end > offset).concat(this.buffer);
    this.redo = [];
    this.redoBytes = 0;
    this.finalizedAt = this.acked = offset;
    while (this.buffer.length && this.buffer[0].end <= offset) this.buffer.shift();
    const head = this.buffer[0];
    if (head && head.offset < offset) {
      this.buffer[0] = { offset, end: head.end, data: head.data.subarray(offset - head.offset) };
    }
    return this.resumeOffset();
  }

  finished() {
    return this.exhausted && this.buffer.length === 0;
  }

  /** The audio of connection `epoch`: the held audio from the resume offset, then new audio
   * (paced), until the iterable ends or the connection is replaced. */
  async *connectionAudio(epoch) {
    this.sentEnd = this.resumeOffset();
    for (;;) {
      if (epoch !== this.epoch) return;
      const next = this.buffer.find((e) => e.offset >= this.sentEnd);
      if (next) {
        this.sentEnd = next.end;
        this.release(); // acks that came before it was sent
        if (this.startedAt === null) this.startedAt = Date.now();
        yield next.data;
        continue;
      }
      if (this.exhausted) return;
      if (this.offset - this.acked >= this.maxUnacked) {
        await this.changed(); // backpressure: the server's acknowledgements catch up first
        continue;
      }
      const entry = await this.read();
      if (entry && this.pace && this.startedAt !== null) {
        const due = this.startedAt + (entry.offset / this.bytesPerSecond / this.pace) * 1000;
        if (due > Date.now()) await Promise.race([sleep(due - Date.now()), this.changed()]);
      }
    }
  }

  /** The next piece of the caller's audio, appended to the buffer (one read at a time). */
  async read() {
    if (this.reading === null) {
      this.reading = (async () => {
        let item;
        try {
          item = await this.iterator.next();
        } catch (err) {
          this.failure = err;
          throw err;
        }
        if (item.done) {
          this.exhausted = true;
          return null;
        }
        if (!Buffer.isBuffer(item.value) && !(item.value instanceof Uint8Array)) {
          this.failure = new TypeError('audio items must be Buffers');
          throw this.failure;
        }
        const data = Buffer.from(item.value);
        const entry = { offset: this.offset, end: this.offset + data.length, data };
        this.offset = entry.end;
        if (data.length) this.buffer.push(entry);
        return entry;
      })().finally(() => {
        this.reading = null;
      });
    }
    return this.reading;
  }
}

/**
 * The decisions of a resuming stream: what the caller sees, whether and when to reconnect, and
 * the first request of each connection.
 */
class Resumer {
  constructor(config, policy, outbox, grpc, errorDetails) {
    const channels = config.audio_channel_count || 1;
    const perSample = BYTES_PER_SAMPLE[config.encoding];
    if (!perSample) throw new Error(`resume needs a raw encoding (LINEAR16, MULAW, ALAW), not ${config.encoding}`);
    this.config = config;
    this.policy = policy;
    this.outbox = outbox;
    this.grpc = grpc;
    this.errorDetails = errorDetails;
    this.timeline = new Timeline(config.sample_rate_hz, perSample * channels);
    // One recognition: its finals mark where a lost session is redone from. Channels
    // recognized apart finalize at their own moments: not redone.
    this.oneRecognition = channels === 1 || config.channel_mode !== 'CHANNEL_MODE_SEPARATE';
    this.callerWantsFlow = Boolean(config.flow_status && config.flow_status.enabled);
    this.token = '';
    this.lastSeq = 0; // of the current session
    this.finalIds = new Set();
    this.failures = 0;
    this.lostSince = null; // the first failed reconnect of this disconnect
    this.resumeWindowMs = DEFAULT_RESUME_WINDOW_MS; // the session's, once its SessionStarted came
    this.attachedSince = null;
    this.attachedTries = 0;
    this.reopening = false;
    this.heard = false;
    this.connecting();
    this.request = this.firstConfig();
  }

  firstConfig() {
    return { ...this.config, flow_status: { enabled: true, interval_ms: this.policy.flowStatusIntervalMs } };
  }

  connecting() {
    this.ended = false;
    this.drained = false;
    this.endedOk = false;
    this.processed = 0;
  }

  /** Take in a response; whether the caller sees it (shifted onto the stream's timeline). */
  passes(r) {
    this.failures = 0;
    this.lostSince = null;
    this.attachedSince = null;
    this.attachedTries = 0;
    const seq = Number(r.seq);
    if (seq && seq <= this.lastSeq) return false; // delivered before the reconnect
    this.lastSeq = Math.max(this.lastSeq, seq);
    if (r.response === 'started') {
      if (r.started.resumed) return false; // the same session goes on
      if (r.started.resume_token) this.token = r.started.resume_token;
      if (r.started.resume_window) this.resumeWindowMs = Number(nanos(r.started.resume_window) / 1000000n);
    } else if (r.response === 'flow_status') {
      const acked = Number(r.flow_status.acked_audio_bytes);
      this.heard = this.heard || acked > 0;
      this.outbox.ack(this.timeline.audioBytes + acked);
    } else if (r.response === 'ended') {
      this.ended = true;
      this.endedOk = !ENDS_IN_ERROR.has(r.ended.reason);
      this.drained = r.ended.reason === 'SESSION_END_REASON_DRAINING';
      this.processed = this.timeline.bytesOf(r.ended.audio_duration);
    } else if (r.response === 'result') {
      this.heard = true;
      if (this.finalIds.has(r.result.result_id)) return false; // its utterance is already final
      if (r.result.is_final) this.finalIds.add(r.result.result_id);
    }
    this.timeline.apply(r);
    if (r.response === 'result' && r.result.is_final && this.oneRecognition) {
      this.outbox.finalized(this.timeline.bytesOf(r.result.end_offset));
    }
    return r.response !== 'flow_status' || this.callerWantsFlow;
  }

  connectionLost(err) {
    const { status } = this.grpc;
    if (err.code === status.UNAVAILABLE) return true;
    // A CANCELLED the server never sends and we did not ask for: a proxy resetting the stream.
    return err.code === status.CANCELLED && !this.errorDetails(err).reason;
  }

  /** A connection failed with `err`: ms to wait before the next, or null when the stream in fact
   * ended normally. Throws to give up. */
  delayAfter(err) {
    if (this.outbox.failure) throw this.outbox.failure;
    if (this.endedOk && this.connectionLost(err)) return null;
    const delay = this.retryDelayMs(err);
    if (delay === null) throw err;
    return delay;
  }

  retryDelayMs(err) {
    const p = this.policy;
    if (this.ended || !(this.token || this.reopening)) return null;
    const reason = this.errorDetails(err).reason;
    if (this.token && reason === 'SESSION_NOT_FOUND') {
      if (this.heard && !(p.restartLostSessions && this.oneRecognition)) return null;
      // Gone: it ended before it heard anything, or its server process died with it. A new
      // session redoes the audio from the end of the last final on: every final once.
      this.startNewSession(this.outbox.restartAt(this.outbox.finalizedAt));
      return p.backoffMs;
    }
    let tries;
    if (this.token && reason === 'SESSION_ATTACHED') {
      const now = Date.now();
      if (this.attachedSince === null) this.attachedSince = now;
      if (now - this.attachedSince > p.attachedWaitMs) return null;
      tries = ++this.attachedTries;
    } else if (this.connectionLost(err)) {
      const now = Date.now();
      if (this.lostSince === null) this.lostSince = now;
      tries = ++this.failures;
      if (p.maxAttempts !== null && p.maxAttempts !== undefined && tries > p.maxAttempts) return null;
      const window = p.reconnectWindowMs ?? this.resumeWindowMs;
      if (now + backoff(p, tries) - this.lostSince > window) return null;
    } else {
      return null;
    }
    return backoff(p, tries);
  }

  /** After the retry delay: the next connection's first request. */
  reconnecting() {
    if (this.token) {
      this.request = {
        resume_token: this.token,
        resume_last_seq: String(this.lastSeq),
        resume_audio_bytes: String(this.outbox.resumeOffset() - this.timeline.audioBytes),
      };
    } else {
      this.request = this.firstConfig(); // a drained session's replacement was refused: again
    }
  }

  /** The stream ended without an error: whether to go on in a new session (after a drain). */
  nextSession() {
    if (!(this.drained && this.policy.reconnectOnDrain)) return false;
    const start = this.outbox.restartAt(this.timeline.audioBytes + this.processed);
    if (this.outbox.finished()) return false; // the drained session had all the audio there is
    this.startNewSession(start);
    return true;
  }

  startNewSession(start) {
    this.timeline.newSession(start);
    this.token = '';
    this.lastSeq = 0;
    this.finalIds = new Set();
    this.heard = false;
    this.reopening = true;
    this.request = this.firstConfig();
  }
}

/**
 * streamRecognize with resume (see the top of this file). `connect(request, audio, onResponse)`
 * runs one connection: it resolves when the server closes it with OK, rejects with its error.
 */
async function resumingStream(connect, config, audio, options, grpc, errorDetails) {
  const { pace = null, bytesPerSecond = 0, onResponse } = options;
  const policy = policyOf(options.resume);
  const outbox = new Outbox(audio, policy.maxUnackedBytes, pace, bytesPerSecond);
  const resumer = new Resumer(config, policy, outbox, grpc, errorDetails);
  const responses = [];
  const take = (r) => {
    if (!resumer.passes(r)) return;
    responses.push(r);
    if (onResponse) onResponse(r);
  };
  for (;;) {
    const epoch = outbox.newEpoch();
    resumer.connecting();
    try {
      await connect(resumer.request, outbox.connectionAudio(epoch), take);
    } catch (err) {
      const delay = resumer.delayAfter(err);
      if (delay !== null) {
        outbox.newEpoch(); // the failed connection's sender stops
        await sleep(delay);
        resumer.reconnecting();
        continue;
      }
    }
    if (!resumer.nextSession()) break;
  }
  outbox.newEpoch();
  const finals = responses.filter((r) => r.response === 'result' && r.result.is_final).map((r) => r.result);
  const ended = [...responses].reverse().find((r) => r.response === 'ended');
  return { responses, finals, ended: ended ? ended.ended : null };
}

module.exports = { DEFAULT_POLICY, resumingStream };
