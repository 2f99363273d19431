// Types of index.js (hand-written); the message and service types are generated into
// ./types by scripts/gen_clients.sh (proto-loader-gen-types, same options as LOADER_OPTIONS).
import * as grpc from '@grpc/grpc-js';
import type { Options } from '@grpc/proto-loader';
import type { ProtoGrpcType } from './types/speech';
import type { SpeechClient } from './types/voxgate/v1/Speech';
import type { StreamingConfig } from './types/voxgate/v1/StreamingConfig';
import type { StreamingRecognizeResponse__Output } from './types/voxgate/v1/StreamingRecognizeResponse';
import type { RecognitionResult__Output } from './types/voxgate/v1/RecognitionResult';
import type { SessionEnded__Output } from './types/voxgate/v1/SessionEnded';
import type { Duration__Output } from './types/google/protobuf/Duration';

export { grpc };
export type {
  SpeechClient,
  StreamingConfig,
  StreamingRecognizeResponse__Output as StreamingRecognizeResponse,
  RecognitionResult__Output as RecognitionResult,
};

export const LOADER_OPTIONS: Options;
export const PROTO_DIR: string;

export function loadApi(): ProtoGrpcType['voxgate']['v1'];
export function createClient(
  target: string,
  opts?: { credentials?: grpc.ChannelCredentials; options?: grpc.ClientOptions },
): SpeechClient;

export interface Wav {
  sampleRate: number;
  channels: number;
  /** Mono signed 16-bit little-endian PCM. */
  pcm: Buffer;
  /** The file's own channels, interleaved signed 16-bit little-endian frames. */
  interleaved: Buffer;
}
export function readWav(source: string | Buffer): Wav;
export function chunks(data: Buffer, size: number): Generator<Buffer>;
/** 'TEXT' or 'TEXT:BOOST' as a phrase hint (no boost: the server's default). */
export function parsePhrase(spec: string): { value: string; boost?: number };
export function seconds(duration: Duration__Output | null | undefined): number;

export interface ErrorDetails {
  code: string;
  message: string;
  reason?: string;
  domain?: string;
  metadata?: Record<string, string>;
  retryDelaySeconds?: number;
  fieldViolations?: { field: string; description: string }[];
}
export function errorDetails(err: grpc.ServiceError): ErrorDetails;
export function formatError(details: ErrorDetails): string;

/** How a stream with `resume` reconnects (resume.js). */
export interface ResumePolicy {
  /** How long one disconnect is retried (reset once a response arrives); null: the session's
   * SessionStarted.resume_window (30 s on a default server). */
  reconnectWindowMs: number | null;
  /** Also a cap on reconnects in a row for one disconnect; null: none but the window. */
  maxAttempts: number | null;
  /** The first pause between attempts, doubled each time up to maxBackoffMs. */
  backoffMs: number;
  maxBackoffMs: number;
  /** Audio kept unacknowledged; reading the audio iterable waits beyond it. */
  maxUnackedBytes: number;
  flowStatusIntervalMs: number;
  /** After SessionEnded{DRAINING} with audio left: go on in a new session. */
  reconnectOnDrain: boolean;
  /** A session lost with its server process: redo it from the last final in a new session. */
  restartLostSessions: boolean;
  /** How long a resume refused with SESSION_ATTACHED is retried. */
  attachedWaitMs: number;
}
export const DEFAULT_POLICY: Readonly<ResumePolicy>;

export interface StreamOptions {
  /** Speed against real time (1 = real time); null or 0: no pacing. */
  pace?: number | null;
  bytesPerSecond?: number;
  onResponse?: (response: StreamingRecognizeResponse__Output) => void;
  metadata?: grpc.Metadata;
  deadline?: grpc.Deadline;
  /** Survive a dropped connection, a drain and a lost worker (raw encodings only). */
  resume?: boolean | Partial<ResumePolicy>;
}
export interface StreamResult {
  responses: StreamingRecognizeResponse__Output[];
  finals: RecognitionResult__Output[];
  ended: SessionEnded__Output | null;
}
/** Rejects with a grpc.ServiceError that has `statusDetails: ErrorDetails`. */
export function streamRecognize(
  client: SpeechClient,
  config: StreamingConfig,
  audio: Iterable<Buffer> | AsyncIterable<Buffer>,
  options?: StreamOptions,
): Promise<StreamResult>;

export interface TranscribeWavOptions extends Omit<StreamOptions, 'bytesPerSecond'> {
  chunkMs?: number;
  interimResults?: boolean;
  wordTimeOffsets?: boolean;
  languageCode?: string;
  /** A multichannel file: send its channels, each recognized on its own ('separate'), or downmixed by the server ('mix'). */
  channels?: 'separate' | 'mix';
  /** Phrase hints: names, products, terms to favour. */
  phrases?: { value: string; boost?: number }[];
  /** Report music (MUSIC_STARTED, MUSIC_ENDED) and DTMF digits as speech events. */
  nonSpeechEvents?: boolean;
}
export function transcribeWav(
  client: SpeechClient,
  wav: string | Buffer,
  options?: TranscribeWavOptions,
): Promise<StreamResult>;
