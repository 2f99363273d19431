// Original file: proto/voxgate/v1/speech.proto

import type { StreamingConfig as _voxgate_v1_StreamingConfig, StreamingConfig__Output as _voxgate_v1_StreamingConfig__Output } from '../../voxgate/v1/StreamingConfig';
import type { KeepAlive as _voxgate_v1_KeepAlive, KeepAlive__Output as _voxgate_v1_KeepAlive__Output } from '../../voxgate/v1/KeepAlive';
import type { Finalize as _voxgate_v1_Finalize, Finalize__Output as _voxgate_v1_Finalize__Output } from '../../voxgate/v1/Finalize';
import type { PhraseHints as _voxgate_v1_PhraseHints, PhraseHints__Output as _voxgate_v1_PhraseHints__Output } from '../../voxgate/v1/PhraseHints';

export interface StreamingRecognizeRequest {
  'config'?: (_voxgate_v1_StreamingConfig | null);
  'audio'?: (Buffer | Uint8Array | string);
  'keep_alive'?: (_voxgate_v1_KeepAlive | null);
  'finalize'?: (_voxgate_v1_Finalize | null);
  'phrase_hints'?: (_voxgate_v1_PhraseHints | null);
  'request'?: "config"|"audio"|"keep_alive"|"finalize"|"phrase_hints";
}

export interface StreamingRecognizeRequest__Output {
  'config'?: (_voxgate_v1_StreamingConfig__Output | null);
  'audio'?: (Buffer);
  'keep_alive'?: (_voxgate_v1_KeepAlive__Output | null);
  'finalize'?: (_voxgate_v1_Finalize__Output | null);
  'phrase_hints'?: (_voxgate_v1_PhraseHints__Output | null);
  'request'?: "config"|"audio"|"keep_alive"|"finalize"|"phrase_hints";
}
